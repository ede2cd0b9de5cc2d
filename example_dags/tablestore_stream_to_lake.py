"""Table Store stream → Delta Lake, one window of records per data interval.

    open_window ─► read (mapped) ─► complete ─► merge (Spark) ─► upsert (Spark) ─► commit

A Table Store table with its stream enabled records every write as a stream record in an ordered
per-shard log; shards split and merge. A window ``[start, end)`` holds the records written in it:
``open_window`` (once the window is ``settle_margin`` old, and while its start is inside the stream's
retention) describes the stream after ``end`` and records the shards the window reads with their
lineage; the mapped readers claim them, a child shard only once its parents are drained past the window,
each shard read from the iterator the previous window recorded up to its first record at or after
``end`` (recorded for the next window). ``PUT_ROW`` is a full row, ``UPDATE_ROW`` a partial one (columns
set, columns deleted), ``DELETE_ROW`` a delete; the merge folds each key's records in order and the
upsert applies them to ``{lake_root}/{table}``. ``tablestore_stream_to_bigquery`` sends the same change
sets on to BigQuery CDC tables.

Every setting is a DAG param (or an Airflow connection) with a default that runs on this machine with
nothing configured but the ``tablestore_default`` connection (``scripts/demo.sh tablestore`` starts the
project's Table Store stream emulator and sets it): the SQLite metastore under ``$AIRFLOW_HOME``, Spark
``local[*]`` and Delta tables under ``$CDC_DEMO_HOME/tablestore/lake``. Settings that shape the DAG itself are
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
from airflow_provider_cdc.pipeline import DeltaLake, Locations, TablestoreStream, cdc_pipeline

DAG_ID = "tablestore_stream_to_lake"
SETTINGS = DagSettings.from_env()
ROOT = f"{SETTINGS.demo_home}/tablestore"
SETTLE = os.environ.get("CDC_TABLESTORE_SETTLE_SECONDS", "").strip()
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
    description="Table Store stream to Delta Lake, one window per data interval",
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
    },
    tags=["cdc", "tablestore", "delta", "example"],
) as dag:
    cdc_pipeline(
        source=TablestoreStream(
            table="{{ params.table }}",
            tablestore_conn_id="{{ params.tablestore_conn_id }}",
            column_types="{{ params.column_types | tojson }}",
            settle_margin="{{ params.settle_margin }}",
        ),
        targets=[DeltaLake()],
        locations=Locations(
            staging_root="{{ params.staging_root }}",
            changeset_root="{{ params.changeset_root }}",
            lake_root="{{ params.lake_root }}",
        ),
        pipeline_id="{{ params.pipeline_id }}",
        readers=SETTINGS.readers,
    )
