"""The read path against Google's Cloud Spanner emulator, through real partition churn.

Google's emulator runs on the real clock and splits and merges change-stream partitions on its own,
about every 20 seconds. A seeded workload commits for about 80 seconds in real time; then four
consecutive 20-second windows are read with the hook (SQLite metastore, Parquet staging), and each
window's staged rows must be exactly the committed history's mods in that window. The workload
writes only values Google's emulator reports faithfully (``value_profile="google-emulator"``: it
reports FLOAT64 NaN and infinities as null, drops fractional seconds of TIMESTAMP values, writes
years before 1000 without zero padding, reports commit-timestamp columns as 9999-12-31 and crashes
on an ARRAY with a NULL element when a change stream watches the table). Transactions write some rows
several times (``max_writes_per_row``), which Spanner reports as one mod per row.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from support.staged_changes import difference as _difference
from support.staged_changes import expected_changes as _expected
from support.staged_changes import staged_changes as _staged

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.testing.workload import (
    ALL_CHANGES_STREAM,
    WORKLOAD_TABLES,
    Workload,
    schema_ddl,
)

WINDOW = timedelta(seconds=20)
WINDOWS = 4
CHANGES_PER_SECOND = 20


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _next_second(moment: datetime) -> datetime:
    return moment.replace(microsecond=0) + timedelta(seconds=1)


def _sleep_until(moment: datetime) -> None:
    delay = (moment - _now()).total_seconds()
    if delay > 0:
        time.sleep(delay)


def commit_in_real_time(workload: Workload, until: datetime, changes_per_second: int) -> None:
    """Commit small batches of the workload, about ``changes_per_second`` changes a second, until
    ``until`` (the last commit lands before it)."""
    batch = max(1, changes_per_second // 4)
    while _now() < until - timedelta(seconds=1):
        workload.run(changes=batch)
        time.sleep(0.25)
    last = workload.transactions[-1].commit_timestamp
    assert last < until, f"a commit at {last} landed after {until}"


@pytest.fixture(scope="module")
def churned_history(new_google_database: Any) -> tuple[Any, Workload, datetime]:
    """A database on Google's emulator and about 80 seconds of workload committed in real time."""
    database = new_google_database(schema_ddl(tables=WORKLOAD_TABLES), prefix="churn")
    begin = _next_second(_now() + timedelta(seconds=1))
    _sleep_until(begin)
    workload = Workload(
        database, None, 23, value_profile="google-emulator", max_writes_per_row=3, max_rows_per_table=150
    )
    commit_in_real_time(workload, begin + WINDOW * WINDOWS, CHANGES_PER_SECOND)
    _sleep_until(begin + WINDOW * WINDOWS + timedelta(seconds=1))
    return database, workload, begin


def _hook(database: Any) -> Any:
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook

    return SpannerChangeStreamHook(
        project_id="test-project",
        instance_id="test-instance",
        database_id=database.database_id,
        stream=ALL_CHANGES_STREAM,
    )


def test_windows_through_partition_churn_stage_the_committed_history_exactly_once(
    churned_history: tuple[Any, Workload, datetime], google_airflow_env: str, tmp_path: Path
) -> None:
    database, workload, begin = churned_history
    windows = [Window(begin + WINDOW * i, begin + WINDOW * (i + 1)) for i in range(WINDOWS)]
    history = workload.history_between(windows[0].start, windows[-1].end)
    mods = [mod for transaction in history for mod in transaction.mods]
    assert len(history) == len(workload.transactions), "the workload committed outside the windows"
    assert {mod.mod_type for mod in mods} == {"INSERT", "UPDATE", "DELETE"}
    assert all(workload.history_between(w.start, w.end) for w in windows), "a window got no commits"

    hook = _hook(database)
    total = 0
    for window in windows:
        hook.open_window("pipeline", window, str(tmp_path), "reader-0")
        summary = hook.read_window(window, str(tmp_path), "reader-0")
        expected, staged = _expected(workload, window), _staged(tmp_path, window)
        assert staged == expected, f"window {window}: {_difference(staged, expected)}"
        assert summary.rows == sum(expected.values())
        # Every partition of the window is drained to its end (or finished before it).
        assert hook.lagging_partitions(window.end, window) == []
        for partition in hook.metastore.partitions_alive_at(hook.stream_key, window.end - ONE_MICROSECOND):
            assert partition.watermark >= window.end, (window, partition)
        total += summary.rows
    assert total == len(mods)
    # A past window is read again from the recorded lineage, its partitions long ended: same rows.
    window = windows[1]
    hook.open_window("pipeline", window, str(tmp_path / "again"), "reader-1")
    hook.read_window(window, str(tmp_path / "again"), "reader-1")
    assert _staged(tmp_path / "again", window) == _expected(workload, window)

    # The lineage: Google's emulator split and merged partitions while the workload ran; every child
    # starts where each of its parents ended.
    partitions = {p.token: p for p in hook.metastore.list_partitions(hook.stream_key)}
    initial = [p for p in partitions.values() if not p.parent_tokens]
    children = [p for p in partitions.values() if p.parent_tokens]
    assert initial and len(children) >= 2 * len(initial), (
        f"{len(initial)} initial partitions and only {len(children)} children in "
        f"{WINDOW * WINDOWS} of real time"
    )
    merged = [p for p in children if len(p.parent_tokens) > 1]
    split = Counter(parent for p in children for parent in p.parent_tokens)
    assert merged, "no partitions merged"
    assert any(count > 1 for count in split.values()), "no partition split"
    for child in children:
        for token in child.parent_tokens:
            parent = partitions[token]
            assert parent.is_finished and parent.end_timestamp == child.start_timestamp, (parent, child)
            assert parent.start_timestamp < child.start_timestamp, (parent, child)


def test_windows_read_out_of_order_start_from_the_partitions_alive_then(
    churned_history: tuple[Any, Workload, datetime], google_airflow_env: str, tmp_path: Path
) -> None:
    """A later window first, then older ones (a backfill before the recorded lineage), then the rest."""
    database, workload, begin = churned_history
    windows = [Window(begin + WINDOW * i, begin + WINDOW * (i + 1)) for i in range(WINDOWS)]
    hook = _hook(database)
    for index in (2, 0, 1, 3):
        window = windows[index]
        hook.open_window("backfill", window, str(tmp_path), "reader-0")
        hook.read_window(window, str(tmp_path), "reader-0")
        expected, staged = _expected(workload, window), _staged(tmp_path, window)
        assert staged == expected, f"window {index} {window}: {_difference(staged, expected)}"
        assert hook.lagging_partitions(window.end, window) == []
