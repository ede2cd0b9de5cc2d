"""The example DAG end to end on Airflow 3: real runs, real Spark, the demo history, Delta tables.

The demo database (12 windows of 200 changes with partition splits and merges, partial updates,
deletes and transactions spanning partitions) is served by an emulator in this process
(``example_dag_home`` in conftest). Airflow commands run as subprocesses against a SQLite metadata
database; DAG runs execute their tasks in a runner process (``python tests/e2e/test_example_dag.py run``)
that does what the scheduler does for a run, with ``airflow dags test``'s in-process task execution:
create the run (as the scheduler creates a scheduled run) or take a queued one (cleared, backfilled),
then run every task instance as soon as its dependencies allow, retries included. The backfill test
runs the real thing: ``airflow backfill create`` executed by ``airflow scheduler`` (LocalExecutor)
with ``airflow api-server`` serving the task processes.

The tests build on each other, in file order: ten windows, a cleared window, a backfill, a killed
upsert (window 10), two runs of one window at once (window 11, the last). Run alone, a test first
runs the windows it builds on.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

import pytest

DAG_ID = "spanner_change_stream_to_lake"
FIRST_WINDOW_START = datetime(2026, 1, 1, tzinfo=timezone.utc)  # the demo's and the DAG's start date
PIPELINE = DAG_ID  # the DAG's default pipeline_id
TABLES = ("Customers", "Orders", "Readings")
FIRST_WINDOWS = 10  # windows 0-9 run one after the other
CLEARED_WINDOW = 4
BACKFILLED = range(5, 10)
KILLED_WINDOW = 10
RACED_WINDOW = 11
ALL_TASKS = {"wait_parents", "open_window", "read[0]", "read[1]", "drained", "merge", "upsert", "commit"}
#: The initial snapshot's tasks: they run in the first window's run; open_window skips them in later runs.
SNAPSHOT = "initial_snapshot"
SNAPSHOT_TASKS = {f"{SNAPSHOT}.{t}" for t in ("open", "read", "merge", "upsert", "commit")}


def is_snapshot_task(name: str) -> bool:
    """Whether ``name`` (``task_id`` or ``task_id[map_index]``) is one of the snapshot's skippable tasks."""
    return name.split("[")[0] in SNAPSHOT_TASKS


RUNNER_TIMEOUT = 1500.0

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        os.environ.get("CDC_E2E_TESTS") != "1",
        reason="end-to-end DAG tests (about 8 minutes) run with CDC_E2E_TESTS=1, as scripts/test.sh sets it",
    ),
]


# =============================================================================================
# The runner: executes DAG runs in its own process (python tests/e2e/test_example_dag.py run ...).
# =============================================================================================


def _runner_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="test_example_dag.py run", description="Execute DAG runs.")
    parser.add_argument("--report", required=True, help="write the runs' final states here (JSON)")
    parser.add_argument(
        "--window", nargs=2, action="append", default=[], metavar=("START", "END"), help="create a run"
    )
    parser.add_argument(
        "--manual", action="store_true", help="create manual runs (logical date = window end)"
    )
    parser.add_argument("--run-id", action="append", default=[], help="continue an existing run")
    parser.add_argument("--queued", action="store_true", help="run every queued run, oldest first")
    parser.add_argument("--stop-before", action="append", default=[], help="leave this task unrun")
    parser.add_argument("--ready-file", help="created once the runs are loaded")
    parser.add_argument("--go-file", help="start running tasks once this file exists")
    return parser.parse_args(argv)


def _run_dag_runs(argv: Sequence[str]) -> int:
    """Create or load DAG runs and run their task instances as the scheduler would, one run at a time.

    Tasks run in this process through the in-process execution API, with the function ``airflow
    dags test`` runs them with; a failed try with retries left is retried after its retry delay.
    """
    args = _runner_arguments(argv)
    from airflow.utils.cli import get_bagged_dag, get_db_dag

    sdk_dag, scheduler_dag = get_bagged_dag(None, DAG_ID), get_db_dag(None, DAG_ID)
    run_ids = _create_or_find_runs(scheduler_dag, args)
    if args.ready_file:
        Path(args.ready_file).write_text("ready")
    if args.go_file:
        while not Path(args.go_file).exists():
            time.sleep(0.02)
    report = [_execute_run(sdk_dag, scheduler_dag, run_id, set(args.stop_before)) for run_id in run_ids]
    Path(args.report).write_text(json.dumps(report, indent=1))
    return 0


