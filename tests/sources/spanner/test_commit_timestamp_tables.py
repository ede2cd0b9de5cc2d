"""Tables read by their commit-timestamp column, windows of a real-time history on Google's emulator.

The history: five rows committed in one transaction (one timestamp; pages of two rows split it), two
transactions writing one explicit timestamp, a changelog table whose rows change an entity key, a
soft delete and an undelete, a change-type column, and a row written late with an explicit past
timestamp. Each window, merged with the reference collapse and applied in order, equals the tables
the configuration describes at the window end; the late row is named when the window after it opens.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from support.table_sources import (
    apply_window,
    column_types,
    decoded,
    sleep_until,
    staged_rows,
    table_hook,
)

from airflow_provider_cdc.core.window import Window

W = timedelta(seconds=3)
DDL = [
    "CREATE TABLE Docs (Id INT64 NOT NULL, Title STRING(MAX), Deleted BOOL, "
    "UpdatedAt TIMESTAMP OPTIONS (allow_commit_timestamp=true)) PRIMARY KEY (Id)",
    "CREATE TABLE DocumentHistory (UserId INT64 NOT NULL, DocumentId INT64 NOT NULL, "
    "Ts TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp=true), Delta STRING(MAX)) "
    "PRIMARY KEY (UserId, DocumentId, Ts)",
    "CREATE TABLE Events (Id INT64 NOT NULL, Kind STRING(MAX), Op STRING(MAX), "
    "HappenedAt TIMESTAMP OPTIONS (allow_commit_timestamp=true)) PRIMARY KEY (Id)",
]
TABLES = [
    {"table": "Docs", "timestamp_column": "UpdatedAt", "soft_delete_column": "Deleted"},
    {
        "table": "DocumentHistory",
        "timestamp_column": "Ts",
        "entity_key": ["UserId", "DocumentId"],
        "target_table": "Documents",
    },
    {"table": "Events", "timestamp_column": "HappenedAt", "change_type_column": "Op"},
]
LATE_KEY = 9


def _now() -> datetime:
    return datetime.now(timezone.utc)


@pytest.fixture(scope="module")
def history(new_google_database: Any) -> tuple[Any, list[Window]]:
    from google.cloud.spanner_v1 import COMMIT_TIMESTAMP as NOW

    database = new_google_database(DDL, prefix="ct")
    begin = (_now() + timedelta(seconds=2)).replace(microsecond=0)
    windows = [Window(begin + W * i, begin + W * (i + 1)) for i in range(3)]
    sleep_until(begin + timedelta(milliseconds=200))
    with database.batch() as batch:  # five rows, one commit timestamp
        batch.insert(
            "Docs",
            ["Id", "Title", "Deleted", "UpdatedAt"],
            [(k, f"doc {k}", False, NOW) for k in range(1, 6)],
        )
    shared = _now() - timedelta(milliseconds=100)
    for key in (1, 2):  # two transactions, one explicit timestamp
        with database.batch() as batch:
            batch.insert(
                "Events", ["Id", "Kind", "Op", "HappenedAt"], [(key, f"kind {key}", "INSERT", shared)]
            )
    with database.batch() as batch:
        batch.insert(
            "DocumentHistory", ["UserId", "DocumentId", "Ts", "Delta"], [(1, 1, NOW, "a"), (1, 2, NOW, "x")]
        )
    with database.batch() as batch:
        batch.insert("DocumentHistory", ["UserId", "DocumentId", "Ts", "Delta"], [(1, 1, NOW, "b")])
    sleep_until(windows[1].start + timedelta(milliseconds=200))
    with database.batch() as batch:
        batch.update("Docs", ["Id", "Title", "UpdatedAt"], [(2, "doc 2, again", NOW)])
    with database.batch() as batch:
        batch.update("Docs", ["Id", "Deleted", "UpdatedAt"], [(3, True, NOW)])  # a soft delete
    with database.batch() as batch:
        batch.update("Events", ["Id", "Op", "HappenedAt"], [(1, "D", NOW)])
        batch.insert("DocumentHistory", ["UserId", "DocumentId", "Ts", "Delta"], [(1, 1, NOW, "c")])
    with database.batch() as batch:  # late: a timestamp in the first window, which is read already
        batch.insert(
            "Docs",
            ["Id", "Title", "Deleted", "UpdatedAt"],
            [(LATE_KEY, "late", False, windows[0].start + timedelta(seconds=1))],
        )
    sleep_until(windows[2].start + timedelta(milliseconds=200))
    with database.batch() as batch:
        batch.insert("Docs", ["Id", "Title", "Deleted", "UpdatedAt"], [(6, "doc 6", False, NOW)])
        batch.update("Docs", ["Id", "Deleted", "UpdatedAt"], [(3, False, NOW)])  # undeleted
    sleep_until(windows[-1].end + timedelta(milliseconds=300))
    return database, windows


def expected_tables(database: Any, types: dict[str, dict], first: datetime, end: datetime) -> dict[str, dict]:
    """What the configuration makes of the tables at ``end``: Docs without soft-deleted rows (and
    without the late row, which no window reads), each document's newest history row, the events
    whose last change is not a delete; the soft-delete and change-type columns are not carried."""
    from airflow_provider_cdc.sources.spanner.wire_values import wire_rows

    def rows(snapshot: Any, sql: str, names: list[str]) -> list[dict]:
        return [
            dict(zip(names, r, strict=True)) for r in wire_rows(snapshot.execute_sql(sql, lazy_decode=True))
        ]

    result: dict[str, dict] = {"Docs": {}, "Documents": {}, "Events": {}}
    with database.snapshot(read_timestamp=end, multi_use=True) as snapshot:
        for row in rows(
            snapshot,
            "SELECT Id, Title, Deleted, UpdatedAt FROM Docs",
            ["Id", "Title", "Deleted", "UpdatedAt"],
        ):
            key = decoded(types["Docs"], {"Id": row.pop("Id")})
            if not row.pop("Deleted") and key != ((("Id", LATE_KEY),)):
                result["Docs"][key] = dict(decoded(types["Docs"], row))
        for row in rows(
            snapshot,
            "SELECT UserId, DocumentId, Ts, Delta FROM DocumentHistory ORDER BY Ts",
            ["UserId", "DocumentId", "Ts", "Delta"],
        ):
            entity = {"UserId": row.pop("UserId"), "DocumentId": row.pop("DocumentId")}
            key = decoded(types["DocumentHistory"], entity)
            result["Documents"][key] = dict(decoded(types["DocumentHistory"], row))
        for row in rows(
            snapshot, "SELECT Id, Kind, Op, HappenedAt FROM Events", ["Id", "Kind", "Op", "HappenedAt"]
        ):
            key = decoded(types["Events"], {"Id": row.pop("Id")})
            if row.pop("Op") not in ("D", "DELETE"):
                result["Events"][key] = dict(decoded(types["Events"], row))
    return {name: table for name, table in result.items() if table}


@pytest.mark.parametrize("page_rows", [None, 2], ids=["partitioned", "pages-of-2"])
def test_commit_timestamp_windows_equal_the_tables_and_name_late_rows(
    history: tuple,
    google_airflow_env: str,
    tmp_path: Path,
    page_rows: int | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from airflow_provider_cdc.sources.spanner.table_hook import LateRowsError

    database, windows = history
    hook = table_hook(database, source="Tables")
    types = {name: column_types(database, name) for name in ("Docs", "DocumentHistory", "Events")}
    types["Documents"] = types["DocumentHistory"]
    hook.metastore.record_pipeline("ct", windows[0].start)  # as the open operator does
    state: dict[str, dict] = {}
    for index, window in enumerate(windows):
        open_window = dict(mode="commit_timestamp", tables=TABLES, page_rows=page_rows)
        if index == 1:
            with pytest.raises(LateRowsError) as raised:
                hook.open_window("ct", window, str(tmp_path), **open_window)
            message = str(raised.value)
            assert "table 'Docs': 1 row(s)" in message and '{"Id":"9"}' in message
            assert (windows[0].start + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S") in message
            capsys.readouterr()
            hook.open_window("ct", window, str(tmp_path), on_late_rows="warn", **open_window)
            assert '{"Id":"9"}' in capsys.readouterr().out  # logged, and the window goes on
        else:
            hook.open_window("ct", window, str(tmp_path), **open_window)
        summary = hook.read_window(window, str(tmp_path), "reader-0")
        rows = staged_rows(hook, tmp_path, window)
        assert summary.rows == len(rows)
        identities = [(r["table_name"], r["keys_json"], r["change_sequence_number"]) for r in rows]
        assert len(identities) == len(set(identities)), "a row was staged twice"
        if index == 0:
            docs = [r for r in rows if r["table_name"] == "Docs"]
            assert len(docs) == 5 and len({r["commit_timestamp"] for r in docs}) == 1
            events = [r for r in rows if r["table_name"] == "Events"]
            assert len(events) == 2 and len({r["commit_timestamp"] for r in events}) == 1
        if index == 1:
            assert {(r["table_name"], r["operation"]) for r in rows} >= {
                ("Docs", "DELETE"),
                ("Events", "DELETE"),
            }
        apply_window(state, rows, types)
        assert state == expected_tables(database, types, windows[0].start, window.end), (
            f"after window {window}"
        )
    assert sorted(dict(key)["Id"] for key in state["Docs"]) == [1, 2, 3, 4, 5, 6]  # 3 undeleted, 9 late


def test_a_window_is_read_again_at_its_own_timestamp(
    history: tuple, google_airflow_env: str, tmp_path: Path
) -> None:
    database, windows = history
    hook = table_hook(database, source="Again")
    window = windows[0]
    hook.open_window("again", window, str(tmp_path), mode="commit_timestamp", tables=TABLES)
    hook.read_window(window, str(tmp_path), "reader-0")
    first = sorted(
        (r["table_name"], r["keys_json"], r["after_json"]) for r in staged_rows(hook, tmp_path, window)
    )
    summary = hook.open_window("again", window, str(tmp_path), mode="commit_timestamp", tables=TABLES)
    assert summary["read_timestamp"].startswith(window.end.strftime("%Y-%m-%dT%H:%M:%S"))
    hook.read_window(window, str(tmp_path), "reader-1")
    again = sorted(
        (r["table_name"], r["keys_json"], r["after_json"]) for r in staged_rows(hook, tmp_path, window)
    )
    assert again == first and first


def test_a_column_that_is_not_a_commit_timestamp_is_refused(
    history: tuple, google_airflow_env: str, tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.table_hook import TableSourceConfigError

    database, windows = history
    hook = table_hook(database, source="Refused")
    refusals = [
        (
            {"table": "Docs", "timestamp_column": "Title"},
            "'Title' of table 'Docs' is not a commit-timestamp column",
        ),
        (
            {"table": "Docs", "timestamp_column": "UpdatedAt", "soft_delete_column": "Nope"},
            "has no column 'Nope'",
        ),
        ({"table": "Nothing", "timestamp_column": "UpdatedAt"}, "does not exist"),
    ]
    for table, message in refusals:
        with pytest.raises(TableSourceConfigError, match=message):
            hook.open_window("refused", windows[0], str(tmp_path), mode="commit_timestamp", tables=[table])
