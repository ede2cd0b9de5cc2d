"""Spanner change stream → Delta Lake → BigQuery CDC tables, one window per data interval, exactly once.

    initial_snapshot (first run only) ─► wait_parents ─► open_window ─► read (mapped) ─► drained
        ─► merge (Spark) ─► upsert (Spark) ─► to_bigquery ─► commit

The window steps, and the initial snapshot that the first run applies as the window ``[T - 1µs, T)``
(Delta, then BigQuery), are those of ``spanner_change_stream_to_lake``; then ``to_bigquery`` streams the
window's change set to ``{bigquery_project}.{bigquery_dataset}.{table}`` through BigQuery's change data
capture (UPSERT/DELETE rows with ``_CHANGE_SEQUENCE_NUMBER``, Storage Write API default stream). A
Spanner UPDATE carries only the columns it changed, so its row image is completed from the Delta table
the upsert just applied. The commit records the BigQuery tables' ``upsert_stream_apply_watermark`` (the
``to_bigquery`` output) beside the Delta tables' watermarks.

Every setting is a DAG param (or an Airflow connection) with a default that runs on this machine with
nothing configured: the change-stream emulator's demo database (``SPANNER_EMULATOR_HOST``), the SQLite
metastore under ``$AIRFLOW_HOME``, Spark ``local[*]``, Delta tables under
``$AIRFLOW_HOME/cdc-demo/bigquery`` and the dataset ``demo-project.cdc_demo`` of the loopback BigQuery
fake (``python -m airflow_provider_cdc.testing.bigquery_fake --dataset demo-project.cdc_demo``) whose
endpoints ``CDC_BIGQUERY_API_ENDPOINT`` and ``CDC_BIGQUERY_WRITE_ENDPOINT`` give (loopback endpoints
are reached with anonymous credentials and no connection). On Cloud Composer set the Spanner params,
the roots (``gs://``), ``bigquery_project`` and ``bigquery_dataset`` (an existing dataset) and leave
the endpoints unset: ``google_cloud_default`` then carries the credentials for Spanner, Cloud Storage
and BigQuery. The pipeline id differs from the lake DAG's, so both DAGs can share one metastore.

Settings that shape the DAG itself are read from the environment when it is parsed, as in the lake
DAG: ``CDC_WINDOW_MINUTES`` (default 10) or ``CDC_WINDOW_SECONDS``, ``CDC_START_DATE`` (RFC 3339,
default 2026-01-01T00:00:00Z), ``CDC_READERS`` (default 2) and ``CDC_DEMO_HOME``.
"""

from __future__ import annotations

import os
from datetime import timedelta

try:  # Airflow 3
    from airflow.sdk import DAG, Param
except ImportError:  # Airflow 2.11
    from airflow import DAG  # type: ignore[no-redef]
    from airflow.models.param import Param  # type: ignore[no-redef]

from airflow.timetables.interval import DeltaDataIntervalTimetable

from airflow_provider_cdc.dag_settings import DagSettings
from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator
from airflow_provider_cdc.sensors.partitions_drained import SpannerChangeStreamPartitionsDrainedSensor
from airflow_provider_cdc.sources.spanner.change_stream_operators import (
    SpannerChangeStreamOpenWindowOperator,
    SpannerChangeStreamReadWindowOperator,
)
from airflow_provider_cdc.targets.bigquery.operators import BigQueryCdcUpsertOperator
from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator
from airflow_provider_cdc.task_groups import epoch_template, initial_snapshot, snapshot_start, window_template

DAG_ID = "spanner_change_stream_to_bigquery"


# Settings that shape the DAG itself, read from the environment when the file is parsed.
SETTINGS = DagSettings.from_env()
DEMO_HOME = SETTINGS.demo_home
WINDOW = SETTINGS.window
START_DATE = SETTINGS.start_date
READERS = SETTINGS.readers  # mapped over a fixed list, as in the lake DAG
# BigQuery endpoints: unset for BigQuery itself; a local fake's for the embedded defaults.
BIGQUERY_API_ENDPOINT = os.environ.get("CDC_BIGQUERY_API_ENDPOINT", "").strip()
BIGQUERY_WRITE_ENDPOINT = os.environ.get("CDC_BIGQUERY_WRITE_ENDPOINT", "").strip()

