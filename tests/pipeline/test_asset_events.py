"""Data-aware scheduling: the tables' asset names, and the commit's asset events reaching Airflow's
database and queueing the example consumer DAG (``example_dags/cdc_table_consumer.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.asset_events import (
    END,
    EXAMPLE_DAGS,
    PIPELINE,
    PRODUCER_DAG_ID,
    START,
    WINDOW,
    expected_orders_extra,
    producer_home,
    window_in_lake,
)

from airflow_provider_cdc import assets
from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.targets.bigquery.names import bigquery_table_uri, split_bigquery_dataset
from airflow_provider_cdc.targets.delta.names import delta_table_uri


# ------------------------------------------------------------------------------------------ naming
@pytest.mark.parametrize(
    ("lake_root", "uri"),
    [
        ("/data/lake", "file:///data/lake/Orders"),
        ("/data/lake/", "file:///data/lake/Orders"),
        ("file:///data/lake", "file:///data/lake/Orders"),
        ("file://localhost/data//lake/", "file:///data/lake/Orders"),
        ("/data/my lake/é", "file:///data/my%20lake/%C3%A9/Orders"),  # ASCII, as Airflow 2 requires
        ("file:///data/my%20lake", "file:///data/my%20lake/Orders"),  # not encoded twice
        ("gs://bucket/cdc/lake", "gs://bucket/cdc/lake/Orders"),
        ("gs://bucket", "gs://bucket/Orders"),
        ("GS://bucket/lake/", "gs://bucket/lake/Orders"),
        ("s3://bucket/lake", "s3://bucket/lake/Orders"),
    ],
)
def test_a_delta_table_is_named_by_its_location(lake_root: str, uri: str) -> None:
    from airflow_provider_cdc._compat import Asset

    assert delta_table_uri(lake_root, "Orders") == uri
    assert Asset(uri=uri).uri == uri  # Airflow's own normalisation leaves it unchanged


def test_a_bigquery_table_is_named_as_the_google_provider_names_it() -> None:
    from airflow.providers.google.assets.bigquery import create_asset

    uri = bigquery_table_uri("demo-project.cdc_demo", "Orders")
    assert uri == "bigquery://demo-project/cdc_demo/Orders"
    assert create_asset(project_id="demo-project", dataset_id="cdc_demo", table_id="Orders").uri == uri
    scoped = split_bigquery_dataset("example.com:my-project.sales")
    assert scoped == ("example.com:my-project", "sales")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: delta_table_uri("lake", "Orders"), "is relative"),
        (lambda: delta_table_uri("file:relative/lake", "Orders"), "is relative"),
        (lambda: delta_table_uri("file://host/lake", "Orders"), "names no host"),
        (lambda: delta_table_uri("gs:///lake", "Orders"), "names its bucket"),
        (lambda: delta_table_uri("gs://user:secret@bucket/lake", "Orders"), "credentials"),
        (lambda: delta_table_uri("gs://bucket/lake?x=1", "Orders"), "query"),
        (lambda: delta_table_uri("airflow://lake", "Orders"), "reserved"),
        (lambda: delta_table_uri("", "Orders"), "non-empty"),
        (lambda: delta_table_uri("/lake", "Orders/../x"), "invalid Delta table name"),
        (lambda: delta_table_uri("/" + "l" * 1500, "Orders"), "Airflow allows 1500"),
        (lambda: bigquery_table_uri("cdc_demo", "Orders"), "expected project.dataset"),
        (lambda: bigquery_table_uri("Demo_Project.cdc", "Orders"), "expected project.dataset"),
        (lambda: bigquery_table_uri("p-1.cdc-demo", "Orders"), "expected project.dataset"),
        (lambda: bigquery_table_uri("demo-project.cdc", "a.b"), "invalid BigQuery table name"),
        (lambda: assets.alias_name("no spaces"), "no asset alias for pipeline"),
    ],
)
def test_a_name_no_asset_can_have_is_refused_saying_why(call: Any, message: str) -> None:
    with pytest.raises(assets.AssetNameError, match=message):
        call()


def test_the_former_names_still_import_from_assets() -> None:
    assert assets.delta_table_uri is delta_table_uri and assets.bigquery_table_uri is bigquery_table_uri
    assert assets.lake_root_uri("/data/lake/") == "file:///data/lake"


def test_the_events_of_a_commit_carry_the_window_and_each_tables_watermark() -> None:
    assert assets.alias_name(PIPELINE) == "cdc:shop"

    def entry(uri: str | None, mark: str | None, rows: int | None) -> dict[str, Any]:
        return {"uri": uri, "watermark": mark, "rows": rows}

    summary = {
        "window_id": WINDOW.window_id,
        "tables": {
            "delta": {
                "Orders": entry("gs://b/lake/Orders", "2026-03-01T12:10:00.000000Z", 3),
                "Customers": entry("gs://b/lake/Customers", "2026-03-01T12:10:00.000000Z", 0),
            },
            "bigquery": {
                "Orders": entry("bigquery://p-1/ds/Orders", "2026-03-01T12:09:58.000000Z", 3),
                "Items": entry("bigquery://p-1/ds/Items", None, 1),  # no watermark yet
                "Lines": entry(None, "2026-03-01T12:09:58.000000Z", 1),  # no asset name
            },
        },
    }
    events = assets.table_events(summary, WINDOW)
    assert [uri for uri, _ in events] == [
        "bigquery://p-1/ds/Orders", "gs://b/lake/Customers", "gs://b/lake/Orders"
    ]
    assert events[2][1] == {
        "window_start": "2026-03-01T12:00:00.000000Z",
        "window_end": "2026-03-01T12:10:00.000000Z",
        "window_id": WINDOW.window_id,
        "target": "delta",
        "table": "Orders",
        "watermark": "2026-03-01T12:10:00.000000Z",
        "rows": 3,
    }
    assert events[0][1]["watermark"] == "2026-03-01T12:09:58.000000Z"
    assert assets.table_events({"window_id": WINDOW.window_id}, WINDOW) == []


# ----------------------------------------------------------------------- Airflow 3: database, queue
RUN = """
import json, sys, time
from airflow.dag_processing.dagbag import DagBag
from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
from airflow.utils.db import upgradedb
from airflow.utils.session import create_session

