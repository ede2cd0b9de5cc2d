"""How a DAG run spent its time, from Airflow's own records, and an Airflow deployment to run it in.

:func:`dag_shape` reads the DAG's task ids (in dependency order) and its leaves from the DAG file;
:func:`read_run` reads a run and its task instances from Airflow's metadata database (SQLite or
PostgreSQL); :class:`RunTiming` gives the window's end → applied, each task's times and the gaps
between tasks. :class:`SchedulerDeployment` starts ``airflow api-server``, ``scheduler``,
``dag-processor`` and ``triggerer`` (what ``airflow standalone`` starts) with a LocalExecutor and the
metadata database on PostgreSQL, and stops them.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: The Airflow settings of the scheduler deployment: the values a production deployment would keep
#: (Airflow's defaults, except the executor, the database and the API server's worker count).
SCHEDULER_SETTINGS: dict[str, str] = {
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW__CORE__PARALLELISM": "32",
    "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "16",
    "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "5",
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "1",
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "300",
    "AIRFLOW__TRIGGERER__CAPACITY": "1000",
    "AIRFLOW__API__WORKERS": "1",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
}

#: The states of a task instance that ran (skipped and upstream-failed ones carry start and end dates too).
RAN_STATES = frozenset({"success", "failed", "running", "deferred", "up_for_retry", "up_for_reschedule"})

_PROBE = """import json, runpy, sys
dag = runpy.run_path(sys.argv[1])["dag"]
depth = {}
def level(task_id):
    if task_id not in depth:
        ups = dag.get_task(task_id).upstream_task_ids
        depth[task_id] = 1 + max((level(u) for u in ups), default=-1)
    return depth[task_id]
order = sorted(dag.task_ids, key=lambda t: (level(t), dag.task_ids.index(t)))
tasks = {t: {"deferrable": bool(getattr(dag.get_task(t), "deferrable", False)),
             "start_from_trigger": bool(getattr(dag.get_task(t), "start_from_trigger", False)),
             "upstream": sorted(dag.get_task(t).upstream_task_ids)}
         for t in dag.task_ids}
print(json.dumps({"order": order, "leaves": sorted(t.task_id for t in dag.leaves), "tasks": tasks}))
"""


@dataclass(frozen=True)
class DagShape:
    """The DAG's task ids in dependency order, its leaves, and which tasks defer or start deferred."""

    order: list[str]
    leaves: list[str]
    deferrable: set[str]
    start_from_trigger: set[str]
    upstream: dict[str, list[str]] = field(default_factory=dict)


def dag_shape(dag_file: Path, env: dict[str, str]) -> DagShape:
    """Parse ``dag_file`` in a child process with ``env`` (the benchmark's Airflow environment)."""
    found = subprocess.run(
        [sys.executable, "-c", _PROBE, str(dag_file)], env=env, capture_output=True, text=True, check=False
    )
    if found.returncode:
        raise SystemExit(f"parsing {dag_file} failed:\n{found.stderr[-3000:]}")
    shape = json.loads(found.stdout.strip().splitlines()[-1])
    tasks = shape["tasks"]
    return DagShape(
        shape["order"],
        shape["leaves"],
        {t for t, v in tasks.items() if v["deferrable"]},
        {t for t, v in tasks.items() if v["start_from_trigger"]},
        {t: v["upstream"] for t, v in tasks.items()},
    )


