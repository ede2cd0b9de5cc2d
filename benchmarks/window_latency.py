"""Window latency of the example DAG: window end → applied, per window and as p50/p95, with a baseline.

    .venv/bin/python benchmarks/window_latency.py --spark connect --changes-per-window 1000
    .venv/bin/python benchmarks/window_latency.py --spark submit  --changes-per-window 50000
    .venv/bin/python benchmarks/window_latency.py --windows 3 --keep /tmp/window-latency

It starts the change-stream emulator with the demo database (``--demo --demo-windows N
--demo-changes-per-window M``) in a subprocess, prepares a fresh Airflow home (SQLite), and runs
the example DAG ``spanner_change_stream_to_lake`` for each window in turn with ``dag.test()``.
``--spark connect`` (default) first starts a local Spark Connect server and names it in the Spark
connection, so every window's merge runs in that warm Spark; ``--spark submit`` configures nothing:
a cold ``spark-submit`` on ``local[*]`` per window with the operators' local defaults. Either way the
upsert job runs with the worker's Python, and Delta tables and change sets are on local disk.
Goals (printed with the result): end → applied p50 ≤ 5 s with Spark Connect, ≤ 12 s with spark-submit.

The runs happen one after another in one Airflow process that has run a one-task DAG first, as a
running Airflow would have: ``dag.test()`` builds Airflow's in-process execution API on its first
task (about 10 s here), which a deployment pays once at start-up, not per window.

Per window it prints, from Airflow's records of the run and its task instances:

* **end → applied**: from the creation of the DAG run (in production the scheduler creates it
  when the window ends) to the end of its ``commit`` task. The tasks run one after another
  (mapped readers in sequence, so ``read`` is their sum); a deployment adds its scheduler's
  loop and its executor's start-up of each task process;
* each task's duration;
* ``cpu``: user + system CPU seconds of the Airflow process and its descendants (JVM, Python
  workers, the upsert job) during the run, steadier than wall time on a shared machine; ``load``:
  the 1-minute load average when the window started.

Baseline, in the same run after each window so that it sees the same machine: with ``--spark
connect``, a trivial job (``spark.range(10).count()``) in a new session on the warm server (the
floor of a window's Spark work there); with ``--spark submit``, the cold ``spark-submit`` of a
trivial PySpark application, twice in a row with Spark's defaults (the floor of a window whose
merge and upsert each start a JVM), and once with the operators' local settings
(``LOCAL_SPARK_CONF``: the floor of one Spark job per window). The window p50's ratio to the
baseline's p50 is printed.

After each window the Delta tables are compared with the emulator's ground truth for the windows
applied so far; the benchmark exits with status 1 if a table differs or a run fails.
p50 is the median; p95 the nearest-rank 95th percentile (the maximum for fewer than 20 windows).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_provider_cdc.operators._spark import LOCAL_SPARK_CONF  # noqa: E402

DAG_ID = "spanner_change_stream_to_lake"
FIRST_WINDOW_START = datetime(2026, 1, 1, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=10)
RUNNER_FLAG = "--dag-runner"
#: Goals for end → applied p50 by where the merge runs.
GOAL_P50_SECONDS = {"connect": 5.0, "submit": 12.0}
TASK_ORDER = ("wait_parents", "open_window", "read", "drained", "merge", "upsert", "commit")
WARM_UP_DAG_ID = "window_latency_warm_up"
WARM_UP_DAG = f"""from datetime import datetime, timezone

from airflow.sdk import DAG, task

