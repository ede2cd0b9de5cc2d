"""Datastream files (Cloud Storage or a folder) → BigQuery CDC tables, one window of arrived files per
data interval.

    wait_for_files ─► open_window ─► read (mapped) ─► complete ─► merge (Spark) ─► to_bigquery ─► commit

The window steps up to the merge are those of ``datastream_to_lake``: a window is the set of files
that arrived in ``[start, end)``, listed once the clock is past its end plus the lateness margin. Every
Datastream event carries the whole row, so the change set goes straight to BigQuery, without a Delta
lake: ``to_bigquery`` streams it to ``{bigquery_project}.{bigquery_dataset}.{table}`` through BigQuery's
change data capture (UPSERT/DELETE rows with ``_CHANGE_SEQUENCE_NUMBER``, Storage Write API default
stream). BigQuery applies a row only when its sequence number is greater than the stored one, deletes
included, so a late, older event never overwrites a newer row nor brings a deleted one back. The commit
records the tables' ``upsert_stream_apply_watermark``.

Every setting is a DAG param (or an Airflow connection) with a default that runs on this machine with
nothing configured: the stream under ``$CDC_DEMO_HOME/datastream/stream`` (``CDC_DATASTREAM_ROOT``
overrides it), the SQLite metastore, Spark ``local[*]`` and the dataset ``demo-project.cdc_demo`` of the
loopback BigQuery fake (``python -m airflow_provider_cdc.testing.bigquery_fake --dataset
demo-project.cdc_demo``; ``CDC_BIGQUERY_API_ENDPOINT`` and ``CDC_BIGQUERY_WRITE_ENDPOINT``). On Cloud
Composer set ``stream_root``, the roots (``gs://``), ``bigquery_project`` and ``bigquery_dataset`` and
leave the endpoints unset. Settings that shape the DAG itself are read from the environment as in
``datastream_to_lake``.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta

try:  # Airflow 3
    from airflow.sdk import DAG, Param
except ImportError:  # Airflow 2.11
    from airflow import DAG  # type: ignore[no-redef]
    from airflow.models.param import Param  # type: ignore[no-redef]

from airflow.timetables.interval import DeltaDataIntervalTimetable

from airflow_provider_cdc.dag_settings import DagSettings
from airflow_provider_cdc.pipeline import BigQueryCdc, DatastreamFiles, Locations, cdc_pipeline

DAG_ID = "datastream_to_bigquery"
SETTINGS = DagSettings.from_env()
ROOT = f"{SETTINGS.demo_home}/datastream"
STREAM_ROOT = os.environ.get("CDC_DATASTREAM_ROOT", "").strip() or f"{ROOT}/stream"
STREAM_SETTINGS = json.loads(os.environ.get("CDC_DATASTREAM_SETTINGS", "").strip() or "{}")
LATENESS = os.environ.get("CDC_DATASTREAM_LATENESS_SECONDS", "").strip()
API_ENDPOINT = os.environ.get("CDC_BIGQUERY_API_ENDPOINT", "").strip()
WRITE_ENDPOINT = os.environ.get("CDC_BIGQUERY_WRITE_ENDPOINT", "").strip()

with DAG(
    dag_id=DAG_ID,
    description="Datastream files to BigQuery CDC tables, one window of arrived files per data interval",
    start_date=SETTINGS.start_date,
    schedule=DeltaDataIntervalTimetable(SETTINGS.window),  # data intervals [start, start + window)
    catchup=True,
    max_active_runs=1,  # windows apply in order
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    params={
        "stream_root": Param(
            STREAM_ROOT,
            type="string",
            description="the stream's destination path (gs://bucket/prefix or a folder)",
        ),
        "source": Param(
            "datastream_bigquery",
            type="string",
            description="the source's name: staging folder and metastore key (its own: a window's files "
            "are claimed per source)",
        ),
        "objects": Param(
            [], type="array", description="Datastream objects (folders) to read; empty: every object"
        ),
        "settings": Param(
            STREAM_SETTINGS,
            type="object",
            description="source_database, primary_keys, column_types (JSONL), table_names",
        ),
        "file_rotation_interval": Param(
            60, type="integer", minimum=15, maximum=60, description="the stream's file rotation interval (s)"
        ),
        "lateness_margin": Param(
            LATENESS,
            type="string",
            description="seconds after a window's end before listing it (blank: 2 rotations + 60 s)",
        ),
        "pipeline_id": Param(
            DAG_ID, type="string", description="names the pipeline in the metastore and BigQuery"
        ),
        "staging_root": Param(
            f"{ROOT}/bigquery/staging", type="string", description="staged rows (local or gs://)"
        ),
        "changeset_root": Param(
            f"{ROOT}/bigquery/changesets", type="string", description="merged change sets"
        ),
        "bigquery_project": Param("demo-project", type="string", description="BigQuery project"),
        "bigquery_dataset": Param("cdc_demo", type="string", description="BigQuery dataset (must exist)"),
        "bigquery_api_endpoint": Param(
            API_ENDPOINT, type="string", description="BigQuery REST endpoint (blank: BigQuery)"
        ),
        "bigquery_write_endpoint": Param(
            WRITE_ENDPOINT, type="string", description="Storage Write API endpoint (blank: BigQuery)"
        ),
    },
    tags=["cdc", "datastream", "bigquery", "example"],
) as dag:
    cdc_pipeline(
        source=DatastreamFiles(
            stream_root="{{ params.stream_root }}",
            source="{{ params.source }}",
            objects="{{ params.objects | tojson }}",
            settings="{{ params.settings | tojson }}",
            file_rotation_interval="{{ params.file_rotation_interval }}",
            lateness_margin="{{ params.lateness_margin }}",
        ),
        targets=[
            BigQueryCdc(
                project_id="{{ params.bigquery_project }}",
                dataset="{{ params.bigquery_dataset }}",
                api_endpoint="{{ params.bigquery_api_endpoint }}",
                write_endpoint="{{ params.bigquery_write_endpoint }}",
            )
        ],
        locations=Locations(
            staging_root="{{ params.staging_root }}", changeset_root="{{ params.changeset_root }}"
        ),
        pipeline_id="{{ params.pipeline_id }}",
        readers=SETTINGS.readers,
    )
