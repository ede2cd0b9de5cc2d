"""The change stream connection fields, declared once: every field reaches the hook from the operators,
the sensor and its trigger, is templated, survives the trigger's serialization, and the sensor defers
unless told not to, whatever Airflow's ``[operators] default_deferrable`` says."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_cdc.sensors.partitions_drained import SpannerChangeStreamPartitionsDrainedSensor
from airflow_provider_cdc.sources.spanner.change_stream_operators import (
    SpannerChangeStreamOpenWindowOperator,
    SpannerChangeStreamReadWindowOperator,
)
from airflow_provider_cdc.sources.spanner.connection import (
    CONNECTION_FIELDS,
    ChangeStreamConnection,
    ChangeStreamConnectionMixin,
)
from airflow_provider_cdc.triggers.partitions_drained import PartitionsDrainedTrigger

#: A value for every connection field, none of them the default.
FIELDS: dict[str, Any] = {
    "instance_id": "orders-instance",
    "database_id": "orders-db",
    "stream": "Orders",
    "project_id": "orders-project",
    "gcp_conn_id": "gcp_orders",
    "impersonation_chain": [
        "reader@orders-project.iam.gserviceaccount.com",
        "lead@orders-project.iam.gserviceaccount.com",
    ],
    "metastore_conn_id": "cdc_ledger",
    "heartbeat_ms": 2_500,
    "retention": "36h",
}
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
END = START + timedelta(minutes=10)
TASKS = (
    SpannerChangeStreamOpenWindowOperator,
    SpannerChangeStreamReadWindowOperator,
    SpannerChangeStreamPartitionsDrainedSensor,
)


@pytest.fixture
def gcp_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Google Cloud connection ``gcp_orders`` exists; no emulator is in the way."""
    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_GCP_ORDERS", json.dumps({"conn_type": "google_cloud_platform"}))


def _sensor(**kwargs: Any) -> SpannerChangeStreamPartitionsDrainedSensor:
    return SpannerChangeStreamPartitionsDrainedSensor(
        task_id="drained", timestamp=END, window_start=START, window_end=END, **kwargs
    )


def test_the_fields_are_the_dataclass_fields_and_every_value_differs_from_its_default() -> None:
    assert set(FIELDS) == set(CONNECTION_FIELDS)
    defaults = {field.name: field.default for field in dataclasses.fields(ChangeStreamConnection)}
    assert all(FIELDS[name] != defaults[name] for name in CONNECTION_FIELDS), defaults


def test_every_field_survives_sensor_trigger_serialize_and_rebuild(
    gcp_connection: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        from airflow.sdk.exceptions import TaskDeferred
    except ImportError:  # Airflow 2.11
        from airflow.exceptions import TaskDeferred  # type: ignore[no-redef]

    monkeypatch.setattr(SpannerChangeStreamPartitionsDrainedSensor, "poke", lambda self, context: False)
    sensor = _sensor(deferrable=True, poke_interval=7, timeout=60, **FIELDS)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, PartitionsDrainedTrigger)
    classpath, kwargs = trigger.serialize()
    assert kwargs == {
        **FIELDS,
        "retention": timedelta(hours=36).total_seconds(),
        "timestamp": END.isoformat(),
        "window_start": START.isoformat(),
        "window_end": END.isoformat(),
        "poll_interval": 7.0,
        "pipeline_id": None,
        "end_from_trigger": False,
        "interval_end": None,
    }
    stored = json.loads(json.dumps(kwargs))  # what the triggerer keeps
    module, name = classpath.rsplit(".", 1)
    rebuilt = getattr(importlib.import_module(module), name)(**stored)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert rebuilt.connection == trigger.connection == dataclasses.replace(
        ChangeStreamConnection(**FIELDS), retention=timedelta(hours=36).total_seconds()
    )
    hook = rebuilt.to_hook()
    assert (hook.instance_id, hook.database_id, hook.stream) == ("orders-instance", "orders-db", "Orders")
    assert (hook.resolved_project_id, hook.gcp_conn_id) == ("orders-project", "gcp_orders")
    assert list(hook.impersonation_chain) == FIELDS["impersonation_chain"]
    assert (hook.metastore_conn_id, hook.heartbeat_ms) == ("cdc_ledger", 2_500)
    assert hook.retention_argument == timedelta(hours=36)


@pytest.mark.parametrize("task", TASKS, ids=lambda task: task.__name__)
def test_every_field_is_templated_and_reaches_the_hook(task: type, gcp_connection: None) -> None:
    assert set(CONNECTION_FIELDS) <= set(task.template_fields)
    templated: dict[str, Any] = {name: f"{{{{ params.{name} }}}}" for name in CONNECTION_FIELDS}
    templated["impersonation_chain"] = ["{{ params.reader }}", "{{ params.lead }}"]
    extra = {} if task is SpannerChangeStreamPartitionsDrainedSensor else {"staging_root": "/staging"}
    operator = task(task_id="t", **templated, **extra)
    reader, lead = FIELDS["impersonation_chain"]
    operator.render_template_fields({"params": {**FIELDS, "reader": reader, "lead": lead}})
    hook = operator.to_hook()
    assert operator.connection == ChangeStreamConnection(**{**FIELDS, "heartbeat_ms": "2500"})
    assert (hook.gcp_conn_id, list(hook.impersonation_chain)) == ("gcp_orders", FIELDS["impersonation_chain"])
    assert (hook.heartbeat_ms, hook.retention_argument) == (2_500, timedelta(hours=36))
    assert operator.to_hook() is hook, "one hook while the fields stay the same"
    operator.heartbeat_ms = 3_000
    assert operator.to_hook().heartbeat_ms == 3_000


