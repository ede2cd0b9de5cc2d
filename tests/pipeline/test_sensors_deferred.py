"""The pipeline's sensors defer by default and never hold a worker for a poll loop: a satisfied wait
returns from ``execute`` at once; an unsatisfied one checks once and defers. On Airflow 3.3+ they start
in the triggerer, which renders their templated fields and ends the task there when the wait is over.

The end-to-end tests run a DAG with Airflow's own ``dag.test()`` (which runs a deferred task's trigger
inline), in a fresh Airflow home, and check what a user sees: the task succeeds once the window's units
are read, after one check in the task and polls in the trigger; a window whose predecessor never ran
fails at once, naming the window it waits for.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_cdc._compat import AirflowFailException
from airflow_provider_cdc.sensors.window_complete import TRIGGERER_RENDERS_TEMPLATES, WindowCompleteSensor
from airflow_provider_cdc.sources.spanner.sensors import SpannerChangeStreamPartitionsDrainedSensor
from airflow_provider_cdc.sources.spanner.triggers import PartitionsDrainedTrigger
from airflow_provider_cdc.triggers.window_complete import WindowCompleteTrigger
from tests.sources.test_window_sources import SOURCE_KEY, WINDOW, DropHook, hook, metastore_conn  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
SPANNER = {"instance_id": "i", "database_id": "d", "stream": "S", "project_id": "{{ params.project }}"}
needs_3_3 = pytest.mark.skipif(
    not TRIGGERER_RENDERS_TEMPLATES, reason="the triggerer renders templates: 3.3+"
)


def _complete(**kwargs: Any) -> WindowCompleteSensor:
    return WindowCompleteSensor(
        task_id="complete", source_key=SOURCE_KEY, metastore_conn_id="cdc_drops", **kwargs
    )


@pytest.mark.parametrize("configured", ["false", "true", None])
def test_the_sensors_defer_whatever_default_deferrable_says(
    configured: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if configured is None:
        monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", configured)
    for sensor in (_complete(), SpannerChangeStreamPartitionsDrainedSensor(task_id="drained", **SPANNER)):
        assert sensor.deferrable is True
        assert sensor.start_from_trigger is TRIGGERER_RENDERS_TEMPLATES
    poking = _complete(deferrable=False)
    assert (poking.deferrable, poking.start_from_trigger) == (False, False)
    with pytest.raises(ValueError, match="start_from_trigger needs deferrable=True"):
        _complete(deferrable=False, start_from_trigger=True)
    kept = _complete(start_from_trigger=False)
    assert (kept.deferrable, kept.start_from_trigger) == (True, False)


@needs_3_3
def test_a_sensor_whose_arguments_read_xcom_defers_from_a_worker() -> None:
    from_handle = "{{ ti.xcom_pull(task_ids='open', key='window')['source_key'] }}"
    sensor = WindowCompleteSensor(task_id="complete", source_key=from_handle)
    assert (sensor.deferrable, sensor.start_from_trigger) == (True, False)
    with pytest.raises(ValueError, match="cannot render source_key: the triggerer does not serve XCom"):
        WindowCompleteSensor(task_id="complete", source_key=from_handle, start_from_trigger=True)


@needs_3_3
def test_the_start_trigger_takes_the_sensors_templates_and_ends_the_task_there() -> None:
    drained = SpannerChangeStreamPartitionsDrainedSensor(
        task_id="wait_parents", pipeline_id="{{ params.pipeline }}", poke_interval=3, timeout=600, **SPANNER
    )
    args = drained.start_trigger_args
    assert args.trigger_cls == "airflow_provider_cdc.sources.spanner.triggers.PartitionsDrainedTrigger"
    assert args.next_method == "execute_complete"
    assert args.timeout == timedelta(seconds=600)
    assert args.trigger_kwargs["project_id"] == "{{ params.project }}"
    assert args.trigger_kwargs["timestamp"] == "{{ data_interval_start }}"
    assert args.trigger_kwargs["interval_end"] == "{{ data_interval_end }}"
    assert args.trigger_kwargs["pipeline_id"] == "{{ params.pipeline }}"
    assert (args.trigger_kwargs["poll_interval"], args.trigger_kwargs["end_from_trigger"]) == (3.0, True)

    # What the triggerer does (Airflow's own code): build the trigger, give it the task, render.
    trigger = PartitionsDrainedTrigger(**args.trigger_kwargs)
    trigger.task_instance = SimpleNamespace(task_id="wait_parents", task=drained)
    context = {
        "params": {"project": "p-1", "pipeline": "orders"},
        "data_interval_start": WINDOW.start,
        "data_interval_end": WINDOW.end,
    }
    trigger.render_template_fields(context=context)
    assert (trigger.project_id, trigger.pipeline_id) == ("p-1", "orders")
    assert trigger.checked_window() == WINDOW
    assert trigger.window() is None


def test_a_trigger_deferred_under_its_old_classpath_still_resolves_and_new_ones_use_the_new_path() -> None:
    """Tasks deferred before the drained trigger moved to the Spanner source are stored with the old
    classpath; the triggerer imports it as it does any trigger's."""
    import importlib

    old = importlib.import_module("airflow_provider_cdc.triggers.partitions_drained").PartitionsDrainedTrigger
    assert old is PartitionsDrainedTrigger
    stored = PartitionsDrainedTrigger(**SPANNER, timestamp="2024-01-01T00:00:00+00:00", poll_interval=1.0)
    classpath, kwargs = stored.serialize()
    assert classpath == "airflow_provider_cdc.sources.spanner.triggers.PartitionsDrainedTrigger"
    resumed = old(**kwargs)  # the triggerer rebuilds the trigger from what was stored
    assert resumed.serialize() == (classpath, kwargs)


