"""Spanner change stream → Delta Lake, one window per data interval, exactly once, in commit order per key.

    wait_parents ─► open_window ─► read (mapped) ─► drained ─► merge (Spark) ─► upsert (Spark) ─► commit
                        └─► initial_snapshot (first window only) ─► merge

The first window starts the pipeline with a snapshot: every table the stream watches, as of one
microsecond before the first window, applied as the window ``[T - 1µs, T)`` before the stream's first
window; ``open_window`` skips it in every later run, without starting its tasks. The snapshot's
timestamp must stay within the database's ``version_retention_period`` until the first run reads it
(one hour by default: raise it, or set ``initial_snapshot`` to false for an empty database).

Every setting is a DAG param (or an Airflow connection) with a default that runs on this machine with
nothing configured: the change-stream emulator's demo database (``SPANNER_EMULATOR_HOST``), the SQLite
metastore under ``$AIRFLOW_HOME``, Spark ``local[*]`` and Delta tables under ``$AIRFLOW_HOME/cdc-demo``.
On Cloud Composer set the params to your instance, database and stream and the roots to ``gs://`` URIs;
``spark_conn_id`` names where the Spark jobs run. The window length (``CDC_WINDOW_MINUTES``/
``CDC_WINDOW_SECONDS``), the first window's start (``CDC_START_DATE``) and the readers per window
(``CDC_READERS``) shape the DAG and are read from the environment when it is parsed.
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
from airflow_provider_cdc.pipeline import DeltaLake, Locations, SpannerChangeStream, cdc_pipeline

DAG_ID = "spanner_change_stream_to_lake"
SETTINGS = DagSettings.from_env()
HOME = SETTINGS.demo_home

with DAG(
    dag_id=DAG_ID,
    description="Spanner change stream to Delta Lake, one window per data interval",
    start_date=SETTINGS.start_date,
    schedule=DeltaDataIntervalTimetable(SETTINGS.window),  # data intervals [start, start + window)
    catchup=True,
    max_active_runs=1,  # windows apply in order
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    params={
        "project_id": Param("demo-project", type="string", description="Google Cloud project"),
        "instance_id": Param("demo-instance", type="string", description="Spanner instance"),
        "database_id": Param("demo", type="string", description="Spanner database"),
        "stream": Param("WorkloadChanges", type="string", description="change stream (READ_<stream>)"),
        "pipeline_id": Param(DAG_ID, type="string", description="names the pipeline (metastore, Delta)"),
        "initial_snapshot": Param(True, type="boolean", description="start with a snapshot (first run)"),
        "staging_root": Param(
            f"{HOME}/staging", type="string", description="staged changes (local or gs://)"
        ),
        "changeset_root": Param(f"{HOME}/changesets", type="string", description="merged change sets"),
        "lake_root": Param(f"{HOME}/lake", type="string", description="Delta tables (local or gs://)"),
        "spark_conn_id": Param(
            "spark_default",
            type="string",
            description="where the merge and upsert jobs run: a connection of type spark (spark-submit; "
            "none defined: local[*]), spark_connect or dataproc (a cluster or Serverless batches)",
        ),
    },
    tags=["cdc", "spanner", "delta", "example"],
) as dag:
    cdc_pipeline(
        source=SpannerChangeStream(
            project_id="{{ params.project_id }}",
            instance_id="{{ params.instance_id }}",
            database_id="{{ params.database_id }}",
            stream="{{ params.stream }}",
        ),
        targets=[DeltaLake()],
        locations=Locations(
            staging_root="{{ params.staging_root }}",
            changeset_root="{{ params.changeset_root }}",
            lake_root="{{ params.lake_root }}",
        ),
        pipeline_id="{{ params.pipeline_id }}",
        readers=SETTINGS.readers,
        spark_conn_id="{{ params.spark_conn_id }}",
        initial_snapshot="{{ params.initial_snapshot }}",
        first_window_start=SETTINGS.start_date,
    )
