"""Change-stream semantics of the emulator, observed through the real client.

Heartbeats on idle partitions, streaming reads that wait for the clock or for a split, and the
scope of a stream (``FOR ALL``, ``FOR table``, ``FOR table(column)``, a stream created later).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.spanner_v1 import KeySet

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND
from airflow_provider_cdc.sources.spanner.records import (
    ChangeStreamRecord,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
)
from airflow_provider_cdc.testing.lineage_walk import query_partition, walk_lineage
from airflow_provider_cdc.testing.spanner_emulator import ManualClock, SpannerEmulator

SINGERS = (
    "CREATE TABLE Singers (SingerId INT64 NOT NULL, Name STRING(MAX), Rating FLOAT64) PRIMARY KEY (SingerId)"
)
ALBUMS = (
    "CREATE TABLE Albums (SingerId INT64 NOT NULL, AlbumId INT64 NOT NULL, Title STRING(MAX)) "
    "PRIMARY KEY (SingerId, AlbumId)"
)
EVERYTHING = "CREATE CHANGE STREAM Everything FOR ALL"
SMALL_SCHEMA = [SINGERS, ALBUMS, EVERYTHING]
_DONE = object()


def initial_tokens(database: Any, stream: str, start: datetime) -> list[str]:
    """Tokens the initial (NULL token) query reports for ``start``."""
    records = list(query_partition(database, stream, start, start, None, 10_000))
    assert records and all(isinstance(record, ChildPartitionsRecord) for record in records)
    tokens = [child.token for record in records for child in record.child_partitions]
    assert all(not child.parent_partition_tokens for record in records for child in record.child_partitions)
    return tokens


class BackgroundRead:
    """A change-stream query running in a thread; records arrive on a queue as the server sends them."""

    def __init__(
        self, database: Any, stream: str, start: datetime, end: datetime | None, token: str, hb: int
    ):
        self.records: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(
            target=self._run, args=(database, stream, start, end, token, hb), daemon=True
        )
        self._thread.start()

    def _run(self, *args: Any) -> None:
        try:
            for record in query_partition(*args):
                self.records.put(record)
        except Exception as exc:  # surfaced to the test by next_record/finish
            self.records.put(exc)
        finally:
            self.records.put(_DONE)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def next_of(self, kind: type, timeout: float = 10.0) -> tuple[Any, list[ChangeStreamRecord]]:
        """Wait for the next record of ``kind``; returns it and the records before it."""
        before: list[ChangeStreamRecord] = []
        deadline = time.monotonic() + timeout
        while True:
            item = self.records.get(timeout=max(deadline - time.monotonic(), 0.01))
            if isinstance(item, Exception):
                raise item
            if item is _DONE:
                raise AssertionError(f"the read ended before a {kind.__name__} arrived; got {before}")
            if isinstance(item, kind):
                return item, before
            before.append(item)

    def finish(self, timeout: float = 10.0) -> list[ChangeStreamRecord]:
        """Wait for the read to complete; returns the records not consumed yet."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the read did not complete"
        rest = []
        while True:
            item = self.records.get_nowait()
            if item is _DONE:
                return rest
            if isinstance(item, Exception):
                raise item
            rest.append(item)


def assert_heartbeat_cadence(
    records: list[ChangeStreamRecord], start: datetime, end: datetime, interval: timedelta
) -> None:
    """Progress (heartbeats and commits) never pauses longer than ``interval`` from start to end."""
    marks = [start]
    for record in records:
        stamp = record.timestamp
        assert stamp > marks[-1] or (stamp == marks[-1] and len(marks) == 1), f"{stamp} not after {marks[-1]}"
        marks.append(stamp)
    marks.append(end)
    gaps = [later - earlier for earlier, later in zip(marks, marks[1:], strict=False)]
    assert max(gaps) <= interval, f"progress paused for {max(gaps)} with heartbeats every {interval}"


@pytest.fixture(scope="module")
def single_partition_emulator(emulator_instance: Any) -> Iterator[tuple[SpannerEmulator, Any]]:
    """An emulator whose databases start with one partition, and its instance."""
    with SpannerEmulator(
        clock=ManualClock(datetime(2026, 3, 1, tzinfo=timezone.utc)), seed=3, initial_partitions=1
    ) as emulator:
        yield emulator, emulator_instance(emulator)


_ids = iter(range(1, 1000))


def fresh_database(instance: Any, ddl: list[str]) -> Any:
    database = instance.database(f"sem{next(_ids)}", ddl_statements=ddl)
    database.create().result(30)
    return database


