"""Spanner tables read by their commit-timestamp column → Delta Lake, one window per data interval.

    open_window ─► read (mapped) ─► merge (Spark) ─► upsert (Spark) ─► commit

No change stream: each window ``[start, end)`` reads, from every configured table, the rows whose
``TIMESTAMP OPTIONS (allow_commit_timestamp=true)`` column falls into it, at a read timestamp at or
after the window end (``SpannerTableOpenWindowOperator(mode="commit_timestamp")`` plans the batches
and records them in the metastore; the mapped readers claim and stage them). A table updated in place
gives each key's full row; an insert-only changelog table (``DocumentHistory(UserId, DocumentId, Ts,
Delta)``) gives each row as a change of its ``entity_key`` in ``target_table``. The merge, the upsert
and the commit are those of ``spanner_change_stream_to_lake``; the merge's ``stream_key`` is
``projects/{project}/instances/{instance}/databases/{database}/{source}``.

Windows apply in order: ``max_active_runs=1``; the open operator fails a window whose predecessor was
never run (naming it), and the upsert and the commit wait for the previous window to be applied. A row
written with an explicit past timestamp into a window already read fails the next window without
retries (``on_late_rows="fail"``) or is only logged (``"warn"``).

What a commit-timestamp source cannot see: a delete, unless a ``soft_delete_column`` (or a
``change_type_column``) marks it; the intermediate versions of a row within a window (only its last
write is there to read); transaction grouping (every row is a change of its own). Rows written before
the first window are not read.

Every setting is a DAG param (or an Airflow connection) with a default that runs on this machine with
nothing configured: the emulator's commit-timestamp demo database ``demo-project/demo-instance/ledger``
(``python -m airflow_provider_cdc.testing.spanner_emulator --demo --demo-kind commit-timestamp``,
``SPANNER_EMULATOR_HOST``), the SQLite metastore under ``$AIRFLOW_HOME``, Spark ``local[*]`` and Delta
tables under ``$AIRFLOW_HOME/cdc-demo/commit-timestamp``. The pipeline id differs from the other
example DAGs', so they can share one metastore. ``tables`` is a list of ``CommitTimestampTable`` fields
(``table``, ``timestamp_column``, ``entity_key``, ``soft_delete_column``, ``change_type_column``,
``target_table``), passed to the open operator as JSON text.
Settings that shape the DAG itself are read from the environment when it is parsed, as in the lake
DAG: ``CDC_WINDOW_MINUTES`` (default 10) or ``CDC_WINDOW_SECONDS``, ``CDC_START_DATE`` (RFC 3339,
default 2026-01-01T00:00:00Z; the pipeline's first window), ``CDC_READERS`` (default 2) and
``CDC_DEMO_HOME``.
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
from airflow_provider_cdc.pipeline import DeltaLake, Locations, SpannerTables, cdc_pipeline

DAG_ID = "spanner_commit_timestamp_tables_to_lake"

#: The demo database's tables: ``Performances`` updated in place with soft deletes, and the changelog
#: ``DocumentHistory`` whose rows change each document's entry in ``DocumentLatest``.
DEFAULT_TABLES = [
    {"table": "Performances", "timestamp_column": "LastUpdateTime", "soft_delete_column": "Deleted"},
    {"table": "DocumentHistory", "timestamp_column": "Ts", "entity_key": ["UserId", "DocumentId"],
     "target_table": "DocumentLatest"},
]  # fmt: skip
SETTINGS = DagSettings.from_env()
ROOT = f"{SETTINGS.demo_home}/commit-timestamp"

with DAG(
    dag_id=DAG_ID,
    description="Spanner commit-timestamp tables to Delta Lake, one window per data interval",
    start_date=SETTINGS.start_date,
    schedule=DeltaDataIntervalTimetable(SETTINGS.window),  # data intervals [start, start + window)
    catchup=True,
    max_active_runs=1,  # windows apply in order
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    params={
        "project_id": Param("demo-project", type="string", description="Google Cloud project"),
        "instance_id": Param("demo-instance", type="string", description="Spanner instance"),
        "database_id": Param("ledger", type="string", description="Spanner database"),
        "source": Param("ledger_tables", type="string", description="staging folder, metastore key"),
        "tables": Param(
            DEFAULT_TABLES,
            type="array",
            items={"type": "object", "required": ["table", "timestamp_column"]},
            description="tables read by their commit-timestamp column (CommitTimestampTable fields)",
        ),
        "on_late_rows": Param(
            "fail", enum=["fail", "warn"], description="rows written into a window already read: fail or warn"
        ),
        "pipeline_id": Param(DAG_ID, type="string", description="names the pipeline (metastore, Delta)"),
        "staging_root": Param(f"{ROOT}/staging", type="string", description="staged rows (local or gs://)"),
        "changeset_root": Param(f"{ROOT}/changesets", type="string", description="merged change sets"),
        "lake_root": Param(f"{ROOT}/lake", type="string", description="Delta tables (local or gs://)"),
    },
    tags=["cdc", "spanner", "delta", "example"],
) as dag:
    cdc_pipeline(
        source=SpannerTables(
            project_id="{{ params.project_id }}",
            instance_id="{{ params.instance_id }}",
            database_id="{{ params.database_id }}",
            source="{{ params.source }}",
            tables="{{ params.tables | tojson }}",  # the operator parses the JSON text
            on_late_rows="{{ params.on_late_rows }}",
        ),
        targets=[DeltaLake()],
        locations=Locations(
            staging_root="{{ params.staging_root }}",
            changeset_root="{{ params.changeset_root }}",
            lake_root="{{ params.lake_root }}",
        ),
        pipeline_id="{{ params.pipeline_id }}",
        readers=SETTINGS.readers,
        first_window_start=SETTINGS.start_date,  # a window before it is never read
    )
