"""Datastream files (Cloud Storage or a folder) → Delta Lake, one window of arrived files per data interval.

    wait_for_files ─► open_window ─► read (mapped) ─► complete ─► merge (Spark) ─► upsert (Spark) ─► commit

Datastream replicates MySQL, Oracle, PostgreSQL or SQL Server into Cloud Storage as Avro or JSONL files
of change events, delivered at least once, in no order, with backfill files written into old minute
folders and late CDC files for old minutes. A window ``[start, end)`` is therefore the set of files that
**arrived** in it (their creation time), read once the clock is past ``end`` plus a lateness margin
(``wait_for_files``). ``open_window`` lists them once and records them in the metastore (a re-run reads
the same files), the mapped readers stage their events, the merge keeps per key the event with the
greatest change sequence number (from the source database's log position: see README, "Datastream"),
and the upsert applies it only where it is newer than what the table holds, keeping tombstones of
deleted keys for ``tombstone_horizon_days`` so that a late, older event never brings a deleted row back.

Every setting is a DAG param (or an Airflow connection) with a default that runs on this machine with
nothing configured: the stream under ``$CDC_DEMO_HOME/datastream/stream`` (``CDC_DATASTREAM_ROOT``
overrides it, e.g. ``gs://bucket/prefix``; ``scripts/demo.sh datastream`` writes a stream there), the
SQLite metastore under ``$AIRFLOW_HOME``, Spark ``local[*]`` and Delta tables under
``$CDC_DEMO_HOME/datastream/lake``. On Cloud Composer set ``stream_root`` to the stream's destination
path and the roots to ``gs://``; ``google_cloud_default`` carries the credentials. Settings that shape
the DAG itself are read from the environment when it is parsed: ``CDC_WINDOW_MINUTES`` (default 10) or
``CDC_WINDOW_SECONDS``, ``CDC_START_DATE`` (RFC 3339, default 2026-01-01T00:00:00Z), ``CDC_READERS``
(default 2), ``CDC_DEMO_HOME``, and ``CDC_DATASTREAM_ROOT`` / ``CDC_DATASTREAM_SETTINGS`` (JSON) /
``CDC_DATASTREAM_LATENESS_SECONDS`` for the params' defaults.
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
from airflow_provider_cdc.pipeline import DatastreamFiles, DeltaLake, Locations, cdc_pipeline

DAG_ID = "datastream_to_lake"
SETTINGS = DagSettings.from_env()
ROOT = f"{SETTINGS.demo_home}/datastream"
STREAM_ROOT = os.environ.get("CDC_DATASTREAM_ROOT", "").strip() or f"{ROOT}/stream"
STREAM_SETTINGS = json.loads(os.environ.get("CDC_DATASTREAM_SETTINGS", "").strip() or "{}")
LATENESS = os.environ.get("CDC_DATASTREAM_LATENESS_SECONDS", "").strip()

with DAG(
    dag_id=DAG_ID,
    description="Datastream files to Delta Lake, one window of arrived files per data interval",
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
            "datastream", type="string", description="the source's name: staging folder and metastore key"
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
        "tombstone_horizon_days": Param(
            7,
            type="number",
            exclusiveMinimum=0,  # 0 would keep tombstones that block nothing: refused when a run is created
            description="days (more than 0) deleted keys refuse older late events, from the window "
            "that applied the delete",
        ),
        "pipeline_id": Param(
            DAG_ID, type="string", description="names the pipeline in the metastore and Delta"
        ),
        "staging_root": Param(f"{ROOT}/staging", type="string", description="staged rows (local or gs://)"),
        "changeset_root": Param(f"{ROOT}/changesets", type="string", description="merged change sets"),
        "lake_root": Param(f"{ROOT}/lake", type="string", description="Delta tables (local or gs://)"),
    },
    tags=["cdc", "datastream", "delta", "example"],
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
        # Late events older than what a table holds never overwrite it, deleted keys included.
        targets=[DeltaLake(tombstone_horizon="{{ params.tombstone_horizon_days * 86400 }}")],
        locations=Locations(
            staging_root="{{ params.staging_root }}",
            changeset_root="{{ params.changeset_root }}",
            lake_root="{{ params.lake_root }}",
        ),
        pipeline_id="{{ params.pipeline_id }}",
        readers=SETTINGS.readers,
    )
