"""Change-stream reads: validating a query, the initial partitions and a partition's records."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import grpc

from airflow_provider_cdc.core.timestamps import format_timestamp, from_micros

from . import wire
from .model import (
    FLUSH,
    MAX_HEARTBEAT_MS,
    MIN_HEARTBEAT_MS,
    ChangeStream,
    ChangeStreamQuery,
    EmulatorError,
    PartitionLog,
)
from .partitions import Partition

if TYPE_CHECKING:
    from .database import Database

IsActive = Callable[[], bool]


def validate_query(db: Database, query: ChangeStreamQuery) -> tuple[ChangeStream, Partition | None]:
    """The stream and partition a query reads (``None``: the initial query), or the error Spanner returns."""
    with db.lock:
        stream = db.stream(query.stream)
        invalid, out_of_range = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE
        if not MIN_HEARTBEAT_MS <= query.heartbeat_ms <= MAX_HEARTBEAT_MS:
            raise EmulatorError(
                invalid,
                f"heartbeat_milliseconds must be between {MIN_HEARTBEAT_MS} and {MAX_HEARTBEAT_MS}, "
                f"got {query.heartbeat_ms}",
            )
        start = format_timestamp(from_micros(query.start_us))
        if query.end_us is not None and query.end_us < query.start_us:
            end = format_timestamp(from_micros(query.end_us))
            raise EmulatorError(invalid, f"end_timestamp {end} is before start_timestamp {start}")
        if query.start_us < stream.created_us:
            created = format_timestamp(from_micros(stream.created_us))
            raise EmulatorError(
                out_of_range,
                f"start_timestamp {start} is before the creation of change stream {stream.name} at {created}",
            )
        oldest = db.clock.now_us() - stream.retention_us
        if query.start_us < oldest:
            raise EmulatorError(
                out_of_range,
                f"start_timestamp {start} is outside the retention period of change stream {stream.name} "
                f"(oldest readable: {format_timestamp(from_micros(oldest))})",
            )
        if query.token is None:
            return stream, None
        pid = stream.tokens.get(query.token)
        if pid is None:
            raise EmulatorError(
                invalid,
                f"partition_token {query.token!r} is not a partition of change stream {stream.name}",
            )
        partition = db.partitions.all[pid]
        if query.start_us < partition.start_us:
            raise EmulatorError(
                invalid,
                f"start_timestamp {start} is before the start of partition {query.token} at "
                f"{format_timestamp(from_micros(partition.start_us))}",
            )
        return stream, partition


def read(db: Database, query: ChangeStreamQuery, is_active: IsActive) -> Iterator[bytes | object]:
    """Rows of one change-stream query, in order; ``FLUSH`` before blocking on the clock."""
    stream, partition = validate_query(db, query)
    if partition is None:
        yield from _initial(db, stream, query, is_active)
    else:
        yield from _partition(db, stream, partition, query, is_active)


def _wait(db: Database, is_active: IsActive) -> None:
    if not is_active():
        raise EmulatorError(grpc.StatusCode.CANCELLED, "the client cancelled the change-stream query")
    db.clock.wait(0.5)


def _initial(
    db: Database, stream: ChangeStream, query: ChangeStreamQuery, is_active: IsActive
) -> Iterator[bytes | object]:
    while True:
        with db.lock:
            db.run_schedule(db.clock.now_us())
            if db.readable_until_us() >= query.start_us:
                alive = sorted(db.partitions.alive_at(query.start_us), key=lambda p: p.low)
                tokens = [db.token(stream, p) for p in alive]
                break
        yield FLUSH
        _wait(db, is_active)
    start = format_timestamp(from_micros(query.start_us))
    for sequence, i in enumerate(range(0, len(tokens), 2)):
        yield wire.child_partitions_row(start, f"{sequence:08d}", [(t, [None]) for t in tokens[i : i + 2]])


def _partition(
    db: Database, stream: ChangeStream, partition: Partition, query: ChangeStreamQuery, is_active: IsActive
) -> Iterator[bytes | object]:
    heartbeat_us = query.heartbeat_ms * 1000
    progress = query.start_us - 1
    log = stream.logs.setdefault(partition.pid, PartitionLog())
    index = bisect_left(log.timestamps, query.start_us)
    query_end = query.end_us

    def heartbeats(until_us: int) -> Iterator[bytes]:
        nonlocal progress
        while progress + heartbeat_us <= until_us:
            progress += heartbeat_us
            yield wire.heartbeat_row(format_timestamp(from_micros(progress)))

    while True:
        with db.lock:
            db.run_schedule(db.clock.now_us())
            limit = db.readable_until_us()
            if query_end is not None:
                limit = min(limit, query_end)
            available = len(log.timestamps)
            end_us = partition.end_us
        while index < available and log.timestamps[index] <= limit:
            ts = log.timestamps[index]
            yield from heartbeats(ts - 1)
            yield log.rows[index]
            progress = ts
            index += 1
        if end_us is not None and (query_end is None or end_us <= query_end) and index >= available:
            yield from heartbeats(end_us - 1)
            yield _children_row(db, stream, partition)
            return
        if query_end is not None and limit >= query_end:
            yield from heartbeats(query_end)
            return
        yield from heartbeats(limit)
        yield FLUSH
        _wait(db, is_active)


def _children_row(db: Database, stream: ChangeStream, partition: Partition) -> bytes:
    with db.lock:
        children = [db.partitions.all[c] for c in partition.children]
        entries = [
            (db.token(stream, c), [db.token(stream, db.partitions.all[p]) for p in c.parents])
            for c in children
        ]
    assert partition.end_us is not None
    return wire.child_partitions_row(format_timestamp(from_micros(partition.end_us)), "00000000", entries)
