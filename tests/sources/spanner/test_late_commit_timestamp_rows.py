"""Late writes into commit-timestamp windows already read, on the project's emulator and on Google's.

A history in two phases: rows written before the previous window's read timestamp, then writes while
the next window runs. A row updated with an explicit past timestamp (the count unchanged), a row
rewritten to a timestamp before the pipeline, and a delete plus a late insert (the count unchanged)
fail the next window naming the keys; rows legitimately updated into the current window, keyed by every
key type with NULL key parts, do not; a rewrite that keeps its timestamp is not seen (a documented
limit). The windows are placed around the phases once each has committed, so no write can stray into
the other phase however slow the machine is. Google's half is skipped where its emulator is missing.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from support.table_sources import metastore_connection, sleep_until, table_hook

from airflow_provider_cdc.core.window import Window

UTC = timezone.utc
SIMPLE = "(Id INT64 NOT NULL, Title STRING(MAX), UpdatedAt TIMESTAMP OPTIONS (allow_commit_timestamp=true))"
DDL = [
    *(
        f"CREATE TABLE {name} {SIMPLE} PRIMARY KEY (Id)"
        for name in ("Rewritten", "Replaced", "Updated", "Same")
    ),
    *(
        f"CREATE TABLE {name} (Name STRING(MAX), Blob BYTES(MAX), Score FLOAT64, Amount NUMERIC, Day DATE, "
        "Moment TIMESTAMP, Flag BOOL, Seq INT64, Title STRING(MAX), "
        "UpdatedAt TIMESTAMP OPTIONS (allow_commit_timestamp=true)) "
        "PRIMARY KEY (Name, Blob, Score, Amount, Day, Moment, Flag, Seq)"
        for name in ("Keyed", "KeyedMoved")
    ),
]
KEYED_COLUMNS = ["Name", "Blob", "Score", "Amount", "Day", "Moment", "Flag", "Seq", "Title", "UpdatedAt"]
SIMPLE_COLUMNS = ["Id", "Title", "UpdatedAt"]
KEYS = {  # every key type, strings that need escaping, NaN, NULL key parts
    "escaped": ["a\"b'c\n", b"\x00\xff", 1.5, Decimal("1.50"), date(2020, 1, 2),
                datetime(2020, 1, 2, 3, 4, 5, 123456, tzinfo=UTC), True, 1],
    "nulls": [None] * 8,
    "odd": ["日本", b"", float("nan"), Decimal("-0.000000001"), date(1, 1, 1),
            datetime(1970, 1, 1, tzinfo=UTC), False, -(2**63)],
    "plain": ["x", b"y", 1 / 3, Decimal("0"), date(9999, 12, 31), datetime(2024, 1, 1, tzinfo=UTC), False, 4],
}  # fmt: skip


def _wire(values: list[Any]) -> list[Any]:
    return [base64.b64encode(v) if isinstance(v, bytes) else v for v in values]


@dataclass
class History:
    """The database, its emulator's host, the pipeline's first window start and the two windows."""

    database: Any
    host: str
    first: datetime
    previous: Window
    current: Window
    explicit: datetime  # the timestamp the rows of ``Same`` were written with, twice


@pytest.fixture(scope="module", params=["project", "google"])
def history(request: pytest.FixtureRequest) -> History:
    from google.cloud.spanner_v1 import COMMIT_TIMESTAMP as NOW

    if request.param == "project":
        emulator = request.getfixturevalue("spanner_emulator")
        database = request.getfixturevalue("new_spanner_database")(DDL, prefix="late")
        clock = emulator.clock
        now: Callable[[], datetime] = clock.now

        def wait_past(moment: datetime) -> None:
            clock.set(max(clock.now(), moment + timedelta(milliseconds=300)))

        host = emulator.host
    else:
        emulator = request.getfixturevalue("google_spanner_emulator")
        database = request.getfixturevalue("new_google_database")(DDL, prefix="late")

        def now() -> datetime:
            return datetime.now(UTC)

        def wait_past(moment: datetime) -> None:
            sleep_until(moment + timedelta(milliseconds=300))

        host = emulator.host
    first = (now() + timedelta(seconds=1)).replace(microsecond=0)
    wait_past(first)
    explicit = first + timedelta(milliseconds=100)
    # phase 1: what the previous window reads
    with database.batch() as batch:
        for table in ("Rewritten", "Replaced", "Updated"):
            batch.insert(table, SIMPLE_COLUMNS, [(k, f"{table} {k}", NOW) for k in (1, 2, 3)])
        batch.insert("Same", SIMPLE_COLUMNS, [(k, f"same {k}", explicit) for k in (1, 2, 3)])
        for table in ("Keyed", "KeyedMoved"):
            batch.insert(table, KEYED_COLUMNS, [[*_wire(key), name, NOW] for name, key in KEYS.items()])
    start = now() + timedelta(milliseconds=500)
    wait_past(start)
    # phase 2: written while the current window runs
    late = first + timedelta(milliseconds=50)  # before every phase-1 commit: never a row's own timestamp
    with database.batch() as batch:
        batch.update("Rewritten", SIMPLE_COLUMNS, [(2, "rewritten late", late)])
        batch.update(
            "Rewritten", SIMPLE_COLUMNS, [(3, "rewritten before the pipeline", first - timedelta(hours=1))]
        )
        batch.delete("Replaced", _keys([[3]]))
        batch.insert("Replaced", SIMPLE_COLUMNS, [(4, "inserted late", late)])
        batch.update("Updated", SIMPLE_COLUMNS, [(2, "updated now", NOW)])
        batch.delete("Updated", _keys([[3]]))
    with database.batch() as batch:  # deleted, then written again in this window
        batch.insert("Updated", SIMPLE_COLUMNS, [(3, "written again now", NOW)])
        batch.update("Same", SIMPLE_COLUMNS, [(2, "rewritten with the same timestamp", explicit)])
        for table in ("Keyed", "KeyedMoved"):  # NULL and NaN keys updated into this window
            moved = [[*_wire(KEYS[name]), "updated now", NOW] for name in ("nulls", "odd")]
            batch.update(table, KEYED_COLUMNS, moved)
        batch.update("Keyed", KEYED_COLUMNS, [[*_wire(KEYS["escaped"]), "rewritten late", late]])
    end = now() + timedelta(milliseconds=500)
    wait_past(end)
    return History(database, host, first, Window(first, start), Window(start, end), explicit)


def _keys(keys: list[list[Any]]) -> Any:
    from google.cloud.spanner_v1 import KeySet

    return KeySet(keys=keys)


@pytest.fixture
def hook_of(history: History, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> Callable[[str], Any]:
    """A table hook of the history's database (source ``name``) with the pipeline ``name`` recorded."""
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", history.host)
    monkeypatch.setenv("AIRFLOW_CONN_CDC_METASTORE_DEFAULT", metastore_connection(sqlite_url))

    def make(name: str) -> Any:
        hook = table_hook(history.database, source=name)
        hook.metastore.record_pipeline(name.lower(), history.first)
        return hook

    return make