started = time.monotonic()
upgradedb()  # in this process: 'airflow db migrate' would import Airflow once more
print(f"migrated in {time.monotonic() - started:.1f} s", file=sys.stderr)
bag = DagBag(sys.argv[1])
assert not bag.import_errors, bag.import_errors
run = bag.dags[sys.argv[2]].test()
assert run.state == "success", run.state
print(f"migrated and ran in {time.monotonic() - started:.1f} s", file=sys.stderr)
with create_session() as session:
    events = [
        {"uri": e.asset.uri, "extra": e.extra, "dag": e.source_dag_id,
         "aliases": [a.name for a in e.source_aliases]}
        for e in session.query(AssetEvent).order_by(AssetEvent.id)
    ]
    queued = sorted(
        (q.target_dag_id, session.get(AssetModel, q.asset_id).uri) for q in session.query(AssetDagRunQueue)
    )
print(json.dumps({"events": events, "queued": queued}))
"""


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A run of a DAG whose commit task has the pipeline's alias as outlet, beside the example
    consumer DAG scheduled on ``{lake_root}/Orders``, in a fresh Airflow home; the asset events and
    the consumer queue Airflow's database then holds."""
    locations, env = producer_home(tmp_path_factory.mktemp("assets"))
    command = [sys.executable, "-c", RUN, env["AIRFLOW__CORE__DAGS_FOLDER"], PRODUCER_DAG_ID]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    print(*(line for line in done.stderr.splitlines() if line.startswith("migrated")), sep="\n")  # -s
    return {"lake_root": locations["lake_root"], **json.loads(done.stdout.strip().splitlines()[-1])}


@pytest.mark.dag_run
def test_the_commit_emits_an_event_per_applied_table_into_airflows_database(
    committed: dict[str, Any],
) -> None:
    orders = f"file://{committed['lake_root']}/Orders"
    customers = f"file://{committed['lake_root']}/Customers"
    events = committed["events"]
    assert [e["uri"] for e in events] == [customers, orders]
    assert {(e["dag"], tuple(e["aliases"])) for e in events} == {(PRODUCER_DAG_ID, ("cdc:shop",))}
    assert events[1]["extra"] == expected_orders_extra()
    assert events[0]["extra"]["rows"] == 1


@pytest.mark.dag_run
def test_the_example_consumer_is_queued_on_the_orders_table_only(committed: dict[str, Any]) -> None:
    assert committed["queued"] == [["cdc_table_consumer", f"file://{committed['lake_root']}/Orders"]]


def _metastore_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    monkeypatch.setenv("AIRFLOW_CONN_CDC_ASSETS_TEST", json.dumps(
        {"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": url}}
    ))
    return url


def test_a_window_committed_again_emits_again_and_bigquery_tables_are_named_by_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow records outlet events only when the task succeeds: a commit whose task failed after the
    metastore write must emit on its retry, so every commit of the window emits."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator, table_asset_outlets

    locations = window_in_lake(tmp_path, _metastore_connection(tmp_path, monkeypatch))
    from airflow_provider_cdc.targets.bigquery.commit import applied_output

    # the BigQuery upsert's output: its report names the project and dataset of its tables
    upsert_output = applied_output({
        "window_id": WINDOW.window_id, "project": "demo-project", "dataset": "cdc_demo", "tables": {
            "Orders": {"table": "Orders", "rows": 2, "upsert_stream_apply_watermark": "2026-03-01T12:09:59Z"},
        }}, WINDOW.end_micros).to_dict()  # fmt: skip
    outlets = table_asset_outlets(PIPELINE)
    emitted = []
    for _ in range(2):
        accessors = OutletEventAccessors()
        CdcCommitWindowOperator(
            task_id="commit", outlets=outlets, pipeline_id=PIPELINE, window_start=START, window_end=END,
            locations=locations, metastore_conn_id="cdc_assets_test",
            applied=[_delta_output(locations), upsert_output],
        ).execute({"outlet_events": accessors})
        emitted.append([
            (e.dest_asset_key.uri, e.extra["target"], e.extra["rows"], e.extra["watermark"])
            for e in accessors[outlets[0]].asset_alias_events
        ])
    lake = locations["lake_root"]
    assert emitted[0] == emitted[1] == [
        ("bigquery://demo-project/cdc_demo/Orders", "bigquery", 2, "2026-03-01T12:09:59.000000Z"),
        (f"file://{lake}/Customers", "delta", 1, "2026-03-01T12:10:00.000000Z"),
        (f"file://{lake}/Orders", "delta", 2, "2026-03-01T12:10:00.000000Z"),
    ]


