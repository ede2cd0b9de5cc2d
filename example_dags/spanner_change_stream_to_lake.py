"""Spanner change stream → Delta Lake, one window per data interval, exactly once, in commit order per key.

    initial_snapshot (first run only) ─► wait_parents ─► open_window ─► read (mapped) ─► drained
        ─► merge (Spark) ─► upsert (Spark) ─► commit

The first run starts the pipeline with a snapshot: every table the stream watches, as of one microsecond
before the first window, applied as the window ``[T - 1µs, T)`` (``airflow_provider_cdc.task_groups.
initial_snapshot``); later runs skip it. Rows that existed before the first window are in the lake
with every column from its first commit, and the stream's first window follows without gap or overlap.
The snapshot's timestamp must stay within the database's ``version_retention_period`` until the first
run reads it (one hour by default: raise it, or set ``initial_snapshot`` to false for an empty database).

Every setting is a DAG param (or an Airflow connection) with a default that runs on this machine with
nothing configured: the change-stream emulator's demo database (``SPANNER_EMULATOR_HOST``), the SQLite
metastore under ``$AIRFLOW_HOME``, Spark ``local[*]`` and Delta tables under ``$AIRFLOW_HOME/cdc-demo``.
On Cloud Composer set the params to your instance, database and change stream and the roots to
``gs://`` URIs; ``google_cloud_default`` carries the credentials and ``cdc_metastore_default`` the
metastore (PostgreSQL); the param ``spark_conn_id`` names where the Spark jobs run (``spark-submit``, a
Spark Connect server, or Dataproc). Settings that shape the DAG itself are read from the environment
when it is parsed: the window length in minutes (``CDC_WINDOW_MINUTES``, default 10) or in seconds
(``CDC_WINDOW_SECONDS``, which takes precedence), the first window's start (``CDC_START_DATE``, RFC 3339,
default 2026-01-01T00:00:00Z) and the readers per window (``CDC_READERS``, default 2).
"""

from __future__ import annotations

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
from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator
from airflow_provider_cdc.task_groups import epoch_template, initial_snapshot, snapshot_start, window_template

DAG_ID = "spanner_change_stream_to_lake"


# Settings that shape the DAG itself, read from the environment when the file is parsed.
SETTINGS = DagSettings.from_env()
DEMO_HOME = SETTINGS.demo_home
WINDOW = SETTINGS.window
START_DATE = SETTINGS.start_date
# Parallel readers per window. The mapped readers expand over this fixed list rather than over
# open_window's output: Airflow 2's `airflow dags backfill` never expands a task mapped over the
# output of a task that is not a root of the DAG (the backfill stops as deadlocked).
READERS = SETTINGS.readers

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
        "initial_snapshot": Param(
            True, type="boolean", description="start with a snapshot of the watched tables (first run)"
        ),
        "staging_root": Param(
            f"{DEMO_HOME}/staging", type="string", description="staged changes (local or gs://)"
        ),
        "changeset_root": Param(f"{DEMO_HOME}/changesets", type="string", description="merged change sets"),
        "lake_root": Param(f"{DEMO_HOME}/lake", type="string", description="Delta tables (local or gs://)"),
        "spark_conn_id": Param(
            "spark_default",
            type="string",
            description="where the merge and upsert jobs run: a connection of type spark (spark-submit; "
            "none defined: local[*]), spark_connect or dataproc (a cluster or Serverless batches)",
        ),
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

    # One argument names where a window's data lives, the same for every step after the read.
    locations = {
        "staging_root": "{{ params.staging_root }}",
        "changeset_root": "{{ params.changeset_root }}",
        "lake_root": "{{ params.lake_root }}",
    }
    snapshot = initial_snapshot(
        first_window_start=START_DATE,
        source="{{ params.pipeline_id }}_snapshot",  # the snapshot's staging folder and metastore key
        project_id="{{ params.project_id }}",
        instance_id="{{ params.instance_id }}",
        database_id="{{ params.database_id }}",
        change_stream="{{ params.stream }}",  # its tables, and of each the columns it watches
        locations=locations,
        pipeline_id="{{ params.pipeline_id }}",
        readers=READERS,
        enabled="{{ params.initial_snapshot }}",
        spark_conn_id="{{ params.spark_conn_id }}",
    )
    wait_parents = SpannerChangeStreamPartitionsDrainedSensor(
        task_id="wait_parents",
        trigger_rule="none_failed",  # after the snapshot, or when later runs skip it
        timestamp="{{ data_interval_start }}",
        # The window before this one must be applied: a window run out of order, or after a window
        # that failed for good, fails here at once naming the window it waits for.
        pipeline_id="{{ params.pipeline_id }}",
        poke_interval=5,
        timeout=3600,
        **spanner,
    )
    open_window = SpannerChangeStreamOpenWindowOperator(
        task_id="open_window",
        readers=READERS,
        # the pipeline's first window: the snapshot's, or the stream's own without a snapshot
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
        # Read only each partition's recorded output (the claim that completed it).
        # The stream's metastore key as the opening recorded it (the window handle it pushed).
        stream_key=window_template(open_window.task_id),
        pipeline_id="{{ params.pipeline_id }}",
        # This run's opening of the window: a run whose window was opened again since changes nothing.
        epoch=epoch_template(open_window.task_id),
        conn_id="{{ params.spark_conn_id }}",
    )
    upsert = SparkUpsertWindowOperator(
        task_id="upsert",
        locations=locations,
        pipeline_id="{{ params.pipeline_id }}",
        epoch=epoch_template(open_window.task_id),
        conn_id="{{ params.spark_conn_id }}",
    )
    commit = CdcCommitWindowOperator(
        task_id="commit",
        pipeline_id="{{ params.pipeline_id }}",
        read_summaries=read.output,
        epoch=epoch_template(open_window.task_id),
        locations=locations,
    )

    snapshot >> wait_parents >> open_window >> read >> drained >> merge >> upsert >> commit
