"""Exactly once under SIGKILL: the example DAG's task processes killed at seeded random points.

A pipeline of its own (``crash_home``: emulator, metastore, lake and Airflow home) runs windows of
the demo history one DAG run at a time. Window 0 runs clean and measures how long each step takes;
every later window is killed several times — SIGKILL to the whole process group of the process
running its tasks, so spark-submit, the JVM and the upsert job die with it — at a seeded random
moment within read (some of the window's partitions staged, others not), merge, upsert (some right
after one table's Delta commit, before the next) or commit. After each kill the run goes on as it
does on Airflow: the killed try, left running without a heartbeat, is failed as the scheduler fails
it, cleared as ``airflow tasks clear`` clears it, and the run continues from it. Right after a kill
each table holds the history up to the window's start or up to its end, nothing in between. After
every window the Delta tables equal the committed history up to the window's end (nothing lost,
nothing twice), each table's pipeline commits are one per window at most, in window order, and the
metastore holds every window applied, in order, with the apply watermarks and every table's Delta
app-transaction version at the window's end.

``CDC_CRASH_SEED`` (default 20260101) seeds the kill points; ``CDC_CRASH_POINTS`` (default and
minimum 20) sets how many, five per window. Every kill point is printed (window, step, delay, the
task it killed) and written to ``kill-points.json`` in the campaign's home, so a failure can be
reproduced from the seed. The runner of ``tests/e2e/test_example_dag.py`` executes the runs; this file's
``run`` command wraps it with the recovery of a killed run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from test_example_dag import (
    DAG_ID,
    TABLES,
    Pipeline,
    RunReport,
    _create_or_find_runs,
    _delta_log_entries,
    _execute_run,
    _query,
    _runner_arguments,
)

STEPS = ("read", "merge", "upsert", "commit")
DEFAULT_SEED = 20260101
DEFAULT_POINTS = 20
CHANGES_PER_WINDOW = 150
KILLS_PER_STEP_AND_RUN = 2
KILLS_PER_WINDOW = 5  # kill points per window, so windows = 1 (clean) + points / 5
SPECIAL_SHARE = 0.35  # of the read and upsert kill points, killed after a staged file or table commit
RUNNER_TIMEOUT = 900.0

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        os.environ.get("CDC_E2E_TESTS") != "1",
        reason="end-to-end DAG tests (about 8 minutes) run with CDC_E2E_TESTS=1, as scripts/test.sh sets it",
    ),
]


def crash_seed() -> int:
    return int(os.environ.get("CDC_CRASH_SEED", "").strip() or DEFAULT_SEED)


def crash_points() -> int:
    return max(DEFAULT_POINTS, int(os.environ.get("CDC_CRASH_POINTS", "").strip() or DEFAULT_POINTS))


#: Windows of history kept for kill points that missed their step (it ended before the kill, on a
#: loaded machine): they are tried again, sooner within the step, in the next window.
SPARE_WINDOWS = 2


def crash_windows(points: int) -> int:
    """Windows of the campaign's history: a clean one, the killed ones, and spares for missed points."""
    return 1 + math.ceil(points / KILLS_PER_WINDOW) + SPARE_WINDOWS


# =============================================================================================
# The runner: recovers a killed run as the scheduler would, then executes it.
# =============================================================================================


def _recover_killed_tries(scheduler_dag: Any, run_id: str) -> list[str]:
    """Do for the run's task instances what Airflow does once their process is gone, then clear them.

    A try still recorded as running has no heartbeat: the scheduler fails it (up for retry, or
    failed without retries left). Such tries are then cleared as ``airflow tasks clear`` clears
    them, to run again at once rather than after the retry delay. A task instance left queued is
    scheduled again, as the scheduler does with one stuck in the queue.
    """
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import clear_task_instances
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    recovered, failed = [], set()
    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == DAG_ID, DagRun.run_id == run_id))
        for ti in run.get_task_instances(session=session):
            name = f"{ti.task_id}[{ti.map_index}] try {ti.try_number}"
            if ti.state in (TaskInstanceState.RUNNING, TaskInstanceState.RESTARTING):
                ti.task = scheduler_dag.get_task(ti.task_id)
                ti.handle_failure(error="the task's process was killed (no heartbeat)", session=session)
                recovered.append(f"{name}: {ti.state}, cleared")
                failed.add((ti.task_id, ti.map_index))
            elif ti.state == TaskInstanceState.QUEUED:
                ti.state = TaskInstanceState.SCHEDULED
                recovered.append(f"{name}: queued, scheduled again")
        session.commit()
        session.expire_all()
        to_clear = [
            ti for ti in run.get_task_instances(session=session) if (ti.task_id, ti.map_index) in failed
        ]
        clear_task_instances(to_clear, session, dag_run_state=False)
        session.commit()
    return recovered


