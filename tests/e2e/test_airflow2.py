"""The example DAG on Airflow 2.11 (the Cloud Composer 2 line), driven by ``airflow dags backfill``.

The Airflow 2.11 virtualenv ``.venv-airflow2`` (``scripts/setup.sh --airflow2``) runs as subprocesses
against the change-stream emulator serving the demo database from this process: a backfill of three
10-minute windows must leave the Delta tables equal to the history committed before the last window's
end (and not a change from the window after it), every window ``applied`` in the metastore; backfilling
the same range again with ``--reset-dagruns`` re-runs every window and leaves the tables identical.

Tasks run on the DebugExecutor (inside the backfill process) so that the test takes minutes;
``CDC_AIRFLOW2_EXECUTOR=SequentialExecutor`` runs each task as its own ``airflow tasks run`` process,
as a worker does.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from support.dag_runs import AIRFLOW2_VENV, ON_AIRFLOW2

from airflow_provider_cdc import __version__
from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, format_timestamp, to_micros
from airflow_provider_cdc.testing.demo import DemoSettings, encoded_state, load_demo
from airflow_provider_cdc.testing.workload import TABLES_BY_NAME, State

REPO = Path(__file__).resolve().parents[2]
AIRFLOW2 = AIRFLOW2_VENV / "bin" / "airflow"
DAGS_FOLDER = REPO / "example_dags"
DAG_ID = "spanner_change_stream_to_lake"
EXECUTOR = os.environ.get("CDC_AIRFLOW2_EXECUTOR", "DebugExecutor")

# Four windows of history; the backfill covers the first three, so the fourth must not reach the lake.
SETTINGS = DemoSettings(windows=4, changes_per_window=150)
BACKFILLED_WINDOWS = 3
WINDOWS = [SETTINGS.window_bounds(i) for i in range(BACKFILLED_WINDOWS)]
# The first run starts the pipeline with the initial snapshot's window [T - 1µs, T).
SNAPSHOT_WINDOW = (SETTINGS.start - ONE_MICROSECOND, SETTINGS.start)
# `airflow dags backfill -s S -e E` creates a run for every logical date in [S, E]; with
# DeltaDataIntervalTimetable the logical date is the start of the data interval.
BACKFILL_RANGE = ["-s", WINDOWS[0][0].isoformat(), "-e", WINDOWS[-1][0].isoformat()]
BACKFILL_TIMEOUT = 1200.0

pytestmark = ON_AIRFLOW2


def _tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _airflow2_env(home: Path, emulator_host: str | None) -> dict[str, str]:
    """The environment of an Airflow 2.11 command: nothing of this process's Airflow or virtualenv."""
    dropped = {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "SPARK_HOME", "PYSPARK_PYTHON"}
    dropped.add("PYSPARK_DRIVER_PYTHON")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIRFLOW", "CDC_", "SPANNER_EMULATOR")) and key not in dropped
    }
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS_FOLDER),
        AIRFLOW__CORE__EXECUTOR=EXECUTOR,
        CDC_WINDOW_MINUTES=str(int(SETTINGS.window.total_seconds() // 60)),
        CDC_READERS="2",
        PATH=os.pathsep.join([str(AIRFLOW2_VENV / "bin"), env.get("PATH", "")]),
        PYTHONWARNINGS="ignore",
    )
    if emulator_host:
        env["SPANNER_EMULATOR_HOST"] = emulator_host
    return env


def _run(command: list[str], env: dict[str, str], log: Path, timeout: float) -> float:
    """Run ``command`` (output to ``log``); fail the test with the log's tail unless it succeeds."""
    started = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(
            command, env=env, cwd=env["AIRFLOW_HOME"], stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the command and the spark-submit it started
            process.wait()
            pytest.fail(f"{' '.join(command[1:])} did not finish in {timeout:.0f} s:\n{_tail(log)}")
    if code != 0:
        pytest.fail(f"{' '.join(command[1:])} exited with {code} (log {log}):\n{_tail(log)}")
    return time.monotonic() - started


def _encode(state: State) -> dict[str, list[dict[str, Any]]]:
    """Rows per table in Spanner's JSON encoding, as ``testing.demo.encoded_state`` writes them."""
    return {
        name: [TABLES_BY_NAME[name].encode_values(rows[key]) for key in sorted(rows)]
        for name, rows in state.items()
    }


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


@dataclass
class Backfilled:
    """An Airflow 2.11 home whose first backfill ran against the demo history on the emulator."""

    home: Path
    env: dict[str, str]
    truth: dict[str, list[dict[str, Any]]]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def lake_root(self) -> str:
        return str(self.home / "cdc-demo" / "lake")

    def airflow(self, *args: str, timeout: float = BACKFILL_TIMEOUT) -> float:
        log = self.home / f"{args[0]}-{args[1]}-{len(self.timings)}.log"
        return _run([str(AIRFLOW2), *args], self.env, log, timeout)

    def dag_runs(self) -> list[tuple[str, str, datetime, datetime]]:
        """(run type, state, data interval start, end) of the DAG's runs, from Airflow's database."""
        with sqlite3.connect(self.home / "airflow.db") as conn:
            rows = conn.execute(
                "SELECT run_type, state, data_interval_start, data_interval_end FROM dag_run "
                "WHERE dag_id = ? ORDER BY execution_date",
                (DAG_ID,),
            ).fetchall()
        return [(kind, state, _utc(start), _utc(end)) for kind, state, start, end in rows]

    def metastore(self) -> Any:
        from airflow_provider_cdc.metastore import Metastore

        return Metastore(f"sqlite:///{self.home / 'cdc_metastore.db'}")

    def lake_snapshot(self) -> dict[str, tuple[int, int | None, list[str]]]:
        """Per table: Delta version, applied window version and every row (hidden columns included)."""
        from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

        lake = DeltaLakeTarget(self.lake_root)
        snapshot = {}
        for table in sorted(self.truth):
            rows = [json.dumps(r, sort_keys=True, default=str) for r in lake.read_table(table).to_pylist()]
            snapshot[table] = (
                lake.open(table).version(),
                lake.applied_window_version(table, DAG_ID),
                sorted(rows),
            )
        return snapshot


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backfilled]:
    from airflow_provider_cdc.testing.spanner_emulator import ManualClock, SpannerEmulator

    home = tmp_path_factory.mktemp("airflow2-home")
    timings: dict[str, float] = {}
    emulator = SpannerEmulator(ManualClock(SETTINGS.start - timedelta(minutes=1)), seed=SETTINGS.seed)
    emulator.start()
    try:
        started = time.monotonic()
        workload = load_demo(emulator, SETTINGS)
        last_end = WINDOWS[-1][1]
        truth = _encode(workload.state_at(last_end - ONE_MICROSECOND))
        # The window after the backfilled range changes the tables: reading past the range would show.
        assert truth != encoded_state(workload)
        context = Backfilled(home, _airflow2_env(home, emulator.host), truth, timings)
        timings["load demo history"] = time.monotonic() - started
        timings["airflow db migrate"] = context.airflow("db", "migrate", timeout=600)
        timings["first backfill"] = context.airflow("dags", "backfill", *BACKFILL_RANGE, DAG_ID)
        yield context
    finally:
        emulator.stop()
        print(  # shown with -s: where the time goes
            f"\nAirflow 2.11 ({EXECUTOR}) timings: "
            + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings.items()),
            file=sys.stderr,
        )