@needs_3_3
def test_the_start_trigger_checks_the_predecessor_and_ends_the_task_when_the_window_is_read(
    hook: DropHook,  # noqa: F811
    tmp_path: Path,
) -> None:
    from airflow.triggers.base import TaskSuccessEvent

    from airflow_provider_cdc.sources.operators import record_pipeline

    sensor = _complete(pipeline_id="{{ params.pipeline }}", poke_interval=0.05)
    trigger = WindowCompleteTrigger(**sensor.start_trigger_args.trigger_kwargs)
    trigger.task_instance = SimpleNamespace(task_id="complete", task=sensor)
    context = {
        "params": {"pipeline": "drops"},
        "data_interval_start": WINDOW.start,
        "data_interval_end": WINDOW.end,
    }
    trigger.render_template_fields(context=context)

    record_pipeline("cdc_drops", "drops", WINDOW, WINDOW.start - timedelta(minutes=10))
    refused = asyncio.run(trigger.run().__anext__())
    assert refused.payload["status"] == "error" and refused.payload["never_run"] is True
    rendered = _complete(window_start=WINDOW.start.isoformat(), window_end=WINDOW.end.isoformat())
    with pytest.raises(AirflowFailException, match=f"{WINDOW.start:%Y-%m-%d}") as failed:
        rendered.execute_complete({}, refused.payload)  # the task resumes on a worker to fail with it
    assert "drops" in str(failed.value)

    # The pipeline starts with this window: no predecessor is needed; the trigger waits for the read.
    started = WindowCompleteTrigger(**{**trigger.serialize()[1], "pipeline_id": None})
    hook.open_window_epoch("drops", WINDOW, str(tmp_path), "opener")

    async def read_then_wait() -> Any:
        waiter = asyncio.ensure_future(started.run().__anext__())
        await asyncio.sleep(0.3)
        assert not waiter.done(), "the trigger fired before the window was read"
        await asyncio.to_thread(hook.read_window, WINDOW, str(tmp_path), "reader-0")
        return await asyncio.wait_for(waiter, 30)

    assert isinstance(asyncio.run(read_then_wait()), TaskSuccessEvent)


def test_a_satisfied_sensor_returns_from_execute_without_deferring(
    hook: DropHook,  # noqa: F811
    tmp_path: Path,
) -> None:
    hook.open_window_epoch("drops", WINDOW, str(tmp_path), "opener")
    hook.read_window(WINDOW, str(tmp_path), "reader-0")
    sensor = _complete(window_start=WINDOW.start.isoformat(), window_end=WINDOW.end.isoformat())
    assert sensor.execute({}) is None  # no TaskDeferred: no trigger, no second task process


