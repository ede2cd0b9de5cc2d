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


@dataclass(frozen=True)
class Aggregate:
    """One aggregate item of a query: its start, how a row adds to it, and its result cell."""

    start: Any
    add: Callable[[Any, Row], Any]
    cell: Callable[[Any], Any]

    @classmethod
    def count(cls, value: Callable[[Row], Any] | None) -> Aggregate:
        """``COUNT(*)`` (``value`` None) or ``COUNT(column)``: the rows, or those where it is not NULL."""
        if value is None:
            return cls(0, lambda total, row: total + 1, str)
        return cls(0, lambda total, row: total + (value(row) is not None), str)

    @classmethod
    def bit_xor(cls, value: Callable[[Row], Any]) -> Aggregate:
        """``BIT_XOR``: the exclusive or of the INT64 values that are not NULL; NULL when there are none."""

        def add(total: int | None, row: Row) -> int | None:
            number = value(row)
            if number is None:
                return total
            return number if total is None else total ^ number

        return cls(None, add, lambda total: None if total is None else str(total))


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
    aggregates: list[Aggregate | None] | None = None  # aggregate items (None: a constant item)

    def rows(self, source: Iterable[Row]) -> Iterator[list[Any]]:
        """The result rows (stored cells) from the source's rows, in order."""
        rows: Iterable[Row] = source
        if self.where is not None:
            where = self.where
            rows = (row for row in rows if where(row) is True)
        if self.aggregates is not None:
            rows = [self.aggregate(rows)]
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

    def aggregate(self, rows: Iterable[Row]) -> Row:
        """The one row of an aggregate query: each aggregate item's cell, by item position."""
        aggregates = self.aggregates or []
        totals = [None if a is None else a.start for a in aggregates]
        for row in rows:
            for index, aggregate in enumerate(aggregates):
                if aggregate is not None:
                    totals[index] = aggregate.add(totals[index], row)
        return {
            f"#{index}": aggregate.cell(totals[index])
            for index, aggregate in enumerate(aggregates)
            if aggregate is not None
        }
