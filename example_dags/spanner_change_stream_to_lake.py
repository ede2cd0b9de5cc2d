"""Spanner change stream → Delta Lake, one window per data interval, exactly once, in commit order per key.

    wait_parents ─► open_window ─► read (mapped) ─► drained ─► merge (Spark) ─► upsert (Spark) ─► commit

Every setting is a DAG param (or an Airflow connection) with a default that runs on this machine with
nothing configured: the change-stream emulator's demo database (``SPANNER_EMULATOR_HOST``), the SQLite
metastore under ``$AIRFLOW_HOME``, Spark ``local[*]`` and Delta tables under ``$AIRFLOW_HOME/cdc-demo``.
On Cloud Composer set the params to your instance, database and change stream and the roots to
``gs://`` URIs; ``google_cloud_default`` carries the credentials and ``cdc_metastore_default`` the
metastore (PostgreSQL). Settings that shape the DAG itself are read from the environment when it is
parsed: the window length in minutes (``CDC_WINDOW_MINUTES``, default 10) or in seconds
(``CDC_WINDOW_SECONDS``, which takes precedence), the first window's start (``CDC_START_DATE``, RFC 3339,
default 2026-01-01T00:00:00Z) and the readers per window (``CDC_READERS``, default 2).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

try:  # Airflow 3
    from airflow.sdk import DAG, Param
except ImportError:  # Airflow 2.11
    from airflow import DAG  # type: ignore[no-redef]
    from airflow.models.param import Param  # type: ignore[no-redef]

from airflow.timetables.interval import DeltaDataIntervalTimetable

from airflow_provider_cdc.domain.timestamps import parse_timestamp
from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator
from airflow_provider_cdc.operators.spanner_change_stream import (
    SpannerChangeStreamOpenWindowOperator,
    SpannerChangeStreamReadWindowOperator,
)
from airflow_provider_cdc.operators.upsert import SparkUpsertWindowOperator
from airflow_provider_cdc.sensors.partitions_drained import SpannerChangeStreamPartitionsDrainedSensor

DAG_ID = "spanner_change_stream_to_lake"


def _positive_int_env(name: str, default: int) -> int:
    """A positive integer from the environment variable ``name`` (``default`` when unset)."""
    text = os.environ.get(name, "").strip() or str(default)
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"environment variable {name} must be a positive integer, got {text!r}")
    return int(text)


def _window_from_env() -> timedelta:
    """The window length: ``CDC_WINDOW_SECONDS`` if set, else ``CDC_WINDOW_MINUTES`` (default 10)."""
    if os.environ.get("CDC_WINDOW_SECONDS", "").strip():
        return timedelta(seconds=_positive_int_env("CDC_WINDOW_SECONDS", 600))
    return timedelta(minutes=_positive_int_env("CDC_WINDOW_MINUTES", 10))


def _start_date_from_env(name: str, default: datetime) -> datetime:
    """An RFC 3339 timestamp from the environment variable ``name`` (``default`` when unset), in UTC."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return parse_timestamp(text)
    except ValueError as exc:
        raise ValueError(
            f"environment variable {name} must be an RFC 3339 timestamp such as 2026-01-01T00:00:00Z, "
            f"got {text!r} ({exc})"
        ) from None


DEMO_HOME = os.environ.get("CDC_DEMO_HOME") or str(
    Path(os.environ.get("AIRFLOW_HOME", "~/airflow")).expanduser() / "cdc-demo"
)
WINDOW = _window_from_env()
START_DATE = _start_date_from_env("CDC_START_DATE", datetime(2026, 1, 1, tzinfo=timezone.utc))
# Parallel readers per window. The mapped readers expand over this fixed list rather than over
# open_window's output: Airflow 2's `airflow dags backfill` never expands a task mapped over the
# output of a task that is not a root of the DAG (the backfill stops as deadlocked).
READERS = _positive_int_env("CDC_READERS", 2)

with DAG(
    dag_id=DAG_ID,
    description="Spanner change stream to Delta Lake, one window per data interval",
    start_date=START_DATE,
    schedule=DeltaDataIntervalTimetable(WINDOW),  # data intervals [start, start + WINDOW)
    catchup=True,
    max_active_runs=1,  # windows apply in order
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    params={
        "project_id": Param("demo-project", type="string", description="Google Cloud project"),
        "instance_id": Param("demo-instance", type="string", description="Spanner instance"),
        "database_id": Param("demo", type="string", description="Spanner database"),
        "stream": Param("WorkloadChanges", type="string", description="change stream (READ_<stream>)"),
        "pipeline_id": Param(
            DAG_ID, type="string", description="names the pipeline in the metastore and Delta"
        ),
        "staging_root": Param(
            f"{DEMO_HOME}/staging", type="string", description="staged changes (local or gs://)"
        ),
        "changeset_root": Param(f"{DEMO_HOME}/changesets", type="string", description="merged change sets"),
        "lake_root": Param(f"{DEMO_HOME}/lake", type="string", description="Delta tables (local or gs://)"),
    },
    tags=["cdc", "spanner", "delta", "example"],
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

    wait_parents = SpannerChangeStreamPartitionsDrainedSensor(
        task_id="wait_parents",
        timestamp="{{ data_interval_start }}",
        # The window before this one must be applied: a window run out of order, or after a window
        # that failed for good, fails here at once naming the window it waits for.
        pipeline_id="{{ params.pipeline_id }}",
        poke_interval=5,
        timeout=3600,
        **spanner,
    )
    open_window = SpannerChangeStreamOpenWindowOperator(
        task_id="open_window", readers=READERS, first_window_start=START_DATE.isoformat(), **window
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
    # One argument names where a window's data lives, the same for every step after the read.
    locations = {
        "staging_root": "{{ params.staging_root }}",
        "changeset_root": "{{ params.changeset_root }}",
        "lake_root": "{{ params.lake_root }}",
    }
    merge = SparkMergeWindowOperator(
        task_id="merge",
        locations=locations,
        # Read only each partition's recorded output (the claim that completed it).
        stream_key="projects/{{ params.project_id }}/instances/{{ params.instance_id }}"
        "/databases/{{ params.database_id }}/{{ params.stream }}",
    )
    upsert = SparkUpsertWindowOperator(
        task_id="upsert", locations=locations, pipeline_id="{{ params.pipeline_id }}"
    )
    commit = CdcCommitWindowOperator(
        task_id="commit",
        pipeline_id="{{ params.pipeline_id }}",
        read_summaries=read.output,
        locations=locations,
    )

    wait_parents >> open_window >> read >> drained >> merge >> upsert >> commit
