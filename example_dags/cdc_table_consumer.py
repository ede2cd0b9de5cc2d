"""A downstream DAG scheduled on one target table: it runs when a pipeline's commit has applied a window
to the change-stream demo's ``Orders`` Delta table.

    spanner_change_stream_to_lake: ... ─► commit ══ asset event: {lake_root}/Orders ══► cdc_table_consumer

A pipeline's commit task given ``outlets=table_asset_outlets(DAG_ID)`` emits, through its asset alias
``cdc:{dag_id}``, one asset event per table it applied (the example pipeline DAGs do not declare it: on
Airflow 2.11 an alias the DAG processor has not registered fails the commit, as under a bare
``airflow dags backfill``); the event's extra carries the
window (``window_start``, ``window_end``, ``window_id``), the ``target``, the ``table``, its apply
``watermark`` after the commit (every change committed before it is in the table) and the window's
change ``rows`` of it. A table's asset is named by where it lives: ``file:///.../lake/Orders`` for the
demo's local lake, ``gs://bucket/prefix/Orders`` on Cloud Storage, ``bigquery://project/dataset/table``
for a BigQuery table (:mod:`airflow_provider_cdc.assets`).

Airflow may fold several events into one run (windows committed while the consumer was busy): the task
logs each, and the last watermark is how far the table is complete. A window committed again (a retry,
a backfill) emits again: key what you do on ``window_id`` and it stays idempotent.

Read when the file is parsed: the lake root (``CDC_CONSUMER_LAKE_ROOT``, default the demo's,
``$CDC_DEMO_HOME/lake``, where ``spanner_change_stream_to_lake`` writes with its default params) and the
table (``CDC_CONSUMER_TABLE``, default ``Orders``).
"""

from __future__ import annotations

import logging
import os
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG, task
except ImportError:  # Airflow 2.11
    from airflow import DAG  # type: ignore[no-redef]
    from airflow.decorators import task  # type: ignore[no-redef]

from airflow_provider_cdc._compat import Asset, triggering_asset_events
from airflow_provider_cdc.dag_settings import DagSettings
from airflow_provider_cdc.targets.delta.names import delta_table_uri

DAG_ID = "cdc_table_consumer"

SETTINGS = DagSettings.from_env()
LAKE_ROOT = os.environ.get("CDC_CONSUMER_LAKE_ROOT") or f"{SETTINGS.demo_home}/lake"
TABLE = os.environ.get("CDC_CONSUMER_TABLE") or "Orders"
# The same URI the commit names the table by: a consumer declaring it schedules on the commit's events.
ORDERS = Asset(uri=delta_table_uri(LAKE_ROOT, TABLE))

log = logging.getLogger(__name__)

with DAG(
    dag_id=DAG_ID,
    description=f"Runs when a window is applied to the Delta table {TABLE}",
    start_date=SETTINGS.start_date,
    schedule=[ORDERS],
    catchup=False,
    tags=["cdc", "assets", "example"],
) as dag:

    @task
    def log_table_events(**context: Any) -> list[dict[str, Any]]:
        """Log the window and the apply watermark of each asset event that triggered the run."""
        applied = []
        for uri, event in triggering_asset_events(context):
            extra = dict(event.extra or {})
            log.info(
                "%s: window %s [%s, %s) applied to %s table %s (%s change rows); watermark %s",
                uri,
                extra.get("window_id"),
                extra.get("window_start"),
                extra.get("window_end"),
                extra.get("target"),
                extra.get("table"),
                extra.get("rows"),
                extra.get("watermark"),
            )
            applied.append({"uri": uri, **extra})
        return applied

    log_table_events()