# ---------------------------------------------------------------------------------------------
# Heartbeats
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("interval_ms", [1_000, 10_000, 25_000])
def test_idle_partition_returns_only_heartbeats_at_the_interval(
    spanner_emulator: Any, new_spanner_database: Any, interval_ms: int
) -> None:
    database = new_spanner_database(SMALL_SCHEMA, prefix="idle")
    clock = spanner_emulator.clock
    start = clock.advance(timedelta(seconds=1))
    tokens = initial_tokens(database, "Everything", start)
    assert len(tokens) == 2
    end = start + timedelta(seconds=60)
    clock.advance(timedelta(seconds=90))
    interval = timedelta(milliseconds=interval_ms)
    for token in tokens:
        records = list(query_partition(database, "Everything", start, end, token, interval_ms))
        assert records, "an idle partition still reports progress"
        assert all(isinstance(record, HeartbeatRecord) for record in records), records
        assert all(start <= record.timestamp <= end for record in records)
        assert len(records) <= 60_000 // interval_ms + 1
        assert_heartbeat_cadence(records, start, end, interval)


def test_heartbeats_around_a_change_promise_it_was_returned(
    spanner_emulator: Any, new_spanner_database: Any
) -> None:
    database = new_spanner_database(SMALL_SCHEMA, prefix="beat")
    clock = spanner_emulator.clock
    start = clock.advance(timedelta(seconds=1))
    tokens = initial_tokens(database, "Everything", start)
    clock.advance(timedelta(seconds=30))
    with database.batch() as batch:
        batch.insert("Singers", columns=["SingerId", "Name", "Rating"], values=[[7, "Nina", 4.0]])
    committed = batch.committed
    end = start + timedelta(seconds=60)
    clock.advance(timedelta(seconds=45))
    found = []
    for token in tokens:
        records = list(query_partition(database, "Everything", start, end, token, 5_000))
        assert_heartbeat_cadence(records, start, end, timedelta(seconds=5))
        data = [index for index, record in enumerate(records) if isinstance(record, DataChangeRecord)]
        found.extend(records[index].commit_timestamp for index in data)
        if data:
            for index, record in enumerate(records):
                if isinstance(record, HeartbeatRecord):
                    assert (record.timestamp < committed) == (index < data[0]), "heartbeat passed the change"
    assert found == [committed]


# ---------------------------------------------------------------------------------------------
# Streaming reads that wait
# ---------------------------------------------------------------------------------------------


def one_partition_stream(
    single_partition_emulator: tuple[SpannerEmulator, Any],
) -> tuple[SpannerEmulator, Any, datetime, str]:
    """A fresh database on the one-partition emulator, its clock a second on: the emulator, the
    database, that moment and the token of the stream ``Everything``'s one partition."""
    emulator, instance = single_partition_emulator
    database = fresh_database(instance, SMALL_SCHEMA)
    start = emulator.clock.advance(timedelta(seconds=1))
    (token,) = initial_tokens(database, "Everything", start)
    return emulator, database, start, token


def test_streaming_read_with_null_end_returns_children_on_a_split(
    single_partition_emulator: tuple[SpannerEmulator, Any],
) -> None:
    emulator, database, start, token = one_partition_stream(single_partition_emulator)
    clock = emulator.clock
    read = BackgroundRead(database, "Everything", start, None, token, 1_000)
    time.sleep(0.3)
    assert read.running, "a read with a NULL end must wait for changes"

    clock.advance(timedelta(seconds=2))
    with database.batch() as batch:
        batch.insert("Singers", columns=["SingerId", "Name", "Rating"], values=[[1, "Ada", 5.0]])
    record, _ = read.next_of(DataChangeRecord)
    assert record.commit_timestamp == batch.committed
    assert record.mods[0].keys == {"SingerId": "1"}
    time.sleep(0.2)
    assert read.running, "the read continues after a change"

    split_at = clock.advance(timedelta(seconds=3))
    emulator.split_partition(database.name)
    children, before = read.next_of(ChildPartitionsRecord)
    rest = read.finish()
    assert all(isinstance(record, HeartbeatRecord) for record in before)
    assert all(record.timestamp <= split_at for record in before)
    assert all(isinstance(record, ChildPartitionsRecord) for record in rest)
    # the split happens now: at the clock reading, or just past progress the read already reported
    assert split_at <= children.start_timestamp <= split_at + timedelta(milliseconds=1)
    split_at = children.start_timestamp
    reported = [child for record in [children, *rest] for child in record.child_partitions]
    assert len(reported) == 2
    assert all(child.parent_partition_tokens == (token,) for child in reported)

    # the children carry the key range on from the split
    clock.advance(timedelta(seconds=1))
    with database.batch() as batch:
        batch.update("Singers", columns=["SingerId", "Rating"], values=[[1, 4.0]])
    later = batch.committed
    found = []
    for child in reported:
        for record in query_partition(database, "Everything", split_at, later, child.token, 1_000):
            if isinstance(record, DataChangeRecord):
                found.append((child.token, record.commit_timestamp, record.mod_type.value))
    assert [(stamp, mod_type) for _, stamp, mod_type in found] == [(later, "UPDATE")]