def _run(argv: Sequence[str]) -> int:
    """Create the window's run (``--window``) or continue a killed one (``--run-id``), and execute it."""
    parser = argparse.ArgumentParser(prog="test_crash_campaign.py run")
    parser.add_argument("--report", required=True)
    parser.add_argument("--run-id-file", required=True, help="the run's id is written here first")
    parser.add_argument("--window", nargs=2, metavar=("START", "END"))
    parser.add_argument("--run-id")
    args = parser.parse_args(argv)
    from airflow.utils.cli import get_bagged_dag, get_db_dag

    sdk_dag, scheduler_dag = get_bagged_dag(None, DAG_ID), get_db_dag(None, DAG_ID)
    if args.run_id:
        run_id = args.run_id
        for line in _recover_killed_tries(scheduler_dag, run_id):
            print(f"[recovery] {line}", flush=True)
    else:
        (run_id,) = _create_or_find_runs(
            scheduler_dag, _runner_arguments(["--report", args.report, "--window", *args.window])
        )
    Path(args.run_id_file).write_text(run_id)
    report = [_execute_run(sdk_dag, scheduler_dag, run_id, set())]
    Path(args.report).write_text(json.dumps(report, indent=1))
    return 0


# =============================================================================================
# Kill points
# =============================================================================================


AFTER_DELAY = "delay"  # a fraction of the step's typical duration after it started
AFTER_STAGED = "after-staged"  # read: as soon as the try has staged something
AFTER_COMMIT = "after-commit"  # upsert: as soon as one table's Delta commit shows


@dataclass
class KillPoint:
    """Where to kill: a step of a window's run, and when within it."""

    window: int
    step: str
    fraction: float
    mode: str = AFTER_DELAY


@dataclass
class KillRecord:
    """What a kill point hit."""

    point: KillPoint
    delay: float | None = None  # seconds after the step's task was seen running
    killed: list[str] = field(default_factory=list)  # task instances the kill left running
    done_before: list[str] = field(default_factory=list)  # the run's tasks finished before the kill
    staged: int = 0  # staging directories written to by the window's reads when killed
    tables_committed: list[str] = field(default_factory=list)  # Delta commits since the try started
    processes: int = 0  # processes in the killed tree
    note: str = ""

    @property
    def step_hit(self) -> str | None:
        steps = {name.split("[")[0] for name in self.killed}
        return steps.pop() if len(steps) == 1 else None

    def describe(self) -> str:
        p = self.point
        where = p.mode if p.mode != AFTER_DELAY else f"{p.fraction:.2f} of its duration"
        delay = "-" if self.delay is None else f"{self.delay:.2f}s"
        return (
            f"window {p.window} step {p.step} ({where}): delay {delay}, killed {self.killed or 'no task'}"
            f" ({self.processes} processes), done before {self.done_before}, "
            f"staged {self.staged}, tables committed {self.tables_committed}"
            f"{'; ' + self.note if self.note else ''}"
        )


def plan_kill_points(seed: int, points: int, windows: Sequence[int]) -> list[KillPoint]:
    """``points`` kill points over ``windows``: every step about as often, at most
    ``KILLS_PER_STEP_AND_RUN`` per step and window, in step order within a window."""
    rng = random.Random(seed)
    steps = [STEPS[i % len(STEPS)] for i in range(points)]
    rng.shuffle(steps)
    per_window: dict[int, list[str]] = {w: [] for w in windows}
    for step in steps:
        open_windows = [w for w in windows if per_window[w].count(step) < KILLS_PER_STEP_AND_RUN]
        fewest = min(len(per_window[w]) for w in open_windows)
        per_window[rng.choice([w for w in open_windows if len(per_window[w]) == fewest])].append(step)
    plan: list[KillPoint] = []
    special = {"read": AFTER_STAGED, "upsert": AFTER_COMMIT}
    for window in windows:
        for step in sorted(per_window[window], key=STEPS.index):
            # The first read and the first upsert always, later ones at random, wait for a
            # staged partition or a table commit; the rest kill at a random moment.
            first = not any(point.step == step for point in plan)
            mode = AFTER_DELAY
            if step in special and (first or rng.random() < SPECIAL_SHARE):
                mode = special[step]
            plan.append(KillPoint(window, step, round(rng.uniform(0.05, 0.9), 3), mode))
    return plan