# ----------------------------------------------------------------- Airflow 3: dag.test(), in a fresh home
DAG_FILE = f"""
from datetime import datetime, timezone

try:
    from airflow.sdk import DAG, Param
except ImportError:  # Airflow 2.11
    from airflow import DAG
    from airflow.models.param import Param

from airflow_provider_cdc.sensors.window_complete import WindowCompleteSensor

with DAG(
    "sensor_deferred",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    params={{"start": Param("{WINDOW.start.isoformat()}"), "end": Param("{WINDOW.end.isoformat()}"),
            "pipeline": Param("")}},
) as dag:
    WindowCompleteSensor(
        task_id="complete",
        source_key="{SOURCE_KEY}",
        window_start="{{{{ params.start }}}}",
        window_end="{{{{ params.end }}}}",
        pipeline_id="{{{{ params.pipeline }}}}",
        metastore_conn_id="cdc_drops",
        poke_interval=0.2,
        timeout=120,
    )
"""

RUN = """
import json, sys, threading, time
from datetime import timedelta

sys.path.insert(0, sys.argv[4])
from airflow.utils.db import upgradedb
upgradedb()
try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:  # Airflow 2.11
    from airflow.models import DagBag
from tests.sources.test_window_sources import WINDOW, DropHook

from airflow_provider_cdc.sensors.window_complete import WindowCompleteSensor
from airflow_provider_cdc.sources.operators import record_pipeline
from airflow_provider_cdc.triggers.window_complete import WindowCompleteTrigger

checks = {"task": 0, "trigger": 0}
lagging, poll = WindowCompleteSensor.lagging, WindowCompleteTrigger._check

def counted_lagging(self):
    checks["task"] += 1
    return lagging(self)

def counted_poll(self):
    checks["trigger"] += 1
    return poll(self)

WindowCompleteSensor.lagging, WindowCompleteTrigger._check = counted_lagging, counted_poll
mode, staging = sys.argv[2], sys.argv[3]
hook = DropHook("cdc_drops", now=WINDOW.end + timedelta(minutes=6))
conf = {}
if mode == "drains":
    hook.open_window_epoch("drops", WINDOW, staging, "opener")

    def read_once_polled():
        while checks["trigger"] < 3:
            time.sleep(0.05)
        hook.read_window(WINDOW, staging, "reader-0")

    threading.Thread(target=read_once_polled, daemon=True).start()
else:
    record_pipeline("cdc_drops", "drops", WINDOW, WINDOW.start - timedelta(minutes=10))
    conf = {"pipeline": "drops"}
dag = DagBag(sys.argv[1]).dags["sensor_deferred"]
run = dag.test(run_conf=conf)
states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
print(json.dumps({"run": str(run.state), "states": states, "checks": checks}))
"""