def _create_or_find_runs(scheduler_dag: Any, args: argparse.Namespace) -> list[str]:
    """Run ids to execute: ``--run-id``s, new runs of ``--window``s, then (``--queued``) queued runs."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType
    from sqlalchemy import select

    from airflow_provider_cdc.core.timestamps import parse_timestamp

    run_ids = list(args.run_id)
    with create_session() as session:
        for start_text, end_text in args.window:
            start, end = parse_timestamp(start_text), parse_timestamp(end_text)
            # A scheduled run's logical date is its data interval's start; a manual run's is its
            # end (``airflow dags trigger``/``dags test`` infer the interval that ends there).
            run_type = DagRunType.MANUAL if args.manual else DagRunType.SCHEDULED
            logical_date = end if args.manual else start
            run = scheduler_dag.create_dagrun(
                run_id=DagRun.generate_run_id(run_type=run_type, logical_date=logical_date, run_after=end),
                logical_date=logical_date,
                data_interval=(start, end),
                run_after=end,
                run_type=run_type,
                triggered_by=DagRunTriggeredByType.TEST if args.manual else DagRunTriggeredByType.TIMETABLE,
                state=DagRunState.QUEUED,
                session=session,
            )
            session.commit()
            run_ids.append(run.run_id)
        if args.queued:
            queued = session.scalars(
                select(DagRun)
                .where(DagRun.dag_id == DAG_ID, DagRun.state == DagRunState.QUEUED)
                .order_by(DagRun.logical_date)
            ).all()
            run_ids.extend(run.run_id for run in queued if run.run_id not in run_ids)
    return run_ids


def _execute_run(sdk_dag: Any, scheduler_dag: Any, run_id: str, stop_before: set[str]) -> dict[str, Any]:
    """Run the run's task instances until it ends (or only tasks after a stopped one are left)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.sdk.definitions.dag import _run_task
    from airflow.utils import timezone as airflow_timezone
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    waiting = {TaskInstanceState.UP_FOR_RETRY, TaskInstanceState.UP_FOR_RESCHEDULE}
    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == DAG_ID, DagRun.run_id == run_id))
        run.dag = scheduler_dag
        if run.state == DagRunState.QUEUED:
            run.set_state(DagRunState.RUNNING)
            session.commit()
        states: dict[tuple[str, int], Any] = {}
        while run.state == DagRunState.RUNNING:
            session.expire_all()
            schedulable, _ = run.update_state(session=session)
            for ti in schedulable:
                if ti.task_id in stop_before:
                    continue
                if ti.state != TaskInstanceState.UP_FOR_RESCHEDULE:
                    ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
                ti.scheduled_dttm = airflow_timezone.utcnow()
            session.commit()
            tis = run.get_task_instances(session=session)
            scheduled = [ti for ti in tis if ti.state == TaskInstanceState.SCHEDULED]
            # Each pass settles one more level of skipped tasks (a skipped branch's descendants).
            current = {(ti.task_id, ti.map_index): ti.state for ti in tis}
            changed, states = current != states, current
            if not scheduled:
                if changed and run.state == DagRunState.RUNNING:
                    continue
                if run.state != DagRunState.RUNNING or not any(ti.state in waiting for ti in tis):
                    break  # done, or only tasks left that depend on a stopped one
                time.sleep(0.5)  # a try waiting for its retry delay
                continue
            for ti in scheduled:
                try:
                    _run_task(ti=ti, task=sdk_dag.task_dict[ti.task_id])
                except Exception as exc:  # the task instance's state records the outcome
                    print(f"[runner] {ti.task_id} raised {type(exc).__name__}: {exc}", flush=True)
        session.expire_all()
        history = session.scalars(
            select(TaskInstanceHistory).where(
                TaskInstanceHistory.dag_id == DAG_ID, TaskInstanceHistory.run_id == run_id
            )
        ).all()
        return {
            "run_id": run_id,
            "run_type": str(run.run_type),
            "state": str(run.state),
            "data_interval": [run.data_interval_start.isoformat(), run.data_interval_end.isoformat()],
            "tasks": [
                {
                    "task_id": t.task_id,
                    "map_index": t.map_index,
                    "try_number": t.try_number,
                    "state": None if t.state is None else str(t.state),
                    "started": t.start_date and t.start_date.isoformat(),
                    "ended": t.end_date and t.end_date.isoformat(),
                }
                for t in run.get_task_instances(session=session)
            ],
            "history": [
                {"task_id": h.task_id, "map_index": h.map_index, "state": h.state, "try_number": h.try_number}
                for h in history
            ],
        }


# =============================================================================================
# What a user sees: DAG runs and task tries, task logs, the Delta tables, the metastore.
# =============================================================================================