def _kill_tree(process: subprocess.Popen) -> int:
    """SIGKILL the process group of ``process`` and every descendant (one in another group too)."""
    import psutil

    try:
        tree = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in tree:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    process.wait(timeout=60)
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, f"processes survived SIGKILL: {alive}"
    return 1 + len(tree)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def _run_in_slices(
    process: subprocess.Popen, condition: Callable[[], bool], limit: float, slice_seconds: float = 0.01
) -> bool:
    """Let the process group of ``process`` run in short slices, frozen (SIGSTOP) in between, until
    ``condition()`` holds while it is frozen (True: it is left frozen for the kill) or it has run
    ``limit`` seconds (False)."""
    ran = 0.0
    while True:
        _signal_group(process, signal.SIGSTOP)
        if condition():
            return True
        if ran >= limit or process.poll() is not None:
            return False
        _signal_group(process, signal.SIGCONT)
        time.sleep(slice_seconds)
        ran += slice_seconds


def _upsert_job_started(process: subprocess.Popen) -> bool:
    import psutil

    try:
        tree = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    for child in tree:
        try:
            if any("upsert_job" in part for part in child.cmdline()):
                return True
        except psutil.Error:
            continue
    return False


# =============================================================================================
# The campaign's pipeline
# =============================================================================================


class CrashPipeline(Pipeline):
    """The example DAG's pipeline in a home of its own, its runs started by this file's runner."""

    runner_script = Path(__file__).resolve()

    def __init__(self, home: Any) -> None:
        super().__init__(home)
        self.truths: dict[int, dict[str, list[dict[str, Any]]]] = {}

    def task_states(self, run_id: str) -> dict[str, str | None]:
        rows = _query(
            self,
            "SELECT task_id, map_index, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
            DAG_ID,
            run_id,
        )
        return {(t if m < 0 else f"{t}[{m}]"): s for t, m, s in rows}

    def commit_counts(self) -> dict[str, int]:
        return {table: _delta_log_entries(self.home.lake_root, table) for table in TABLES}

    def truth_after(self, index: int) -> dict[str, list[dict[str, Any]]]:
        if index not in self.truths:
            self.truths[index] = super().truth_after(index)
        return self.truths[index]

    def truth_before(self, index: int) -> dict[str, list[dict[str, Any]]]:
        """The tables' rows before window ``index`` (as after the window before it)."""
        if index > 0:
            return self.truth_after(index - 1)
        return self.truth_at(self.snapshot_window()[0])  # the initial snapshot's rows

    def staged_since(self, since: float) -> int:
        """Directories under the staging root with files written since ``since`` (epoch seconds)."""
        root = self.home.staging_root
        if not root.exists():
            return 0
        return len(
            {path.parent for path in root.rglob("*") if path.is_file() and path.stat().st_mtime >= since}
        )

    def assert_tables_whole(self, index: int) -> None:
        """Each table holds the history up to window ``index``'s start or its end, nothing between."""
        from airflow_provider_cdc.testing.lake_check import compare_lake_to_truth

        before, after = self.truth_before(index), self.truth_after(index)
        lake = self.lake()
        for table in TABLES:
            (as_before,) = compare_lake_to_truth(lake, {table: before[table]})
            (as_after,) = compare_lake_to_truth(lake, {table: after[table]})
            assert as_before.equal or as_after.equal, (
                f"table {table} during window {index} is neither before nor after it: "
                f"vs. after: only in the lake {as_after.only_in_lake}, "
                f"only in the history {as_after.only_in_truth}"
            )

    def assert_commits_once_in_order(self, index: int) -> None:
        """Per table: the pipeline's Delta commits are window versions up to ``index``'s, each at most
        once, in window order."""
        from airflow_provider_cdc.core.timestamps import to_micros

        # the initial snapshot's window [T - 1µs, T) first: window 0's run applies it
        versions = [to_micros(self.snapshot_window()[1])] + [self.version(i) for i in range(index + 1)]
        for table in TABLES:
            commits = self.window_commits(table)
            assert commits == sorted(set(commits)), (
                f"{table}: a window committed twice or out of order: {commits}"
            )
            assert set(commits) <= set(versions), f"{table}: commits of unknown windows: {commits}"


@dataclass
class Attempt:
    """One runner process for a window's run: killed at a point, or run to its end."""

    process: subprocess.Popen
    log: Path
    report: Path
    run_id_file: Path


