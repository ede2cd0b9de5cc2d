"""The window steps (merge, Delta upsert, commit, BigQuery upsert) take their common arguments from one
declaration: the same defaults, all templated, ``impersonation_chain`` reaching the Google credentials,
and no Google connection read for a pipeline on local paths."""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.google.common.hooks.base_google import GoogleBaseHook
from support.change_sets import interval_context as _context
from support.change_sets import write_window

from airflow_provider_cdc._compat import AirflowException, AirflowNotFoundException
from airflow_provider_cdc.filesystems import STORAGE_OPTIONS_ENV
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.operators.window_step import WINDOW_STEP_FIELDS

SERVICE_ACCOUNT = "lake-writer@shop-project.iam.gserviceaccount.com"
KEYFILE = {
    "type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nabc\n", "client_email": "x@y"
}
LOCAL = {"staging_root": "/data/staging", "changeset_root": "/data/changesets", "lake_root": "/data/lake"}
REMOTE = {"staging_root": "gs://b/staging", "changeset_root": "gs://b/changesets", "lake_root": "gs://b/lake"}


def _classes() -> dict[str, type]:
    """Every window-step operator, under each path a DAG may import it from."""
    from airflow_provider_cdc.operators.bigquery_upsert import BigQueryCdcUpsertOperator as OldBigQuery
    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator
    from airflow_provider_cdc.operators.upsert import SparkUpsertWindowOperator as OldUpsert
    from airflow_provider_cdc.targets.bigquery.operators import BigQueryCdcUpsertOperator
    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    return {
        "merge": SparkMergeWindowOperator,
        "upsert": SparkUpsertWindowOperator,
        "upsert (operators.upsert)": OldUpsert,
        "commit": CdcCommitWindowOperator,
        "bigquery": BigQueryCdcUpsertOperator,
        "bigquery (operators.bigquery_upsert)": OldBigQuery,
    }


#: What each step needs besides the common arguments.
_OWN: dict[str, dict[str, Any]] = {
    "merge": {"stream_key": "projects/p/instances/i/databases/d/OrdersStream"},
    "upsert": {"pipeline_id": "shop"},
    "commit": {},
    "bigquery": {"pipeline_id": "shop", "dataset": "cdc"},
}
STEPS = sorted(_classes())


def _operator(step: str, task_id: str = "step", **kwargs: Any) -> Any:
    arguments = {"locations": dict(LOCAL), **_OWN[step.split(" ")[0]], **kwargs}
    return _classes()[step](task_id=task_id, **arguments)


@pytest.fixture
def no_google_connection(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """No Google connection is defined; every Google hook built is recorded, and reading a connection
    fails the test."""
    monkeypatch.delenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", raising=False)
    asked: list[tuple[str, Any]] = []

    def refuse(self: GoogleBaseHook, gcp_conn_id: str = "google_cloud_default", impersonation_chain=None,
               **kwargs: Any) -> None:
        asked.append((gcp_conn_id, impersonation_chain))
        raise AssertionError(f"the Google connection {gcp_conn_id!r} was read for local locations")

    monkeypatch.setattr(GoogleBaseHook, "__init__", refuse)
    return asked


@pytest.fixture
def asked_google(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """The Google hooks built, with the connection and impersonation chain each was asked for."""
    asked: list[tuple[str, Any]] = []
    original = GoogleBaseHook.__init__

    def record(self: GoogleBaseHook, gcp_conn_id: str = "google_cloud_default", impersonation_chain=None,
               **kwargs: Any) -> None:
        asked.append((gcp_conn_id, impersonation_chain))
        original(self, gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain, **kwargs)

    monkeypatch.setattr(GoogleBaseHook, "__init__", record)
    return asked


def _gcp_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **extra: Any) -> str:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "google_cloud_platform", "extra": extra})
    )
    return conn_id