def _open(hook: Any, history: History, table: str, root: Path, **options: Any) -> dict:
    config = [{"table": table, "timestamp_column": "UpdatedAt"}]
    return hook.open_window(
        hook.source.lower(), history.current, str(root), mode="commit_timestamp", tables=config, **options
    )


def _check(hook: Any, history: History, table: str) -> Any:
    """The late-row check of ``table`` at the current window, as the hook runs it."""
    from airflow_provider_cdc.sources.spanner.commit_timestamp import check_late_rows, commit_timestamp_table
    from airflow_provider_cdc.sources.spanner.table_rows import CommitTimestampTable
    from airflow_provider_cdc.sources.spanner.table_schema import table_schema

    with history.database.snapshot(multi_use=True) as snapshot:
        schema = table_schema(snapshot, table)
    config = CommitTimestampTable.of({"table": table, "timestamp_column": "UpdatedAt"})
    planned = commit_timestamp_table(schema, config)
    return check_late_rows(hook.database, planned, history.first, history.current, history.current.end)


def _shown(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")


def test_an_already_read_row_rewritten_with_a_past_timestamp_fails_the_window(
    history: History, hook_of: Callable[[str], Any], tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.table_hook import LateRowsError

    hook = hook_of("Rewritten")
    with pytest.raises(LateRowsError) as raised:
        _open(hook, history, "Rewritten", tmp_path)
    message = str(raised.value)
    assert f"window {history.current}" in message and "table 'Rewritten': 2 row(s)" in message, message
    late = _shown(history.first + timedelta(milliseconds=50))
    assert f'key {{"Id":"2"}} at {late}' in message, message  # same count, another past timestamp
    before = _shown(history.first - timedelta(hours=1))
    assert f'key {{"Id":"3"}} at {before}' in message, message  # moved before the pipeline's range


def test_a_delete_and_a_late_insert_fail_the_window_and_the_delete_is_reported(
    history: History,
    hook_of: Callable[[str], Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from airflow_provider_cdc.sources.spanner.table_hook import LateRowsError

    hook = hook_of("Replaced")
    with pytest.raises(LateRowsError) as raised:
        _open(hook, history, "Replaced", tmp_path)
    message = str(raised.value)
    assert "table 'Replaced': 1 row(s)" in message and 'key {"Id":"4"}' in message, message
    assert '"Id":"3"' not in message
    capsys.readouterr()
    caplog.clear()
    _open(hook, history, "Replaced", tmp_path, on_late_rows="warn")
    logged = capsys.readouterr().out + caplog.text
    assert 'key {"Id":"4"}' in logged and "were deleted" in logged and 'key {"Id":"3"}' in logged, logged


def test_rows_updated_into_the_current_window_are_not_late(
    history: History, hook_of: Callable[[str], Any], tmp_path: Path
) -> None:
    """Updates (one a delete and an insert) into this window, of rows keyed by every key type with NULL
    and NaN key parts among them, are folded out of the earlier digest exactly."""
    for table in ("Updated", "KeyedMoved"):
        hook = hook_of(table)
        summary = _open(hook, history, table, tmp_path / table)
        assert summary["tables"] == {table: summary["batches"]}
        check = _check(hook, history, table)
        assert check.moved == 2 and not check.changed, check
        assert check.after.rows == check.before.rows - 2


def test_a_row_of_every_key_type_rewritten_late_is_named(
    history: History, hook_of: Callable[[str], Any], tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.table_hook import LateRowsError

    hook = hook_of("Keyed")
    check = _check(hook, history, "Keyed")
    assert (check.before.rows, check.moved, check.after.rows) == (4, 2, 2)
    assert check.changed and check.late == 1 and check.deleted == 0
    (row,) = check.late_rows
    assert '"Name":"a\\"b\'c\\n"' in row.key_json and '"Seq":"1"' in row.key_json, row.key_json
    with pytest.raises(LateRowsError, match=r"table 'Keyed': 1 row\(s\)"):
        _open(hook, history, "Keyed", tmp_path)


def test_a_rewrite_that_keeps_its_timestamp_is_not_seen(
    history: History, hook_of: Callable[[str], Any], tmp_path: Path
) -> None:
    """The documented limit: the range's rows and their timestamps are as they were."""
    hook = hook_of("Same")
    _open(hook, history, "Same", tmp_path)  # no LateRowsError
    with history.database.snapshot() as snapshot:
        (title,) = next(iter(snapshot.execute_sql("SELECT Title FROM Same WHERE Id = 2")))
    assert title == "rewritten with the same timestamp"
    check = _check(hook, history, "Same")
    assert not check.changed and check.after == check.before and check.after.rows == 3
