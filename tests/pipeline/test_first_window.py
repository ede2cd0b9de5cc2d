"""The open step decides whether a run takes the initial snapshot: real runs (``dag.test()``) of the first
window and a later one, the snapshot's tasks run in the first and are skipped, unstarted, in the later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# whole DAG runs: left out of the fast tier
pytestmark = pytest.mark.dag_run

#: A window whose open step records nothing (its metastore and source stubbed); the rest as the factory
#: wires it: the snapshot after open_window, the merge after both with ``none_failed``.
DAG_FILE = textwrap.dedent(
    """
    from datetime import datetime, timedelta, timezone
    from types import SimpleNamespace

    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, task
    from airflow.timetables.interval import DeltaDataIntervalTimetable

    from airflow_provider_cdc.core.contract.window_handle import WindowHandle
    from airflow_provider_cdc.sources.operators import OpenWindowOperatorBase

    T = datetime(2026, 1, 1, tzinfo=timezone.utc)


    class StubOpen(OpenWindowOperatorBase):
        def preflight(self, context):
            pass

        def record_pipeline(self, context, window):
            return SimpleNamespace(first_window_start=T - timedelta(microseconds=1)), None

        def open(self, context, window, pipeline):
            return WindowHandle(pipeline, "stub/source", window, self.staging_root, 1)


    with DAG("first_window", start_date=T, schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)),
             catchup=True, max_active_runs=1):
        open_window = StubOpen(task_id="open_window", staging_root="/tmp/staging", readers=2,
                               first_window_start="2025-12-31T23:59:59.999999Z",
                               snapshot_task_ids=["initial_snapshot.open"])

        @task
        def read(reader_index):
            return {"reader_index": reader_index}

        readers = read.expand(reader_index=[0, 1])
        snapshot = [EmptyOperator(task_id=f"initial_snapshot.{name}") for name in ("open", "merge", "commit")]
        merge = EmptyOperator(task_id="merge", trigger_rule="none_failed")
        open_window >> [readers, snapshot[0]]
        snapshot[0] >> snapshot[1] >> snapshot[2] >> merge
        readers >> merge >> EmptyOperator(task_id="commit")
    """
)

RUN = textwrap.dedent(
    """
    import json, sys
    from datetime import datetime

    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.db import upgradedb
    from airflow.utils.session import create_session

    upgradedb()
    dag = DagBag(sys.argv[1]).dags["first_window"]
    states = {}
    for end in ("2026-01-01T00:10:00+00:00", "2026-01-01T00:20:00+00:00"):
        # a manual run's data interval ends at its logical date
        run = dag.test(logical_date=datetime.fromisoformat(end))
        start = run.data_interval_start.isoformat()
        with create_session() as session:
            tis = session.query(TaskInstance).filter(TaskInstance.run_id == run.run_id)
            states[start] = {"run": str(run.state),
                             "tasks": {f"{ti.task_id}[{ti.map_index}]": str(ti.state) for ti in tis}}
    print(json.dumps(states))
    """
)


def test_only_the_first_windows_run_starts_the_snapshots_tasks(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "first_window.py").write_text(DAG_FILE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path / "airflow"), AIRFLOW__CORE__DAGS_FOLDER=str(dags),
               AIRFLOW__CORE__LOAD_EXAMPLES="False")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(dags)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    first, later = runs["2026-01-01T00:00:00+00:00"], runs["2026-01-01T00:10:00+00:00"]
    assert first["run"] == later["run"] == "success", runs
    snapshot = {"initial_snapshot.open[-1]", "initial_snapshot.merge[-1]", "initial_snapshot.commit[-1]"}
    window = {"open_window[-1]", "read[0]", "read[1]", "merge[-1]", "commit[-1]"}
    assert first["tasks"] == dict.fromkeys(window | snapshot, "success"), first
    # A later window's run starts only the window's tasks: the snapshot's are skipped, never started.
    assert later["tasks"] == {**dict.fromkeys(window, "success"), **dict.fromkeys(snapshot, "skipped")}, later