# ------------------------------------------------------------------------------------- the declaration
@pytest.mark.parametrize("step", STEPS)
def test_every_window_step_has_the_same_defaults(step: str) -> None:
    op = _operator(step)
    assert op.gcp_conn_id == "google_cloud_default"
    assert op.impersonation_chain is None
    assert op.metastore_conn_id == CdcMetastoreHook.default_conn_name
    assert (op.window_start, op.window_end) == ("{{ data_interval_start }}", "{{ data_interval_end }}")
    assert op.epoch is None


@pytest.mark.parametrize("step", STEPS)
def test_every_common_argument_is_templated(step: str) -> None:
    op = _operator(
        step,
        pipeline_id="{{ params.pipeline }}",
        locations={"changeset_root": "{{ params.root }}/changesets", "lake_root": "{{ params.root }}/lake"},
        window_start="{{ params.start }}",
        window_end="{{ params.end }}",
        epoch="{{ params.epoch }}",
        gcp_conn_id="{{ params.conn }}",
        impersonation_chain="{{ params.account }}",
        metastore_conn_id="{{ params.metastore }}",
    )
    assert set(WINDOW_STEP_FIELDS) <= set(op.template_fields)
    params = {
        "pipeline": "shop", "root": "/data", "start": "2026-03-01T12:00:00Z", "end": "2026-03-01T12:10:00Z",
        "epoch": 3, "conn": "gcp_lake", "account": SERVICE_ACCOUNT, "metastore": "cdc_metastore_shop",
    }
    op.render_template_fields({"params": params})
    assert op.pipeline_id == "shop"
    assert op.locations == {"changeset_root": "/data/changesets", "lake_root": "/data/lake"}
    window = op.window()
    assert (window.start, window.end) == (
        datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc), datetime(2026, 3, 1, 12, 10, tzinfo=timezone.utc)
    )
    assert op.window_epoch() == 3
    assert (op.gcp_conn_id, op.impersonation_chain, op.metastore_conn_id) == (
        "gcp_lake", SERVICE_ACCOUNT, "cdc_metastore_shop"
    )


@pytest.mark.parametrize("step", STEPS)
def test_default_args_reach_the_common_arguments(step: str) -> None:
    try:  # Airflow 3
        from airflow.sdk import DAG
    except ImportError:  # Airflow 2.11
        from airflow import DAG  # type: ignore[no-redef]

    defaults = {"gcp_conn_id": "gcp_lake", "impersonation_chain": [SERVICE_ACCOUNT], "metastore_conn_id": "m"}
    with DAG("window_steps", schedule=None, default_args=defaults):
        op = _operator(step)
    assert (op.gcp_conn_id, op.impersonation_chain, op.metastore_conn_id) == (
        "gcp_lake", [SERVICE_ACCOUNT], "m"
    )


@pytest.mark.parametrize("step", ["merge", "upsert", "bigquery"])
def test_a_step_that_needs_locations_says_so_when_built(step: str) -> None:
    with pytest.raises((TypeError, AirflowException), match="locations"):  # Airflow 3, Airflow 2
        _classes()[step](task_id="step", **_OWN[step])


# ------------------------------------------------------------------------------------- credentials
@pytest.mark.parametrize("step", STEPS)
def test_local_locations_read_no_google_connection(step: str, no_google_connection: list) -> None:
    op = _operator(step)
    op.render_template_fields(_context())
    assert op.storage_environment() == {}
    assert op.pipeline_hook().storage_options() == {}
    assert no_google_connection == []


