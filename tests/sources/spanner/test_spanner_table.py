"""Table sources through the hook against Google's Cloud Spanner emulator (real clock).

A snapshot window ``[T - 1µs, T)`` followed by the change stream read from ``T`` equals the database
at every window end, with writes running across ``T``; snapshot readers that die or lose their lease
stage each row exactly once; a snapshot older than the version retention fails naming the option;
commit-timestamp windows (two transactions sharing a timestamp, a page boundary inside one
timestamp, a changelog table, a soft delete, a change-type column) equal the expected tables, and a
row written late with an explicit past timestamp is named.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.table_sources import (
    INSTANCE,
    PROJECT,
    SNAPSHOT_DDL,
    Writes,
    apply_window,
    column_types,
    database_tables,
    now,
    sleep_until,
    staged_rows,
    table_hook,
)

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND
from airflow_provider_cdc.core.window import Window

W = timedelta(seconds=3)


def test_snapshot_then_stream_equals_the_database_at_every_window_end(
    new_google_database: Any, google_airflow_env: str, tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook
    from airflow_provider_cdc.sources.spanner.snapshot import snapshot_window

    database = new_google_database(SNAPSHOT_DDL, prefix="snap")
    writes = Writes(database, seed=3)
    writes.insert_accounts(80)
    for _ in range(30):
        writes.step()
    first = (now() + timedelta(seconds=2)).replace(microsecond=0)
    windows = [Window(first + W * i, first + W * (i + 1)) for i in range(3)]
    sleep_until(first - timedelta(seconds=1))
    while now() < windows[-1].end - timedelta(milliseconds=300):  # writes run across T
        writes.step()
        time.sleep(0.02)
    sleep_until(windows[-1].end + timedelta(milliseconds=500))

    snapshot = snapshot_window(first)
    source_hook = table_hook(database)
    types = {name: column_types(database, name) for name in ("Accounts", "Notes")}
    summary = source_hook.open_window(
        "pipe", snapshot, str(tmp_path), mode="snapshot", tables=["Accounts", "Notes"]
    )
    assert summary["read_timestamp"].endswith(".999999Z") and summary["batches"] >= 2
    read = source_hook.read_window(snapshot, str(tmp_path), "reader-0")
    state: dict[str, dict] = {}
    rows = staged_rows(source_hook, tmp_path, snapshot)
    assert read.rows == len(rows) and {r["operation"] for r in rows} == {"INSERT"}
    assert _nullability(rows) == NULLABILITY  # from INFORMATION_SCHEMA.COLUMNS.IS_NULLABLE
    apply_window(state, rows, types)
    assert state == database_tables(database, types, snapshot.start), "the snapshot differs from the database"
    stream = SpannerChangeStreamHook(
        project_id=PROJECT, instance_id=INSTANCE, database_id=database.database_id, stream="Everything"
    )
    for window in windows:
        stream.open_window("pipe", window, str(tmp_path), "reader-0")
        stream.read_window(window, str(tmp_path), "reader-0")
        changes = staged_rows(stream, tmp_path, window)
        assert changes, f"window {window} staged nothing"
        apply_window(state, changes, types)
        assert state == database_tables(database, types, window.end - ONE_MICROSECOND), (
            f"after window {window}"
        )
    kinds = {r["operation"] for w in windows for r in staged_rows(stream, tmp_path, w)}
    assert kinds == {"INSERT", "UPDATE", "DELETE"}
    # Data change records carry no nullability: the change stream's read adds it.
    assert _nullability([r for w in windows for r in staged_rows(stream, tmp_path, w)]) == NULLABILITY


#: Each column of SNAPSHOT_DDL's tables: whether it may hold NULL (not declared NOT NULL).
NULLABILITY = {
    ("Accounts", "Id"): False, ("Accounts", "Name"): True, ("Accounts", "Balance"): True,
    ("Accounts", "Active"): True, ("Accounts", "Score"): True,
    ("Notes", "Owner"): False, ("Notes", "Seq"): False, ("Notes", "Text"): True,
}  # fmt: skip


def _nullability(rows: list[dict[str, Any]]) -> dict[tuple[str, str], bool | None]:
    """``is_nullable`` of each (table, column) the staged rows' column types describe."""
    return {
        (row["table_name"], column["name"]): column.get("is_nullable")
        for row in rows
        for column in json.loads(row["column_types_json"])
    }


def _wide_database(new_google_database: Any, rows: int = 120) -> tuple[Any, Window]:
    database = new_google_database(
        [f"CREATE TABLE T{i} (Id INT64 NOT NULL, Payload STRING(MAX)) PRIMARY KEY (Id)" for i in range(3)],
        prefix="wide",
    )
    with database.batch() as batch:
        for i in range(3):
            batch.insert(f"T{i}", ["Id", "Payload"], [(k, f"row {k} of T{i}") for k in range(rows)])
    from airflow_provider_cdc.sources.spanner.snapshot import snapshot_window

    window = snapshot_window((now() + timedelta(seconds=1)).replace(microsecond=0))
    sleep_until(window.end + timedelta(milliseconds=100))
    return database, window


def _opened_wide_snapshot(new_google_database: Any, root: Path) -> tuple[Any, Window, Any]:
    """The :func:`_wide_database`'s snapshot window opened under ``root``: the database, the window and
    the hook that opened it."""
    database, window = _wide_database(new_google_database)
    hook = table_hook(database)
    hook.open_window("pipe", window, str(root), mode="snapshot", tables=["T0", "T1", "T2"])
    return database, window, hook


