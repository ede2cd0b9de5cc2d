"""Table sources against the project's emulator (simulated clock), where it answers batch reads.

The same contracts as against Google's emulator, without waiting on the real clock: a snapshot and
the stream read from ``T`` equal the database at every window end, and commit-timestamp windows
(explicit timestamps shared by two transactions, pages splitting one timestamp, a soft delete) equal
the tables, and a row written late with an explicit past timestamp is named.
Skips, naming what is missing, while the emulator does not answer PartitionQuery or snapshot reads.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.table_sources import (
    INSTANCE,
    PROJECT,
    SNAPSHOT_DDL,
    apply_window,
    column_types,
    database_tables,
    seeded_writes,
    staged_rows,
    table_hook,
    write_across,
)

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND
from airflow_provider_cdc.core.window import Window

W = timedelta(seconds=10)


@pytest.fixture
def project_env(spanner_emulator: Any, spanner_airflow_env: str) -> Any:
    """The session's project emulator, which Airflow's hooks see (with a SQLite metastore)."""
    return spanner_emulator


def _require_batch_reads(database: Any, table: str, at: Any) -> None:
    from google.api_core import exceptions as gexc

    try:
        snapshot = database.batch_snapshot(read_timestamp=at)
        for batch in snapshot.generate_query_batches(f"SELECT * FROM {table}"):
            list(snapshot.process_query_batch(batch, lazy_decode=True))
    except (gexc.Unknown, gexc.MethodNotImplemented, gexc.InvalidArgument) as exc:
        pytest.skip(f"the project's emulator does not answer PartitionQuery at a timestamp yet: {exc}")


def test_snapshot_then_stream_equals_the_database_at_every_window_end(
    new_spanner_database: Any, project_env: Any, tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook
    from airflow_provider_cdc.sources.spanner.snapshot import snapshot_window

    clock = project_env.clock
    database = new_spanner_database(SNAPSHOT_DDL, prefix="snap")
    writes, first = seeded_writes(database, clock, seed=8, accounts=120, steps=60)
    windows = [Window(first + W * i, first + W * (i + 1)) for i in range(3)]
    write_across(
        writes, clock, first - timedelta(milliseconds=300), windows[-1].end, timedelta(milliseconds=37)
    )
    _require_batch_reads(database, "Accounts", first)

    snapshot = snapshot_window(first)
    types = {name: column_types(database, name) for name in ("Accounts", "Notes")}
    source = table_hook(database)
    source.open_window("pipe", snapshot, str(tmp_path), mode="snapshot", tables=["Accounts", "Notes"])
    source.read_window(snapshot, str(tmp_path), "reader-0")
    state: dict[str, dict] = {}
    apply_window(state, staged_rows(source, tmp_path, snapshot), types)
    assert state == database_tables(database, types, snapshot.start)
    stream = SpannerChangeStreamHook(
        project_id=PROJECT, instance_id=INSTANCE, database_id=database.database_id, stream="Everything"
    )
    for window in windows:
        stream.open_window("pipe", window, str(tmp_path), "reader-0")
        stream.read_window(window, str(tmp_path), "reader-0")
        apply_window(state, staged_rows(stream, tmp_path, window), types)
        assert state == database_tables(database, types, window.end - ONE_MICROSECOND), (
            f"after window {window}"
        )


def test_commit_timestamp_windows_with_shared_timestamps_and_pages(
    new_spanner_database: Any, project_env: Any, tmp_path: Path
) -> None:
    from google.api_core import exceptions as gexc

    from airflow_provider_cdc.sources.spanner.table_hook import LateRowsError, SpannerTableError

    clock = project_env.clock
    database = new_spanner_database(
        [
            "CREATE TABLE Docs (Id INT64 NOT NULL, Title STRING(MAX), Deleted BOOL, "
            "UpdatedAt TIMESTAMP OPTIONS (allow_commit_timestamp=true)) PRIMARY KEY (Id)"
        ],
        prefix="ct",
    )
    begin = (clock.now() + timedelta(seconds=1)).replace(microsecond=0)
    windows = [Window(begin + W * i, begin + W * (i + 1)) for i in range(2)]
    clock.set(begin + timedelta(seconds=1))
    shared = clock.now()
    for key in (1, 2):  # two transactions, one explicit timestamp
        with database.batch() as batch:
            batch.insert(
                "Docs", ["Id", "Title", "Deleted", "UpdatedAt"], [(key, f"doc {key}", False, shared)]
            )
    from google.cloud.spanner_v1 import COMMIT_TIMESTAMP

    with database.batch() as batch:  # five rows, one commit timestamp
        batch.insert(
            "Docs",
            ["Id", "Title", "Deleted", "UpdatedAt"],
            [(k, f"doc {k}", False, COMMIT_TIMESTAMP) for k in range(3, 8)],
        )
    clock.set(windows[1].start + timedelta(seconds=1))
    with database.batch() as batch:
        batch.update("Docs", ["Id", "Deleted", "UpdatedAt"], [(4, True, COMMIT_TIMESTAMP)])
    with database.batch() as batch:  # late: a timestamp in the first window
        batch.insert(
            "Docs",
            ["Id", "Title", "Deleted", "UpdatedAt"],
            [(9, "late", False, windows[0].start + timedelta(seconds=2))],
        )
    clock.set(windows[-1].end + timedelta(seconds=1))
    _require_batch_reads(database, "Docs", windows[0].end)

    config = [{"table": "Docs", "timestamp_column": "UpdatedAt", "soft_delete_column": "Deleted"}]
    types = {"Docs": column_types(database, "Docs")}
    hook = table_hook(database, source="Docs")
    hook.metastore.record_pipeline("ct", windows[0].start)
    for page_rows in (None, 2):
        state: dict[str, dict] = {}
        for index, window in enumerate(windows):
            root = str(tmp_path / str(page_rows))
            options = {"mode": "commit_timestamp", "tables": config, "page_rows": page_rows}
            try:
                if index == 1:
                    with pytest.raises(LateRowsError, match=r'table \'Docs\': 1 row.*\{"Id":"9"\}'):
                        hook.open_window("ct", window, root, **options)
                hook.open_window("ct", window, root, on_late_rows="warn", **options)
            except SpannerTableError as exc:
                if isinstance(exc.__cause__, gexc.InvalidArgument):
                    pytest.skip(f"the project's emulator does not answer the late-row check yet: {exc}")
                raise
            hook.read_window(window, str(tmp_path / str(page_rows)), "reader-0")
            rows = staged_rows(hook, tmp_path / str(page_rows), window)
            assert len({(r["keys_json"], r["change_sequence_number"]) for r in rows}) == len(rows)
            apply_window(state, rows, types)
        assert sorted(dict(key)["Id"] for key in state["Docs"]) == [1, 2, 3, 5, 6, 7]


def test_a_snapshot_reads_the_tables_and_columns_its_change_stream_watches(
    new_spanner_database: Any, project_env: Any, tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.snapshot import snapshot_window
    from airflow_provider_cdc.sources.spanner.table_hook import TableSourceConfigError

    clock = project_env.clock
    ddl = [
        *SNAPSHOT_DDL,
        "CREATE CHANGE STREAM AccountNames FOR Accounts(Name)",
        "CREATE CHANGE STREAM Keys FOR Notes()",
    ]
    database = new_spanner_database(ddl, prefix="scope")
    _, first = seeded_writes(database, clock, seed=3, accounts=40, steps=30)
    clock.set(first + timedelta(seconds=5))
    _require_batch_reads(database, "Accounts", first)
    window = snapshot_window(first)
    types = {name: column_types(database, name) for name in ("Accounts", "Notes")}
    truth = database_tables(database, types, window.start)

    def snapshot(source: str, **arguments: Any) -> dict[str, dict]:
        hook = table_hook(database, source)
        hook.open_window(source, window, str(tmp_path), mode="snapshot", **arguments)
        hook.read_window(window, str(tmp_path), "reader-0")
        state: dict[str, dict] = {}
        apply_window(state, staged_rows(hook, tmp_path, window), types)
        return state

    # FOR ALL: every table, every column
    assert snapshot("All", change_stream="Everything") == truth
    # FOR Accounts(Name): one table, its key and the watched column
    names = snapshot("Names", change_stream="AccountNames")
    assert list(names) == ["Accounts"] and truth["Accounts"]
    assert names["Accounts"] == {
        key: {c: v for c, v in row.items() if c in ("Id", "Name")} for key, row in truth["Accounts"].items()
    }
    # FOR Notes(): the keys alone
    keys = snapshot("Keys", change_stream="Keys")
    assert keys == {"Notes": {key: {c: v for c, v in row.items() if c in ("Owner", "Seq")}
                              for key, row in truth.get("Notes", {}).items()}}  # fmt: skip
    # tables named: those, restricted to what the stream watches
    assert snapshot("Named", change_stream="Everything", tables=["Notes"]) == {
        "Notes": truth.get("Notes", {})
    }
    with pytest.raises(
        TableSourceConfigError, match=r"table 'Notes' is not watched by change stream 'AccountNames'"
    ):
        snapshot("Unwatched", change_stream="AccountNames", tables=["Notes"])
    with pytest.raises(TableSourceConfigError, match=r"change stream 'Missing' does not exist"):
        snapshot("Missing", change_stream="Missing")
    with pytest.raises(TableSourceConfigError, match=r"tables must be a non-empty list"):
        snapshot("Neither")