class Campaign:
    """Runs windows one after another, killing their runs at the planned points."""

    def __init__(self, pipeline: CrashPipeline) -> None:
        self.pipeline = pipeline
        self.typical: dict[str, float] = {}
        self.records: list[KillRecord] = []
        self.durations: list[float] = []
        self.window_started_at = 0.0  # epoch seconds: the window's first runner started

    def start(self, index: int, run_id: str | None, name: str) -> Attempt:
        run_id_file = self.pipeline.home.root / f"{name}-{self.pipeline.counter + 1:02d}.run-id"
        if run_id is None:
            args = ["--window", *(bound.isoformat() for bound in self.pipeline.window(index))]
        else:
            args = ["--run-id", run_id]
        process, log, report = self.pipeline.start_runner(*args, "--run-id-file", str(run_id_file), name=name)
        return Attempt(process, log, report, run_id_file)

    def run_id(self, attempt: Attempt) -> str | None:
        while not attempt.run_id_file.exists():
            if attempt.process.poll() is not None:
                return None
            time.sleep(0.05)
        return attempt.run_id_file.read_text()

    def finish(self, attempt: Attempt) -> RunReport:
        (report,), _ = self.pipeline.finish_runner(attempt.process, attempt.log, attempt.report)
        return report

    def measure(self, report: RunReport) -> None:
        """Typical step durations from a clean run (read: its readers one after another)."""

        def seconds(name: str) -> float:
            task = report.tasks[name]
            return (
                datetime.fromisoformat(task["ended"]) - datetime.fromisoformat(task["started"])
            ).total_seconds()

        readers = [name for name in report.tasks if name.startswith("read[")]
        self.typical = {
            "read": sum(seconds(name) for name in readers),
            **{step: seconds(step) for step in STEPS if step != "read"},
        }

    def kill(self, attempt: Attempt, point: KillPoint) -> KillRecord:
        """Wait for the point's step to run under ``attempt``, kill the process tree in it, and
        record what was running."""
        record = KillRecord(point)
        run_id = self.run_id(attempt)
        deadline = time.monotonic() + RUNNER_TIMEOUT
        while True:
            if attempt.process.poll() is not None or run_id is None:
                record.note = "the run ended before the step started"
                return record
            assert time.monotonic() < deadline, f"step {point.step} never started: {attempt.log}"
            states = self.pipeline.task_states(run_id)
            if any(name.split("[")[0] == point.step and state == "running" for name, state in states.items()):
                break
            time.sleep(0.01)
        seen, seen_at = time.monotonic(), time.time()
        commits_before = self.pipeline.commit_counts()
        if point.mode == AFTER_COMMIT:
            self._kill_after_a_table_commit(attempt, commits_before, record)
        elif point.mode == AFTER_STAGED:
            limit = 5 + 3 * self.typical["read"]
            if not _run_in_slices(attempt.process, lambda: self.pipeline.staged_since(seen_at) > 0, limit):
                record.note = f"the read staged nothing in {limit:.1f}s of run time"
        elif not self._wait_within_step(run_id, point.step, point.fraction * self.typical[point.step]):
            record.note = "the step ended before the kill"  # the run goes on to the next point
            return record
        record.delay = time.monotonic() - seen
        record.processes = _kill_tree(attempt.process)
        record.staged = self.pipeline.staged_since(self.window_started_at)
        states = self.pipeline.task_states(run_id)
        record.killed = sorted(name for name, state in states.items() if state == "running")
        record.done_before = sorted(name for name, state in states.items() if state == "success")
        after = self.pipeline.commit_counts()
        record.tables_committed = [t for t in TABLES if after[t] > commits_before[t]]
        return record

    def _wait_within_step(self, run_id: str, step: str, seconds: float) -> bool:
        """Wait ``seconds`` unless every task instance of ``step`` ends first (then False)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            states = [
                state
                for name, state in self.pipeline.task_states(run_id).items()
                if name.split("[")[0] == step
            ]
            if states and all(state in ("success", "failed", "up_for_retry", "skipped") for state in states):
                return False
            time.sleep(min(0.01, max(0.0, end - time.monotonic())))
        return True

    def _kill_after_a_table_commit(
        self, attempt: Attempt, baseline: dict[str, int], record: KillRecord
    ) -> None:
        """Run the upsert in short slices (the process group frozen in between) until one of its
        Delta commits shows: the kill lands after its first table commit, before its next."""
        job_seen = False

        def committed_or_job_ended() -> bool:
            nonlocal job_seen
            counts = self.pipeline.commit_counts()
            if any(counts[t] > baseline[t] for t in TABLES):
                return True
            running = _upsert_job_started(attempt.process)
            job_seen = job_seen or running
            return job_seen and not running

        _run_in_slices(attempt.process, committed_or_job_ended, 5 + 10 * self.typical["upsert"])
        if not any(self.pipeline.commit_counts()[t] > baseline[t] for t in TABLES):
            record.note = "the upsert committed nothing before the kill"  # e.g. all applied before

    def run_window(self, index: int, points: list[KillPoint]) -> RunReport:
        """Run window ``index``, killed at ``points``; then re-run it until it ends."""
        pipeline, run_id, report = self.pipeline, None, None
        attempt: Attempt | None = None
        started, self.window_started_at = time.monotonic(), time.time()
        for point in points:
            if report is not None:  # the run ended before an earlier point: nothing left to kill
                record = KillRecord(point, note="the run had ended")
            else:
                attempt = attempt or self.start(index, run_id, name=f"w{index}-{point.step}")
                record = self.kill(attempt, point)
                run_id = run_id or self.run_id(attempt)
                if record.delay is not None:  # killed: the next point's attempt goes on from here
                    attempt = None
                    pipeline.assert_tables_whole(index)
                elif attempt.process.poll() is not None:
                    report, attempt = self.finish(attempt), None  # the run ended before the point
            self.records.append(record)
            print(f"[kill {len(self.records):02d}] {record.describe()}", flush=True)
        if report is None:
            report = self.finish(attempt or self.start(index, run_id, name=f"w{index}-to-end"))
        report.assert_succeeded()
        self.durations.append(time.monotonic() - started)
        pipeline.applied.add(index)
        return report

    def assert_applied(self, index: int) -> None:
        self.pipeline.assert_lake_equals_truth(index)
        self.pipeline.assert_applied_through(index)
        self.pipeline.assert_commits_once_in_order(index)


# =============================================================================================
# The test
# =============================================================================================


@pytest.fixture(scope="module")
def crash_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A demo history of ``crash_windows`` windows of 150 changes, with its own emulator, metastore,
    lake and Airflow home."""
    from conftest import example_dag_home_at

    with example_dag_home_at(
        tmp_path_factory.mktemp("crash-campaign"), crash_windows(crash_points()), CHANGES_PER_WINDOW
    ) as home:
        yield home


