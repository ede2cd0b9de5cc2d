"""Reads at a timestamp: row versions, the version retention period, future timestamps and commit
timestamps, on the project's emulator and on Google's (skipped where it is not installed).
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.spanner_v1 import KeySet
from table_targets import Target, message, project_tables, shown, target

__all__ = ["project_tables", "target"]

ACCOUNTS = [
    "CREATE TABLE Accounts (Id INT64 NOT NULL, Owner STRING(MAX), Balance NUMERIC, "
    "UpdatedAt TIMESTAMP OPTIONS (allow_commit_timestamp=true), Note TIMESTAMP) PRIMARY KEY (Id)"
]
COMMIT_TS = "spanner.commit_timestamp()"
Rows = list[list[Any]]


Write = tuple[str, list[str], list[list[Any]]]


def commit(database: Any, *writes: Write, deletes: tuple[int, ...] = ()) -> datetime:
    """One transaction of ``(operation, columns, rows)`` writes on Accounts and key deletes."""
    with database.batch() as batch:
        for operation, columns, rows in writes:
            getattr(batch, operation)("Accounts", columns=columns, values=rows)
        if deletes:
            batch.delete("Accounts", KeySet(keys=[[key] for key in deletes]))
    return batch.committed


def query(database: Any, sql: str = "SELECT Id, Owner FROM Accounts ORDER BY Id", **bound: Any) -> Rows:
    with database.snapshot(**bound) as snapshot:
        return [list(row) for row in snapshot.execute_sql(sql)]


def read(database: Any, **bound: Any) -> Rows:
    with database.snapshot(**bound) as snapshot:
        return [list(row) for row in snapshot.read("Accounts", ["Id", "Owner"], KeySet(all_=True))]


def test_a_snapshot_at_a_timestamp_sees_the_rows_as_of_then(target: Target) -> None:
    database = target.database(ACCOUNTS)
    t1 = commit(database, ("insert", ["Id", "Owner"], [[k, f"owner {k}"] for k in (1, 2, 3, 4)]))
    owner = ["Id", "Owner"]
    t2 = commit(database, ("update", owner, [[1, "ann"]]), ("insert", owner, [[5, "eve"]]), deletes=(2,))
    t3 = commit(database, ("update", owner, [[1, "anna"]]), ("insert", owner, [[2, "bob"]]), deletes=(4,))
    expected = {
        t1 - timedelta(microseconds=1): [],
        t1: [[1, "owner 1"], [2, "owner 2"], [3, "owner 3"], [4, "owner 4"]],
        t2: [[1, "ann"], [3, "owner 3"], [4, "owner 4"], [5, "eve"]],
        t3 - timedelta(microseconds=1): [[1, "ann"], [3, "owner 3"], [4, "owner 4"], [5, "eve"]],
        t3: [[1, "anna"], [2, "bob"], [3, "owner 3"], [5, "eve"]],
    }
    for at, rows in expected.items():
        assert query(database, read_timestamp=at) == rows, at
        assert read(database, read_timestamp=at) == rows, at
    assert query(database) == expected[t3]  # a strong read: now
    assert read(database) == expected[t3]


def test_a_multi_use_snapshot_reads_at_the_timestamp_it_began(target: Target) -> None:
    database = target.database(ACCOUNTS)
    commit(database, ("insert", ["Id", "Owner"], [[1, "before"]]))
    with database.snapshot(multi_use=True) as snapshot:  # strong: its timestamp is when it began
        first = [list(row) for row in snapshot.execute_sql("SELECT Id, Owner FROM Accounts")]
        assert snapshot._transaction_id  # begun inline by the first query
        commit(
            database, ("update", ["Id", "Owner"], [[1, "after"]]), ("insert", ["Id", "Owner"], [[2, "new"]])
        )
        second = [list(row) for row in snapshot.read("Accounts", ["Id", "Owner"], KeySet(all_=True))]
        third = [list(row) for row in snapshot.execute_sql("SELECT Id, Owner FROM Accounts")]
    assert first == second == third == [[1, "before"]]
    assert query(database) == [[1, "after"], [2, "new"]]


def test_exact_staleness_reads_at_now_minus_the_staleness(target: Target) -> None:
    database = target.database(ACCOUNTS)
    t1 = commit(database, ("insert", ["Id", "Owner"], [[1, "first"]]))
    target.pass_time(timedelta(seconds=3))
    commit(database, ("update", ["Id", "Owner"], [[1, "second"]]))
    stale = target.now() - (t1 + timedelta(seconds=1.5))  # about halfway between the commits
    assert query(database, exact_staleness=stale) == [[1, "first"]]
    assert query(database, exact_staleness=timedelta(0)) == [[1, "second"]]


def test_reads_older_than_the_version_retention_period_fail(target: Target) -> None:
    database = target.database(ACCOUNTS)
    commit(database, ("insert", ["Id", "Owner"], [[1, "a"]]))
    old = target.now() - timedelta(hours=1, minutes=5)
    expected = f"Read-only transaction timestamp {shown(old)} has exceeded the maximum timestamp staleness"
    with pytest.raises(exceptions.FailedPrecondition) as caught:
        query(database, read_timestamp=old)
    assert message(caught.value) == expected
    with pytest.raises(exceptions.FailedPrecondition) as caught:
        read(database, read_timestamp=old)
    assert message(caught.value) == expected
    snapshot = database.batch_snapshot(read_timestamp=old)
    try:
        batches = list(snapshot.generate_query_batches("SELECT Id FROM Accounts"))
        with pytest.raises(exceptions.FailedPrecondition) as caught:
            for batch in batches:
                list(snapshot.process_query_batch(batch))
        assert message(caught.value) == expected
    finally:
        snapshot.close()
    with pytest.raises(exceptions.FailedPrecondition, match="exceeded the maximum timestamp staleness"):
        query(database, exact_staleness=timedelta(hours=2))


def test_the_version_retention_period_can_be_raised(target: Target) -> None:
    if target.google:
        pytest.skip("Google's emulator accepts version_retention_period but keeps reads to one hour")
    database = target.database(ACCOUNTS)
    t1 = commit(database, ("insert", ["Id", "Owner"], [[1, "a"]]))
    target.pass_time(timedelta(minutes=90))
    with pytest.raises(exceptions.FailedPrecondition, match="exceeded the maximum timestamp staleness"):
        query(database, read_timestamp=t1)
    name = database.name.rsplit("/", 1)[1]
    database.update_ddl([f"ALTER DATABASE `{name}` SET OPTIONS (version_retention_period = '2h')"]).result(60)
    assert query(database, read_timestamp=t1) == [[1, "a"]]
    database.reload()
    assert database.version_retention_period == "2h"
    options = query(database, "SELECT OPTION_NAME, OPTION_VALUE FROM INFORMATION_SCHEMA.DATABASE_OPTIONS")
    assert options == [["database_dialect", "GOOGLE_STANDARD_SQL"], ["version_retention_period", "2h"]]
    with pytest.raises(
        exceptions.InvalidArgument, match="version_retention_period must be between 1h and 7d"
    ):
        database.update_ddl([f"ALTER DATABASE `{name}` SET OPTIONS (version_retention_period='30m')"]).result(
            60
        )
    with pytest.raises(exceptions.InvalidArgument, match="Option: retention is unknown"):
        database.update_ddl([f"ALTER DATABASE `{name}` SET OPTIONS (retention = '2h')"]).result(60)


def test_a_read_at_a_future_timestamp_waits_until_then(target: Target) -> None:
    database = target.database(ACCOUNTS)
    commit(database, ("insert", ["Id", "Owner"], [[1, "a"]]))
    at = target.now() + timedelta(seconds=1.5)
    result: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: result.update(rows=query(database, read_timestamp=at)))
    reader.start()
    reader.join(0.5)
    assert reader.is_alive(), "a read in the future answered before its timestamp"
    target.pass_time(timedelta(seconds=2))
    reader.join(30)
    assert result["rows"] == [[1, "a"]]


# ----- commit timestamps ---------------------------------------------------------------------------
def updated_at(database: Any, key: int) -> Any:
    return query(database, f"SELECT UpdatedAt FROM Accounts WHERE Id = {key}")[0][0]


def test_the_commit_timestamp_placeholder_stores_the_commit_timestamp(target: Target) -> None:
    database = target.database(ACCOUNTS)
    committed = commit(database, ("insert", ["Id", "UpdatedAt"], [[1, COMMIT_TS], [2, COMMIT_TS]]))
    found = query(database, "SELECT Id, UpdatedAt FROM Accounts ORDER BY Id")
    assert found == [[1, committed], [2, committed]]
    later = commit(database, ("update", ["Id", "UpdatedAt"], [[2, COMMIT_TS]]))
    assert later > committed
    assert updated_at(database, 2) == later


def test_an_explicit_commit_timestamp_in_the_past_is_kept(target: Target) -> None:
    database = target.database(ACCOUNTS)
    past = datetime(2020, 5, 17, 8, 30, 15, 250000, tzinfo=timezone.utc)
    commit(database, ("insert", ["Id", "UpdatedAt", "Balance"], [[1, past, Decimal("1.5")]]))
    assert updated_at(database, 1) == past


def test_an_explicit_commit_timestamp_in_the_future_fails(target: Target) -> None:
    database = target.database(ACCOUNTS)
    future = (target.now() + timedelta(hours=1)).replace(microsecond=123400)
    with pytest.raises(exceptions.FailedPrecondition) as caught:
        commit(database, ("insert", ["Id", "UpdatedAt"], [[1, future]]))
    assert message(caught.value) == f"Cannot write timestamps in the future, found: {shown(future)}"
    commit(database, ("insert", ["Id", "Note"], [[1, future]]))  # a column without the option takes it
    assert query(database, "SELECT Note FROM Accounts") == [[future]]


def test_the_placeholder_needs_the_allow_commit_timestamp_option(target: Target) -> None:
    database = target.database(ACCOUNTS)
    with pytest.raises(exceptions.FailedPrecondition) as caught:
        commit(database, ("insert", ["Id", "Note"], [[1, COMMIT_TS]]))
    assert message(caught.value) == (
        "Cannot write commit timestamp because the allow_commit_timestamp column option is not set to true "
        "for column Accounts.Note, or for all corresponding shared key columns in this table's interleaved "
        "table hierarchy."
    )