def _dag_test(mode: str, tmp_path: Path, sqlite_url: str) -> tuple[dict[str, Any], str]:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "sensor_deferred.py").write_text(DAG_FILE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "CDC_"))}
    metastore = json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": sqlite_url}})
    env.update(
        AIRFLOW_HOME=str(tmp_path / "home"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW_CONN_CDC_DROPS=metastore,
    )
    command = [sys.executable, "-c", RUN, str(dags), mode, str(tmp_path / "staging"), str(ROOT)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout + done.stderr


@pytest.mark.dag_run
def test_dag_test_defers_once_and_succeeds_when_the_window_is_read(tmp_path: Path, sqlite_url: str) -> None:
    result, _ = _dag_test("drains", tmp_path, sqlite_url)
    assert result["run"] == "success" and result["states"] == {"complete": "success"}
    assert result["checks"]["task"] == 1, "the task checks once, then hands the wait to the trigger"
    assert result["checks"]["trigger"] >= 3


@pytest.mark.dag_run
def test_dag_test_fails_a_window_run_before_its_predecessor_naming_it(
    tmp_path: Path, sqlite_url: str
) -> None:
    result, output = _dag_test("out_of_order", tmp_path, sqlite_url)
    assert result["run"] == "failed" and result["states"] == {"complete": "failed"}
    assert result["checks"] == {"task": 0, "trigger": 0}, "refused before any wait"
    assert "AirflowFailException" in output
    assert f"waits for the window ending at {WINDOW.start:%Y-%m-%dT%H:%M:%S}" in output, "named"


# ------------------------------------------------- Airflow 3.3: a real scheduler, triggerer and API server
REAL_DAG_FILE = f"""
from datetime import datetime, timezone

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Param

from airflow_provider_cdc.sensors.window_complete import WindowCompleteSensor

with DAG(
    "sensor_in_the_triggerer",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    params={{"start": Param("{WINDOW.start.isoformat()}"), "end": Param("{WINDOW.end.isoformat()}"),
            "pipeline": Param(""), "source": Param("{SOURCE_KEY}")}},
) as dag:
    handle = PythonOperator(task_id="open", python_callable=lambda: {{"source_key": "{SOURCE_KEY}"}})
    window = {{
        "window_start": "{{{{ params.start }}}}",
        "window_end": "{{{{ params.end }}}}",
        "pipeline_id": "{{{{ params.pipeline }}}}",
        "metastore_conn_id": "cdc_drops",
        "poke_interval": 0.5,
        "timeout": 300,
        "retries": 0,
    }}
    handle >> WindowCompleteSensor(task_id="complete", source_key="{{{{ params.source }}}}", **window)
    from_xcom = "{{{{ ti.xcom_pull(task_ids='open')['source_key'] }}}}"
    handle >> WindowCompleteSensor(task_id="complete_from_xcom", source_key=from_xcom, **window)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, condition: Any, timeout: float = 300) -> Any:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@needs_3_3
@pytest.mark.dag_run
def test_a_real_triggerer_runs_a_sensor_without_a_worker_and_one_reading_xcom_after_one(
    hook: DropHook,  # noqa: F811
    tmp_path: Path,
    sqlite_url: str,
) -> None:
    import signal
    import sqlite3

    from cryptography.fernet import Fernet

    from airflow_provider_cdc.sources.operators import record_pipeline

    dags, home = tmp_path / "dags", tmp_path / "home"
    dags.mkdir()
    (dags / "sensor_in_the_triggerer.py").write_text(REAL_DAG_FILE)
    port, database = _free_port(), home / "airflow.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "CDC_"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{database}",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__WORKERS="1",
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__API_AUTH__JWT_SECRET="sensor-test-secret-" + "x" * 32,
        AIRFLOW__CORE__FERNET_KEY=Fernet.generate_key().decode(),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
        AIRFLOW_CONN_CDC_DROPS=json.dumps(
            {"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": sqlite_url}}
        ),
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
    )
    airflow = str(Path(sys.executable).parent / "airflow")

    def cli(*args: str) -> str:
        done = subprocess.run([airflow, *args], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        return done.stdout

    def query(sql: str, *args: Any) -> list[tuple]:
        with sqlite3.connect(database, timeout=30) as db:
            return db.execute(sql, args).fetchall()

    cli("db", "migrate")
    processes = [
        subprocess.Popen(
            [airflow, name],
            env=env,
            stdout=(tmp_path / f"{name}.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        for name in ("api-server", "scheduler", "dag-processor", "triggerer")
    ]
    try:
        _wait("the DAG", lambda: query("SELECT 1 FROM dag WHERE dag_id = 'sensor_in_the_triggerer'"))
        cli("dags", "unpause", "sensor_in_the_triggerer")
        hook.open_window_epoch("drops", WINDOW, str(tmp_path / "staging"), "opener")
        cli("dags", "trigger", "sensor_in_the_triggerer", "--run-id", "drains")
        states = (
            "SELECT task_id, state, hostname FROM task_instance WHERE run_id = ? AND task_id LIKE 'complete%'"
        )

        def sensors(run_id: str) -> dict[str, tuple[str, str]]:
            return {task: (state, host or "") for task, state, host in query(states, run_id)}

        _wait("both sensors to defer", lambda: {s for s, _ in sensors("drains").values()} == {"deferred"})
        assert sensors("drains")["complete"] == ("deferred", ""), "started in the triggerer: no worker"
        assert sensors("drains")["complete_from_xcom"][1], (
            "an XCom template: checked on a worker, then deferred"
        )
        hook.read_window(WINDOW, str(tmp_path / "staging"), "reader-0")
        _wait(
            "both sensors to end", lambda: {s for s, _ in sensors("drains").values()} <= {"success", "failed"}
        )
        assert sensors("drains")["complete"] == ("success", ""), "ended in the triggerer: no worker ran it"
        assert sensors("drains")["complete_from_xcom"][0] == "success"

        record_pipeline("cdc_drops", "drops", WINDOW, WINDOW.start - timedelta(minutes=10))
        conf = '{"pipeline": "drops"}'
        cli("dags", "trigger", "sensor_in_the_triggerer", "--run-id", "early", "--conf", conf)
        _wait("the early sensors to end", lambda: {s for s, _ in sensors("early").values()} == {"failed"})
        log = next((home / "logs").glob("dag_id=*/run_id=early/task_id=complete/attempt=*.log"))
        assert f"waits for the window ending at {WINDOW.start:%Y-%m-%dT%H:%M:%S}" in log.read_text()
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