def _before_each_chunk(reader: Any, call: Callable[[], None]) -> None:
    """Makes the table reader ``reader`` call ``call`` before it encodes each chunk of rows."""
    original = reader._encoder

    def encoder(*args: Any) -> Any:
        made = original(*args)
        columns = made.columns

        def intercepted(rows: Any) -> Any:
            call()
            return columns(rows)

        made.columns = intercepted
        return made

    reader._encoder = encoder


def _assert_each_row_once(hook: Any, root: Path, window: Window, rows: int = 120) -> None:
    staged = staged_rows(hook, root, window)
    keys = [(r["table_name"], r["keys_json"]) for r in staged]
    assert len(keys) == len(set(keys)) == 3 * rows, "a row was staged twice or lost"


def test_a_snapshot_reader_that_loses_its_lease_changes_nothing(
    new_google_database: Any, google_airflow_env: str, tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.table_reader import TableReadError

    database, window, hook = _opened_wide_snapshot(new_google_database, tmp_path)
    slow = hook.table_reader(str(tmp_path), "slow", lease_seconds=1.0, rows_per_file=10, chunk_rows=10)
    stalled = threading.Event()

    def pause_once() -> None:
        if not stalled.is_set():
            stalled.set()
            time.sleep(3.0)  # past its lease: another reader takes the batch over

    _before_each_chunk(slow, pause_once)
    errors: list[BaseException] = []

    def run_slow() -> None:
        try:
            slow.read(window)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run_slow)
    thread.start()
    assert stalled.wait(300)
    fast = hook.read_window(window, str(tmp_path), "fast", lease_seconds=30.0, poll_seconds=0.2)
    thread.join(600)
    assert len(errors) == 1 and isinstance(errors[0], TableReadError), errors
    assert "another reader took the batch" in str(errors[0]) or "lost its lease" in str(errors[0])
    assert fast.rows > 0
    _assert_each_row_once(hook, tmp_path, window)


def _killed_snapshot_reader(env: dict, database_id: str, window_id: str, root: str, marker: str) -> None:
    os.environ.update(env)
    from airflow_provider_cdc.sources.spanner.table_hook import SpannerTableHook

    hook = SpannerTableHook(
        project_id=PROJECT, instance_id=INSTANCE, database_id=database_id, source="Snapshot"
    )
    reader = hook.table_reader(root, "dag/run/read/0", rows_per_file=10, chunk_rows=10)
    calls = [0]

    def count_and_die() -> None:
        calls[0] += 1
        if calls[0] == 16:  # mid-way through the second table's rows
            Path(marker).write_text("killing")
            os.kill(os.getpid(), 9)

    _before_each_chunk(reader, count_and_die)
    reader.read(Window.from_window_id(window_id))


def test_a_snapshot_task_killed_mid_way_and_retried_stages_each_row_once(
    new_google_database: Any, google_airflow_env: str, tmp_path: Path
) -> None:
    database, window, hook = _opened_wide_snapshot(new_google_database, tmp_path)
    env = {k: os.environ[k] for k in ("SPANNER_EMULATOR_HOST", "AIRFLOW_CONN_CDC_METASTORE_DEFAULT")}
    marker = tmp_path / "killed"
    process = multiprocessing.get_context("spawn").Process(
        target=_killed_snapshot_reader,
        args=(env, database.database_id, window.window_id, str(tmp_path), str(marker)),
    )
    process.start()
    process.join(900)  # a bound for a loaded machine, not a wait: the reader kills itself mid-way
    assert process.exitcode == -9 and marker.exists(), "the reader was not killed mid-way"
    items = hook.metastore.window_partitions(hook.stream_key, window.start, window.end)
    assert any(i.state == "done" for i in items) and any(i.state == "running" for i in items)
    # the task's retry (the same lease owner) takes its batch back at once and finishes the window
    summary = hook.read_window(window, str(tmp_path), "dag/run/read/0")
    assert summary.rows > 0
    _assert_each_row_once(hook, tmp_path, window)
    recorded = {
        f"claim={i.claim_id}"
        for i in hook.metastore.window_partitions(hook.stream_key, window.start, window.end)
    }
    folders = {
        folder.name
        for folder in (tmp_path / "Snapshot" / window.window_id).glob("partition=*/claim=*")
        if any(folder.iterdir())
    }
    assert folders and folders <= recorded, "the dead claim's files were not removed"


def test_a_snapshot_older_than_the_version_retention_fails_naming_the_option(
    new_google_database: Any, google_airflow_env: str, tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.errors import RetentionExpiredError
    from airflow_provider_cdc.sources.spanner.snapshot import snapshot_window

    database = new_google_database(SNAPSHOT_DDL[:1], prefix="old")
    hook = table_hook(database)
    window = snapshot_window(now().replace(microsecond=0) - timedelta(hours=2))
    with pytest.raises(RetentionExpiredError) as raised:
        hook.open_window("pipe", window, str(tmp_path), mode="snapshot", tables=["Accounts"])
    message = str(raised.value)
    assert "version retention period of 1h (Spanner's default" in message
    assert "SET OPTIONS (version_retention_period=" in message and database.database_id in message
    assert hook.metastore.window_partitions(hook.stream_key, window.start, window.end) == []
    # A re-run of the snapshot window once it is applied changes nothing, however old it is.
    hook.metastore.open_window("pipe", hook.stream_key, window.start, window.end)
    hook.metastore.transition_window("pipe", window.start, window.end, "reading", "applied")
    summary = hook.open_window("pipe", window, str(tmp_path), mode="snapshot", tables=["Accounts"])
    assert summary["already_applied"] and summary["batches"] == 0
    assert hook.metastore.get_window("pipe", window.start, window.end).state.value == "applied"