def test_the_upsert_applies_a_local_window_without_a_google_connection(
    tmp_path: Path, no_google_connection: list, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    from deltalake import DeltaTable

    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_HERE", json.dumps({"conn_type": "spark", "host": "local[*]"}))
    write_window(tmp_path / "changesets")
    op = SparkUpsertWindowOperator(
        task_id="upsert", conn_id="spark_here", pipeline_id="shop", metastore_conn_id=None,
        locations={"changeset_root": str(tmp_path / "changesets"), "lake_root": str(tmp_path / "lake")},
    )
    op.render_template_fields(_context())
    with caplog.at_level(logging.DEBUG):
        op.execute(_context())
    assert DeltaTable(str(tmp_path / "lake" / "Orders")).version() >= 0
    assert no_google_connection == []
    assert not [r for r in caplog.records if "google_cloud_default" in r.getMessage()]


def _submitted(op: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the operator hands spark-submit (its fields when SparkSubmitOperator runs)."""
    seen: dict[str, Any] = {}

    def submit(self: Any, context: Any) -> None:
        seen.update(env=dict(self.env_vars or {}), args=list(self.application_args or []))

    monkeypatch.setattr(SparkSubmitOperator, "execute", submit)
    op.execute(_context())
    return seen


@pytest.mark.parametrize("conn", ["spark_here", "spark_yarn"])
def test_the_merge_of_local_locations_runs_without_a_google_connection(
    conn: str, no_google_connection: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = {"spark_here": "local[1]", "spark_yarn": "yarn"}[conn]
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn.upper()}", json.dumps({"conn_type": "spark", "host": host}))
    op = _operator("merge", conn_id=conn, metastore_conn_id=None)
    op.render_template_fields(_context())
    seen = _submitted(op, monkeypatch)
    assert STORAGE_OPTIONS_ENV not in seen["env"]  # nothing to refuse on YARN either
    assert no_google_connection == []


def test_object_store_locations_read_the_default_connection(
    asked_google: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    _gcp_connection(monkeypatch, "google_cloud_default", keyfile_dict=json.dumps(KEYFILE))
    op = _operator("upsert", locations=dict(REMOTE))
    op.render_template_fields(_context())
    options = json.loads(op.storage_environment()[STORAGE_OPTIONS_ENV])
    assert json.loads(options["google_service_account_key"]) == KEYFILE
    assert asked_google == [("google_cloud_default", None)]


def test_a_missing_default_connection_means_application_default_credentials(
    asked_google: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", raising=False)
    op = _operator("commit", locations=dict(REMOTE))
    op.render_template_fields(_context())
    assert op.pipeline_hook().storage_options() == {}
    named = _operator("commit", locations=dict(REMOTE), gcp_conn_id="gcp_missing")
    named.render_template_fields(_context())
    with pytest.raises(AirflowNotFoundException):
        named.pipeline_hook().storage_options()


@pytest.mark.parametrize("step", STEPS)
def test_the_impersonation_chain_reaches_the_google_hook_of_the_storage(
    step: str, asked_google: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = _gcp_connection(monkeypatch, "gcp_lake")
    op = _operator(step, locations=dict(REMOTE), gcp_conn_id=conn, impersonation_chain=[SERVICE_ACCOUNT])
    op.render_template_fields(_context())
    hook = op.pipeline_hook()
    assert (hook.gcp_conn_id, tuple(hook.impersonation_chain)) == (conn, (SERVICE_ACCOUNT,))
    # The storage clients (Delta, pyarrow) take a key or Application Default Credentials, never a
    # short-lived impersonated token: the step refuses rather than act as the connection's identity.
    with pytest.raises(ValueError, match="impersonation_chain"):
        op.storage_environment()
    with pytest.raises(ValueError, match="impersonation_chain"):
        hook.storage_options()
    assert len(asked_google) == 2
    assert all((conn_id, tuple(chain)) == (conn, (SERVICE_ACCOUNT,)) for conn_id, chain in asked_google)


def test_the_bigquery_upsert_hands_its_hook_the_impersonation_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    from unittest import mock

    op = _operator("bigquery", gcp_conn_id="gcp_bq", impersonation_chain=SERVICE_ACCOUNT)
    op.render_template_fields(_context())
    with mock.patch("airflow_provider_cdc.targets.bigquery.operators.BigQueryCdcHook") as hook:
        hook.return_value.apply_window.return_value = {"project": "p-1", "dataset": "d", "tables": {}}
        output = op.execute(_context())
    assert hook.call_args.args[:2] == ("gcp_bq", SERVICE_ACCOUNT)
    assert (output["target"], output["location"], output["tables"]) == ("bigquery", "p-1.d", [])


def test_credentials_of_the_default_connection_stay_off_a_yarn_command_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_provider_cdc.operators._spark import job_credentials

    env = {STORAGE_OPTIONS_ENV: json.dumps({"google_service_account_key": json.dumps(KEYFILE)})}
    assert job_credentials("yarn", env, "google_cloud_default") == {}
    assert job_credentials("local[*]", env, "google_cloud_default") == env
    assert job_credentials("spark://host:7077", env, "gcp_lake") == env
    with pytest.raises(ValueError, match="command line") as refused:
        job_credentials("k8s://https://cluster", env, "gcp_lake")
    assert "PRIVATE KEY" not in str(refused.value)


# ------------------------------------------------------------------------------------- BigQuery fake
def test_the_bigquery_hook_reaches_local_endpoints_anonymously_without_a_connection(
    no_google_connection: list,
) -> None:
    from google.auth.credentials import AnonymousCredentials

    from airflow_provider_cdc.targets.bigquery.hook import BigQueryCdcHook

    hook = BigQueryCdcHook(api_endpoint="http://127.0.0.1:9050", write_endpoint="127.0.0.1:9060")
    credentials, project = hook.get_credentials_and_project_id()
    assert isinstance(credentials, AnonymousCredentials) and not project
    assert hook.extras == {"is_anonymous": True}
    assert no_google_connection == []
    with pytest.raises(AssertionError, match="was read"):  # other endpoints read the connection
        BigQueryCdcHook(api_endpoint="https://bigquery.googleapis.com", write_endpoint="127.0.0.1:9060")


# ------------------------------------------------------------------------------------- the window handle
def _handle(**changes: Any) -> Any:
    from airflow_provider_cdc.core.contract.window_handle import WindowHandle
    from airflow_provider_cdc.core.window import Window

    start = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
    window = Window(start, start.replace(minute=10))
    fields = {
        "pipeline": "shop", "source_key": "projects/p/instances/i/databases/d/OrdersStream", "window": window,
        "staging_root": "/data/staging", "epoch": 4, "window_basis": "arrival",
        "staging_location": "/data/staging/orders_files/" + window.window_id, **changes,
    }  # fmt: skip
    return WindowHandle(**fields)


def _step_with_handle(step: str, window: Any, **kwargs: Any) -> Any:
    own = {k: v for k, v in _OWN[step.split(" ")[0]].items() if k != "stream_key"}  # the merge needs no key
    return _classes()[step](task_id="step", locations=dict(LOCAL), window=window, **{**own, **kwargs})


@pytest.mark.parametrize("form", ["dict", "json", "handle"])
@pytest.mark.parametrize("step", STEPS)
def test_every_step_takes_the_open_steps_window_handle_whole(step: str, form: str) -> None:
    handle = _handle()
    given = {"dict": handle.to_dict(), "json": json.dumps(handle.to_dict()), "handle": handle}[form]
    op = _step_with_handle(step, "{{ params.window }}" if form == "json" else given)
    assert "window_handle" in op.template_fields
    op.render_template_fields(_context(params={"window": given}))  # a data interval that is not the window
    assert op.window() == handle.window
    assert (op.window_epoch(), op.pipeline_of({}), op.pipeline_id) == (4, "shop", "shop")
    assert op.handle() is op.handle()  # parsed once
    if step == "merge":
        arguments = op.merge_arguments()
        assert arguments[arguments.index("--staging") + 1] == handle.staging_location  # as the open step said
        assert arguments[arguments.index("--window-basis") + 1] == "arrival"
        assert arguments[arguments.index("--window-start") + 1] == "2026-03-01T12:00:00.000000Z"
        assert op.source_key() == handle.source_key


@pytest.mark.parametrize("step", STEPS)
def test_a_handle_and_a_different_explicit_argument_fail_without_retries_naming_both(step: str) -> None:
    from airflow_provider_cdc._compat import AirflowFailException

    handle = _handle()
    for name, value, shown in [
        ("window_start", "2026-03-01T11:00:00Z", "'2026-03-01T11:00:00Z'"),
        ("epoch", "3", "'3'"),
        ("pipeline_id", "payments", "'payments'"),
    ]:
        op = _step_with_handle(step, handle.to_dict(), **{name: value})
        differs = rf"{name} {re.escape(shown)} differs from the window handle's"
        with pytest.raises(AirflowFailException, match=differs):
            op.render_template_fields(_context())
    # the same values agree
    same = _step_with_handle(step, handle.to_dict(), window_start="2026-03-01T12:00:00Z", epoch=4)
    same.render_template_fields(_context())
    assert same.window() == handle.window


def test_without_a_handle_the_separate_arguments_still_work_and_the_merge_needs_one_or_a_key() -> None:
    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator

    op = _operator("merge", epoch="2")
    op.render_template_fields(_context())
    assert op.handle() is None and op.window_epoch() == 2
    arguments = op.merge_arguments()
    assert arguments[arguments.index("--staging") + 1].startswith("/data/staging/OrdersStream/")
    with pytest.raises(TypeError, match="needs window .* or stream_key"):
        SparkMergeWindowOperator(task_id="merge", locations=dict(LOCAL))
    older = {k: v for k, v in _handle().to_dict().items() if k != "staging_location"}  # an older XCom
    merge = _step_with_handle("merge", older)
    merge.render_template_fields(_context())
    arguments = merge.merge_arguments()
    assert arguments[arguments.index("--staging") + 1].startswith("/data/staging/OrdersStream/")
    broken = _step_with_handle("merge", '{"pipeline": "shop"}')
    with pytest.raises(AirflowException, match="window must be the open step's window handle"):
        broken.render_template_fields(_context())


def test_the_completion_sensor_waits_for_the_handles_source_and_window() -> None:
    from airflow_provider_cdc._compat import AirflowFailException
    from airflow_provider_cdc.sensors.window_complete import WindowCompleteSensor

    handle = _handle()
    sensor = WindowCompleteSensor(task_id="complete", window=handle.to_dict(), deferrable=False)
    sensor.render_template_fields(_context())
    assert sensor.source_key == handle.source_key and sensor._window() == handle.window
    assert sensor.trigger().window_start == handle.window.start.isoformat()
    assert not sensor.start_from_trigger  # the open task's handle is an XCom the triggerer cannot read
    other = WindowCompleteSensor(
        task_id="complete", window=handle.to_dict(), window_end="2026-03-01T12:20:00Z", deferrable=False
    )
    differs = "window_end '2026-03-01T12:20:00Z' differs from the window handle's 2026-03-01T12:10:00"
    with pytest.raises(AirflowFailException, match=differs):
        other.render_template_fields(_context())
    with pytest.raises(TypeError, match="needs window"):
        WindowCompleteSensor(task_id="complete")


def test_locations_name_the_pipelines_roots_and_each_registered_targets() -> None:
    from airflow_provider_cdc._errors import InvalidSettingError
    from airflow_provider_cdc.operators._window import known_roots, locations_of

    assert known_roots()[:2] == ["staging_root", "changeset_root"] and "lake_root" in known_roots()
    roots = locations_of({"staging_root": "/s", "changeset_root": "/c", "lake_root": "/l/"}, "lake_root")
    assert (roots.staging_root, roots.target_roots, roots.root("lake_root")) == (
        "/s",
        {"lake_root": "/l/"},
        "/l",
    )
    assert locations_of(roots) == roots
    with pytest.raises(InvalidSettingError, match=r"unknown key\(s\) \['warehouse_root'\].*'lake_root'"):
        locations_of({"staging_root": "/s", "warehouse_root": "/w"})
    with pytest.raises(InvalidSettingError, match=r"locations lacks \['lake_root'\]"):
        locations_of({"changeset_root": "/c"}, "changeset_root", "lake_root")
    with pytest.raises(ValueError, match="lake_root is not set"):
        locations_of({"changeset_root": "/c"}).root("lake_root")