def test_read_with_a_future_end_waits_for_the_clock(
    single_partition_emulator: tuple[SpannerEmulator, Any],
) -> None:
    emulator, database, start, token = one_partition_stream(single_partition_emulator)
    clock = emulator.clock
    end = start + timedelta(seconds=30)
    read = BackgroundRead(database, "Everything", start, end, token, 10_000)
    time.sleep(0.3)
    assert read.running, "the end is in the future: the read waits"
    clock.advance(timedelta(seconds=12))
    first, _ = read.next_of(HeartbeatRecord)
    assert start < first.timestamp <= clock.now()
    assert read.running
    clock.advance(timedelta(seconds=25))
    records = [first, *read.finish()]
    assert all(isinstance(record, HeartbeatRecord) for record in records)
    assert_heartbeat_cadence(records, start, end, timedelta(seconds=10))


# ---------------------------------------------------------------------------------------------
# Stream scope
# ---------------------------------------------------------------------------------------------


def _mods(reads: list[Any]) -> list[tuple[datetime, str, str, dict, dict, dict]]:
    return [
        (
            record.commit_timestamp,
            record.table_name,
            record.mod_type.value,
            mod.keys,
            mod.new_values,
            mod.old_values,
        )
        for read in reads
        for record in read.data_records
        for mod in record.mods
    ]


def test_stream_scope_tables_and_columns(spanner_emulator: Any, new_spanner_database: Any) -> None:
    database = new_spanner_database(
        [
            SINGERS,
            ALBUMS,
            EVERYTHING,
            "CREATE CHANGE STREAM SingersOnly FOR Singers",
            "CREATE CHANGE STREAM SingerNames FOR Singers(Name)",
        ],
        prefix="scope",
    )
    clock = spanner_emulator.clock
    start = clock.advance(timedelta(seconds=1))
    stamps = []

    def commit(write: Any) -> None:
        clock.advance(timedelta(seconds=2))
        with database.batch() as batch:
            write(batch)
        stamps.append(batch.committed)

    commit(
        lambda b: (
            b.insert("Singers", columns=["SingerId", "Name", "Rating"], values=[[1, "Ada", 4.5]]),
            b.insert("Albums", columns=["SingerId", "AlbumId", "Title"], values=[[1, 10, "First"]]),
        )
    )
    commit(lambda b: b.update("Singers", columns=["SingerId", "Rating"], values=[[1, 3.0]]))
    commit(lambda b: b.update("Singers", columns=["SingerId", "Name"], values=[[1, "Ada L."]]))
    commit(lambda b: b.update("Albums", columns=["SingerId", "AlbumId", "Title"], values=[[1, 10, "Second"]]))
    commit(lambda b: b.delete("Singers", KeySet(keys=[[1]])))
    end = clock.advance(timedelta(seconds=1))
    t1, t2, t3, t4, t5 = stamps
    singer, album = {"SingerId": "1"}, {"SingerId": "1", "AlbumId": "10"}

    everything = _mods(walk_lineage(database, "Everything", start, end))
    assert sorted(everything, key=lambda m: (m[0], m[1])) == [
        (t1, "Albums", "INSERT", album, {"Title": "First"}, {}),
        (t1, "Singers", "INSERT", singer, {"Name": "Ada", "Rating": 4.5}, {}),
        (t2, "Singers", "UPDATE", singer, {"Rating": 3.0}, {"Rating": 4.5}),
        (t3, "Singers", "UPDATE", singer, {"Name": "Ada L."}, {"Name": "Ada"}),
        (t4, "Albums", "UPDATE", album, {"Title": "Second"}, {"Title": "First"}),
        (t5, "Singers", "DELETE", singer, {}, {"Name": "Ada L.", "Rating": 3.0}),
    ]

    singers_reads = walk_lineage(database, "SingersOnly", start, end)
    assert sorted(_mods(singers_reads), key=lambda m: m[0]) == [m for m in everything if m[1] == "Singers"]
    first = [r for read in singers_reads for r in read.data_records if r.commit_timestamp == t1]
    assert [r.number_of_records_in_transaction for r in first] == [1], "the stream sees one table of t1"

    names_reads = walk_lineage(database, "SingerNames", start, end)
    assert sorted(_mods(names_reads), key=lambda m: m[0]) == [
        (t1, "Singers", "INSERT", singer, {"Name": "Ada"}, {}),
        (t3, "Singers", "UPDATE", singer, {"Name": "Ada L."}, {"Name": "Ada"}),
        (t5, "Singers", "DELETE", singer, {}, {"Name": "Ada L."}),
    ]
    for read in names_reads:
        for record in read.data_records:
            assert [(c.name, c.is_primary_key, c.ordinal_position) for c in record.column_types] == [
                ("SingerId", True, 1),
                ("Name", False, 2),
            ]