@dataclass
class RunReport:
    """A DAG run as the runner (or Airflow's metadata database) left it."""

    run_id: str
    run_type: str
    state: str
    data_interval: tuple[datetime, datetime]
    tasks: dict[str, dict[str, Any]]  # "task" or "task[map_index]" -> {"state", "try_number"}
    history: list[dict[str, Any]] = field(default_factory=list)  # earlier tries

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunReport:
        tasks = {_ti_name(t["task_id"], t["map_index"]): t for t in data["tasks"]}
        start, end = (datetime.fromisoformat(text) for text in data["data_interval"])
        return cls(data["run_id"], data["run_type"], data["state"], (start, end), tasks, data["history"])

    def tries(self, task_id: str) -> list[tuple[int, str]]:
        """Every try of an unmapped task, oldest first: ``(try_number, state)``."""
        tries = [(h["try_number"], h["state"]) for h in self.history if h["task_id"] == task_id]
        current = self.tasks[task_id]
        return sorted({*tries, (current["try_number"], current["state"])})

    def assert_succeeded(self) -> None:
        """The run succeeded: every window task succeeded; the snapshot's tasks succeeded in the first
        window's run and were skipped in every other."""
        first_run = self.data_interval[0] == FIRST_WINDOW_START
        snapshot = {name: t["state"] for name, t in self.tasks.items() if is_snapshot_task(name)}
        window = {name: t["state"] for name, t in self.tasks.items() if name not in snapshot}
        failed = {name: state for name, state in window.items() if state != "success"}
        assert self.state == "success" and not failed, f"run {self.run_id} is {self.state}; tasks: {failed}"
        assert set(window) == ALL_TASKS, f"run {self.run_id} has tasks {sorted(self.tasks)}"
        assert {name.split("[")[0] for name in snapshot} == SNAPSHOT_TASKS, sorted(self.tasks)
        expected = "success" if first_run else "skipped"
        assert set(snapshot.values()) == {expected}, f"run {self.run_id}: snapshot tasks {snapshot}"


def _ti_name(task_id: str, map_index: int) -> str:
    return task_id if map_index < 0 else f"{task_id}[{map_index}]"


_UPSERT_SUMMARY = '{"changeset": '
#: A commit that found its window applied: before its compare-and-set, or by losing it to the run
#: that applied the window meanwhile.
_ALREADY_COMMITTED = re.compile(
    r"Window \[[^)]*\) of \S+ was (?:already applied|applied by another run meanwhile)"
)


def _log_events(text: str) -> Iterator[str]:
    """Log lines as text: a JSON-formatted line (a scheduler task's log file) gives its event."""
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                yield str(json.loads(line).get("event", ""))
                continue
            except json.JSONDecodeError:
                pass
        yield line


def upsert_summaries(text: str) -> list[dict[str, Any]]:
    """The upsert job's summaries (its last stdout line, as the task logs it)."""
    decoder = json.JSONDecoder()
    return [
        decoder.raw_decode(event, event.index(_UPSERT_SUMMARY))[0]
        for event in _log_events(text)
        if _UPSERT_SUMMARY in event
    ]


def committed_as_already_applied(text: str) -> int:
    """How many commit tasks in the log found their window already applied."""
    return sum(1 for event in _log_events(text) if _ALREADY_COMMITTED.search(event))


