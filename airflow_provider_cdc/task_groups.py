"""Task groups a pipeline DAG is assembled from.

:func:`initial_snapshot` is the step that starts a change-stream pipeline on a database that already has
rows: in the DAG run whose data interval starts at the first window's start ``T`` it reads every table the
stream watches as of ``T - 1µs`` and applies it as the pipeline's first window ``[T - 1µs, T)``; every
later run skips it. Put it upstream of the stream window's first task and give that task
``trigger_rule="none_failed"``, and the stream's open operator ``first_window_start`` =
:func:`snapshot_start`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, coerce_timestamp, format_timestamp
from airflow_provider_cdc.operators._window import epoch_template
from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator
from airflow_provider_cdc.sources.operators import window_template
from airflow_provider_cdc.sources.spanner.table_operators import (
    SNAPSHOT,
    SpannerTableOpenWindowOperator,
    SpannerTableReadWindowOperator,
    snapshot_window_bounds,
)
from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

try:  # Airflow 3
    from airflow.providers.standard.operators.python import ShortCircuitOperator
    from airflow.sdk import TaskGroup
except ImportError:  # Airflow 2.11
    from airflow.operators.python import ShortCircuitOperator  # type: ignore[no-redef]
    from airflow.utils.task_group import TaskGroup  # type: ignore[no-redef]

log = logging.getLogger(__name__)

__all__ = ["epoch_template", "initial_snapshot", "is_first_window", "snapshot_start", "window_template"]

_TRUE = {"true", "1", "yes", "on"}


def snapshot_start(first_window_start: datetime | str) -> str:
    """The pipeline's first window start when it begins with a snapshot: ``T - 1µs`` (RFC 3339)."""
    return format_timestamp(coerce_timestamp(first_window_start) - ONE_MICROSECOND)


def is_first_window(
    first_window_start: str, enabled: Any = True, data_interval_start: Any = None, **_: Any
) -> bool:
    """Whether this DAG run is the one whose data interval starts at ``first_window_start`` (and the
    snapshot is ``enabled``: a bool, or its rendered text)."""
    if str(enabled).strip().lower() not in _TRUE:
        log.info("The initial snapshot is turned off: skipping it")
        return False
    if data_interval_start is None:
        log.info("This run has no data interval: skipping the initial snapshot")
        return False
    first = coerce_timestamp(first_window_start)
    if coerce_timestamp(data_interval_start) != first:
        log.info(
            "This run's data interval starts at %s; the initial snapshot belongs to the run starting at %s",
            format_timestamp(coerce_timestamp(data_interval_start)),
            format_timestamp(first),
        )
        return False
    return True


