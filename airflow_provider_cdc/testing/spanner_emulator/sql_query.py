"""A bound query: its result fields and how its rows come from the rows of its table or view."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from .model import Table
from .values import SpannerType

Row = dict[str, Any]


@dataclass
class Query:
    """A bound query: its result fields and how to produce its rows from the source's rows."""

    fields: list[tuple[str, SpannerType]]
    table: Table | None  # the table it scans (None: a view, or no FROM)
    view: Callable[[Any], list[Row]] | None  # rows of an INFORMATION_SCHEMA view, from the database
    cells: list[Callable[[Row], Any]]
    where: Callable[[Row], bool | None] | None = None
    order: Callable[[Row], tuple] | None = None
    limit: int | None = None
    offset: int = 0
    not_partitionable: str | None = None  # why PartitionQuery refuses it
    hints: dict[str, str] = field(default_factory=dict)
    counts: list[Callable[[Row], bool] | None] | None = None  # COUNT items (None: a constant item)

    def rows(self, source: Iterable[Row]) -> Iterator[list[Any]]:
        """The result rows (stored cells) from the source's rows, in order."""
        rows: Iterable[Row] = source
        if self.where is not None:
            where = self.where
            rows = (row for row in rows if where(row) is True)
        if self.counts is not None:
            rows = [self.count(rows)]
        if self.order is not None and self.limit is not None:  # keeps only the rows it may return
            rows = heapq.nsmallest(self.offset + self.limit, rows, key=self.order)
        elif self.order is not None:
            rows = sorted(rows, key=self.order)
        if self.offset or self.limit is not None:
            stop = None if self.limit is None else self.offset + self.limit
            rows = islice(rows, self.offset, stop)
        cells = self.cells
        for row in rows:
            yield [cell(row) for cell in cells]

    def count(self, rows: Iterable[Row]) -> Row:
        """The one row of an aggregate query: each COUNT item's count, by item position."""
        counts = self.counts or []
        totals = [0] * len(counts)
        for row in rows:
            for index, counted in enumerate(counts):
                if counted is not None and counted(row):
                    totals[index] += 1
        return {f"#{index}": str(total) for index, total in enumerate(totals)}