@dataclass
class Pipeline:
    """The example DAG's pipeline in ``example_dag_home``: runs, logs, lake and metastore."""

    #: The file whose ``run`` command executes DAG runs in a process of their own.
    runner_script: ClassVar[Path] = Path(__file__).resolve()
    home: Any  # ExampleDagHome
    applied: set[int] = field(default_factory=set)
    failed_windows: set[int] = field(default_factory=set)
    counter: int = 0
    runners: list[subprocess.Popen] = field(default_factory=list)

    # ----- windows and truth -----
    def window(self, index: int) -> tuple[datetime, datetime]:
        return self.home.settings.window_bounds(index)

    def snapshot_window(self) -> tuple[datetime, datetime]:
        """The initial snapshot's window ``[T - 1µs, T)``."""
        from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND

        start = self.window(0)[0]
        return start - ONE_MICROSECOND, start

    def version(self, index: int) -> int:
        """The window's version in Delta (its end in µs)."""
        from airflow_provider_cdc.core.timestamps import to_micros

        return to_micros(self.window(index)[1])

    def truth_after(self, index: int) -> dict[str, list[dict[str, Any]]]:
        """The tables' rows once every transaction committed before window ``index``'s end is applied."""
        from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND

        return self.truth_at(self.window(index)[1] - ONE_MICROSECOND)

    def truth_at(self, moment: datetime) -> dict[str, list[dict[str, Any]]]:
        """The tables' rows as of ``moment`` (every transaction committed at or before it applied)."""
        from airflow_provider_cdc.testing.workload import TABLES_BY_NAME

        state = self.home.workload.state_at(moment)
        return {
            name: [TABLES_BY_NAME[name].encode_values(rows[key]) for key in sorted(rows)]
            for name, rows in state.items()
        }

    # ----- running -----
    def log_path(self, name: str) -> Path:
        self.counter += 1
        return self.home.root / f"{self.counter:02d}-{name}.log"

    def start_runner(self, *args: str, name: str) -> tuple[subprocess.Popen, Path, Path]:
        log, report = self.log_path(name), self.home.root / f"{self.counter:02d}-{name}.json"
        with log.open("w") as out:
            process = subprocess.Popen(
                [sys.executable, str(self.runner_script), "run", "--report", str(report), *args],
                env=self.home.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.home.root,
                start_new_session=True,
            )
        self.runners.append(process)
        return process, log, report

    def finish_runner(
        self, process: subprocess.Popen, log: Path, report: Path
    ) -> tuple[list[RunReport], str]:
        try:
            code = process.wait(timeout=RUNNER_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill(process)
            raise
        text = log.read_text(errors="replace")
        assert code == 0, f"the runner exited with {code}:\n{text[-5000:]}"
        return [RunReport.from_json(run) for run in json.loads(report.read_text())], text

    @staticmethod
    def kill(process: subprocess.Popen) -> None:
        """Kill a runner that has not ended, with its process group (its tasks' jobs included)."""
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def stop_runners(self) -> None:
        for process in self.runners:
            self.kill(process)

    def run(self, *args: str, name: str) -> tuple[list[RunReport], str]:
        return self.finish_runner(*self.start_runner(*args, name=name))

    @staticmethod
    def window_args(windows: Iterable[tuple[datetime, datetime]]) -> list[str]:
        args = []
        for start, end in windows:
            args += ["--window", start.isoformat(), end.isoformat()]
        return args

    def require(self, indices: Iterable[int]) -> None:
        """Run the windows among ``indices`` that are not applied yet, in order (skip if they failed)."""
        missing = [i for i in indices if i not in self.applied]
        if not missing:
            return
        if self.failed_windows & set(range(max(missing) + 1)):
            pytest.skip(f"windows {sorted(self.failed_windows)} did not apply")
        reports, _ = self.run(*self.window_args(self.window(i) for i in missing), name="windows")
        for index, report in zip(missing, reports, strict=True):
            (self.applied if report.state == "success" else self.failed_windows).add(index)
        if any(i not in self.applied for i in missing):
            pytest.fail(f"windows {sorted(set(missing) - self.applied)} failed to apply")

    # ----- the lake and the metastore -----
    def lake(self) -> Any:
        from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

        return DeltaLakeTarget(str(self.home.lake_root))

    def metastore(self) -> Any:
        from airflow_provider_cdc.metastore import Metastore

        return Metastore(self.home.metastore_url)

    def snapshot(self) -> dict[str, tuple[int, list[str]]]:
        """Per table: Delta version and every row (hidden CDC columns included), sorted."""
        lake = self.lake()
        result = {}
        for table in TABLES:
            rows = lake.read_table(table).to_pylist()
            result[table] = (
                lake.open(table).version(),
                sorted(json.dumps(row, sort_keys=True, default=str) for row in rows),
            )
        return result

    def window_commits(self, table: str) -> list[int]:
        """Window versions of the pipeline's commits to ``table``, in commit order."""
        from airflow_provider_cdc.targets.delta.target import (
            COMMIT_METADATA_APP_ID,
            COMMIT_METADATA_WINDOW_VERSION,
            app_id_for,
        )

        history = self.lake().open(table).history()
        return [
            int(entry[COMMIT_METADATA_WINDOW_VERSION])
            for entry in sorted(history, key=lambda e: e["version"])
            if entry.get(COMMIT_METADATA_APP_ID) == app_id_for(PIPELINE)
        ]

    def changed_tables(self, index: int) -> list[str]:
        """The tables the window's change set holds (its manifest)."""
        from airflow_provider_cdc.core.window import Window

        window_id = Window(*self.window(index)).window_id
        manifest = json.loads((self.home.changeset_root / window_id / "_manifest.json").read_text())
        return sorted(manifest["tables"])

    def assert_lake_equals_truth(self, index: int) -> None:
        from airflow_provider_cdc.testing.lake_check import compare_lake_to_truth

        truth = self.truth_after(index)
        assert sorted(truth) == list(TABLES)
        for result in compare_lake_to_truth(self.lake(), truth):
            assert result.equal, (
                f"table {result.table} after window {index}: {result.lake_rows} rows in the lake, "
                f"{result.truth_rows} in the history; only in the lake: {result.only_in_lake}; "
                f"only in the history: {result.only_in_truth}"
            )

    def assert_applied_through(self, index: int) -> None:
        """Metastore: windows 0..index applied, in order; every table's apply watermark at index's end."""
        store = self.metastore()
        try:
            windows = store.list_windows(PIPELINE)
            watermarks = store.table_watermarks(PIPELINE, target="delta")
        finally:
            store.dispose()
        bounds = [(w.start, w.end) for w in windows]
        assert bounds == [self.snapshot_window()] + [self.window(i) for i in range(index + 1)]
        states = [(w.window_id, w.state.value) for w in windows]
        assert {state for _, state in states} == {"applied"}, states
        assert watermarks == {table: self.window(index)[1] for table in TABLES}
        for table in TABLES:
            assert self.lake().applied_window_version(table, PIPELINE) == self.version(index)

    def window_records(self) -> dict[datetime, Any]:
        store = self.metastore()
        try:
            return {w.start: w for w in store.list_windows(PIPELINE)}
        finally:
            store.dispose()


@pytest.fixture(scope="module")
def pipeline(example_dag_home: Any) -> Iterator[Pipeline]:
    pipeline = Pipeline(example_dag_home)
    try:
        yield pipeline
    finally:
        pipeline.stop_runners()


# =============================================================================================
# 1. Ten consecutive windows
# =============================================================================================


def test_ten_windows_apply_the_history_exactly(pipeline: Pipeline) -> None:
    from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, to_micros

    workload = pipeline.home.workload
    first, last = pipeline.window(0)[0], pipeline.window(FIRST_WINDOWS - 1)[1]
    history = workload.history_between(first, last)
    mods = [mod for transaction in history for mod in transaction.mods]
    # The history these windows carry has everything the pipeline must get right.
    assert [e for e in workload.splits if e.at < last] and [e for e in workload.merges if e.at < last]
    assert any(m.mod_type == "DELETE" for m in mods)
    assert any(m.mod_type == "UPDATE" and len(m.new_values) < len(_value_columns(m.table)) for m in mods)

    # Rows from before the first window, some of them updated partially or deleted in these windows.
    before = workload.state_at(first - ONE_MICROSECOND)
    assert all(before[table] for table in TABLES)
    assert any(m.mod_type == "UPDATE" and m.key in before.get(m.table, {}) for m in mods)
    assert any(m.mod_type == "DELETE" and m.key in before.get(m.table, {}) for m in mods)

    windows = [pipeline.window(i) for i in range(FIRST_WINDOWS)]
    reports, _ = pipeline.run(*pipeline.window_args(windows), name="ten-windows")

    assert [r.data_interval for r in reports] == windows
    for index, report in enumerate(reports):
        assert report.run_type == "scheduled"
        (pipeline.applied if report.state == "success" else pipeline.failed_windows).add(index)
        report.assert_succeeded()
    pipeline.assert_lake_equals_truth(FIRST_WINDOWS - 1)
    pipeline.assert_applied_through(FIRST_WINDOWS - 1)
    # One Delta commit per window and table the window changed, in window order, none twice: the
    # snapshot's first (every table has rows before the first window).
    snapshot_version = to_micros(pipeline.snapshot_window()[1])
    for table in TABLES:
        expected = [pipeline.version(i) for i in range(FIRST_WINDOWS) if table in pipeline.changed_tables(i)]
        assert pipeline.window_commits(table) == [snapshot_version, *expected], table
    assert _transactions_spanning_partitions(pipeline) > 0


def _value_columns(table: str) -> tuple[str, ...]:
    from airflow_provider_cdc.testing.workload import TABLES_BY_NAME

    return tuple(c.name for c in TABLES_BY_NAME[table].value_columns)


def _transactions_spanning_partitions(pipeline: Pipeline) -> int:
    """Staged transactions whose records came from more than one partition."""
    import pyarrow.dataset as ds

    staged = ds.dataset(str(pipeline.home.staging_root), format="parquet", partitioning=None)
    table = staged.to_table(columns=["transaction_id", "source_metadata_json"])
    spanning = {
        tid
        for tid, metadata in zip(
            table["transaction_id"].to_pylist(), table["source_metadata_json"].to_pylist(), strict=True
        )
        if json.loads(metadata)["number_of_partitions_in_transaction"] > 1
    }
    return len(spanning)


# =============================================================================================
# 2. A cleared window runs again and changes nothing
# =============================================================================================


def test_clearing_a_middle_window_and_running_it_again_changes_nothing(pipeline: Pipeline) -> None:
    pipeline.require(range(FIRST_WINDOWS))
    start, end = pipeline.window(CLEARED_WINDOW)
    before = pipeline.snapshot()
    attempt_before = pipeline.window_records()[start].attempt

    pipeline.home.airflow(
        "tasks", "clear", DAG_ID, "--start-date", start.isoformat(), "--end-date", start.isoformat(), "--yes",
        log=pipeline.log_path("tasks-clear"),
    )
    reports, log = pipeline.run("--queued", name="cleared-window")

    assert [r.data_interval for r in reports] == [(start, end)]
    report = reports[0]
    report.assert_succeeded()
    assert report.tries("upsert") == [(1, "success"), (2, "success")]  # it really ran again
    summaries = upsert_summaries(log)
    assert len(summaries) == 1 and summaries[0]["window_version"] == pipeline.version(CLEARED_WINDOW)
    assert summaries[0]["tables_applied"] == []
    assert summaries[0]["skipped_as_applied"] == pipeline.changed_tables(CLEARED_WINDOW)
    # No Delta commit at all: same versions, same rows (hidden columns included).
    assert pipeline.snapshot() == before
    pipeline.assert_lake_equals_truth(FIRST_WINDOWS - 1)
    pipeline.assert_applied_through(FIRST_WINDOWS - 1)
    assert pipeline.window_records()[start].attempt == attempt_before + 1


# =============================================================================================
# 3. A backfill over five applied windows, run by the scheduler, changes nothing
# =============================================================================================


@dataclass
class Daemon:
    """An Airflow service started for a test and ended by its process group."""

    name: str
    process: subprocess.Popen
    log: Path

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


def _start_daemon(pipeline: Pipeline, *args: str, name: str) -> Daemon:
    log = pipeline.log_path(name)
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "airflow"), *args],
            env=pipeline.home.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Daemon(name, process, log)