with DAG(
    dag_id=DAG_ID,
    description="Spanner change stream to Delta Lake and BigQuery CDC tables, one window per data interval",
    start_date=START_DATE,
    schedule=DeltaDataIntervalTimetable(WINDOW),  # data intervals [start, start + WINDOW)
    catchup=True,
    max_active_runs=1,  # windows apply in order
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    params={
        "project_id": Param("demo-project", type="string", description="Google Cloud project of Spanner"),
        "instance_id": Param("demo-instance", type="string", description="Spanner instance"),
        "database_id": Param("demo", type="string", description="Spanner database"),
        "stream": Param("WorkloadChanges", type="string", description="change stream (READ_<stream>)"),
        "pipeline_id": Param(
            DAG_ID, type="string", description="names the pipeline in the metastore, Delta and BigQuery"
        ),
        "initial_snapshot": Param(
            True, type="boolean", description="start with a snapshot of the watched tables (first run)"
        ),
        # Staging belongs to the stream (its partitions' claims are shared by pipelines reading it);
        # change sets and Delta tables belong to the pipeline.
        "staging_root": Param(
            f"{DEMO_HOME}/staging", type="string", description="staged changes (local or gs://)"
        ),
        "changeset_root": Param(
            f"{DEMO_HOME}/bigquery/changesets", type="string", description="merged change sets"
        ),
        "lake_root": Param(
            f"{DEMO_HOME}/bigquery/lake", type="string", description="Delta tables (local or gs://)"
        ),
        "bigquery_project": Param("demo-project", type="string", description="BigQuery project"),
        "bigquery_dataset": Param("cdc_demo", type="string", description="BigQuery dataset (must exist)"),
        "bigquery_api_endpoint": Param(
            BIGQUERY_API_ENDPOINT, type="string", description="BigQuery REST endpoint (blank: BigQuery)"
        ),
        "bigquery_write_endpoint": Param(
            BIGQUERY_WRITE_ENDPOINT, type="string", description="Storage Write API endpoint (blank: BigQuery)"
        ),
    },
    tags=["cdc", "spanner", "delta", "bigquery", "example"],
) as dag:
    spanner = {
        "project_id": "{{ params.project_id }}",
        "instance_id": "{{ params.instance_id }}",
        "database_id": "{{ params.database_id }}",
        "stream": "{{ params.stream }}",
    }
    window = {
        "staging_root": "{{ params.staging_root }}",
        "pipeline_id": "{{ params.pipeline_id }}",
        **spanner,
    }

    locations = {
        "staging_root": "{{ params.staging_root }}",
        "changeset_root": "{{ params.changeset_root }}",
        "lake_root": "{{ params.lake_root }}",
    }
    # Where the change sets go in BigQuery, for the snapshot and every window.
    bigquery = {
        "project_id": "{{ params.bigquery_project }}",
        "dataset": "{{ params.bigquery_dataset }}",
        "api_endpoint": "{{ params.bigquery_api_endpoint }}",
        "write_endpoint": "{{ params.bigquery_write_endpoint }}",
        "max_staleness": timedelta(minutes=15),  # the tables' max_staleness option
    }
    snapshot = initial_snapshot(
        first_window_start=START_DATE,
        source="{{ params.pipeline_id }}_snapshot",
        project_id="{{ params.project_id }}",
        instance_id="{{ params.instance_id }}",
        database_id="{{ params.database_id }}",
        change_stream="{{ params.stream }}",
        locations=locations,
        pipeline_id="{{ params.pipeline_id }}",
        readers=READERS,
        enabled="{{ params.initial_snapshot }}",
        bigquery=bigquery,
    )
    wait_parents = SpannerChangeStreamPartitionsDrainedSensor(
        task_id="wait_parents",
        trigger_rule="none_failed",  # after the snapshot, or when later runs skip it
        timestamp="{{ data_interval_start }}",
        pipeline_id="{{ params.pipeline_id }}",  # the window before this one must be applied
        poke_interval=5,
        timeout=3600,
        **spanner,
    )
    open_window = SpannerChangeStreamOpenWindowOperator(
        task_id="open_window",
        readers=READERS,
        first_window_start=f"{{{{ '{snapshot_start(START_DATE)}' if params.initial_snapshot "
        f"else '{START_DATE.isoformat()}' }}}}",
        **window,
    )
    read = SpannerChangeStreamReadWindowOperator.partial(task_id="read", **window).expand(
        reader_index=list(range(READERS))
    )
    drained = SpannerChangeStreamPartitionsDrainedSensor(
        task_id="drained",
        timestamp="{{ data_interval_end }}",
        window_start="{{ data_interval_start }}",
        window_end="{{ data_interval_end }}",
        poke_interval=2,
        timeout=3600,
        **spanner,
    )
    merge = SparkMergeWindowOperator(
        task_id="merge",
        locations=locations,
        # The stream's metastore key as the opening recorded it (the window handle it pushed).
        stream_key=window_template(open_window.task_id),
        pipeline_id="{{ params.pipeline_id }}",
        # This run's opening of the window: a run whose window was opened again since changes nothing.
        epoch=epoch_template(open_window.task_id),
    )
    upsert = SparkUpsertWindowOperator(
        task_id="upsert",
        locations=locations,
        pipeline_id="{{ params.pipeline_id }}",
        epoch=epoch_template(open_window.task_id),
    )
    # The same change set to BigQuery; partial row images are completed from the Delta tables.
    to_bigquery = BigQueryCdcUpsertOperator(
        task_id="to_bigquery",
        locations=locations,
        pipeline_id="{{ params.pipeline_id }}",
        epoch=epoch_template(open_window.task_id),
        **bigquery,
    )
    commit = CdcCommitWindowOperator(
        task_id="commit",
        pipeline_id="{{ params.pipeline_id }}",
        read_summaries=read.output,
        epoch=epoch_template(open_window.task_id),
        # Each BigQuery table's upsert_stream_apply_watermark, as to_bigquery read it after the apply.
        bigquery_watermarks=to_bigquery.output,
        locations=locations,
        # max_staleness=timedelta(minutes=30) would fail the run when a Delta table's or a BigQuery
        # table's apply watermark lags the current time by more (the demo's windows lie in the past).
    )

    snapshot >> wait_parents >> open_window >> read >> drained >> merge >> upsert >> to_bigquery >> commit
