"""The initial snapshot task group: which run takes the snapshot, and how the window after it is wired."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_provider_cdc.task_groups import is_first_window, snapshot_start

T = datetime(2026, 1, 1, tzinfo=timezone.utc)
EXAMPLE_DAGS = Path(__file__).resolve().parents[2] / "example_dags"


def test_the_snapshot_starts_one_microsecond_before_the_first_window() -> None:
    assert snapshot_start(T) == "2025-12-31T23:59:59.999999Z"
    assert snapshot_start("2026-01-01T00:00:00Z") == "2025-12-31T23:59:59.999999Z"


@pytest.mark.parametrize(
    ("data_interval_start", "enabled", "expected"),
    [
        (T, True, True),
        ("2026-01-01T00:00:00+00:00", "True", True),  # rendered from a template
        (datetime(2026, 1, 1, 0, 10, tzinfo=timezone.utc), True, False),  # a later run
        (datetime(2025, 12, 31, 23, 50, tzinfo=timezone.utc), True, False),  # before the start
        (T, False, False),
        (T, "False", False),
        (None, True, False),  # a manual run without a data interval
    ],
)
def test_only_the_first_windows_run_takes_the_snapshot(
    data_interval_start: object, enabled: object, expected: bool
) -> None:
    assert is_first_window(T.isoformat(), enabled, data_interval_start=data_interval_start) is expected


@pytest.mark.parametrize("dag_id", ["spanner_change_stream_to_lake", "spanner_change_stream_to_bigquery"])
def test_example_dags_start_with_the_snapshot_and_later_windows_run_without_it(dag_id: str) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(EXAMPLE_DAGS))
    assert bag.import_errors == {}
    dag = bag.dags[dag_id]
    gate = dag.get_task("initial_snapshot.is_first_window")
    # Only the snapshot's own tasks are skipped; the window after it runs by its trigger rule.
    assert gate.ignore_downstream_trigger_rules is False
    assert {t.task_id for t in gate.downstream_list} == {"initial_snapshot.open"}
    commit = dag.get_task("initial_snapshot.commit")
    assert {t.task_id for t in commit.downstream_list} == {"wait_parents"}
    assert dag.get_task("wait_parents").trigger_rule == "none_failed"
    opened = dag.get_task("initial_snapshot.open")
    assert opened.mode == "snapshot" and opened.change_stream == "{{ params.stream }}"
    assert (opened.window_start, opened.window_end) == (snapshot_start(T), "2026-01-01T00:00:00.000000Z")
    # The stream's first window follows the snapshot's: [T - 1µs, T) is the pipeline's first window.
    assert snapshot_start(T) in dag.get_task("open_window").first_window_start
    steps = ["open", "read", "merge", "upsert", "commit"]
    if dag_id.endswith("bigquery"):
        steps.insert(4, "to_bigquery")
    for before, after in zip(steps, steps[1:], strict=False):
        assert f"initial_snapshot.{after}" in dag.get_task(f"initial_snapshot.{before}").downstream_task_ids


@pytest.mark.parametrize(
    "dag_id",
    [
        "spanner_change_stream_to_lake",
        "spanner_change_stream_to_bigquery",
        "spanner_commit_timestamp_tables_to_lake",
    ],
)
def test_the_steps_after_the_read_carry_the_epoch_their_open_task_pushed(dag_id: str) -> None:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(str(EXAMPLE_DAGS)).dags[dag_id]
    groups = ["", "initial_snapshot."] if "change_stream" in dag_id else [""]
    for group in groups:
        opened = "initial_snapshot.open" if group else "open_window"
        pulled = f"{{{{ ti.xcom_pull(task_ids='{opened}', key='epoch') }}}}"
        steps = (
            ("merge", "upsert", "to_bigquery", "commit")
            if "bigquery" in dag_id
            else ("merge", "upsert", "commit")
        )
        for step in steps:
            assert dag.get_task(f"{group}{step}").epoch == pulled, (group, step)
        assert dag.get_task(f"{group}merge").pipeline_id == "{{ params.pipeline_id }}"
