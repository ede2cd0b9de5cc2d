"""Table Store stream → Delta Lake → BigQuery CDC tables, one window of records per data interval.

    open_window ─► read (mapped) ─► complete ─► merge (Spark) ─► upsert (Spark) ─► to_bigquery ─► commit

The window steps up to the upsert are those of ``tablestore_stream_to_lake``; then ``to_bigquery`` sends the
window's change set to ``{bigquery_project}.{bigquery_dataset}.{table}`` through BigQuery's change data
capture. An ``UPDATE_ROW`` carries only the columns it changed, so its row image is completed from the
Delta table the upsert just applied. The commit records the BigQuery tables' apply watermarks.

Every setting is a DAG param (or an Airflow connection) with a default that runs on this machine with
nothing configured but the ``tablestore_default`` connection (``scripts/demo.sh tablestore`` starts the
project's Table Store stream emulator and sets it): the SQLite metastore under ``$AIRFLOW_HOME``, Spark
``local[*]``, Delta tables under ``$CDC_DEMO_HOME/tablestore/lake`` and, for BigQuery, the loopback fake
(``CDC_BIGQUERY_API_ENDPOINT``, ``CDC_BIGQUERY_WRITE_ENDPOINT``). Settings that shape the DAG itself are
read from the environment when it is parsed: ``CDC_WINDOW_MINUTES`` (default 10) or
``CDC_WINDOW_SECONDS``, ``CDC_START_DATE``, ``CDC_READERS``, ``CDC_DEMO_HOME``, and
``CDC_TABLESTORE_SETTLE_SECONDS`` for the settle margin's default.
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
from airflow_provider_cdc.pipeline import BigQueryCdc, DeltaLake, Locations, TablestoreStream, cdc_pipeline

DAG_ID = "tablestore_stream_to_bigquery"
SETTINGS = DagSettings.from_env()
ROOT = f"{SETTINGS.demo_home}/tablestore/bigquery"
SETTLE = os.environ.get("CDC_TABLESTORE_SETTLE_SECONDS", "").strip()
API_ENDPOINT = os.environ.get("CDC_BIGQUERY_API_ENDPOINT", "").strip()
WRITE_ENDPOINT = os.environ.get("CDC_BIGQUERY_WRITE_ENDPOINT", "").strip()
#: The demo table's attribute columns (a deleted column has no value to tell its type).
DEMO_COLUMN_TYPES = {
    "amount": "DOUBLE",
    "quantity": "INTEGER",
    "status": "STRING",
    "paid": "BOOLEAN",
    "note": "STRING",
}

with DAG(
    dag_id=DAG_ID,
    description="Table Store stream to Delta Lake and BigQuery CDC tables, one window per data interval",
    start_date=SETTINGS.start_date,
    schedule=DeltaDataIntervalTimetable(SETTINGS.window),
    catchup=True,
    max_active_runs=1,  # windows apply in order
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    params={
        "table": Param("orders", type="string", description="the Table Store table whose stream is read"),
        "tablestore_conn_id": Param("tablestore_default", type="string", description="tablestore connection"),
        "column_types": Param(
            DEMO_COLUMN_TYPES, type="object", description="attribute columns' Table Store types"
        ),
        "settle_margin": Param(
            SETTLE, type="string", description="seconds after a window's end before it is read (blank: 300)"
        ),
        "pipeline_id": Param(DAG_ID, type="string", description="names the pipeline in the metastore"),
        "staging_root": Param(f"{ROOT}/staging", type="string", description="staged rows (local or gs://)"),
        "changeset_root": Param(f"{ROOT}/changesets", type="string", description="merged change sets"),
        "lake_root": Param(f"{ROOT}/lake", type="string", description="Delta tables (local or gs://)"),
        "bigquery_project": Param("demo-project", type="string", description="BigQuery project"),
        "bigquery_dataset": Param("cdc_demo", type="string", description="BigQuery dataset (must exist)"),
        "bigquery_api_endpoint": Param(API_ENDPOINT, type="string", description="blank: BigQuery"),
        "bigquery_write_endpoint": Param(WRITE_ENDPOINT, type="string", description="blank: BigQuery"),
    },
    tags=["cdc", "tablestore", "delta", "bigquery", "example"],
) as dag:
    cdc_pipeline(
        source=TablestoreStream(
            table="{{ params.table }}",
            tablestore_conn_id="{{ params.tablestore_conn_id }}",
            column_types="{{ params.column_types | tojson }}",
            settle_margin="{{ params.settle_margin }}",
        ),
        targets=[
            DeltaLake(),
            # The same change set to BigQuery; partial rows are completed from the Delta tables.
            BigQueryCdc(
                project_id="{{ params.bigquery_project }}",
                dataset="{{ params.bigquery_dataset }}",
                api_endpoint="{{ params.bigquery_api_endpoint }}",
                write_endpoint="{{ params.bigquery_write_endpoint }}",
            ),
        ],
        locations=Locations(
            staging_root="{{ params.staging_root }}",
            changeset_root="{{ params.changeset_root }}",
            lake_root="{{ params.lake_root }}",
        ),
        pipeline_id="{{ params.pipeline_id }}",
        readers=SETTINGS.readers,
    )
