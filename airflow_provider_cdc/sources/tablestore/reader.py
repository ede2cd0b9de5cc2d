"""Reading a Table Store window: each claimed shard read from its start to the window's end, staged.

A shard's reading of window ``[start, end)`` (:class:`ShardWindowRead`) starts where
:func:`~airflow_provider_cdc.sources.tablestore.shards.start_position` says and stops at the first of:

- the first record written at or after ``end``: the checkpoint is the iterator **at** that record,
  got by reading the batch again from its own iterator with ``limit`` = the record's index (the
  service's next iterator is then exactly the boundary);
- ``SHARD_END``: the service returned no next iterator (the shard is closed and drained);
- caught up: an empty batch with a next iterator and ``may_more_record`` not true.

The checkpoint at ``end`` and the number of records read are recorded (the first reading wins); a
later reading of the same window — a retry, a re-opening, another reader after a lost lease — reads
exactly that many records from the same start, so it stages the same records with the same sequence
numbers. A child whose parent did not reach ``SHARD_END`` in the window is skipped (its records lie
after ``end``). A shard read to ``SHARD_END`` ends its partition at the window's end; every other
shard's watermark moves to the end, so the window's completion is read from the metastore alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, ClassVar

from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.core.types import LogicalType
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.claimed_reader import (
    ClaimedWindowReader,
    UnitRead,
    WindowReadError,
    collector_paused,
)
from airflow_provider_cdc.sources.tablestore.checkpoints import (
    ITERATOR,
    SHARD_END,
    Checkpoint,
    ShardCheckpoints,
)
from airflow_provider_cdc.sources.tablestore.client import (
    StreamRecord,
    TablestoreError,
    TablestoreStreamClient,
)
from airflow_provider_cdc.sources.tablestore.records import ShardWindowRows
from airflow_provider_cdc.sources.tablestore.shards import (
    SEEK,
    StartPosition,
    shard_stages,
    skips,
    start_position,
)
from airflow_provider_cdc.staging.parquet import StagingWriter

__all__ = [
    "CheckpointConflictError",
    "ShardWindowRead",
    "TablestoreReadError",
    "TablestoreWindowReader",
    "TransientTablestoreError",
]

#: Records asked for per ``GetStreamRecord`` call.
DEFAULT_BATCH_LIMIT = 100
#: Records staged at once (one Arrow batch handed to the staging writer).
_WRITE_ROWS = 2_048
#: How far before a window's start the first sight of a shard seeks (clock steps between machines).
DEFAULT_SEEK_MARGIN_US = 10 * 60 * 1_000_000


class TablestoreReadError(WindowReadError):
    """A Table Store window could not be read; the message names the window, the shard and the cause."""

    partition_noun: ClassVar[str] = "shard"


class TransientTablestoreError(Exception):
    """A retryable :class:`TablestoreError` as the claimed reader retries it (the cause is kept)."""


class CheckpointConflictError(Exception):
    """Another reading of the window recorded a different end for the shard first: read it again."""


class ShardWindowRead:
    """One shard's records for one window (see the module): iterate :meth:`records`, then take
    :attr:`checkpoint` and :attr:`consumed` (records taken from the shard, skipped ones included)."""

    def __init__(
        self,
        client: TablestoreStreamClient,
        stream_id: str,
        shard_id: str,
        start: StartPosition,
        window_end_us: int,
        *,
        replay: int | None = None,
        batch_limit: int = DEFAULT_BATCH_LIMIT,
    ) -> None:
        self.client = client
        self.stream_id = stream_id
        self.shard_id = shard_id
        self.start = start
        self.window_end_us = window_end_us
        self.replay = replay
        self.batch_limit = batch_limit
        self.consumed = 0
        self.checkpoint: Checkpoint | None = None

    def _first_iterator(self) -> str:
        if self.start.kind == ITERATOR:
            assert self.start.iterator is not None
            return self.start.iterator
        seek = self.start.seek_us if self.start.kind == SEEK else None
        return self.client.get_shard_iterator(self.stream_id, self.shard_id, seek)

    def _fetch(self, iterator: str, limit: int) -> Any:
        return self.client.get_stream_records(
            iterator, limit, stream_id=self.stream_id, shard_id=self.shard_id
        )

    def records(self) -> Iterator[StreamRecord]:
        """The shard's records of the window, in stream order (leading records before a first
        sight's start skipped)."""
        with ThreadPoolExecutor(1, thread_name_prefix=f"tablestore-{self.shard_id}") as prefetcher:
            yield from self._records(prefetcher)

    def _records(self, prefetcher: ThreadPoolExecutor) -> Iterator[StreamRecord]:
        iterator = self._first_iterator()
        skipping = self.start.skip_before_us is not None
        ahead: tuple[str, int, Future[Any]] | None = None  # the next batch, asked for in advance
        while True:
            limit = self.batch_limit
            if self.replay is not None:
                limit = min(limit, self.replay - self.consumed)
                if limit <= 0:
                    _settle(ahead)
                    self.checkpoint = Checkpoint(ITERATOR, iterator, self.consumed)
                    return
            if ahead is not None and ahead[:2] == (iterator, limit):
                batch = ahead[2].result()
            else:
                _settle(ahead)
                batch = self._fetch(iterator, limit)
            ahead = None
            if batch.next_iterator is not None and (batch.records or batch.may_more_record is True):
                # While this batch is staged, the service answers for the next one (the answer is
                # dropped if the window ends in this batch).
                following = self.batch_limit
                if self.replay is not None:
                    following = min(following, self.replay - self.consumed - len(batch.records))
                if following > 0:
                    ahead = (
                        batch.next_iterator,
                        following,
                        prefetcher.submit(self._fetch, batch.next_iterator, following),
                    )
            for index, record in enumerate(batch.records):
                sequence = record.sequence
                if sequence is None:
                    _settle(ahead)
                    raise TablestoreError(
                        "OTSClientResponseError",
                        "a record has no sequence information",
                        operation="GetStreamRecord",
                        stream_id=self.stream_id,
                        shard_id=self.shard_id,
                        iterator=iterator,
                    )
                if self.replay is None and sequence.timestamp_us >= self.window_end_us:
                    _settle(ahead)
                    ahead = None
                    boundary = iterator if index == 0 else self._fetch(iterator, index).next_iterator
                    if boundary is None:  # the shard closed between the two reads: it ends here
                        boundary = self._fetch(iterator, index + 1).next_iterator
                    self.checkpoint = Checkpoint(ITERATOR, boundary, self.consumed)
                    return
                self.consumed += 1
                if skipping and sequence.timestamp_us < (self.start.skip_before_us or 0):
                    continue
                skipping = False
                yield record
            if batch.next_iterator is None:
                _settle(ahead)
                if self.replay is not None and self.consumed < self.replay:
                    raise CheckpointConflictError(
                        f"shard {self.shard_id!r} ended after {self.consumed} records, but the window's "
                        f"first reading recorded {self.replay}"
                    )
                self.checkpoint = Checkpoint(SHARD_END, None, self.consumed)
                return
            if not batch.records and batch.may_more_record is not True:
                _settle(ahead)
                if self.replay is not None:
                    raise CheckpointConflictError(
                        f"shard {self.shard_id!r} has no record after {self.consumed}, but the window's "
                        f"first reading recorded {self.replay}"
                    )
                self.checkpoint = Checkpoint(ITERATOR, batch.next_iterator, self.consumed)
                return
            iterator = batch.next_iterator