with DAG("{WARM_UP_DAG_ID}", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:

    @task
    def nothing() -> None:
        return None

    nothing()
"""
TRIVIAL_APP = """from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("baseline").getOrCreate()
assert spark.range(10).count() == 10
spark.stop()
"""


@dataclass
class Measurement:
    """One window (or one baseline round): its latency and how it was spent."""

    seconds: float
    tasks: dict[str, float] = field(default_factory=dict)
    cpu_seconds: float = 0.0
    load: float = 0.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in (0, 100]) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(command: list[str], env: dict[str, str], log_path: Path) -> tuple[float, float, int]:
    """Run ``command`` with output to ``log_path``; return (wall seconds, CPU seconds, exit status)."""
    cpu, began = children_cpu(), time.monotonic()
    with log_path.open("w") as log:
        status = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    return time.monotonic() - began, children_cpu() - cpu, status


def start_emulator(workdir: Path, windows: int, changes: int) -> tuple[subprocess.Popen, str, Path]:
    port_file, truth = workdir / "emulator.port", workdir / "truth.json"
    log = (workdir / "emulator.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_cdc.testing.spanner_emulator", "--port", "0", "--demo",
         "--demo-windows", str(windows), "--demo-changes-per-window", str(changes),
         "--port-file", str(port_file), "--demo-truth", str(truth)],
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
    )  # fmt: skip
    began = time.monotonic()
    while not (port_file.exists() and port_file.read_text().strip()):
        if process.poll() is not None:
            raise SystemExit(f"the emulator exited with status {process.returncode}; see {log.name}")
        time.sleep(0.5)
    print(f"emulator: demo database of {windows} window(s) x {changes} changes loaded in "
          f"{time.monotonic() - began:.0f}s", flush=True)  # fmt: skip
    return process, port_file.read_text().strip(), truth


def airflow_environment(workdir: Path, emulator_host: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AIRFLOW_", "CDC_"))}
    env.update(
        AIRFLOW_HOME=str(workdir / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "example_dags"),
        CDC_DEMO_HOME=str(workdir / "cdc"),
        SPANNER_EMULATOR_HOST=emulator_host,
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    env.pop("SPARK_HOME", None)
    warm_up = workdir / "warm_up_dags"
    warm_up.mkdir(exist_ok=True)
    (warm_up / f"{WARM_UP_DAG_ID}.py").write_text(WARM_UP_DAG)
    local_bundle = "airflow.dag_processing.bundles.local.LocalDagBundle"
    env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps(
        [
            {"name": "dags-folder", "classpath": local_bundle, "kwargs": {}},
            {"name": "window-latency-warm-up", "classpath": local_bundle, "kwargs": {"path": str(warm_up)}},
        ]
    )
    return env


def _parse(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc) if text else None


def run_timings(airflow_db: Path, window_end: datetime) -> tuple[float, dict[str, float]]:
    """(run creation → commit end seconds, task durations) of the newest run of ``window_end``."""
    with sqlite3.connect(airflow_db) as db:
        run = db.execute(
            "SELECT run_id, created_at FROM dag_run WHERE dag_id = ? AND data_interval_end LIKE ? "
            "ORDER BY id DESC LIMIT 1",
            (DAG_ID, window_end.strftime("%Y-%m-%d %H:%M:%S") + "%"),
        ).fetchone()
        if run is None:
            raise SystemExit(f"no run of {DAG_ID} for the window ending {window_end.isoformat()}")
        rows = db.execute(
            "SELECT task_id, end_date, duration, try_number FROM task_instance "
            "WHERE dag_id = ? AND run_id = ?",
            (DAG_ID, run[0]),
        ).fetchall()
    tasks: dict[str, float] = {}
    for task_id, _end, duration, tries in rows:
        tasks[task_id] = tasks.get(task_id, 0.0) + float(duration or 0.0)
        if (tries or 1) > 1:
            print(f"  note: task {task_id} ran {tries} times", flush=True)
    commit_end = next((_parse(r[1]) for r in rows if r[0] == "commit" and r[1]), None)
    created = _parse(run[1])
    return (commit_end - created).total_seconds() if commit_end and created else math.nan, tasks


def check_lake(lake_root: Path, truth: dict, windows_applied: int) -> list[str]:
    """Tables that differ from the ground truth after ``windows_applied`` windows."""
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget
    from airflow_provider_cdc.testing.lake_check import compare_lake_to_truth

    expected = truth["state_after_window"][windows_applied - 1]
    results = compare_lake_to_truth(DeltaLakeTarget(str(lake_root)), expected)
    return [f"{r.table} (lake {r.lake_rows} rows, truth {r.truth_rows})" for r in results if not r.equal]


def spark_submit_command() -> list[str]:
    from pyspark import find_spark_home

    return [str(Path(find_spark_home._find_spark_home()) / "bin" / "spark-submit")]


def baseline_round(workdir: Path, env: dict[str, str]) -> tuple[Measurement, Measurement]:
    """Two cold submits with Spark's defaults, then one with the operators' local settings."""
    app = workdir / "trivial_app.py"
    app.write_text(TRIVIAL_APP)
    env = {**env, "PYSPARK_PYTHON": sys.executable}
    submit = [*spark_submit_command(), "--master", "local[*]"]
    load = os.getloadavg()[0]
    walls, cpus = [], []
    for attempt in range(2):
        wall, cpu, status = timed_run([*submit, str(app)], env, workdir / f"baseline-default-{attempt}.log")
        if status:
            raise SystemExit(f"baseline spark-submit failed; see {workdir}/baseline-default-{attempt}.log")
        walls.append(wall)
        cpus.append(cpu)
    settings = [arg for key, value in LOCAL_SPARK_CONF.items() for arg in ("--conf", f"{key}={value}")]
    tuned = [*submit, *settings]
    wall, cpu, status = timed_run([*tuned, str(app)], env, workdir / "baseline-local.log")
    if status:
        raise SystemExit(f"baseline spark-submit failed; see {workdir}/baseline-local.log")
    two = Measurement(sum(walls), {"submit 1": walls[0], "submit 2": walls[1]}, sum(cpus), load)
    return two, Measurement(wall, {"submit": wall}, cpu, os.getloadavg()[0])


def start_spark_connect(workdir: Path) -> tuple[object, str, int]:
    """A local Spark Connect server for the windows' merges: (server, URI, port)."""
    from airflow_provider_cdc.spark_connect.server import LocalSparkConnectServer, free_port, warm_up

    server = LocalSparkConnectServer(workdir / "spark-connect")
    began = time.monotonic()
    state = server.start(free_port())
    print(f"Spark Connect server {state.url} started in {time.monotonic() - began:.0f}s", flush=True)
    # as `python -m airflow_provider_cdc spark-connect start` does: warm the JVM and the merges' session
    print(f"warmed up in {warm_up(state.url, workdir / 'spark-connect'):.0f}s", flush=True)
    return server, state.url, state.port


def connect_baseline(url: str) -> Measurement:
    """A trivial job on the warm server in a session of its own, as each window's merge opens one."""
    from airflow_provider_cdc.spark_connect.session import remote_session

    load, cpu, began = os.getloadavg()[0], own_cpu(), time.monotonic()
    with remote_session(url, what="the baseline") as spark:
        assert spark.range(10).count() == 10
    wall = time.monotonic() - began
    return Measurement(wall, {"warm job": wall}, own_cpu() - cpu, load)


def report(title: str, measurements: list[Measurement], columns: list[str]) -> None:
    print(f"\n{title}")
    header = ["#", "end→applied" if "merge" in columns else "seconds", *columns, "cpu", "load"]
    rows = [
        [str(i + 1), f"{m.seconds:.1f}", *[f"{m.tasks.get(c, 0.0):.1f}" for c in columns],
         f"{m.cpu_seconds:.1f}", f"{m.load:.1f}"]
        for i, m in enumerate(measurements)
    ]  # fmt: skip
    for stat, pick in (("p50", statistics.median), ("p95", lambda v: percentile(v, 95))):
        rows.append(
            [stat, f"{pick([m.seconds for m in measurements]):.1f}",
             *[f"{pick([m.tasks.get(c, 0.0) for m in measurements]):.1f}" for c in columns],
             f"{pick([m.cpu_seconds for m in measurements]):.1f}", ""]
        )  # fmt: skip
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))


