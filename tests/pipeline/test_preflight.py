"""Do what is configured, or refuse at once: a connection id given must exist (only the defaults may be
missing, and what that means is logged), errors a retry cannot heal fail the task without retries, the
open step's preflight names every mistake before anything is recorded, and so does
``python -m airflow_provider_cdc check``; the commands that take a pipeline take its DAG id too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_cdc._compat import AirflowFailException
from airflow_provider_cdc.core.timestamps import from_micros, to_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore

EXAMPLE_DAGS = Path(__file__).resolve().parents[2] / "example_dags"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WINDOW = {"window_start": "2026-01-01T00:00:00Z", "window_end": "2026-01-01T00:10:00Z"}
SCHEMA = [
    "CREATE TABLE Orders (OrderId INT64 NOT NULL, Status STRING(MAX)) PRIMARY KEY (OrderId)",
    "CREATE CHANGE STREAM Everything FOR ALL",
]


def _metastore_env(url: str) -> str:
    return json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": url}})


def _context(task_id: str = "open") -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="cdc", run_id="run-1", task_id=task_id, map_index=-1)
    ti.xcom_push = lambda key, value: None
    return {"ti": ti}


def _clean_env(**values: str) -> dict[str, str]:
    """An environment with nothing of this process's Airflow or provider settings, plus ``values``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CDC_", "SPANNER_EMULATOR"))}
    env.update(AIRFLOW__CORE__LOAD_EXAMPLES="False", **values)
    return env


# ----- undefined connections ------------------------------------------------------------------------
@pytest.mark.dag_run
def test_an_undefined_metastore_connection_fails_at_once_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_cdc._errors import ConnectionNotDefinedError
    from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
    from airflow_provider_cdc.preflight import PreflightFailure
    from airflow_provider_cdc.sources.datastream.operators import DatastreamOpenWindowOperator

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AIRFLOW_CONN_CDC_METASTORE_DEFAULT", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_CDC_METASTORE_TYPO", raising=False)
    with pytest.raises(ConnectionNotDefinedError) as caught:
        CdcMetastoreHook("cdc_metastore_typo").get_url()
    assert isinstance(caught.value, AirflowFailException)  # Airflow fails the task without retries
    message = str(caught.value)
    assert "connection 'cdc_metastore_typo' given as metastore_conn_id is not defined" in message
    assert "AIRFLOW_CONN_CDC_METASTORE_TYPO" in message and "'cdc_metastore_default'" in message
    assert not (tmp_path / "home" / "cdc_metastore.db").exists(), "no worker-local metastore instead"
    # Only the default may be missing: it is the SQLite file under AIRFLOW_HOME.
    assert CdcMetastoreHook().get_url() == f"sqlite:///{tmp_path / 'home' / 'cdc_metastore.db'}"

    (tmp_path / "stream" / "shop_orders").mkdir(parents=True)
    opener = DatastreamOpenWindowOperator(
        task_id="open", stream_root=str(tmp_path / "stream"), source="shop",
        staging_root=str(tmp_path / "staging"), metastore_conn_id="cdc_metastore_typo", **WINDOW,
    )  # fmt: skip
    with pytest.raises(PreflightFailure) as failed:
        opener.execute(_context())
    message = str(failed.value)
    assert "metastore_conn_id of task open: connection 'cdc_metastore_typo' given as metastore_conn_id" in (
        message
    )
    fix = "Fix: define it (Admin > Connections, the environment variable AIRFLOW_CONN_CDC_METASTORE_TYPO"
    assert fix in message
    assert not (tmp_path / "staging").exists()


DAG_TEST = textwrap.dedent(
    """
    import json, sys
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.db import upgradedb
    from airflow.utils.session import create_session

    upgradedb()
    bag = DagBag(sys.argv[1])
    assert not bag.import_errors, bag.import_errors
    run = bag.dags["typos"].test()
    with create_session() as session:
        tries = {
            ti.task_id: [ti.state, ti.try_number]
            for ti in session.query(TaskInstance).filter(TaskInstance.run_id == run.run_id)
        }
    print(json.dumps({"run": run.state, "tries": tries}))
    """
)

