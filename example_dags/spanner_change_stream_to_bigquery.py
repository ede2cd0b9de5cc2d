"""Spanner change stream → Delta Lake → BigQuery CDC tables, one window per data interval, exactly once.

    wait_parents ─► open_window ─► read (mapped) ─► drained ─► merge (Spark) ─► upsert (Spark)
        ─► to_bigquery ─► commit;   open_window ─► initial_snapshot (first window only) ─► merge

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
from airflow_provider_cdc.pipeline import BigQueryCdc, DeltaLake, Locations, SpannerChangeStream, cdc_pipeline

DAG_ID = "spanner_change_stream_to_bigquery"
SETTINGS = DagSettings.from_env()
HOME = f"{SETTINGS.demo_home}/bigquery"
# BigQuery endpoints: unset for BigQuery itself; a local fake's for the embedded defaults.
API_ENDPOINT = os.environ.get("CDC_BIGQUERY_API_ENDPOINT", "").strip()
WRITE_ENDPOINT = os.environ.get("CDC_BIGQUERY_WRITE_ENDPOINT", "").strip()

with DAG(
    dag_id=DAG_ID,
    description="Spanner change stream to Delta Lake and BigQuery CDC tables, one window per data interval",
    start_date=SETTINGS.start_date,
    schedule=DeltaDataIntervalTimetable(SETTINGS.window),  # data intervals [start, start + window)
    catchup=True,
    max_active_runs=1,  # windows apply in order
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    params={
        "project_id": Param("demo-project", type="string", description="Google Cloud project of Spanner"),
        "instance_id": Param("demo-instance", type="string", description="Spanner instance"),
        "database_id": Param("demo", type="string", description="Spanner database"),
        "stream": Param("WorkloadChanges", type="string", description="change stream (READ_<stream>)"),
        "pipeline_id": Param(DAG_ID, type="string", description="names the pipeline (metastore, targets)"),
        "initial_snapshot": Param(True, type="boolean", description="start with a snapshot (first run)"),
        # Staging belongs to the stream (its partitions' claims are shared by pipelines reading it);
        # change sets and Delta tables belong to the pipeline.
        "staging_root": Param(
            f"{SETTINGS.demo_home}/staging", type="string", description="staged changes (local or gs://)"
        ),
        "changeset_root": Param(f"{HOME}/changesets", type="string", description="merged change sets"),
        "lake_root": Param(f"{HOME}/lake", type="string", description="Delta tables (local or gs://)"),
        "bigquery_project": Param("demo-project", type="string", description="BigQuery project"),
        "bigquery_dataset": Param("cdc_demo", type="string", description="BigQuery dataset (must exist)"),
        "bigquery_api_endpoint": Param(API_ENDPOINT, type="string", description="REST (blank: BigQuery)"),
        "bigquery_write_endpoint": Param(WRITE_ENDPOINT, type="string", description="blank: BigQuery"),
    },
    tags=["cdc", "spanner", "delta", "bigquery", "example"],
) as dag:
    cdc_pipeline(
        source=SpannerChangeStream(
            project_id="{{ params.project_id }}",
            instance_id="{{ params.instance_id }}",
            database_id="{{ params.database_id }}",
            stream="{{ params.stream }}",
        ),
        targets=[
            DeltaLake(),
            # The same change set to BigQuery; partial row images are completed from the Delta tables.
            BigQueryCdc(
                project_id="{{ params.bigquery_project }}",
                dataset="{{ params.bigquery_dataset }}",
                api_endpoint="{{ params.bigquery_api_endpoint }}",
                write_endpoint="{{ params.bigquery_write_endpoint }}",
                max_staleness=timedelta(minutes=15),  # the tables' max_staleness option
            ),
        ],
        locations=Locations(
            staging_root="{{ params.staging_root }}",
            changeset_root="{{ params.changeset_root }}",
            lake_root="{{ params.lake_root }}",
        ),
        pipeline_id="{{ params.pipeline_id }}",
        readers=SETTINGS.readers,
        initial_snapshot="{{ params.initial_snapshot }}",
        first_window_start=SETTINGS.start_date,
    )