def own_cpu() -> float:
    """CPU seconds of this process and its waited-for descendants."""
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )


def dag_runner(log_path: str) -> int:
    """The Airflow process: a one-task DAG first, then the example DAG for each window index on stdin.

    Answers each line of stdin with one JSON line (run start, CPU seconds, state); Airflow's own
    output goes to ``log_path``.
    """
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    log = open(log_path, "a", buffering=1)  # stays open for the process's life
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    import runpy

    began = time.monotonic()
    bundles = json.loads(os.environ["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"])
    warm_up = Path(bundles[1]["kwargs"]["path"]) / f"{WARM_UP_DAG_ID}.py"
    runpy.run_path(str(warm_up))["dag"].test()
    answers.write(json.dumps({"warm_up_seconds": time.monotonic() - began}) + "\n")
    dag = runpy.run_path(str(ROOT / "example_dags" / "spanner_change_stream_to_lake.py"))["dag"]

    for line in sys.stdin:
        end = FIRST_WINDOW_START + WINDOW * (int(line) + 1)
        print(f"===== window ending {end.isoformat()}", flush=True)
        cpu = own_cpu()
        run = dag.test(logical_date=end)
        answer = {"cpu": own_cpu() - cpu, "state": str(run.state)}
        answers.write(json.dumps(answer) + "\n")
    return 0


