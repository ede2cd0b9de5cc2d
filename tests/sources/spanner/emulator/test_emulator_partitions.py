"""Batch snapshots: partitioned queries and reads that cover a table exactly once at the snapshot's
timestamp, what PartitionQuery refuses, partition tokens bound to their request, and reads by key set,
on the project's emulator and on Google's (skipped where it is not installed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.spanner_v1 import KeyRange, KeySet, param_types
from table_targets import Target, message, project_tables, target

__all__ = ["project_tables", "target"]

LEDGER = [
    "CREATE TABLE Ledger (Shard INT64 NOT NULL, EntryId STRING(16) NOT NULL, Amount INT64, Memo STRING(MAX)) "
    "PRIMARY KEY (Shard, EntryId DESC)"
]
COLUMNS = ["Shard", "EntryId", "Amount", "Memo"]
NOT_PARTITIONABLE = (
    "The emulator is not able to determine whether this query is partitionable. Please test this query "
    "against Cloud Spanner and obtain a query execution plan to confirm it is partitionable. A query is "
    "partitionable only if the first operator in the query execution plan is a Distributed Union. If you "
    "confirm it is partitionable, set the hint @{spanner_emulator.disable_query_partitionability_check=true} "
    "on the query statement to bypass this check in the emulator. This hint will be ignored by the "
    "production Cloud Spanner service and the emulator will accept the query and return a valid result "
    "when it is run with the check disabled. Possible reason why the query may not be partitionable: Query "
    "is not a simple table scan."
)
OTHER_REQUEST = "Partitioned request was created for different read or sql parameters."


def ledger(target: Target) -> tuple[Any, Any, list[tuple]]:
    """A ledger of 60 rows at a snapshot timestamp, changed afterwards; the database, the timestamp and
    the rows as of it."""
    database = target.database(LEDGER)
    rows = [
        [shard, f"e{entry:03d}", shard * 100 + entry, f"memo {entry}"]
        for shard in range(3)
        for entry in range(20)
    ]
    with database.batch() as batch:
        batch.insert("Ledger", COLUMNS, rows)
    at = batch.committed
    target.pass_time(timedelta(milliseconds=2))
    with database.batch() as batch:  # after the snapshot: invisible to it
        batch.update("Ledger", ["Shard", "EntryId", "Amount"], [[0, "e001", -1]])
        batch.delete("Ledger", KeySet(keys=[[1, "e005"]]))
        batch.insert("Ledger", COLUMNS, [[7, "new", 1, "late"]])
    return database, at, [tuple(row) for row in rows]


@contextmanager
def ledger_snapshot(target: Target) -> Iterator[tuple[Any, Any, Any, list[tuple]]]:
    """The :func:`ledger`'s database, timestamp, a batch snapshot at it (closed after) and its rows."""
    database, at, rows = ledger(target)
    snapshot = database.batch_snapshot(read_timestamp=at)
    try:
        yield database, at, snapshot, rows
    finally:
        snapshot.close()


def test_partitioned_queries_cover_the_table_exactly_once(target: Target) -> None:
    with ledger_snapshot(target) as (database, at, snapshot, rows):
        batches = list(snapshot.generate_query_batches("SELECT Shard, EntryId, Amount, Memo FROM Ledger"))
        found = [tuple(row) for batch in batches for row in snapshot.process_query_batch(batch)]
        assert Counter(found) == Counter(rows)
        if not target.google:  # Google's emulator gives two partitions, the first one empty
            assert len(batches) >= 3
            assert all(list(snapshot.process_query_batch(batch)) for batch in batches)
        batches = list(
            snapshot.generate_query_batches(
                "SELECT EntryId FROM Ledger WHERE Shard = @shard AND Amount >= @low",
                params={"shard": 2, "low": 210},
                param_types={"shard": param_types.INT64, "low": param_types.INT64},
            )
        )
        found = [row[0] for batch in batches for row in snapshot.process_query_batch(batch)]
        assert sorted(found) == [f"e{entry:03d}" for entry in range(10, 20)]


def test_partitioned_reads_cover_the_key_set_exactly_once(target: Target) -> None:
    with ledger_snapshot(target) as (database, at, snapshot, rows):
        batches = list(snapshot.generate_read_batches("Ledger", COLUMNS, KeySet(all_=True), max_partitions=3))
        found = [tuple(row) for batch in batches for row in snapshot.process_read_batch(batch)]
        assert Counter(found) == Counter(rows)
        if not target.google:
            assert len(batches) == 3
        ranges = KeySet(
            ranges=[
                KeyRange(start_closed=[1], end_open=[2]),
                KeyRange(start_open=[0, "e003"], end_closed=[0, "e001"]),
            ]
        )
        batches = list(snapshot.generate_read_batches("Ledger", ["Shard", "EntryId"], ranges))
        found = [tuple(row) for batch in batches for row in snapshot.process_read_batch(batch)]
        expected = [(0, "e002"), (0, "e001")] + [(1, f"e{entry:03d}") for entry in range(20)]
        assert Counter(found) == Counter(expected)


