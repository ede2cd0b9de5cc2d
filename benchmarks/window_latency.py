"""Window latency of the example DAG: window end → applied, per window and as p50/p95, with a baseline.

    .venv/bin/python benchmarks/window_latency.py --spark connect --changes-per-window 1000
    .venv/bin/python benchmarks/window_latency.py --spark submit  --changes-per-window 50000
    .venv/bin/python benchmarks/window_latency.py --runner scheduler --changes-per-window 1000
    .venv/bin/python benchmarks/window_latency.py --runner both --windows 3 --keep /tmp/window-latency

It starts the change-stream emulator with the demo database (``--demo --demo-windows N
--demo-changes-per-window M``) in a subprocess and runs the example DAG ``spanner_change_stream_to_lake``
for each window in turn. ``--spark connect`` (default) first starts a local Spark Connect server and
names it in the Spark connection, so every window's merge runs in that warm Spark; ``--spark submit``
configures nothing: a cold ``spark-submit`` on ``local[*]`` per window with the operators' local
defaults. Either way the upsert job runs with the worker's Python (delta-rs), and Delta tables and change
sets are on local disk. The task ids (their order, the leaf tasks that end a window) are read from the
DAG, whatever its shape.

Runners (``--runner``):

* ``dagtest`` (default): a fresh Airflow home (SQLite) and ``dag.test()`` per window, one after another
  in one Airflow process that has run a one-task DAG first, as a running Airflow would have:
  ``dag.test()`` builds Airflow's in-process execution API on its first task (about 10 s here), which a
  deployment pays once at start-up, not per window. The tasks run one after another in that process
  (mapped readers in sequence); deferred sensors run their trigger inline.
* ``scheduler``: what users run: ``airflow api-server`` (the execution API the task processes talk to),
  ``scheduler`` (LocalExecutor), ``dag-processor`` and ``triggerer``, as ``airflow standalone`` starts
  them; the CDC metastore on PostgreSQL (database ``--metastore-database``), Airflow's metadata database
  on PostgreSQL too (``--airflow-database``) when ``asyncpg`` is installed, else SQLite. The DAG is
  unpaused and the scheduler creates the windows' runs (catching up from the first window, one run at a
  time: ``max_active_runs=1``). The Airflow settings are printed: Airflow's defaults, which a production
  deployment keeps. Per window it prints each task instance's queued/started/ended times, the gap from
  the previous step's end to its queueing (the scheduler's loop), from queueing to start (the executor
  and the task process's start-up), and the task processes (task instances that ran on a worker,
  skipped, deferred, ended in the triggerer without a worker).
* ``both``: ``dagtest`` then ``scheduler`` on the same emulator and Spark, side by side.

Per window it prints, from Airflow's records of the run and its task instances:

* **end → applied**: from the creation of the DAG run (in production the scheduler creates it
  when the window ends) to the end of its last leaf task (the commit);
* each task's duration;
* ``cpu`` (dagtest): user + system CPU seconds of the Airflow process and its descendants (JVM, Python
  workers, the upsert job) during the run, steadier than wall time on a shared machine; ``load``: the
  1-minute load average when the window started.

Baseline (dagtest), in the same run after each window so that it sees the same machine: with ``--spark
connect``, a trivial job (``spark.range(10).count()``) in a new session on the warm server (the
floor of a window's Spark work there); with ``--spark submit``, the cold ``spark-submit`` of a
trivial PySpark application, twice in a row with Spark's defaults (the floor of a window whose
merge and upsert each start a JVM), and once with the operators' local settings
(``LOCAL_SPARK_CONF``: the floor of one Spark job per window). The window p50's ratio to the
baseline's p50 is printed.

The Delta tables are compared with the emulator's ground truth (dagtest: after each window; scheduler:
after the last); the benchmark exits with status 1 if a table differs or a run fails.
p50 is the median; p95 the nearest-rank 95th percentile (the maximum for fewer than 20 windows).
Goals (printed with the result): end → applied p50 with dag.test() ≤ 5 s with Spark Connect and ≤ 12 s
with spark-submit; under the scheduler ≤ 15 s either way.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import resource
import shutil
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

from _airflow_runs import (  # noqa: E402
    DagShape,
    JvmWatch,
    RunTiming,
    SchedulerDeployment,
    dag_shape,
    print_steps,
    read_phases,
    read_run,
    recreate_database,
)

from airflow_provider_cdc.operators._spark import LOCAL_SPARK_CONF  # noqa: E402

DAG_ID = "spanner_change_stream_to_lake"
DAG_FILE = ROOT / "example_dags" / f"{DAG_ID}.py"
FIRST_WINDOW_START = datetime(2026, 1, 1, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=10)
RUNNER_FLAG = "--dag-runner"
#: Goals for end → applied p50 by runner and where the merge runs.
GOAL_P50_SECONDS = {
    ("dagtest", "connect"): 5.0,
    ("dagtest", "submit"): 12.0,
    ("scheduler", "connect"): 15.0,
    ("scheduler", "submit"): 15.0,
}
#: What each column of a window's steps under the scheduler measures, and which setting governs it.
GAPS_LEGEND = (
    "Columns (seconds): gap = upstream tasks' end → queued: the scheduler's loop, which sleeps "
    "[scheduler] scheduler_idle_sleep_time",
    "  only when it had nothing to do ([scheduler] scheduler_heartbeat_sec paces its job heartbeat, not "
    "the loop);",
    "  →start = queued → running: the LocalExecutor (a free [core] parallelism slot) forks the task "
    "process, which starts",
    "  through the API server's execution API; ran = running → ended, in the task process: boot (→ its "
    "first log line),",
    "  parse (the DAG file, parsed again in every task process) and exec (the operator). A row 'triggerer' "
    "started there",
    "  (start_from_trigger), without a worker: the triggerer picks new triggers up on each loop (≤ 1 s). "
    "[dag_processor]",
    "  min_file_process_interval paces re-parsing DAG files for the scheduler; runs use the stored DAG, so "
    "it is not on this path.",
)
#: How long one window may take under the scheduler before the benchmark gives up.
SCHEDULER_WINDOW_TIMEOUT = 900.0
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
    counts: dict[str, int] = field(default_factory=dict)


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


def run_timings(url: str, window_end: datetime) -> RunTiming:
    """The newest run of the window ending at ``window_end`` with its task instances."""
    timing = read_run(url, DAG_ID, window_end)
    if timing is None:
        raise SystemExit(f"no run of {DAG_ID} for the window ending {window_end.isoformat()}")
    for task in timing.tasks:
        if task.tries > 1:
            print(f"  note: task {task.task_id} ran {task.tries} times", flush=True)
    return timing


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


def run_window(
    runner: DagRunner, workdir: Path, index: int, truth: dict, failures: list[str], shape: DagShape,
    jvms: JvmWatch,
) -> Measurement:  # fmt: skip
    """Run the DAG for window ``index`` (0-based), print its line and check the lake afterwards."""
    end = FIRST_WINDOW_START + WINDOW * (index + 1)
    load = os.getloadavg()[0]
    answer = runner.run(index)
    timing = run_timings(f"sqlite:///{workdir / 'airflow' / 'airflow.db'}", end)
    latency, tasks = timing.end_to_applied(shape.leaves), timing.durations()
    if answer["state"] != "success":
        verdict = f"run {answer['state']}; see {runner.log}"
    else:
        differs = check_lake(workdir / "cdc" / "lake", truth, index + 1)
        verdict = "lake equals the committed history" if not differs else f"DIFFERS: {', '.join(differs)}"
    if verdict != "lake equals the committed history":
        failures.append(f"dagtest window {index + 1}: {verdict}")
    steps = ", ".join(f"{t} {tasks[t]:.1f}" for t in shape.order if t in tasks)
    print(f"window {index + 1} [{end - WINDOW:%H:%M}, {end:%H:%M}): end→applied {latency:.1f}s ({steps}); "
          f"cpu {answer['cpu']:.1f}s, load {load:.1f}; {verdict}", flush=True)  # fmt: skip
    print(f"  {jvm_line(jvms, timing, shape)}", flush=True)
    return Measurement(latency, tasks, answer["cpu"], load)


def jvm_line(jvms: JvmWatch, timing: RunTiming, shape: DagShape) -> str:
    """Which tasks started a JVM during the run (and that the others did not)."""
    jvms.sample()
    started = jvms.by_task(timing)
    ran = [t for t in shape.order if any(ti.task_id == t and ti.started for ti in timing.tasks)]
    parts = [
        f"{t} {len(started.get(t, []))}" + (f" ({'; '.join(started[t])})" if t in started else "")
        for t in ran
    ]
    return "JVMs started (from the task's start, lifetime): " + ", ".join(parts)


def dagtest_windows(
    workdir: Path, env: dict[str, str], args: argparse.Namespace, truth: dict, failures: list[str],
    url: str | None,
) -> list[Measurement]:  # fmt: skip
    """Every window by ``dag.test()`` in one Airflow process (SQLite metadata, SQLite metastore)."""
    airflow = str(Path(sys.executable).parent / "airflow")
    _, _, status = timed_run([airflow, "db", "migrate"], env, workdir / "db-migrate.log")
    if status:
        raise SystemExit(f"airflow db migrate failed; see {workdir}/db-migrate.log")
    shape = dag_shape(DAG_FILE, env)
    runner = DagRunner(workdir, env)
    print(f"Airflow process ready (one-task DAG run in {runner.warm_up_seconds:.1f}s)", flush=True)
    windows, baseline_two, baseline_one, baseline_warm = [], [], [], []
    jvms = JvmWatch([runner.process.pid]).start()
    for index in range(args.windows):
        windows.append(run_window(runner, workdir, index, truth, failures, shape, jvms))
        if not args.no_baseline and url is not None:
            warm = connect_baseline(url)
            baseline_warm.append(warm)
            print(f"  baseline: a trivial job in a new session on the warm server {warm.seconds:.1f}s",
                  flush=True)  # fmt: skip
        elif not args.no_baseline:
            two, one = baseline_round(workdir, env)
            baseline_two.append(two)
            baseline_one.append(one)
            print(f"  baseline: 2 cold spark-submits (defaults) {two.seconds:.1f}s "
                  f"(cpu {two.cpu_seconds:.1f}s), 1 with the local settings {one.seconds:.1f}s "
                  f"(cpu {one.cpu_seconds:.1f}s)", flush=True)  # fmt: skip
    jvms.stop()
    runner.close()
    where = "a warm Spark Connect server" if args.spark == "connect" else "a cold spark-submit"
    print(f"\n{args.windows} window(s) of {args.changes_per_window} changes, merge by {where}; seconds")
    columns = [t for t in shape.order if any(t in m.tasks for m in windows)]
    report("Example DAG by dag.test(), window end → applied (run created → last leaf task's end):", windows,
           columns)  # fmt: skip
    p50 = statistics.median(m.seconds for m in windows)
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
    return windows


def postgres_connection(args: argparse.Namespace, database: str) -> dict[str, object]:
    return {"conn_type": "postgres", "host": args.pg_host, "port": args.pg_port, "login": args.pg_user,
            "schema": database}  # fmt: skip


def scheduler_windows(
    workdir: Path, env: dict[str, str], args: argparse.Namespace, truth: dict, failures: list[str]
) -> list[Measurement]:
    """Every window under ``airflow scheduler`` (LocalExecutor, triggerer, API server), metadata and
    metastore on PostgreSQL: the scheduler creates each window's run (catching up from the first window)."""
    import sqlalchemy as sa

    recreate_database(args.metastore_database, args.pg_host, args.pg_port, args.pg_user)
    if importlib.util.find_spec("asyncpg") is not None:
        url = recreate_database(args.airflow_database, args.pg_host, args.pg_port, args.pg_user)
    else:  # Airflow 3 opens its metadata database with an async driver too: PostgreSQL's is asyncpg
        (workdir / "airflow").mkdir(exist_ok=True)
        url = f"sqlite:///{workdir / 'airflow' / 'airflow.db'}"
        note = "asyncpg is not installed, which Airflow 3 needs for a PostgreSQL metadata database"
        print(
            f"note: {note}: Airflow's metadata database is SQLite here, as in `airflow standalone`",
            flush=True,
        )
    env = {
        **env,
        "AIRFLOW_CONN_CDC_METASTORE_DEFAULT": json.dumps(postgres_connection(args, args.metastore_database)),
    }
    deployment = SchedulerDeployment(workdir, env, url)
    shape = dag_shape(DAG_FILE, deployment.env)
    print("Airflow settings of the scheduler runner:")
    for key, value in deployment.settings.items():
        print(f"  {key}={value}")
    print(f"  metastore: PostgreSQL database {args.metastore_database}; task ids from the DAG: "
          f"{', '.join(shape.order)}; deferrable: {', '.join(sorted(shape.deferrable)) or 'none'}; "
          f"starting in the triggerer: {', '.join(sorted(shape.start_from_trigger)) or 'none'}",
          flush=True)  # fmt: skip
    print("\n".join(GAPS_LEGEND), flush=True)
    windows: list[Measurement] = []
    previous: RunTiming | None = None
    engine = sa.create_engine(url)
    deferred: set[tuple[str, str, int]] = set()
    jvms: JvmWatch | None = None
    try:
        deployment.start()
        jvms = JvmWatch([p.pid for p in deployment.processes.values()]).start()
        print(f"scheduler, dag-processor, triggerer and api-server started; {DAG_ID} parsed in "
              f"{deployment.wait_for_dag(url, DAG_ID):.0f}s", flush=True)  # fmt: skip
        deployment.airflow_command("dags", "unpause", DAG_ID, log="dags-unpause.log")
        for index in range(args.windows):
            end = FIRST_WINDOW_START + WINDOW * (index + 1)
            load = os.getloadavg()[0]
            began = time.monotonic()
            while True:
                deployment.check_alive()
                with engine.connect() as db:
                    for row in db.execute(
                        sa.text("SELECT run_id, task_id, map_index FROM task_instance "
                                "WHERE dag_id = :d AND state = 'deferred'"), {"d": DAG_ID},
                    ):  # fmt: skip
                        deferred.add((str(row[0]), str(row[1]), int(row[2])))
                timing = read_run(url, DAG_ID, end)
                if timing is not None and timing.state in ("success", "failed"):
                    break
                if time.monotonic() - began > SCHEDULER_WINDOW_TIMEOUT:
                    raise SystemExit(f"window {index + 1} did not end in {SCHEDULER_WINDOW_TIMEOUT:.0f}s")
                time.sleep(0.5)
            timing.deferred = {(t, m) for r, t, m in deferred if r == timing.run_id}
            read_phases(timing, workdir / "airflow" / "logs", DAG_ID)
            windows.append(scheduler_window(index, timing, previous, shape, load, failures))
            print(f"  {jvm_line(jvms, timing, shape)}", flush=True)
            previous = timing
    finally:
        engine.dispose()
        if jvms is not None:
            jvms.stop()
        deployment.stop()
    if not failures:
        differs = check_lake(workdir / "cdc" / "lake", truth, args.windows)
        verdict = "equals the committed history" if not differs else "DIFFERS: " + ", ".join(differs)
        print(f"lake after {args.windows} window(s): {verdict}")
        if differs:
            failures.append(f"scheduler: lake differs: {', '.join(differs)}")
    columns = [t for t in shape.order if any(t in m.tasks for m in windows)]
    report("Example DAG under airflow scheduler, window end → applied (run created → last leaf task's end):",
           windows, columns)  # fmt: skip
    return windows