def initial_snapshot(
    *,
    first_window_start: datetime | str,
    source: str,
    project_id: str,
    instance_id: str,
    database_id: str,
    locations: Mapping[str, str],
    pipeline_id: str,
    change_stream: str | None = None,
    tables: Sequence[str] | None = None,
    readers: int = 2,
    enabled: Any = True,
    bigquery: Mapping[str, Any] | None = None,
    outlets: Sequence[Any] | None = None,
    bigquery_dataset: str | None = None,
    group_id: str = "initial_snapshot",
    spark_conn_id: str = "spark_default",
    **connection: Any,
) -> TaskGroup:
    """The snapshot window ``[T - 1µs, T)`` as a task group (call it inside a DAG):

        is_first_window ─► open ─► read (mapped) ─► merge ─► upsert [─► to_bigquery] ─► commit

    The merge, the upsert and the commit carry the epoch ``open`` pushed (this opening of the window):
    a run whose snapshot window was opened again since (a second run of the first window) changes
    nothing.

    :param first_window_start: ``T``, the first stream window's start (the DAG's start date).
    :param source: the snapshot's name (a plain identifier): its staging folder and metastore key; one per
        pipeline.
    :param locations: ``staging_root``, ``changeset_root`` and ``lake_root``, as the window steps take them.
    :param change_stream: the stream the pipeline reads: the snapshot reads the tables and columns it
        watches (unless ``tables`` names tables).
    :param readers: mapped readers of the snapshot's PartitionQuery batches.
    :param enabled: ``False`` (or text rendering to it) skips the snapshot in every run.
    :param bigquery: arguments of a :class:`~airflow_provider_cdc.targets.bigquery.operators.
        BigQueryCdcUpsertOperator` that applies the snapshot to BigQuery after the Delta tables.
    :param outlets: the commit's outlets, e.g. ``table_asset_outlets(dag_id)``: an asset event per table
        the snapshot applied (see :class:`~airflow_provider_cdc.operators.commit.CdcCommitWindowOperator`).
    :param bigquery_dataset: ``project.dataset`` naming the BigQuery tables' assets (templated).
    :param spark_conn_id: the Spark connection of the merge and the upsert (templated): ``spark``
        (``spark-submit``; missing: ``local[*]``), ``spark_connect`` or ``dataproc``.
    :param connection: further connection fields of the table operators (``gcp_conn_id``,
        ``impersonation_chain``, ``metastore_conn_id``).
    """
    bounds = snapshot_window_bounds(first_window_start)
    table_source = {
        "project_id": project_id,
        "instance_id": instance_id,
        "database_id": database_id,
        "source": source,
        "staging_root": locations["staging_root"],
        "pipeline_id": pipeline_id,
        **bounds,
        **connection,
    }
    with TaskGroup(group_id=group_id, tooltip="the database's rows as of the first window's start") as group:
        first = ShortCircuitOperator(
            task_id="is_first_window",
            python_callable=is_first_window,
            op_kwargs={
                "first_window_start": coerce_timestamp(first_window_start).isoformat(),
                "enabled": enabled,
            },
            # skip the snapshot's tasks only; the stream window after the group runs by its trigger rule
            ignore_downstream_trigger_rules=False,
        )
        open_snapshot = SpannerTableOpenWindowOperator(
            task_id="open", mode=SNAPSHOT, tables=tables, change_stream=change_stream, readers=readers,
            **table_source,
        )  # fmt: skip
        read = SpannerTableReadWindowOperator.partial(task_id="read", **table_source).expand(
            reader_index=list(range(readers))
        )
        # The steps after the read belong to this opening of the snapshot window (its epoch).
        epoch = epoch_template(open_snapshot.task_id)
        merge = SparkMergeWindowOperator(
            task_id="merge",
            locations=locations,
            # the source's metastore key as the opening recorded it (its window handle)
            stream_key=window_template(open_snapshot.task_id, "source_key"),
            pipeline_id=pipeline_id,
            epoch=epoch,
            conn_id=spark_conn_id,
            **bounds,
        )
        upsert = SparkUpsertWindowOperator(
            task_id="upsert", locations=locations, pipeline_id=pipeline_id, epoch=epoch,
            conn_id=spark_conn_id, **bounds,
        )  # fmt: skip
        last: Any = upsert
        watermarks = None
        if bigquery is not None:
            from airflow_provider_cdc.targets.bigquery.operators import BigQueryCdcUpsertOperator

            to_bigquery = BigQueryCdcUpsertOperator(
                task_id="to_bigquery",
                locations=locations,
                pipeline_id=pipeline_id,
                epoch=epoch,
                **bounds,
                **bigquery,
            )
            upsert >> to_bigquery
            last, watermarks = to_bigquery, to_bigquery.output
        commit = CdcCommitWindowOperator(
            task_id="commit",
            pipeline_id=pipeline_id,
            read_summaries=read.output,
            bigquery_watermarks=watermarks,
            locations=locations,
            epoch=epoch,
            outlets=list(outlets or []),
            bigquery_dataset=bigquery_dataset,
            **bounds,
        )
        first >> open_snapshot >> read >> merge >> upsert
        last >> commit
    return group
