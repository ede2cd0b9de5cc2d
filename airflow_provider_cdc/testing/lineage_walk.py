"""A simple reference walk over a change stream's partitions in lineage order.

It queries the change-stream TVF through ``google-cloud-spanner`` one partition at a time: the initial
query with a NULL partition token, then each child partition once, and only after every parent of the
child has reported its children. A child reported by several parents (a merge) is queried once.
:class:`LineageWalker` carries the walk across consecutive windows ``[start, end)``: partitions still
open at a window's end are queried again from the next window's start.

This is the plain, sequential procedure the change-stream documentation describes; tests and demos use
it as a yardstick for the emulator and for the provider's own reader.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.cloud.spanner_v1 import param_types

from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, coerce_timestamp, format_timestamp
from airflow_provider_cdc.sources.spanner.record_parser import parse_change_record_row
from airflow_provider_cdc.sources.spanner.records import (
    ChangeStreamRecord,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
)

_PARAM_TYPES = {
    "start": param_types.TIMESTAMP,
    "end": param_types.TIMESTAMP,
    "token": param_types.STRING,
    "heartbeat": param_types.INT64,
}


class LineageError(RuntimeError):
    """The stream reported partitions that break the lineage rules (names the token)."""


def change_stream_query(stream: str) -> str:
    """The TVF query text for ``stream`` (validated before it reaches SQL)."""
    name = validate_identifier(stream, "change stream")
    return (  # the stream name is a validated identifier; every value is a bound parameter
        f"SELECT ChangeRecord FROM READ_{name}(start_timestamp => @start, end_timestamp => @end, "  # noqa: S608
        "partition_token => @token, heartbeat_milliseconds => @heartbeat)"
    )


def query_partition(
    database: Any,
    stream: str,
    start: datetime,
    end: datetime | None,
    token: str | None,
    heartbeat_milliseconds: int = 10_000,
) -> Iterator[ChangeStreamRecord]:
    """Records of one change-stream query (``end`` inclusive, ``None`` = until the partition ends)."""
    params = {"start": start, "end": end, "token": token, "heartbeat": heartbeat_milliseconds}
    with database.snapshot() as snapshot:
        rows = snapshot.execute_sql(change_stream_query(stream), params=params, param_types=_PARAM_TYPES)
        for row in rows:
            yield from parse_change_record_row(row)


@dataclass
class PartitionRead:
    """One query of one partition: what was asked and every record it returned, in order."""

    token: str | None  # None for the initial query
    parent_tokens: tuple[str, ...]
    partition_start: datetime | None  # the child partitions record's start (None for the initial query)
    start: datetime
    end: datetime  # inclusive
    records: list[ChangeStreamRecord] = field(default_factory=list)

    @property
    def data_records(self) -> list[DataChangeRecord]:
        return [record for record in self.records if isinstance(record, DataChangeRecord)]

    @property
    def heartbeats(self) -> list[HeartbeatRecord]:
        return [record for record in self.records if isinstance(record, HeartbeatRecord)]

    @property
    def child_records(self) -> list[ChildPartitionsRecord]:
        return [record for record in self.records if isinstance(record, ChildPartitionsRecord)]

    @property
    def finished(self) -> bool:
        """The partition reported its children: it has no changes after them."""
        return bool(self.child_records)


@dataclass
class _Partition:
    token: str
    parents: tuple[str, ...]
    start: datetime


class LineageWalker:
    """Walks a change stream's partitions window after window, in lineage order."""

    def __init__(self, database: Any, stream: str, heartbeat_milliseconds: int = 10_000) -> None:
        self.database = database
        self.stream = validate_identifier(stream, "change stream")
        self.heartbeat_milliseconds = heartbeat_milliseconds
        self._known: dict[str, _Partition] = {}
        self._scheduled: set[str] = set()
        self._finished: set[str] = set()
        self._open: dict[str, _Partition] = {}
        self._window_end: datetime | None = None

    @property
    def open_tokens(self) -> list[str]:
        """Partitions queried but not finished at the end of the last window."""
        return list(self._open)

    @property
    def finished_tokens(self) -> set[str]:
        return set(self._finished)

    @property
    def known_partitions(self) -> dict[str, tuple[tuple[str, ...], datetime]]:
        """Every partition token seen so far with its parents and start timestamp."""
        return {token: (p.parents, p.start) for token, p in self._known.items()}

    def read_window(self, start: datetime, end: datetime) -> list[PartitionRead]:
        """Query every partition overlapping ``[start, end)``; returns the reads in the order made.

        Windows must be consecutive (each starts where the previous ended).
        """
        start, end = coerce_timestamp(start), coerce_timestamp(end)
        if end <= start:
            raise ValueError(
                f"window end {format_timestamp(end)} is not after its start {format_timestamp(start)}"
            )
        if self._window_end is not None and start != self._window_end:
            raise ValueError(
                f"window starts at {format_timestamp(start)} but the previous window ended at "
                f"{format_timestamp(self._window_end)}"
            )
        last = end - ONE_MICROSECOND
        reads: list[PartitionRead] = []
        ready: deque[_Partition] = deque()
        if self._window_end is None:
            initial = self._read(None, (), None, start, last)
            reads.append(initial)
            if not initial.finished:
                raise LineageError("the initial query (NULL partition token) returned no child partitions")
            self._register_children(initial, ready)
        else:
            ready.extend(self._open.values())
            self._open = {}
        while ready:
            partition = ready.popleft()
            if partition.start > last:
                self._open[partition.token] = partition
                continue
            read = self._read(
                partition.token, partition.parents, partition.start, max(partition.start, start), last
            )
            reads.append(read)
            if read.finished:
                self._finished.add(partition.token)
                self._register_children(read, ready)
            else:
                self._open[partition.token] = partition
        self._window_end = end
        return reads

    def _read(
        self,
        token: str | None,
        parents: tuple[str, ...],
        partition_start: datetime | None,
        start: datetime,
        end: datetime,
    ) -> PartitionRead:
        read = PartitionRead(token, parents, partition_start, start, end)
        read.records.extend(
            query_partition(self.database, self.stream, start, end, token, self.heartbeat_milliseconds)
        )
        return read

    def _register_children(self, read: PartitionRead, ready: deque[_Partition]) -> None:
        reported: list[str] = []
        for record in read.child_records:
            for child in record.child_partitions:
                parents = tuple(child.parent_partition_tokens)
                if read.token is not None and read.token not in parents:
                    raise LineageError(
                        f"partition {read.token} reported child {child.token} whose parents {parents} "
                        "do not include it"
                    )
                known = self._known.get(child.token)
                if known is None:
                    self._known[child.token] = _Partition(child.token, parents, record.start_timestamp)
                elif set(known.parents) != set(parents) or known.start != record.start_timestamp:
                    raise LineageError(
                        f"child {child.token} reported with parents {parents} from "
                        f"{format_timestamp(record.start_timestamp)}, before with parents {known.parents} "
                        f"from {format_timestamp(known.start)}"
                    )
                reported.append(child.token)
        for token in reported:
            partition = self._known[token]
            if token in self._scheduled:
                continue
            if all(parent in self._finished for parent in partition.parents):
                self._scheduled.add(token)
                ready.append(partition)


def walk_lineage(
    database: Any, stream: str, start: datetime, end: datetime, heartbeat_milliseconds: int = 10_000
) -> list[PartitionRead]:
    """Every partition read of ``stream`` over ``[start, end)``, parents before children."""
    return LineageWalker(database, stream, heartbeat_milliseconds).read_window(start, end)