def scheduler_window(
    index: int, timing: RunTiming, previous: RunTiming | None, shape: DagShape, load: float,
    failures: list[str],
) -> Measurement:  # fmt: skip
    """Print one window's run under the scheduler: latency, steps, gaps and task processes."""
    latency = timing.end_to_applied(shape.leaves)
    counts = timing.counts(shape)
    if timing.state != "success":
        failures.append(f"scheduler window {index + 1}: run {timing.state}")
    after = ""
    if previous is not None and previous.applied(shape.leaves):
        created = (timing.created - previous.applied(shape.leaves)).total_seconds()  # type: ignore[operator]
        after = f"; created {created:.1f}s after the previous window was applied"
    end = timing.interval_end
    print(f"window {index + 1} [{end - WINDOW:%H:%M}, {end:%H:%M}): run {timing.state}, end→applied "
          f"{latency:.1f}s (run created → last leaf ended){after}; load {load:.1f}", flush=True)  # fmt: skip
    print(f"  task processes {counts['processes']}: task instances ran on a worker {counts['ran']}, skipped "
          f"{counts['skipped']}, deferred {counts['deferred']} (ended in the triggerer without a worker "
          f"{counts['triggerer only']}); seconds from the run's creation:")  # fmt: skip
    print_steps(timing, shape)
    return Measurement(latency, timing.durations(), 0.0, load, counts)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [RUNNER_FLAG]:
        return dag_runner(argv[1])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, default=5, help="windows to run (default 5)")
    parser.add_argument("--changes-per-window", type=int, default=50_000)
    parser.add_argument("--keep", type=Path, help="work in this (new or empty) folder and keep it")
    parser.add_argument("--no-baseline", action="store_true", help="skip the baselines (dagtest runner)")
    parser.add_argument(
        "--spark",
        choices=("connect", "submit"),
        default="connect",
        help="where the merge runs: a local Spark Connect server started here (default; "
        "baseline: a trivial job in a new session on it) or a cold spark-submit per window "
        "(baseline: cold spark-submits of a trivial app)",
    )
    parser.add_argument(
        "--runner",
        choices=("dagtest", "scheduler", "both"),
        default="dagtest",
        help="dag.test() in one Airflow process (default), a real airflow scheduler, or both "
        "one after the other on the same emulator and Spark, side by side",
    )
    parser.add_argument("--pg-host", default="127.0.0.1", help="PostgreSQL of the scheduler runner")
    parser.add_argument("--pg-port", type=int, default=5432)
    parser.add_argument("--pg-user", default="postgres")
    parser.add_argument(
        "--airflow-database",
        default="cdc_bench_sched",
        help="the scheduler runner's Airflow metadata database (dropped and created)",
    )
    parser.add_argument(
        "--metastore-database",
        default="cdc_bench_meta",
        help="the scheduler runner's CDC metastore database (dropped and created)",
    )
    args = parser.parse_args(argv)
    if args.windows < 1 or args.changes_per_window < 1:
        parser.error("--windows and --changes-per-window must be positive")
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="cdc-window-latency-"))
    if workdir.exists() and any(workdir.iterdir()):
        parser.error(f"{workdir} is not empty")
    workdir.mkdir(parents=True, exist_ok=True)
    emulator, host, truth_path = start_emulator(workdir, args.windows, args.changes_per_window)
    failures: list[str] = []
    server, url = None, None
    results: dict[str, list[Measurement]] = {}
    runners = ["dagtest", "scheduler"] if args.runner == "both" else [args.runner]
    try:
        spark_env: dict[str, str] = {}
        if args.spark == "connect":
            server, url, port = start_spark_connect(workdir)
            spark_env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(
                {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": port}
            )
        truth = json.loads(truth_path.read_text())
        for name in runners:
            home = workdir if len(runners) == 1 else workdir / name
            home.mkdir(exist_ok=True)
            env = {**airflow_environment(home, host), **spark_env}
            print(f"\n===== runner {name}: {args.windows} window(s) of {args.changes_per_window} changes, "
                  f"--spark {args.spark}; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}",
                  flush=True)  # fmt: skip
            if name == "dagtest":
                results[name] = dagtest_windows(home, env, args, truth, failures, url)
            else:
                results[name] = scheduler_windows(home, env, args, truth, failures)
        print()
        if len(results) == 2:
            side_by_side(results)
        for name, windows in results.items():
            p50 = statistics.median(m.seconds for m in windows)
            goal = GOAL_P50_SECONDS[(name, args.spark)]
            print(f"{name}: end→applied p50 {p50:.1f}s; goal ≤ {goal:.0f}s with --spark {args.spark}: "
                  f"{'met' if p50 <= goal else 'NOT met'}")  # fmt: skip
        print(f"load average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
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


def side_by_side(results: dict[str, list[Measurement]]) -> None:
    """Each window's end → applied by both runners, and the scheduler's task processes."""
    dagtest, scheduler = results["dagtest"], results["scheduler"]
    print("Window end → applied, seconds (dag.test(), airflow scheduler; the scheduler's task processes):")
    print("   #  dagtest  scheduler  processes")
    for i, (a, b) in enumerate(zip(dagtest, scheduler, strict=True)):
        print(f"{i + 1:>4}  {a.seconds:>7.1f}  {b.seconds:>9.1f}  {b.counts.get('processes', 0):>9}")
    p50 = [statistics.median(m.seconds for m in ms) for ms in (dagtest, scheduler)]
    print(f" p50  {p50[0]:>7.1f}  {p50[1]:>9.1f}")


if __name__ == "__main__":
    sys.exit(main())