@pytest.mark.parametrize("task", [*TASKS, PartitionsDrainedTrigger], ids=lambda task: task.__name__)
def test_every_constructor_declares_the_fields_with_the_dataclass_defaults(task: type) -> None:
    declaring = next(
        klass for klass in task.__mro__
        if "__init__" in vars(klass) and "instance_id" in inspect.signature(klass.__init__).parameters
    )
    assert declaring is not ChangeStreamConnectionMixin, "an __init__ of the task itself declares them"
    parameters = inspect.signature(declaring.__init__).parameters
    for field in dataclasses.fields(ChangeStreamConnection):
        declared = parameters[field.name]
        assert declared.kind is inspect.Parameter.KEYWORD_ONLY
        assert declared.default == (inspect.Parameter.empty if field.default is dataclasses.MISSING
                                    else field.default), field.name


def test_default_args_and_partial_know_the_fields(gcp_connection: None) -> None:
    try:
        from airflow.sdk import DAG
    except ImportError:  # Airflow 2.11
        from airflow import DAG  # type: ignore[no-redef]

    shared = {"gcp_conn_id": "gcp_orders", "impersonation_chain": FIELDS["impersonation_chain"][1]}
    where = {name: FIELDS[name] for name in ("instance_id", "database_id", "stream", "project_id")}
    with DAG("fields", schedule=None, start_date=START, default_args=shared):
        sensor = SpannerChangeStreamPartitionsDrainedSensor(task_id="drained", **where)
        opener = SpannerChangeStreamOpenWindowOperator(task_id="open", staging_root="/s", **where)
        SpannerChangeStreamReadWindowOperator.partial(
            task_id="read", staging_root="/s", heartbeat_ms=2_500, retention="36h", **where
        ).expand(reader_index=[0, 1])
    for task in (sensor, opener):
        assert (task.gcp_conn_id, task.impersonation_chain) == tuple(shared.values())
    with pytest.raises(Exception, match="missing keyword argument 'stream'"):
        SpannerChangeStreamPartitionsDrainedSensor(task_id="no_stream", instance_id="i", database_id="d")


@pytest.mark.parametrize(("configured", "expected"), [("true", True), ("false", True), (None, True)])
def test_the_sensor_defers_unless_told_not_to_whatever_default_deferrable_says(
    configured: str | None, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if configured is None:
        monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", configured)
    where = {name: FIELDS[name] for name in ("instance_id", "database_id", "stream")}
    assert _sensor(**where).deferrable is expected
    assert _sensor(deferrable=not expected, **where).deferrable is (not expected)  # an argument wins


def test_the_trigger_imports_neither_the_sensor_nor_the_hook() -> None:
    code = (
        "import sys, airflow_provider_cdc.triggers.partitions_drained\n"
        "print(' '.join(m for m in sys.modules if m.startswith('airflow_provider_cdc')))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = found.stdout.split()
    assert "airflow_provider_cdc.triggers.partitions_drained" in modules
    tasks = ("airflow_provider_cdc.sensors", "airflow_provider_cdc.operators")
    assert not [m for m in modules if m.startswith(tasks)], modules
    hook = "airflow_provider_cdc.sources.spanner.change_stream_hook"
    assert hook not in modules, "imported where it is used"


@pytest.mark.parametrize("source", ["stream", "table"])
def test_an_undefined_default_connection_is_anonymous_against_the_emulator_and_adc_otherwise(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.auth.credentials import AnonymousCredentials

    from airflow_provider_cdc._compat import AirflowFailException
    from airflow_provider_cdc._errors import ConnectionNotDefinedError
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook
    from airflow_provider_cdc.sources.spanner.table_hook import SpannerTableHook

    def build(**where: Any) -> Any:
        where.update(instance_id="orders-instance", database_id="orders-db")
        if source == "stream":
            return SpannerChangeStreamHook(stream="Orders", **where)
        return SpannerTableHook(source="Snapshot", **where)

    monkeypatch.delenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_GCP_MISSING", raising=False)
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", "127.0.0.1:1")
    hook = build()
    assert hook.extras == {"is_anonymous": True}  # the google provider's own setting
    assert isinstance(hook.get_credentials(), AnonymousCredentials)
    assert hook.resolved_project_id == "emulator-project"
    assert hook.database_path == "projects/emulator-project/instances/orders-instance/databases/orders-db"
    monkeypatch.delenv("SPANNER_EMULATOR_HOST")
    assert build(project_id="p").extras == {}  # no key: Application Default Credentials
    # A connection named explicitly must exist, emulator or not: a typo never means the default.
    for emulator in ("127.0.0.1:1", None):
        if emulator:
            monkeypatch.setenv("SPANNER_EMULATOR_HOST", emulator)
        else:
            monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)
        with pytest.raises(ConnectionNotDefinedError) as caught:
            build(gcp_conn_id="gcp_missing")
        assert isinstance(caught.value, AirflowFailException)  # failed without retries
        message = str(caught.value)
        assert "connection 'gcp_missing' given as gcp_conn_id is not defined" in message
        assert "AIRFLOW_CONN_GCP_MISSING" in message and "'google_cloud_default'" in message