class DagRunner:
    """Drives :func:`dag_runner` in a child process with the benchmark's Airflow environment."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.log = workdir / "airflow-runs.log"
        self.process = subprocess.Popen(
            [sys.executable, __file__, RUNNER_FLAG, str(self.log)],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=workdir,
        )  # fmt: skip
        self.warm_up_seconds = self._answer()["warm_up_seconds"]

    def _answer(self) -> dict:
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line:
            raise SystemExit(f"the Airflow process exited with status {self.process.wait()}; see {self.log}")
        return json.loads(line)

    def run(self, index: int) -> dict:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{index}\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def run_window(runner: DagRunner, workdir: Path, index: int, truth: dict, failures: list[str]) -> Measurement:
    """Run the DAG for window ``index`` (0-based), print its line and check the lake afterwards."""
    end = FIRST_WINDOW_START + WINDOW * (index + 1)
    load = os.getloadavg()[0]
    answer = runner.run(index)
    latency, tasks = run_timings(workdir / "airflow" / "airflow.db", end)
    if answer["state"] != "success":
        verdict = f"run {answer['state']}; see {runner.log}"
    else:
        differs = check_lake(workdir / "cdc" / "lake", truth, index + 1)
        verdict = "lake equals the committed history" if not differs else f"DIFFERS: {', '.join(differs)}"
    if verdict != "lake equals the committed history":
        failures.append(f"window {index + 1}: {verdict}")
    steps = ", ".join(f"{t} {tasks.get(t, 0.0):.1f}" for t in TASK_ORDER)
    print(f"window {index + 1} [{end - WINDOW:%H:%M}, {end:%H:%M}): end→applied {latency:.1f}s ({steps}); "
          f"cpu {answer['cpu']:.1f}s, load {load:.1f}; {verdict}", flush=True)  # fmt: skip
    return Measurement(latency, tasks, answer["cpu"], load)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [RUNNER_FLAG]:
        return dag_runner(argv[1])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, default=5, help="windows to run (default 5)")
    parser.add_argument("--changes-per-window", type=int, default=50_000)
    parser.add_argument("--keep", type=Path, help="work in this (new or empty) folder and keep it")
    parser.add_argument("--no-baseline", action="store_true", help="skip the baselines")
    parser.add_argument("--spark", choices=("connect", "submit"), default="connect",
                        help="where the merge runs: a local Spark Connect server started here (default; "
                        "baseline: a trivial job in a new session on it) or a cold spark-submit per window "
                        "(baseline: cold spark-submits of a trivial app)")
    args = parser.parse_args(argv)
    if args.windows < 1 or args.changes_per_window < 1:
        parser.error("--windows and --changes-per-window must be positive")
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="cdc-window-latency-"))
    if workdir.exists() and any(workdir.iterdir()):
        parser.error(f"{workdir} is not empty")
    workdir.mkdir(parents=True, exist_ok=True)
    emulator, host, truth_path = start_emulator(workdir, args.windows, args.changes_per_window)
    failures: list[str] = []
    server = None
    try:
        env = airflow_environment(workdir, host)
        if args.spark == "connect":
            server, url, port = start_spark_connect(workdir)
            env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(
                {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": port}
            )
        airflow = str(Path(sys.executable).parent / "airflow")
        _, _, status = timed_run([airflow, "db", "migrate"], env, workdir / "db-migrate.log")
        if status:
            raise SystemExit(f"airflow db migrate failed; see {workdir}/db-migrate.log")
        truth = json.loads(truth_path.read_text())
        runner = DagRunner(workdir, env)
        print(f"Airflow process ready (one-task DAG run in {runner.warm_up_seconds:.1f}s)", flush=True)
        windows, baseline_two, baseline_one, baseline_warm = [], [], [], []
        for index in range(args.windows):
            windows.append(run_window(runner, workdir, index, truth, failures))
            if not args.no_baseline and args.spark == "connect":
                warm = connect_baseline(url)
                baseline_warm.append(warm)
                print(f"  baseline: a trivial job in a new session on the warm server {warm.seconds:.1f}s",
                      flush=True)
            elif not args.no_baseline:
                two, one = baseline_round(workdir, env)
                baseline_two.append(two)
                baseline_one.append(one)
                print(f"  baseline: 2 cold spark-submits (defaults) {two.seconds:.1f}s "
                      f"(cpu {two.cpu_seconds:.1f}s), 1 with the local settings {one.seconds:.1f}s "
                      f"(cpu {one.cpu_seconds:.1f}s)", flush=True)  # fmt: skip
        where = "a warm Spark Connect server" if args.spark == "connect" else "a cold spark-submit"
        print(f"\n{args.windows} window(s) of {args.changes_per_window} changes, merge by {where}; seconds")
        runner.close()
        report("Example DAG, window end → applied (run created → commit end):", windows, [*TASK_ORDER])
        p50 = statistics.median(m.seconds for m in windows)
        goal = GOAL_P50_SECONDS[args.spark]
        print(f"\nend→applied p50 {p50:.1f}s; goal ≤ {goal:.0f}s with --spark {args.spark}: "
              f"{'met' if p50 <= goal else 'NOT met'}")
        if baseline_warm:
            report("Baseline: a trivial job in a new session on the warm Spark Connect server:",
                   baseline_warm, ["warm job"])  # fmt: skip
            floor = statistics.median(m.seconds for m in baseline_warm)
            print(f"window p50 / warm trivial job p50 = {p50 / floor:.1f}x")
        if baseline_two:
            report("Baseline: two cold spark-submits of a trivial app, Spark defaults:", baseline_two,
                   ["submit 1", "submit 2"])  # fmt: skip
            settings = " ".join(f"{k}={v}" for k, v in LOCAL_SPARK_CONF.items())
            report(f"Baseline: one cold spark-submit of a trivial app, {settings}:", baseline_one, ["submit"])
            floor = statistics.median(m.seconds for m in baseline_one)
            print(f"window p50 / one cold trivial spark-submit p50 = {p50 / floor:.1f}x")
    finally:
        if server is not None:
            server.stop()
        emulator.terminate()
        emulator.wait(timeout=30)
        if args.keep is None and not failures:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.keep or failures:
        print(f"work folder (logs, lake, Airflow home): {workdir}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