def _settle(ahead: tuple[str, int, Future[Any]] | None) -> None:
    """Wait for a batch asked for in advance that is not used (its answer and errors dropped), so
    that no call of the shard is still running when the reading moves on."""
    if ahead is not None:
        wait([ahead[2]])


class TablestoreWindowReader(ClaimedWindowReader):
    """Claims and stages the shards of Table Store windows (see the module).

    :param client: the stream client.
    :param stream_id: the table's stream.
    :param table: the table (staged ``table_name``).
    :param checkpoints: the source's shard checkpoints.
    :param declared_types: declared column types (a cleared column's type).
    :param batch_limit: records per ``GetStreamRecord`` call.
    :param seek_margin_us: how far before the start a first sight seeks.
    """

    read_error: ClassVar[type[WindowReadError]] = TablestoreReadError
    retryable: tuple[type[BaseException], ...] = (TransientTablestoreError, CheckpointConflictError)

    def __init__(
        self,
        client: TablestoreStreamClient,
        stream_id: str,
        table: str,
        checkpoints: ShardCheckpoints,
        *args: Any,
        declared_types: Mapping[str, LogicalType] | None = None,
        batch_limit: int = DEFAULT_BATCH_LIMIT,
        seek_margin_us: int = DEFAULT_SEEK_MARGIN_US,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.client = client
        self.stream_id = stream_id
        self.table = table
        self.checkpoints = checkpoints
        self.declared_types = dict(declared_types or {})
        self.batch_limit = batch_limit
        self.seek_margin_us = seek_margin_us

    def describe(self, exc: BaseException) -> str:
        cause = exc.__cause__ if isinstance(exc, TransientTablestoreError) else None
        return super().describe(cause or exc)

    def lineage(self, window: Window) -> tuple[list[str], dict[str, tuple[str, ...]]]:
        """The window's shards and every recorded shard's parents (from the metastore)."""
        units = [item.token for item in self.metastore.window_partitions(self.key, window.start, window.end)]
        parents = {p.token: p.parent_tokens for p in self.metastore.list_partitions(self.key)}
        return units, parents

    def read_unit(self, window: Window, token: str, writer: StagingWriter, read: UnitRead) -> None:
        """Stage shard ``token``'s records of ``window`` and record its checkpoint at the end."""
        try:
            self._read_shard(window, token, writer, read)
        except TablestoreError as exc:
            if exc.retryable:
                raise TransientTablestoreError(str(exc)) from exc
            raise

    def _read_shard(self, window: Window, shard: str, writer: StagingWriter, read: UnitRead) -> None:
        start_us, end_us = to_micros(window.start), to_micros(window.end)
        units, parents = self.lineage(window)
        shard_parents = parents.get(shard, ())
        at_start = self.checkpoints.get(shard, start_us)
        read_before = self.checkpoints.shards_with_any(list(shard_parents), start_us)
        start = start_position(
            shard,
            shard_parents,
            at_start,
            units=units,
            read_before=read_before,
            window_start_us=start_us,
            seek_margin_us=self.seek_margin_us,
        )
        at_end = self.checkpoints.get(shard, end_us)
        parents_at_end = {p: c for p in shard_parents if (c := self.checkpoints.get(p, end_us)) is not None}
        waiting = skips(shard_parents, units, parents_at_end)
        if waiting:
            self._finish(window, shard, start.checkpoint(0), 0)
            self.log.info(
                "Shard %s of window %s: skipped, parent(s) %s continue past the window's end",
                shard,
                window,
                ", ".join(waiting),
            )
            return
        stage = shard_stages(units, parents).get(shard, 0)
        rows = ShardWindowRows(self.table, shard, start_us, end_us, stage, self.declared_types)
        reading = ShardWindowRead(
            self.client,
            self.stream_id,
            shard,
            start,
            end_us,
            replay=None if at_end is None else at_end.records,
            batch_limit=self.batch_limit,
        )
        started = time.monotonic()
        with collector_paused():
            self._stage(window, shard, reading, rows, writer, read)
        assert reading.checkpoint is not None
        checkpoint = reading.checkpoint if at_end is None else at_end
        self._finish(window, shard, checkpoint, reading.consumed)
        self.log.info(
            "Shard %s of window %s: %d records staged (stage %d), %s, in %.2fs",
            shard,
            window,
            read.rows,
            stage,
            "drained" if checkpoint.drained else "stopped at the window's end",
            time.monotonic() - started,
        )

    def _stage(
        self,
        window: Window,
        shard: str,
        reading: ShardWindowRead,
        rows: ShardWindowRows,
        writer: StagingWriter,
        read: UnitRead,
    ) -> None:
        """Stage the shard's records of the window, :data:`_WRITE_ROWS` records at a time (each
        group one Arrow batch, so memory is bounded by the group, not the window)."""
        logged = time.monotonic()
        records: list[StreamRecord] = []
        for record in reading.records():
            records.append(record)
            if len(records) >= _WRITE_ROWS:
                read.rows += writer.write_batch(rows.batch(records))
                records.clear()
                if time.monotonic() - logged >= self.progress_seconds:
                    logged = time.monotonic()
                    self.renew(window, shard)
                    self.log.info("Shard %s of window %s: %d records staged", shard, window, read.rows)
        if records:
            read.rows += writer.write_batch(rows.batch(records))

    def _finish(self, window: Window, shard: str, checkpoint: Checkpoint, consumed: int) -> None:
        """Record the shard's checkpoint at the window's end (the first reading's wins) and move its
        partition: ended at the window's end when drained, else its watermark to the end."""
        end_us = to_micros(window.end)
        ours = Checkpoint(checkpoint.kind, checkpoint.iterator, consumed)
        recorded = self.checkpoints.record(shard, end_us, ours)
        if recorded.records != consumed:
            raise CheckpointConflictError(
                f"shard {shard!r}: another reading of window {window} recorded {recorded.records} records "
                f"where this one read {consumed}"
            )
        if recorded.drained:
            self.metastore.end_partitions(self.key, [shard], window.end)
        else:
            self.metastore.advance_watermark(self.key, shard, window.end)