def test_a_stream_created_later_starts_at_its_creation(
    spanner_emulator: Any, new_spanner_database: Any
) -> None:
    database = new_spanner_database([SINGERS, EVERYTHING], prefix="later")
    clock = spanner_emulator.clock
    start = clock.advance(timedelta(seconds=1))
    clock.advance(timedelta(seconds=1))
    with database.batch() as batch:
        batch.insert("Singers", columns=["SingerId", "Name", "Rating"], values=[[1, "Ada", 1.0]])
    before = batch.committed
    asked = clock.advance(timedelta(seconds=5))
    database.update_ddl(["CREATE CHANGE STREAM Later FOR ALL"]).result(30)
    readable_from = clock.advance(timedelta(seconds=1))
    clock.advance(timedelta(seconds=1))
    with database.batch() as batch:
        batch.update("Singers", columns=["SingerId", "Rating"], values=[[1, 2.0]])
        batch.insert("Singers", columns=["SingerId", "Name", "Rating"], values=[[2, "Bo", None]])
    after = batch.committed
    end = clock.advance(timedelta(seconds=1))

    everything = _mods(walk_lineage(database, "Everything", start, end))
    assert [(m[0], m[2]) for m in sorted(everything, key=lambda m: (m[0], m[3]["SingerId"]))] == [
        (before, "INSERT"),
        (after, "UPDATE"),
        (after, "INSERT"),
    ]
    later = _mods(walk_lineage(database, "Later", readable_from, end))
    assert sorted((m[0], m[2], m[3]["SingerId"]) for m in later) == [
        (after, "INSERT", "2"),
        (after, "UPDATE", "1"),
    ]
    inserted = next(m for m in later if m[2] == "INSERT")
    assert inserted[4] == {"Name": "Bo", "Rating": None}

    # the change before the stream existed cannot be asked for
    with pytest.raises((exceptions.OutOfRange, exceptions.InvalidArgument)) as caught:
        list(query_partition(database, "Later", asked - ONE_MICROSECOND, end, None, 10_000))
    assert "start_timestamp" in caught.value.message


def test_stream_creation_time_is_the_ddl_commit_timestamp(
    spanner_emulator: Any, new_spanner_database: Any
) -> None:
    """The DDL operation's metadata reports the commit timestamp: the stream is readable from it on."""
    database = new_spanner_database([SINGERS], prefix="created")
    clock = spanner_emulator.clock
    asked = clock.advance(timedelta(seconds=1))
    operation = database.update_ddl(["CREATE CHANGE STREAM Fresh FOR Singers"])
    operation.result(30)
    stamps = list(operation.metadata.commit_timestamps)
    assert len(stamps) == 1, f"UpdateDatabaseDdlMetadata.commit_timestamps is {stamps}"
    created = stamps[0]
    assert asked <= created < asked + timedelta(seconds=1)
    clock.advance(timedelta(seconds=1))
    records = list(query_partition(database, "Fresh", created, created, None, 10_000))
    assert records and all(isinstance(record, ChildPartitionsRecord) for record in records)
    with pytest.raises((exceptions.OutOfRange, exceptions.InvalidArgument)) as caught:
        list(query_partition(database, "Fresh", created - ONE_MICROSECOND, created, None, 10_000))
    assert "start_timestamp" in caught.value.message