def _delta_output(locations: dict[str, str]) -> dict[str, Any]:
    """The Delta upsert's output for the window the lake holds."""
    from airflow_provider_cdc.changesets.reader import ChangeSetReader
    from airflow_provider_cdc.core.contract.locations import WindowLocations
    from airflow_provider_cdc.targets.delta.commit import held_output

    change_set = WindowLocations(changeset_root=locations["changeset_root"]).change_set(WINDOW)
    changed = {t.name: t.expected_rows for t in ChangeSetReader(change_set).tables()}
    return held_output(locations["lake_root"], {}, changed, PIPELINE, WINDOW).to_dict()


def test_without_outlet_events_in_the_context_the_commit_still_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator, table_asset_outlets

    locations = window_in_lake(tmp_path, _metastore_connection(tmp_path, monkeypatch))
    commit = CdcCommitWindowOperator(
        task_id="commit", outlets=table_asset_outlets(PIPELINE), pipeline_id=PIPELINE, window_start=START,
        window_end=END, locations=locations, metastore_conn_id="cdc_assets_test",
    )
    assert commit.execute({})["watermarks"] == {"delta": {"Customers": "2026-03-01T12:10:00.000000Z",
                                                           "Orders": "2026-03-01T12:10:00.000000Z"}}


def test_a_lake_root_no_asset_can_name_fails_the_commit_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator, table_asset_outlets

    store = Metastore(_metastore_connection(tmp_path, monkeypatch))
    store.create_schema()
    store.open_window(PIPELINE, "OrdersStream", START, END)
    commit = CdcCommitWindowOperator(
        task_id="commit", outlets=table_asset_outlets(PIPELINE), pipeline_id=PIPELINE, window_start=START,
        window_end=END, locations={"changeset_root": str(tmp_path), "lake_root": "file://host/lake"},
        metastore_conn_id="cdc_assets_test",
    )
    with pytest.raises(assets.AssetNameError, match="names no host"):
        commit.execute({})
    assert store.get_window(PIPELINE, START, END).state.value == "reading"


def test_the_consumer_dag_parses_scheduled_on_the_demo_orders_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("CDC_DEMO_HOME", "/srv/cdc-demo")
    bag = DagBag(str(EXAMPLE_DAGS))
    assert bag.import_errors == {}
    dag = bag.dags["cdc_table_consumer"]
    assert [a.uri for a in dag.timetable.asset_condition.objects] == ["file:///srv/cdc-demo/lake/Orders"]
    assert {t.task_id for t in dag.tasks} == {"log_table_events"}
    # The example pipelines declare no alias (a bare `airflow dags backfill` on 2.11 cannot register one).
    for dag_id, pipeline in bag.dags.items():
        if dag_id != "cdc_table_consumer":
            assert pipeline.get_task("commit").outlets == []


def test_the_consumer_task_reads_each_triggering_event_once() -> None:
    """On Airflow 3 an event through an alias is listed under its asset and under the alias: the
    consumer logs it once."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.execution_time.comms import AssetEventDagRunReferenceResult
    from airflow.sdk.execution_time.context import TriggeringAssetEventsAccessor

    uri = "file:///srv/cdc-demo/lake/Orders"
    extras = [{"window_id": f"{n}-{n + 1}", "watermark": f"2026-03-01T12:{n:02d}:00.000000Z"} for n in (1, 2)]
    events = [
        AssetEventDagRunReferenceResult(
            asset={"name": uri, "uri": uri, "extra": {}}, extra=extra, source_task_id="commit",
            source_dag_id="spanner_change_stream_to_lake", source_run_id="r", source_map_index=-1,
            source_aliases=[{"name": "cdc:spanner_change_stream_to_lake"}], timestamp=END,
        )
        for extra in extras
    ]
    task = DagBag(str(EXAMPLE_DAGS)).dags["cdc_table_consumer"].get_task("log_table_events")
    logged = task.python_callable(triggering_asset_events=TriggeringAssetEventsAccessor.build(events))
    assert logged == [{"uri": uri, **extra} for extra in extras]
