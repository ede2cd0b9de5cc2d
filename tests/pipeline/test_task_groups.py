"""The initial snapshot task group: which run takes the snapshot, and how the window after it is wired."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_provider_cdc.task_groups import snapshot_start

T = datetime(2026, 1, 1, tzinfo=timezone.utc)
EXAMPLE_DAGS = Path(__file__).resolve().parents[2] / "example_dags"


def test_the_snapshot_starts_one_microsecond_before_the_first_window() -> None:
    assert snapshot_start(T) == "2025-12-31T23:59:59.999999Z"
    assert snapshot_start("2026-01-01T00:00:00Z") == "2025-12-31T23:59:59.999999Z"


@pytest.mark.parametrize("dag_id", ["spanner_change_stream_to_lake", "spanner_change_stream_to_bigquery"])
def test_example_dags_take_the_snapshot_through_the_open_steps_branch(dag_id: str) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(EXAMPLE_DAGS))
    assert bag.import_errors == {}
    dag = bag.dags[dag_id]
    # No task of its own decides: the stream's open step follows the snapshot or skips it.
    assert not [t for t in dag.task_ids if t.endswith("is_first_window")]
    open_window = dag.get_task("open_window")
    assert open_window.snapshot_task_ids == ("initial_snapshot.open",)
    takers = {"merge", "upsert", "to_bigquery", "commit"}  # the steps taking its window handle
    assert {t.task_id for t in open_window.downstream_list} - takers == {"read", "initial_snapshot.open"}
    commit = dag.get_task("initial_snapshot.commit")
    assert {t.task_id for t in commit.downstream_list} == {"merge"}
    assert dag.get_task("merge").trigger_rule == "none_failed"
    opened = dag.get_task("initial_snapshot.open")
    assert opened.mode == "snapshot" and opened.change_stream == "{{ params.stream }}"
    assert (opened.window_start, opened.window_end) == (snapshot_start(T), "2026-01-01T00:00:00.000000Z")
    # The stream's first window follows the snapshot's: [T - 1µs, T) is the pipeline's first window.
    assert snapshot_start(T) in open_window.first_window_start
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
def test_the_steps_after_the_read_take_the_window_handle_their_open_task_returned(dag_id: str) -> None:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(str(EXAMPLE_DAGS)).dags[dag_id]
    groups = ["", "initial_snapshot."] if "change_stream" in dag_id else [""]
    for group in groups:
        opened = "initial_snapshot.open" if group else "open_window"
        steps = (
            ("merge", "upsert", "to_bigquery", "commit")
            if "bigquery" in dag_id
            else ("merge", "upsert", "commit")
        )
        for step in steps:
            task = dag.get_task(f"{group}{step}")
            handle = task.window_handle
            assert (handle.operator.task_id, handle.key) == (opened, "return_value"), (group, step)
            assert task.epoch is None, (group, step)
        assert dag.get_task(f"{group}merge").pipeline_id == "{{ params.pipeline_id }}"