@pytest.mark.timeout(3600)
def test_sigkill_at_random_points_loses_and_duplicates_nothing(crash_home: Any) -> None:
    seed, points = crash_seed(), crash_points()
    windows = crash_windows(points)
    planned = windows - SPARE_WINDOWS
    plan = plan_kill_points(seed, points, range(1, planned))
    print(f"[campaign] seed {seed}, {points} kill points over windows 1-{planned - 1}", flush=True)
    pipeline = CrashPipeline(crash_home)
    campaign = Campaign(pipeline)
    try:
        clean = campaign.run_window(0, [])
        campaign.assert_applied(0)
        campaign.measure(clean)
        print(f"[campaign] typical step durations: {campaign.typical}", flush=True)
        missed: list[KillPoint] = []
        index = 1
        while index < windows and (index < planned or missed):
            # A point whose step ended before its kill is tried again in this window, sooner.
            again = [replace(p, window=index, fraction=round(p.fraction / 2, 3)) for p in missed]
            here = sorted([p for p in plan if p.window == index] + again, key=lambda p: STEPS.index(p.step))
            before = len(campaign.records)
            campaign.run_window(index, here)
            campaign.assert_applied(index)
            missed = [r.point for r in campaign.records[before:] if r.delay is None]
            index += 1
        windows = index
    finally:
        pipeline.stop_runners()
        summary = [asdict(r) | {"step_hit": r.step_hit} for r in campaign.records]
        (crash_home.root / "kill-points.json").write_text(json.dumps(summary, indent=1))
        print(f"[campaign] window durations: {[round(d) for d in campaign.durations]}", flush=True)

    assert len(campaign.records) >= points
    hits = Counter(r.step_hit for r in campaign.records)
    print(f"[campaign] kill points hit per step: {dict(hits)}", flush=True)
    wanted = max(2, points // len(STEPS) - 2)
    assert all(hits[step] >= wanted for step in STEPS), (
        f"each step must be hit at least {wanted} times: {dict(hits)}"
    )
    assert any(
        r.point.mode == AFTER_COMMIT and r.tables_committed and r.step_hit == "upsert"
        for r in campaign.records
    ), "no kill landed in an upsert after a table commit"
    assert any(
        r.point.mode == AFTER_STAGED and r.step_hit == "read" and r.staged for r in campaign.records
    ), "no kill landed in a read with some of the window's partitions staged"
    assert pipeline.applied == set(range(windows))


if __name__ == "__main__":
    if sys.argv[1:2] != ["run"]:
        sys.exit(
            "usage: test_crash_campaign.py run --report FILE --run-id-file FILE (--window S E | --run-id ID)"
        )
    sys.exit(_run(sys.argv[2:]))