def _query(pipeline: Pipeline, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Read Airflow's metadata database (retrying while a writer holds it)."""
    for _ in range(50):
        try:
            with sqlite3.connect(f"file:{pipeline.home.airflow_db}?mode=ro", uri=True, timeout=10) as db:
                return db.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            time.sleep(0.2)
    raise AssertionError(f"Airflow's metadata database stayed locked for {sql!r}")


def _tail(path: Path, characters: int = 3000) -> str:
    return path.read_text(errors="replace")[-characters:]


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def test_backfill_over_five_windows_run_by_the_scheduler_changes_nothing(pipeline: Pipeline) -> None:
    pipeline.require(range(FIRST_WINDOWS))
    windows = [pipeline.window(i) for i in BACKFILLED]
    before = pipeline.snapshot()
    attempts_before = {start: w.attempt for start, w in pipeline.window_records().items()}
    home = pipeline.home

    api_server = _start_daemon(pipeline, "api-server", "--port", str(home.api_port), name="api-server")
    # the sensors defer by default: the triggerer runs their waits
    triggerer = _start_daemon(pipeline, "triggerer", name="triggerer")
    scheduler = None
    try:
        home.airflow("dags", "unpause", DAG_ID, log=pipeline.log_path("dags-unpause"))
        home.airflow(
            "backfill", "create", "--dag-id", DAG_ID,
            "--from-date", windows[0][0].isoformat(), "--to-date", windows[-1][0].isoformat(),
            "--reprocess-behavior", "completed", "--max-active-runs", "1",
            log=pipeline.log_path("backfill-create"),
        )
        (backfill_id,) = _query(pipeline, "SELECT id FROM backfill WHERE dag_id = ?", DAG_ID)[0]
        scheduler = _start_daemon(pipeline, "scheduler", name="scheduler")
        deadline = time.monotonic() + 1500
        while not _query(pipeline, "SELECT completed_at FROM backfill WHERE id = ?", backfill_id)[0][0]:
            for daemon in (scheduler, api_server, triggerer):
                assert daemon.process.poll() is None, f"{daemon.name} exited:\n{_tail(daemon.log)}"
            assert time.monotonic() < deadline, "the backfill did not complete in time"
            time.sleep(2)
    finally:
        for daemon in (scheduler, triggerer, api_server):
            if daemon is not None:
                daemon.stop()

    runs = _query(
        pipeline,
        "SELECT run_id, state, run_type, data_interval_start, data_interval_end FROM dag_run "
        "WHERE dag_id = ? AND backfill_id = ? ORDER BY data_interval_start",
        DAG_ID,
        backfill_id,
    )
    assert [(_utc(start), _utc(end)) for *_, start, end in runs] == windows
    assert {(state, run_type) for _, state, run_type, *_ in runs} == {("success", "backfill")}, runs
    for run_id, *_ in runs:
        states = dict(
            _query(
                pipeline,
                "SELECT task_id || CASE WHEN map_index >= 0 THEN '[' || map_index || ']' ELSE '' END, state "
                "FROM task_instance WHERE dag_id = ? AND run_id = ?",
                DAG_ID,
                run_id,
            )
        )
        window = {name: state for name, state in states.items() if not is_snapshot_task(name)}
        skipped = {name: state for name, state in states.items() if name not in window}
        # the window's tasks ran; a later window's run skips the initial snapshot
        assert set(window) == ALL_TASKS, (run_id, states)
        assert set(window.values()) == {"success"} and set(skipped.values()) == {"skipped"}, (run_id, states)
    # Each re-run upsert found its window applied and left the tables alone.
    logs = home.airflow_home / "logs" / f"dag_id={DAG_ID}"
    for index, (run_id, *_) in zip(BACKFILLED, runs, strict=True):
        attempts = sorted((logs / f"run_id={run_id}" / "task_id=upsert").glob("attempt=*.log"))
        summaries = upsert_summaries(attempts[-1].read_text())
        assert [(s["window_version"], s["tables_applied"]) for s in summaries] == [
            (pipeline.version(index), [])
        ]
        assert summaries[0]["skipped_as_applied"] == pipeline.changed_tables(index)
    assert pipeline.snapshot() == before
    pipeline.assert_lake_equals_truth(FIRST_WINDOWS - 1)
    pipeline.assert_applied_through(FIRST_WINDOWS - 1)
    attempts = {start: w.attempt for start, w in pipeline.window_records().items()}
    assert {start: attempts[start] - attempts_before[start] for start in attempts} == {
        pipeline.snapshot_window()[0]: 0,  # the first run's snapshot is not in the backfill
        **{pipeline.window(i)[0]: int(i in BACKFILLED) for i in range(FIRST_WINDOWS)},
    }


# =============================================================================================
# 4. The upsert's process killed mid-apply; the retry heals it
# =============================================================================================


@dataclass
class Kill:
    """What the killer saw when it killed the upsert job."""

    pids: list[int] = field(default_factory=list)
    tables_applied: list[str] = field(default_factory=list)
    error: str | None = None


def _delta_log_entries(lake_root: Path, table: str) -> int:
    log = lake_root / table / "_delta_log"
    return sum(1 for name in log.iterdir() if name.suffix == ".json") if log.exists() else 0


def _kill_upsert_mid_apply(runner: subprocess.Popen, lake_root: Path, kill: Kill, timeout: float) -> None:
    """Wait for the upsert job under ``runner``, then SIGKILL its process tree once it has committed
    to at least one table: it is frozen (SIGSTOP) between short slices of run time while the Delta
    logs are checked, so the kill lands after its first table commit and before its last."""
    import psutil

    def job_tree() -> list[psutil.Process]:
        try:
            tree = psutil.Process(runner.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        jobs = [p for p in tree if "upsert_job.py" in " ".join(_cmdline(p))]
        return tree if jobs else []

    def signal_all(processes: list[psutil.Process], sig: int) -> None:
        for process in processes:
            try:
                process.send_signal(sig)
            except psutil.NoSuchProcess:
                pass

    baseline = {table: _delta_log_entries(lake_root, table) for table in TABLES}
    deadline = time.monotonic() + timeout
    tree: list[psutil.Process] = []
    while not tree:
        if runner.poll() is not None or time.monotonic() > deadline:
            kill.error = "the upsert job never started"
            return
        time.sleep(0.02)
        tree = job_tree()
    signal_all(tree, signal.SIGSTOP)
    while True:
        applied = [t for t in TABLES if _delta_log_entries(lake_root, t) > baseline[t]]
        if applied:
            signal_all(tree, signal.SIGKILL)
            kill.pids = [p.pid for p in tree]
            kill.tables_applied = applied
            return
        if not any(_alive(p) for p in tree):
            kill.error = "the upsert job ended before it was killed"
            return
        if time.monotonic() > deadline:
            signal_all(tree, signal.SIGKILL)
            kill.error = "the upsert job committed nothing in time"
            return
        signal_all(tree, signal.SIGCONT)
        time.sleep(0.02)
        tree = job_tree() or tree
        signal_all(tree, signal.SIGSTOP)


def _alive(process: Any) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmdline(process: Any) -> list[str]:
    try:
        return process.cmdline()
    except Exception:  # gone or not readable: not the job
        return []


def test_upsert_killed_mid_apply_is_healed_by_its_retry(pipeline: Pipeline) -> None:
    pipeline.require(range(KILLED_WINDOW))
    start, end = pipeline.window(KILLED_WINDOW)
    process, log, report = pipeline.start_runner(*pipeline.window_args([(start, end)]), name="killed-upsert")
    kill = Kill()
    killer = threading.Thread(
        target=_kill_upsert_mid_apply, args=(process, pipeline.home.lake_root, kill, 600.0), daemon=True
    )
    killer.start()
    reports, text = pipeline.finish_runner(process, log, report)
    killer.join(timeout=60)
    if reports[0].state == "success":
        pipeline.applied.add(KILLED_WINDOW)

    assert kill.error is None, kill.error
    changed = pipeline.changed_tables(KILLED_WINDOW)
    assert kill.tables_applied and set(kill.tables_applied) <= set(changed), kill
    run = reports[0]
    run.assert_succeeded()
    assert run.tries("upsert") == [(1, "failed"), (2, "success")], (run.tries("upsert"), kill)
    # The retry applied what the killed try had not, and skipped what it had.
    summaries = upsert_summaries(text)
    assert len(summaries) == 1, (summaries, kill)  # the killed job never printed its summary
    assert sorted(summaries[0]["skipped_as_applied"]) == sorted(kill.tables_applied)
    assert sorted(summaries[0]["tables_applied"]) == sorted(set(changed) - set(kill.tables_applied))
    for table in TABLES:
        commits = pipeline.window_commits(table)
        assert commits.count(pipeline.version(KILLED_WINDOW)) == int(table in changed), (table, commits)
    pipeline.assert_lake_equals_truth(KILLED_WINDOW)
    pipeline.assert_applied_through(KILLED_WINDOW)


# =============================================================================================
# 5. Two DAG runs of the same window at once: the later opening applies it, the earlier changes nothing
# =============================================================================================


def test_two_runs_of_one_window_at_once_apply_it_exactly_once(pipeline: Pipeline) -> None:
    """The manual run opens the window again after the scheduled run read and merged it: the scheduled
    run's upsert (of the earlier epoch) is refused without retries and applies nothing, the manual run
    applies every changed table once."""
    pipeline.require(range(RACED_WINDOW))
    window = pipeline.window(RACED_WINDOW)
    # The scheduled run and a manual run of the same data interval, each up to its upsert.
    until_upsert = [*pipeline.window_args([window]), "--stop-before", "upsert"]
    (scheduled,), _ = pipeline.run(*until_upsert, name="race-scheduled")
    (manual,), _ = pipeline.run(*until_upsert, "--manual", name="race-manual")
    for run in (scheduled, manual):
        assert run.data_interval == window
        unrun = {
            name: t["state"]
            for name, t in run.tasks.items()
            if t["state"] != "success" and not is_snapshot_task(name)  # skipped: a later window
        }
        assert unrun == {"upsert": None, "commit": None}, (run.run_id, unrun)
    assert scheduled.run_id != manual.run_id

    # Both tails (upsert → commit) start at the same moment.
    go = pipeline.home.root / "race-go"
    started = []
    for run in (scheduled, manual):
        ready = pipeline.home.root / f"race-ready-{run.run_type}"
        started.append(
            (
                ready,
                pipeline.start_runner(
                    "--run-id", run.run_id, "--ready-file", str(ready), "--go-file", str(go), name="race-tail"
                ),
            )
        )
    deadline = time.monotonic() + 300
    while not all(ready.exists() for ready, _ in started):
        assert all(process.poll() is None for _, (process, *_) in started), "a runner exited early"
        assert time.monotonic() < deadline, "the runners did not get ready"
        time.sleep(0.05)
    go.write_text("go")
    results = [pipeline.finish_runner(*runner) for _, runner in started]

    ((stale,), stale_log), ((fresh,), fresh_log) = results
    fresh.assert_succeeded()
    pipeline.applied.add(RACED_WINDOW)
    # The scheduled run opened the window first; the manual run's opening, the next epoch, fenced it.
    epoch = pipeline.window_records()[window[0]].attempt
    assert stale.state == "failed" and stale.tries("upsert") == [(1, "failed")], stale.tasks
    assert stale.tasks["commit"]["state"] == "upstream_failed", stale.tasks
    stale_epoch = epoch - 1
    assert f"opened it in epoch {stale_epoch}: the upsert of epoch {stale_epoch} changes nothing" in stale_log
    assert upsert_summaries(stale_log) == []  # its job never started
    changed = pipeline.changed_tables(RACED_WINDOW)
    (summary,) = upsert_summaries(fresh_log)
    assert sorted(summary["tables_applied"]) == sorted(changed) and summary["epoch"] == epoch, summary
    for table in TABLES:
        assert pipeline.window_commits(table).count(pipeline.version(RACED_WINDOW)) == int(table in changed)
    assert not committed_as_already_applied(fresh_log)
    pipeline.assert_lake_equals_truth(RACED_WINDOW)
    pipeline.assert_applied_through(RACED_WINDOW)
    # The last window is the end of the history: the lake holds its final state.
    assert pipeline.truth_after(RACED_WINDOW) == _encoded_final_state(pipeline)


def _encoded_final_state(pipeline: Pipeline) -> dict[str, list[dict[str, Any]]]:
    from airflow_provider_cdc.testing.demo import encoded_state

    return encoded_state(pipeline.home.workload)


if __name__ == "__main__":
    if sys.argv[1:2] != ["run"]:
        sys.exit("usage: test_example_dag.py run --report FILE [--window START END]... (see --help)")
    sys.exit(_run_dag_runs(sys.argv[2:]))