def test_provider_is_registered_and_the_dag_parses_on_airflow_2(tmp_path: Path) -> None:
    env = _airflow2_env(tmp_path, None)
    listing = subprocess.run(
        [str(AIRFLOW2), "providers", "list", "-o", "json"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert listing.returncode == 0, listing.stderr[-3000:]
    # The JSON list is the last line; Airflow may log (deprecation warnings) before it.
    providers = {p["package_name"]: p for p in json.loads(listing.stdout.strip().splitlines()[-1])}
    assert "airflow-provider-cdc" in providers, sorted(providers)
    assert providers["airflow-provider-cdc"]["version"] == __version__

    check = """
import json, sys, airflow
from airflow.models import DagBag
from airflow.serialization.serialized_objects import SerializedDAG
bag = DagBag(include_examples=False)
dag = bag.dags.get(sys.argv[1])
report = {"version": airflow.__version__, "errors": bag.import_errors, "dags": sorted(bag.dag_ids)}
if dag is not None:
    SerializedDAG.to_dict(dag)  # what the scheduler stores; raises on a field it cannot serialize
    report["tasks"] = sorted(t.task_id for t in dag.tasks)
    report["timetable"] = type(dag.timetable).__name__
print(json.dumps(report))
"""
    # Serializing a DAG with a DatasetAlias outlet reads the alias's datasets from the metadata
    # database (as the DAG processor does), so the check runs against a migrated one, as Airflow does.
    migrated = subprocess.run(
        [str(AIRFLOW2), "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
    )
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    result = subprocess.run(
        [str(AIRFLOW2_VENV / "bin" / "python"), "-c", check, DAG_ID],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["version"].startswith("2.11."), report["version"]
    assert report["errors"] == {}
    assert report["dags"] == [  # every example DAG parses on Airflow 2.11
        "cdc_table_consumer", "datastream_to_bigquery", "datastream_to_lake",
        "spanner_change_stream_to_bigquery", DAG_ID, "spanner_commit_timestamp_tables_to_lake",
        "tablestore_stream_to_bigquery", "tablestore_stream_to_lake",
    ]  # fmt: skip
    tasks = ["wait_parents", "open_window", "read", "drained", "merge", "upsert", "commit"]
    snapshot = ["open", "read", "merge", "upsert", "commit"]
    assert report["tasks"] == sorted([*tasks, *(f"initial_snapshot.{t}" for t in snapshot)])
    assert report["timetable"] == "DeltaDataIntervalTimetable"


@pytest.mark.spark
@pytest.mark.timeout(2 * BACKFILL_TIMEOUT)
def test_backfill_applies_each_window_and_the_lake_equals_the_history(backfilled: Backfilled) -> None:
    assert backfilled.dag_runs() == [("backfill", "success", start, end) for start, end in WINDOWS]

    store = backfilled.metastore()
    try:
        windows = [(w.start, w.end, w.state.value, w.attempt) for w in store.list_windows(DAG_ID)]
        watermarks = store.table_watermarks(DAG_ID, target="delta")
    finally:
        store.dispose()
    assert windows == [(start, end, "applied", 1) for start, end in [SNAPSHOT_WINDOW, *WINDOWS]]
    last_end = WINDOWS[-1][1]
    assert watermarks == dict.fromkeys(backfilled.truth, last_end), {
        t: format_timestamp(w) for t, w in watermarks.items()
    }

    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget
    from airflow_provider_cdc.testing.lake_check import compare_lake_to_truth

    comparisons = compare_lake_to_truth(DeltaLakeTarget(backfilled.lake_root), backfilled.truth)
    assert [c.table for c in comparisons] == sorted(backfilled.truth)
    for c in comparisons:
        assert c.equal, (
            f"{c.table}: {c.lake_rows} rows in the lake, {c.truth_rows} in the history at "
            f"{format_timestamp(last_end)}; only in the lake: {c.only_in_lake}; only in the history: "
            f"{c.only_in_truth}"
        )
    for table, (_, applied, rows) in backfilled.lake_snapshot().items():
        assert applied == to_micros(last_end), table
        assert len(rows) == len(backfilled.truth[table]), table


@pytest.mark.spark
@pytest.mark.timeout(2 * BACKFILL_TIMEOUT)
def test_backfilling_the_same_range_again_leaves_the_tables_identical(backfilled: Backfilled) -> None:
    before = backfilled.lake_snapshot()
    backfilled.timings["second backfill"] = backfilled.airflow(
        "dags", "backfill", *BACKFILL_RANGE, "--reset-dagruns", "-y", DAG_ID
    )

    assert backfilled.dag_runs() == [("backfill", "success", start, end) for start, end in WINDOWS]
    store = backfilled.metastore()
    try:
        windows = [(w.start, w.end, w.state.value, w.attempt) for w in store.list_windows(DAG_ID)]
    finally:
        store.dispose()
    # Every window was opened, read, merged and applied a second time ...
    assert windows == [(start, end, "applied", 2) for start, end in [SNAPSHOT_WINDOW, *WINDOWS]]
    # ... and the lake recognised each apply: same rows, no new Delta commit.
    after = backfilled.lake_snapshot()
    assert after.keys() == before.keys()
    for table in before:
        assert after[table] == before[table], f"{table} changed when its windows were applied again"