def _utc(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


@dataclass
class TaskTiming:
    """One task instance's times and state."""

    task_id: str
    map_index: int
    state: str
    scheduled: datetime | None
    queued: datetime | None
    started: datetime | None
    ended: datetime | None
    tries: int
    on_worker: bool
    #: seconds of the task process's start-up (start → its first log line), of parsing the DAG file,
    #: and of the rest (pre-execute → end), from the task's log (None: no log read)
    phases: tuple[float, float, float] | None = None


@dataclass
class RunTiming:
    """A DAG run's creation, its task instances and what followed from them."""

    run_id: str
    state: str
    created: datetime
    interval_end: datetime
    tasks: list[TaskTiming]
    deferred: set[tuple[str, int]] = field(default_factory=set)

    def applied(self, leaves: list[str]) -> datetime | None:
        """When the last of the DAG's leaf tasks that ran ended."""
        ends = [t.ended for t in self.tasks if t.task_id in leaves and t.state == "success" and t.ended]
        return max(ends) if ends else None

    def end_to_applied(self, leaves: list[str]) -> float:
        applied = self.applied(leaves)
        return (applied - self.created).total_seconds() if applied else float("nan")

    def durations(self) -> dict[str, float]:
        """Seconds each task ran (mapped instances summed)."""
        out: dict[str, float] = {}
        for t in self.tasks:
            if t.started and t.ended:
                out[t.task_id] = out.get(t.task_id, 0.0) + (t.ended - t.started).total_seconds()
        return out

    def counts(self, shape: DagShape) -> dict[str, int]:
        """Task instances that ran on a worker, were skipped, deferred, ended in the triggerer only, and
        the task processes started (a task deferred from a worker and resumed there counts two)."""
        ran = [t for t in self.tasks if t.on_worker]
        deferred = [t for t in self.tasks if (t.task_id, t.map_index) in self.deferred]
        triggerer_only = [t for t in deferred if not t.on_worker]
        resumed = [t for t in deferred if t.on_worker and t.task_id not in shape.start_from_trigger]
        return {
            "ran": len(ran),
            "skipped": sum(t.state == "skipped" for t in self.tasks),
            "deferred": len(deferred),
            "triggerer only": len(triggerer_only),
            "processes": len(ran) + len(resumed),
        }

    def steps(self, shape: DagShape) -> list[dict[str, Any]]:
        """Each task (mapped instances together) that did not skip, in the DAG's order: its first
        queued/start and last end relative to the run's creation, the gap from the end of its upstream
        tasks to its queueing (the scheduler's loop) and from queueing to start (the executor and the
        task process's start-up), how long it ran, and where (a worker, or the triggerer alone)."""

        def rel(moment: datetime | None) -> float | None:
            return None if moment is None else (moment - self.created).total_seconds()

        ends: dict[str, datetime] = {}
        for t in self.tasks:
            if t.ended and t.state in RAN_STATES:
                ends[t.task_id] = max(t.ended, ends.get(t.task_id, t.ended))
        rows = []
        for task_id in shape.order:
            group = [t for t in self.tasks if t.task_id == task_id and t.state in RAN_STATES and t.started]
            if not group:
                continue
            queued = min((t.queued for t in group if t.queued), default=None)
            started = min(t.started for t in group if t.started)
            ended = max((t.ended for t in group if t.ended), default=None)
            upstream_end = max((ends[u] for u in shape.upstream.get(task_id, []) if u in ends), default=None)
            ready = queued or started
            on_worker = any(t.on_worker for t in group)
            resumed = queued is not None and queued > started  # started in the triggerer, resumed on a worker
            if resumed:
                ready = started
            phases = [t.phases for t in group if t.phases]
            boot, parse, execute = (max(p[i] for p in phases) for i in range(3)) if phases else (None,) * 3
            rows.append(
                {
                    "task": task_id + (f" [{len(group)}]" if len(group) > 1 else ""),
                    "queued": rel(queued),
                    "started": rel(started),
                    "ended": rel(ended),
                    "gap": None if upstream_end is None else (ready - upstream_end).total_seconds(),
                    "start": None if queued is None or resumed else (started - queued).total_seconds(),
                    "ran": None if ended is None else (ended - started).total_seconds(),
                    "where": "triggerer, worker" if resumed else "worker" if on_worker else "triggerer",
                    "boot": boot,
                    "parse": parse,
                    "execute": execute,
                }
            )
        return rows

    def task_at(self, moment: datetime) -> str | None:
        """The task that was running at ``moment`` (the one that started last, if several)."""
        running = [
            t for t in self.tasks if t.started and t.started <= moment and (not t.ended or moment <= t.ended)
        ]
        return max(running, key=lambda t: t.started).task_id if running else None  # type: ignore[arg-type,return-value]


def read_run(url: str, dag_id: str, interval_end: datetime) -> RunTiming | None:
    """The newest run of ``dag_id`` whose data interval ends at ``interval_end``, with its task
    instances, from the metadata database at the SQLAlchemy ``url``."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as db:
            runs = db.execute(
                sa.text("SELECT run_id, state, created_at, data_interval_end FROM dag_run WHERE dag_id = :d"),
                {"d": dag_id},
            ).fetchall()
            matching = [r for r in runs if _utc(r[3]) == interval_end]
            if not matching:
                return None
            run = max(matching, key=lambda r: _utc(r[2]))
            rows = db.execute(
                sa.text(
                    "SELECT task_id, map_index, state, scheduled_dttm, queued_dttm, start_date, end_date, "
                    "try_number, hostname FROM task_instance WHERE dag_id = :d AND run_id = :r"
                ),
                {"d": dag_id, "r": run[0]},
            ).fetchall()
    finally:
        engine.dispose()
    tasks = [
        TaskTiming(
            r[0], r[1], str(r[2]), _utc(r[3]), _utc(r[4]), _utc(r[5]), _utc(r[6]), r[7] or 0, bool(r[8])
        )
        for r in rows
    ]
    return RunTiming(str(run[0]), str(run[1]), _utc(run[2]), interval_end, tasks)  # type: ignore[arg-type]


def read_phases(timing: RunTiming, logs: Path, dag_id: str) -> None:
    """Set each worker task instance's start-up, DAG parse and execute seconds from its log file
    (``{logs}/dag_id=…/run_id=…/task_id=…[/map_index=…]/attempt=N.log``, Airflow 3's JSON lines)."""
    for task in timing.tasks:
        if not (task.on_worker and task.started and task.ended):
            continue
        folder = logs / f"dag_id={dag_id}" / f"run_id={timing.run_id}" / f"task_id={task.task_id}"
        if task.map_index >= 0:
            folder = folder / f"map_index={task.map_index}"
        path = folder / f"attempt={max(task.tries, 1)}.log"
        first = parsed = None
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            moment = _utc(str(record.get("timestamp", "")).replace("Z", "+00:00"))
            if moment is None:
                continue
            first = first or moment
            if parsed is None and "parse complete" in str(record.get("event", "")):
                parsed = moment
        if first and parsed:
            task.phases = (
                (first - task.started).total_seconds(),
                (parsed - first).total_seconds(),
                (task.ended - parsed).total_seconds(),
            )


def print_steps(timing: RunTiming, shape: DagShape) -> None:
    """The run's steps as a table, times in seconds from the run's creation."""

    def cell(value: float | None) -> str:
        return "" if value is None else f"{value:.1f}"

    header = [
        "task",
        "queued",
        "started",
        "ended",
        "gap",
        "→start",
        "ran",
        "(boot",
        "parse",
        "exec)",
        "where",
    ]
    rows = [
        [s["task"], cell(s["queued"]), cell(s["started"]), cell(s["ended"]), cell(s["gap"]), cell(s["start"]),
         cell(s["ran"]), cell(s["boot"]), cell(s["parse"]), cell(s["execute"]), s["where"]]
        for s in timing.steps(shape)
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "    "
            + "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )


class JvmWatch:
    """The Java processes started under given processes, sampled every ``interval`` seconds in a thread:
    which task started a JVM (spark-submit's launcher and driver, a local Spark), and which did not."""

    def __init__(self, roots: list[int], interval: float = 0.2) -> None:
        self.roots, self.interval = set(roots), interval
        #: pid → [first seen, last seen alive, Spark main class]
        self.started: dict[int, list[Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _stat(pid: int) -> tuple[str, int] | None:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        comm, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        return comm, int(rest[1])

    def _descends(self, pid: int) -> bool:
        for _ in range(64):
            if pid in self.roots:
                return True
            stat = self._stat(pid)
            if stat is None or stat[1] <= 1:
                return False
            pid = stat[1]
        return False

    def sample(self) -> None:
        now = datetime.now(timezone.utc)
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) in self.started:
                self.started[int(entry)][1] = now
            if not entry.isdigit() or int(entry) in self.started:
                continue
            stat = self._stat(int(entry))
            if stat is None or stat[0] != "java" or not self._descends(int(entry)):
                continue
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                command = ""
            main = next((w for w in command.split() if w.startswith("org.apache.spark.deploy.")), "java")
            # first seen, not /proc's start time: that counts from boot, and the wall clock may have moved
            self.started[int(entry)] = [now, now, main.rsplit(".", 1)[-1]]

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> JvmWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def by_task(self, timing: RunTiming) -> dict[str, list[str]]:
        """The JVMs started while each task of ``timing`` ran: when, after the task's start, and for how
        long they lived (to the last sample that saw them)."""
        out: dict[str, list[str]] = {}
        for moment, last_seen, main in self.started.values():
            task = timing.task_at(moment)
            if task is None:
                continue
            began = min(t.started for t in timing.tasks if t.task_id == task and t.started)
            after, lived = (moment - began).total_seconds(), (last_seen - moment).total_seconds()
            out.setdefault(task, []).append(f"{main} +{after:.1f}s, ~{lived:.1f}s")
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def recreate_database(name: str, host: str, port: int, user: str) -> str:
    """Drop and create the PostgreSQL database ``name``; return its SQLAlchemy URL."""
    for statement in (f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"'):
        done = subprocess.run(
            ["psql", "-h", host, "-p", str(port), "-U", user, "-d", "postgres", "-v", "ON_ERROR_STOP=1",
             "-q", "-c", statement],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode:
            raise SystemExit(f"{statement} failed: {done.stderr.strip()}")
    return f"postgresql+psycopg2://{user}@{host}:{port}/{name}"


class SchedulerDeployment:
    """``airflow api-server``, ``scheduler``, ``dag-processor`` and ``triggerer`` on one metadata DB."""

    COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")

    def __init__(self, workdir: Path, env: dict[str, str], database_url: str) -> None:
        from cryptography.fernet import Fernet

        self.workdir = workdir
        self.airflow = str(Path(sys.executable).parent / "airflow")
        port = free_port()
        self.settings = {
            **SCHEDULER_SETTINGS,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        }
        self.env = {
            **env,
            **self.settings,
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        }
        self.processes: dict[str, subprocess.Popen] = {}

    def airflow_command(self, *args: str, log: str) -> None:
        with (self.workdir / log).open("w") as out:
            status = subprocess.run([self.airflow, *args], env=self.env, stdout=out, stderr=subprocess.STDOUT)
        if status.returncode:
            raise SystemExit(f"airflow {' '.join(args)} failed; see {self.workdir / log}")

    def start(self) -> None:
        self.airflow_command("db", "migrate", log="db-migrate.log")
        for name in self.COMPONENTS:
            log = (self.workdir / f"{name}.log").open("w")
            self.processes[name] = subprocess.Popen(
                [self.airflow, name], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.workdir, start_new_session=True,
            )  # fmt: skip

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise SystemExit(f"airflow {name} exited with status {process.returncode}; see {name}.log")

    def wait_for_dag(self, url: str, dag_id: str, timeout: float = 300) -> float:
        """Seconds until the DAG processor stored ``dag_id``."""
        import sqlalchemy as sa

        began, engine = time.monotonic(), sa.create_engine(url)
        try:
            while time.monotonic() - began < timeout:
                self.check_alive()
                with engine.connect() as db:
                    if db.execute(sa.text("SELECT 1 FROM dag WHERE dag_id = :d"), {"d": dag_id}).first():
                        return time.monotonic() - began
                time.sleep(1)
        finally:
            engine.dispose()
        raise SystemExit(f"the DAG processor did not store {dag_id} in {timeout:.0f}s")

    def stop(self) -> None:
        """Stop each component's process group (its own processes: executor workers, task processes)."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in self.processes.values():
            try:
                process.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