def test_a_batch_snapshot_travels_as_a_dict(target: Target) -> None:
    with ledger_snapshot(target) as (database, at, snapshot, rows):
        batches = list(snapshot.generate_query_batches("SELECT Shard, EntryId, Amount, Memo FROM Ledger"))
        state = snapshot.to_dict()
        found = []
        for batch in batches:  # each where it is processed: a snapshot rebuilt from the state
            elsewhere = type(snapshot).from_dict(database, state)
            found.extend(tuple(row) for row in elsewhere.process_query_batch(batch))
        assert Counter(found) == Counter(rows)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT Shard FROM Ledger ORDER BY Shard",
        "SELECT Memo FROM Ledger LIMIT 5",
        "SELECT COUNT(*) FROM Ledger WHERE Shard = 1",
    ],
)
def test_partition_query_refuses_what_is_not_a_simple_scan(target: Target, sql: str) -> None:
    with ledger_snapshot(target) as (database, at, snapshot, _):
        with pytest.raises(exceptions.InvalidArgument) as caught:
            list(snapshot.generate_query_batches(sql))
        assert message(caught.value) == NOT_PARTITIONABLE


def test_a_partition_token_serves_only_its_own_request(target: Target) -> None:
    with ledger_snapshot(target) as (database, at, snapshot, _):
        sql = "SELECT EntryId FROM Ledger WHERE Shard = @shard"
        params, types = {"shard": 1}, {"shard": param_types.INT64}
        batch = next(iter(snapshot.generate_query_batches(sql, params=params, param_types=types)))
        changed = {**batch, "query": {**batch["query"], "params": {"shard": 2}}}
        with pytest.raises(exceptions.InvalidArgument) as caught:
            list(snapshot.process_query_batch(changed))
        assert message(caught.value) == OTHER_REQUEST
        read_batch = next(iter(snapshot.generate_read_batches("Ledger", ["Shard"], KeySet(all_=True))))
        with pytest.raises(exceptions.InvalidArgument) as caught:
            list(snapshot.process_query_batch({**batch, "partition": read_batch["partition"]}))
        assert message(caught.value) == OTHER_REQUEST
    other = database.batch_snapshot(read_timestamp=at)  # another transaction
    try:
        with pytest.raises(exceptions.InvalidArgument) as caught:
            list(other.process_query_batch(batch))
        same_session = other._get_session().session_id == snapshot._get_session().session_id
        expected = "transaction" if same_session else "session"
        assert message(caught.value) == f"Partitioned request was created for a different {expected}."
    finally:
        other.close()


def test_reads_by_keys_and_ranges_in_key_order(target: Target) -> None:
    database, at, _ = ledger(target)
    keys = KeySet(
        keys=[[2, "e019"], [0, "e001"], [2, "e019"], [9, "none"]],
        ranges=[KeyRange(start_closed=[1, "e002"], end_open=[1, "e000"])],
    )
    with database.snapshot(read_timestamp=at) as snapshot:
        found = [tuple(row) for row in snapshot.read("Ledger", ["EntryId", "Shard"], keys)]
    assert found == [("e001", 0), ("e002", 1), ("e001", 1), ("e019", 2)]
    with database.snapshot(read_timestamp=at) as snapshot:
        assert len(list(snapshot.read("Ledger", ["Shard"], KeySet(all_=True), limit=7))) == 7


EVERY = KeySet(all_=True)
NOT_FOUND, FAILED = exceptions.NotFound, exceptions.FailedPrecondition
READ_ERRORS = [
    ("Nope", ["Shard"], EVERY, "", NOT_FOUND, "Table not found: Nope"),
    ("Ledger", ["Shard", "Z"], EVERY, "", NOT_FOUND, "Column not found in table Ledger: Z"),
    ("Ledger", ["Shard"], EVERY, "ByMemo", NOT_FOUND, "No index 'ByMemo' was found for table 'Ledger'."),
    ("Ledger", ["Shard"], KeySet(keys=[["x", "e001"]]), "", FAILED, "Could not parse x as an integer"),
    (
        "Ledger", ["Shard"], KeySet(keys=[[1]]), "", FAILED,
        "Wrong number of key parts for Ledger. Expected 2 key parts, found 1 key parts. "
        'Supplied key: values { string_value: "1" }',
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("table", "columns", "keys", "index", "error", "text"), READ_ERRORS, ids=[e[-1] for e in READ_ERRORS]
)
def test_bad_reads_fail_as_spanner_words_them(
    target: Target, table: str, columns: list[str], keys: KeySet, index: str, error: type, text: str
) -> None:
    database = target.database(LEDGER)
    with pytest.raises(error) as caught, database.snapshot() as snapshot:
        list(snapshot.read(table, columns, keys, index=index))
    assert message(caught.value) == text