TYPOS_DAG = textwrap.dedent(
    """
    from datetime import datetime, timedelta, timezone

    from airflow.sdk import DAG

    from airflow_provider_cdc.sources.spanner.change_stream_operators import (
        SpannerChangeStreamOpenWindowOperator,
        SpannerChangeStreamReadWindowOperator,
    )

    where = dict(project_id="test-project", instance_id="test-instance", stream="Everything",
                 staging_root={staging!r}, window_start="2026-01-01T00:00:00Z",
                 window_end="2026-01-01T00:10:00Z")
    with DAG("typos", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), schedule=None,
             default_args={{"retries": 3, "retry_delay": timedelta(seconds=1)}}):
        SpannerChangeStreamOpenWindowOperator(task_id="open", database_id={database!r},
                                              gcp_conn_id="gcp_typo", **where)
        SpannerChangeStreamReadWindowOperator(task_id="read_missing_database", database_id="no_such_db",
                                              **where)
    """
)


@pytest.mark.dag_run
def test_an_undefined_gcp_conn_id_and_a_missing_database_fail_the_tasks_once_without_retries(
    spanner_emulator: Any, new_spanner_database: Any, tmp_path: Path
) -> None:
    """A real run (``dag.test()`` in an Airflow home of its own) with three retries per task: the open
    step given an undefined ``gcp_conn_id`` and the read of a database that does not exist each fail
    on their first try."""
    database = new_spanner_database(SCHEMA, prefix="typos")
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "typos.py").write_text(TYPOS_DAG.format(staging=str(tmp_path / "staging"),
                                                    database=database.database_id))  # fmt: skip
    env = _clean_env(
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW_CONN_CDC_METASTORE_DEFAULT=_metastore_env(f"sqlite:///{tmp_path / 'cdc.db'}"),
        SPANNER_EMULATOR_HOST=spanner_emulator.host,
    )
    done = subprocess.run(
        [sys.executable, "-c", DAG_TEST, str(dags)], env=env, capture_output=True, text=True, timeout=600
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["tries"] == {"open": ["failed", 1], "read_missing_database": ["failed", 1]}, output[-4000:]
    assert "connection 'gcp_typo' given as gcp_conn_id is not defined" in output
    assert "databases/no_such_db" in output and "not retried: it does not exist (404)" in output
    recorded = Metastore(f"sqlite:///{tmp_path / 'cdc.db'}").pipeline_ids()
    assert recorded == [], "the open step recorded nothing"


# ----- a Spanner database, instance or stream that does not exist ---------------------------------
@pytest.fixture(params=["project", "google"])
def emulated(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> tuple:
    """The database with stream ``Everything`` on the project's emulator, or on Google's (skipped where
    it is not installed); ``SPANNER_EMULATOR_HOST`` and the metastore set."""
    if request.param == "project":
        emulator, create = request.getfixturevalue("spanner_emulator"), request.getfixturevalue(
            "new_spanner_database"
        )
    else:
        emulator, create = request.getfixturevalue("google_spanner_emulator"), request.getfixturevalue(
            "new_google_database"
        )
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", emulator.host)
    monkeypatch.setenv("AIRFLOW_CONN_CDC_METASTORE_DEFAULT", _metastore_env(sqlite_url))
    monkeypatch.delenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", raising=False)
    return create(SCHEMA, prefix="shoporders"), sqlite_url


def test_a_missing_database_instance_or_stream_is_refused_at_once_with_what_exists(
    emulated: tuple, tmp_path: Path
) -> None:
    from airflow_provider_cdc.failures import PermanentFailure
    from airflow_provider_cdc.preflight import PreflightFailure
    from airflow_provider_cdc.sources.spanner.change_stream_operators import (
        SpannerChangeStreamOpenWindowOperator,
        SpannerChangeStreamReadWindowOperator,
    )

    database, url = emulated
    name = database.database_id
    where = dict(project_id="test-project", instance_id="test-instance", database_id=name,
                 stream="Everything", staging_root=str(tmp_path / "staging"), **WINDOW)  # fmt: skip

    def refused(**changes: str) -> str:
        with pytest.raises(PreflightFailure) as caught:
            SpannerChangeStreamOpenWindowOperator(task_id="open", **{**where, **changes}).execute(_context())
        return str(caught.value)

    message = refused(database_id=f"{name}x")
    assert f"database_id: Spanner database '{name}x' does not exist in instance 'test-instance'" in message
    assert f"Fix: did you mean {name!r}" in message
    message = refused(instance_id="test-instanse")
    assert "instance_id: Spanner instance 'test-instanse' does not exist in project 'test-project'" in message
    assert "Fix: did you mean 'test-instance'?" in message
    message = refused(stream="Everythin")
    assert f"stream: change stream 'Everythin' does not exist in Spanner database {database.name}" in message
    assert "Fix: did you mean 'Everything'?" in message
    assert Metastore(url).pipeline_ids() == [], "nothing was recorded"
    # The read step has no preflight: Spanner's 404 itself fails it without retries.
    reader = SpannerChangeStreamReadWindowOperator(task_id="read", **{**where, "database_id": f"{name}x"})
    with pytest.raises(PermanentFailure) as caught:
        reader.execute(_context("read"))
    assert f"databases/{name}x" in str(caught.value) and "not retried: it does not exist (404)" in str(
        caught.value
    )


# ----- the classifier -------------------------------------------------------------------------------
def test_permanent_errors_are_told_from_transient_ones_through_their_causes() -> None:
    from google.api_core import exceptions as gexc

    from airflow_provider_cdc.failures import PermanentFailure, fail_permanent_errors, permanent_reason
    from airflow_provider_cdc.sources.spanner.errors import ChangeStreamError
    from airflow_provider_cdc.sources.tablestore.client import TablestoreError

    def wrapped(cause: BaseException) -> BaseException:
        try:
            try:
                raise cause
            except BaseException as exc:
                raise ChangeStreamError("reading the window failed") from exc
        except ChangeStreamError as outer:
            return outer

    for permanent in (gexc.NotFound("Database not found: projects/p/instances/i/databases/d"),
                      gexc.PermissionDenied("no"), gexc.InvalidArgument("Table not found: X"),
                      gexc.Unauthenticated("bad key"),
                      TablestoreError("OTSObjectNotExist", "no table", operation="ListStream")):  # fmt: skip
        assert permanent_reason(wrapped(permanent)), permanent
    for transient in (gexc.ServiceUnavailable("down"), gexc.DeadlineExceeded("slow"), gexc.Aborted("retry"),
                      gexc.InternalServerError("oops"), gexc.TooManyRequests("quota"),
                      gexc.NotFound("Session not found: s1"), RuntimeError("lease lost"),
                      TablestoreError("OTSServerBusy", "busy", operation="GetStreamRecord", retryable=True)):
        assert permanent_reason(wrapped(transient)) is None, transient  # fmt: skip
    with pytest.raises(PermanentFailure, match=r"reading the window failed \[not retried: permission denied"):
        with fail_permanent_errors():
            raise wrapped(gexc.PermissionDenied("denied"))
    with pytest.raises(ChangeStreamError):  # retried as before
        with fail_permanent_errors():
            raise wrapped(gexc.ServiceUnavailable("down"))


# ----- the command -------------------------------------------------------------------------------------
@pytest.fixture
def demo_home(start_emulator: Callable[..., Any], tmp_path: Path) -> dict[str, Any]:
    """The example DAG's demo database (``demo-project/demo-instance/demo``, stream ``WorkloadChanges``)
    on an emulator of its own, a metastore where the pipeline applied its first window, and the
    environment of a shell on a machine with the provider installed."""
    from airflow_provider_cdc.testing.emulator_client import emulator_instance

    emulator = start_emulator()
    instance = emulator_instance(emulator.host, "demo-project", "demo-instance")
    instance.database("demo", ddl_statements=[
        "CREATE TABLE Orders (OrderId INT64 NOT NULL, Status STRING(MAX)) PRIMARY KEY (OrderId)",
        "CREATE CHANGE STREAM WorkloadChanges FOR ALL",
    ]).create().result(30)  # fmt: skip
    url = f"sqlite:///{tmp_path / 'cdc_metastore.db'}"
    store = Metastore(url)
    store.create_schema()
    pipeline = "spanner_change_stream_to_lake"
    stream = "projects/demo-project/instances/demo-instance/databases/demo/WorkloadChanges"
    store.record_pipeline(pipeline, T0)
    store.open_window(pipeline, stream, T0, T0 + timedelta(minutes=10))
    assert store.transition_window(pipeline, T0, T0 + timedelta(minutes=10), "reading", "applied")
    store.record_pipeline("shop", T0)
    store.dispose()
    env = _clean_env(
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(EXAMPLE_DAGS),
        AIRFLOW_CONN_CDC_METASTORE_DEFAULT=_metastore_env(url),
        SPANNER_EMULATOR_HOST=emulator.host,
        CDC_DEMO_HOME=str(tmp_path / "demo"),
    )
    return {"env": env, "cwd": tmp_path}


def _cli(home: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_cdc", *args],
        env=home["env"], cwd=home["cwd"], capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_check_command_names_each_mistake_and_its_fix(demo_home: dict[str, Any]) -> None:
    conf = {"stream_name": "Orders", "stream": "WorkloadChange", "lake_root": "lake",
            "spark_conn_id": "spark_typo"}  # fmt: skip
    done = _cli(demo_home, "check", "--dag", "spanner_change_stream_to_lake", "--conf", json.dumps(conf),
                "--window-start", "2099-01-01T00:00:00Z")  # fmt: skip
    out = done.stdout
    assert done.returncode == 1, out + done.stderr[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 6, out  # the stream is checked by the snapshot's open step and the stream's
    expected = [
        "ERROR   dag_run.conf['stream_name']: 'stream_name' is not a param of DAG "
        "'spanner_change_stream_to_lake'. Fix: did you mean 'stream'? (the DAG's params: changeset_root, "
        "database_id,",
        "stream: change stream 'WorkloadChange' does not exist in Spanner database "
        "projects/demo-project/instances/demo-instance/databases/demo. Fix: did you mean 'WorkloadChanges'?",
        "ERROR   param lake_root (locations['lake_root'] of tasks initial_snapshot.merge, ",
        "'lake' is a relative path (tasks run in other working directories). Fix: give an absolute path "
        f"such as {str(demo_home['cwd'] / 'lake')!r}",
        "ERROR   param spark_conn_id (conn_id of tasks initial_snapshot.merge, initial_snapshot.upsert, "
        "merge, upsert): connection 'spark_typo' given as conn_id is not defined. Fix: define it",
        "ERROR   window (window_start, window_end: the run's data interval): window "
        "[2099-01-01T00:00:00.000000Z, 2099-01-01T00:10:00.000000Z) of pipeline "
        "'spanner_change_stream_to_lake' ends in the future",
        "its last applied window is [2026-01-01T00:00:00.000000Z, 2026-01-01T00:10:00.000000Z) and the "
        "next one to run is [2026-01-01T00:10:00.000000Z, 2026-01-01T00:20:00.000000Z)",
    ]
    for part in expected:
        assert part in out, f"{part!r} not in:\n{out}"

    done = _cli(demo_home, "check", "--dag", "spanner_change_stream_to_lake")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert (
        "Preflight of DAG spanner_change_stream_to_lake, window [2026-01-01T00:10:00.000000Z, "
        "2026-01-01T00:20:00.000000Z): 0 error(s), 0 warning(s)"
    ) in done.stdout, done.stdout
    assert "change stream 'WorkloadChanges' exists" in done.stdout
    assert "no connection 'spark_default': Spark runs local[*] on the worker" in done.stdout

    done = _cli(demo_home, "check", "--dag", "spanner_change_stream_to_lak")
    assert done.returncode == 2 and "did you mean 'spanner_change_stream_to_lake' or" in done.stderr


def test_commands_take_a_dag_id_or_a_pipeline_id_and_say_when_neither_is_known(
    demo_home: dict[str, Any],
) -> None:
    done = _cli(demo_home, "status", "--pipeline", "spanner_change_stream_to_lak")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "status: no pipeline or DAG is named 'spanner_change_stream_to_lak'; did you mean " in done.stderr
    assert "pipelines in the metastore: shop, spanner_change_stream_to_lake" in done.stderr
    assert "DAGs: cdc_table_consumer, datastream_to_bigquery" in done.stderr
    assert "Windows of pipeline" not in done.stdout, "no empty listing for a name nobody knows"

    done = _cli(demo_home, "status", "--pipeline", "datastream_to_lake")  # a DAG whose pipeline ran nothing
    assert done.returncode == 0, done.stderr
    assert "Pipeline datastream_to_lake has recorded no window yet" in done.stdout
    done = _cli(demo_home, "repair", "--pipeline", "no_such_pipeline", "--lake-root", "/l",
                "--changeset-root", "/c")  # fmt: skip
    assert done.returncode == 2 and "repair: no pipeline or DAG is named 'no_such_pipeline'" in done.stderr


def test_a_dags_pipeline_is_its_pipeline_id_param_or_its_id() -> None:
    from airflow_provider_cdc.preflight import dag_pipeline_id
    from airflow_provider_cdc.sources.spanner.change_stream_operators import (
        SpannerChangeStreamOpenWindowOperator,
    )

    try:  # Airflow 3
        from airflow.sdk import DAG, Param
    except ImportError:  # Airflow 2.11
        from airflow import DAG  # type: ignore[no-redef]
        from airflow.models.param import Param  # type: ignore[no-redef]

    with DAG("orders_dag", start_date=T0, schedule=None, params={"pipeline_id": Param("orders")}) as dag:
        SpannerChangeStreamOpenWindowOperator(
            task_id="open", instance_id="i", database_id="db1", stream="S", staging_root="/s",
            pipeline_id="{{ params.pipeline_id }}",
        )  # fmt: skip
    assert dag_pipeline_id(dag) == "orders"
    assert dag_pipeline_id(dag, {"pipeline_id": "orders_v2"}) == "orders_v2"
    with DAG("plain_dag", start_date=T0, schedule=None) as plain:
        SpannerChangeStreamOpenWindowOperator(
            task_id="open", instance_id="i", database_id="db1", stream="S", staging_root="/s"
        )
    assert dag_pipeline_id(plain) == "plain_dag"


def test_a_sources_own_connection_must_be_defined_and_the_open_step_is_found_by_what_it_offers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The preflight names no source: a source's ``*_conn_id`` field is a connection that must exist,
    and its open step is any task that offers what the preflight asks (``OpenStep``)."""
    from airflow_provider_cdc.preflight import OpenStep, dag_findings, open_tasks
    from airflow_provider_cdc.sources.tablestore.operators import (
        TablestoreOpenWindowOperator,
        TablestoreReadWindowOperator,
    )

    try:  # Airflow 3
        from airflow.sdk import DAG
    except ImportError:  # Airflow 2.11
        from airflow import DAG  # type: ignore[no-redef]

    monkeypatch.delenv("AIRFLOW_CONN_TABLESTORE_ORDERS", raising=False)
    with DAG("tablestore_dag", start_date=T0, schedule=None) as dag:
        opened = TablestoreOpenWindowOperator(
            task_id="open", table="orders", staging_root="/s", tablestore_conn_id="tablestore_orders"
        )
        TablestoreReadWindowOperator(
            task_id="read", table="orders", staging_root="/s", tablestore_conn_id="tablestore_orders"
        )
    assert open_tasks(dag) == [opened] and isinstance(opened, OpenStep)
    found = [f for f in dag_findings(dag, lambda task, value: value) if "tablestore_orders" in f.problem]
    assert len(found) == 1 and found[0].level == "error", found
    assert "tablestore_conn_id of tasks open, read" in found[0].setting
    assert "is not defined" in found[0].problem and "AIRFLOW_CONN_TABLESTORE_ORDERS" in found[0].fix


def test_a_root_no_registered_target_names_is_refused_naming_the_known_roots(tmp_path: Path) -> None:
    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
    from airflow_provider_cdc.preflight import dag_findings

    try:  # Airflow 3
        from airflow.sdk import DAG
    except ImportError:  # Airflow 2.11
        from airflow import DAG  # type: ignore[no-redef]

    locations = {"changeset_root": str(tmp_path), "lake_root": str(tmp_path), "warehouse_root": "/w"}
    with DAG("roots_dag", start_date=T0, schedule=None) as dag:
        CdcCommitWindowOperator(task_id="commit", locations=locations)
    found = [f for f in dag_findings(dag, lambda task, value: value) if "warehouse_root" in f.setting]
    assert len(found) == 1 and found[0].level == "error", found
    assert found[0].setting == "commit: locations['warehouse_root']"
    assert "'staging_root', 'changeset_root'" in found[0].fix and "'lake_root'" in found[0].fix


def test_a_source_registers_a_judge_of_its_services_answers_that_is_asked_first() -> None:
    from airflow_provider_cdc.failures import TRANSIENT, permanent_reason, register_verdict

    class ClusterBusy(Exception):
        permanent = True  # what the error says of itself; the source's judge knows better

    def judge(error: BaseException) -> object | None:
        return TRANSIENT if isinstance(error, ClusterBusy) else None

    assert permanent_reason(ClusterBusy("busy")) == "a retry meets the same setting"
    register_verdict(judge)
    register_verdict(judge)  # once per judge
    assert permanent_reason(ClusterBusy("busy")) is None
    assert permanent_reason(RuntimeError("x")) is None


# ----- the window's time, and other sources' checks ----------------------------------------------
def test_a_window_ending_in_the_future_names_the_last_applied_window_and_the_next(sqlite_url: str) -> None:
    from tests.support.clock import ManualClock

    now = T0 + timedelta(hours=1)
    store = Metastore(sqlite_url, clock=ManualClock(to_micros(now)))
    store.create_schema()
    store.record_pipeline("shop", T0)
    store.open_window("shop", "s", T0, T0 + timedelta(minutes=10))
    assert store.transition_window("shop", T0, T0 + timedelta(minutes=10), "reading", "applied")
    future = Window(now + timedelta(days=1), now + timedelta(days=1, minutes=10))
    error = store.predecessor_error("shop", future.start, future.end)
    assert error is not None and error.never_run  # fails without retries, as before
    assert "which was never run" not in str(error)
    told = "ends in the future (it is 2026-01-01T01:00:00.000000Z): a window is read once it is over"
    assert told in str(error)
    assert ("its last applied window is [2026-01-01T00:00:00.000000Z, 2026-01-01T00:10:00.000000Z) and the "
            "next one to run is [2026-01-01T00:10:00.000000Z, 2026-01-01T00:20:00.000000Z)") in str(error)
    past = Window(T0 + timedelta(minutes=20), T0 + timedelta(minutes=30))
    assert "which was never run" in str(store.predecessor_error("shop", past.start, past.end))
    assert store.window_time_problem("shop", past) is None
    store.dispose()


def test_datastream_and_table_store_sources_name_what_exists(tmp_path: Path, sqlite_url: str) -> None:
    from airflow_provider_cdc.sources.datastream.hook import DatastreamHook
    from airflow_provider_cdc.sources.tablestore.client import TablestoreStreamClient
    from airflow_provider_cdc.sources.tablestore.hook import TablestoreStreamHook
    from airflow_provider_cdc.testing.tablestore_emulator import ManualClock, TablestoreEmulator

    (tmp_path / "datastream" / "shop_orders").mkdir(parents=True)
    found = DatastreamHook(str(tmp_path / "datastrem"), "shop").check_source()
    assert [(f.setting, f.level) for f in found] == [("stream_root", "error")]
    assert f"{tmp_path / 'datastrem'} does not exist. Fix: did you mean 'datastream'?" in str(found[0])
    found = DatastreamHook(str(tmp_path / "datastream"), "shop", objects=["shop_order"]).check_source()
    assert str(found[0]) == (
        f"objects: no object 'shop_order' under {tmp_path / 'datastream'}. Fix: did you mean 'shop_orders'?"
    )

    with TablestoreEmulator(ManualClock(to_micros(T0)), shards=1, seed=1) as emulator:
        emulator.create_table("orders", [("id", "INTEGER")])
        client = TablestoreStreamClient(emulator.endpoint, emulator.instance, "test-key", "test-secret",
                                        sleep=lambda _: None, clock=lambda: from_micros(emulator.clock()))
        found = TablestoreStreamHook("order", client=client).check_source()
        assert str(found[0]).startswith(
            f"table: table 'order' does not exist in Table Store instance {emulator.instance!r}. "
            "Fix: did you mean 'orders'?"
        ), found
        assert TablestoreStreamHook("orders", client=client).check_source()[0].level == "ok"


def test_roots_are_absolute_and_writable_and_their_buckets_exist(
    cloud_storage: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_cdc.preflight import check_root

    monkeypatch.delenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", raising=False)
    (tmp_path / "root").mkdir()
    found = [str(f) for f in check_root("lake_root", str(tmp_path / "root"))]
    assert found == [f"lake_root: {tmp_path}/root is writable"]
    assert list((tmp_path / "root").iterdir()) == [], "the probe file is removed"
    (tmp_path / "file").write_text("x")
    assert str(check_root("lake_root", str(tmp_path / "file"))[0]).startswith(
        f"lake_root: {tmp_path}/file is a file"
    )
    new = check_root("lake_root", str(tmp_path / "new" / "lake"))
    assert new[0].level == "ok" and not (tmp_path / "new").exists(), "nothing is created"
    assert "'lake' is a relative path" in str(check_root("lake_root", "lake")[0])
    cloud_storage.bucket("cdc")
    found = [str(f) for f in check_root("lake_root", "gs://cdc/lake")]
    assert found == ["lake_root: gs://cdc/lake is writable"]
    assert list(cloud_storage.bucket("cdc").list_blobs()) == [], "the probe object is removed"
    missing = str(check_root("lake_root", "gs://cdx/lake")[0])
    assert missing.startswith("lake_root: Cloud Storage bucket 'cdx' does not exist (")
    assert missing.endswith("Fix: create it, or fix the root's bucket name")
