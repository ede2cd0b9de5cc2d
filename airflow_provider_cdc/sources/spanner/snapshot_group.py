"""The initial snapshot of a change stream's tables as a task group.

:func:`initial_snapshot` is the step that starts a change-stream pipeline on a database that already has
rows: it reads every table the stream watches as of ``T - 1µs`` and applies it as the pipeline's first
window ``[T - 1µs, T)``. The stream's open step decides whether a run takes it: put the group's ``open``
directly downstream of the stream's open operator, give that operator ``snapshot_task_ids=[<group>.open]``
and ``first_window_start`` = :func:`snapshot_start`, and put the group upstream of the stream window's
merge (``trigger_rule="none_failed"``). The open step follows the group only in the pipeline's first
window and skips it in every other run, so its tasks start no task process there.
:func:`airflow_provider_cdc.pipeline.cdc_pipeline` wires all of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc.core.window import snapshot_start
from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator
from airflow_provider_cdc.sources.spanner.table_operators import (
    SNAPSHOT,
    SpannerTableOpenWindowOperator,
    SpannerTableReadWindowOperator,
    snapshot_window_bounds,
)

if TYPE_CHECKING:
    from airflow_provider_cdc.specs import TargetSpec

try:  # Airflow 3
    from airflow.sdk import TaskGroup
except ImportError:  # Airflow 2.11
    from airflow.utils.task_group import TaskGroup  # type: ignore[no-redef]

__all__ = ["initial_snapshot", "snapshot_start"]


def initial_snapshot(
    *,
    first_window_start: datetime | str,
    source: str,
    instance_id: str,
    database_id: str,
    locations: Mapping[str, str],
    pipeline_id: str,
    project_id: str | None = None,
    change_stream: str | None = None,
    tables: Sequence[str] | None = None,
    readers: int = 2,
    targets: Sequence[TargetSpec] = (),
    outlets: Sequence[Any] | None = None,
    group_id: str = "initial_snapshot",
    spark_conn_id: str = "spark_default",
    **connection: Any,
) -> TaskGroup:
    """The snapshot window ``[T - 1µs, T)`` as a task group (call it inside a DAG):

        open ─► read (mapped) ─► merge ─► each target's apply step (upsert, to_bigquery) ─► commit

    The merge, the apply steps and the commit take the window handle ``open`` returns (this opening of
    the window, ``window=open.output``):
    a run whose snapshot window was opened again since (a second run of the first window) changes
    nothing. Which runs take the snapshot is the stream's open step's choice (see the module).

    :param first_window_start: ``T``, the first stream window's start (the DAG's start date).
    :param source: the snapshot's name (a plain identifier): its staging folder and metastore key; one per
        pipeline.
    :param locations: ``staging_root``, ``changeset_root`` and the targets' roots, as the window steps
        take them.
    :param change_stream: the stream the pipeline reads: the snapshot reads the tables and columns it
        watches (unless ``tables`` names tables).
    :param readers: mapped readers of the snapshot's PartitionQuery batches.
    :param targets: the target specs (``airflow_provider_cdc.pipeline``'s ``DeltaLake``,
        ``BigQueryCdc``), in the order they apply: each builds its apply step of the snapshot window.
    :param outlets: the commit's outlets, e.g. ``[AssetAlias(alias_name(pipeline))]``: an asset event
        per table the snapshot applied (see :class:`~airflow_provider_cdc.operators.commit.
        CdcCommitWindowOperator`).
    :param spark_conn_id: the Spark connection of the merge and of the apply steps that run a Spark
        job (templated): ``spark``
        (``spark-submit``; missing: ``local[*]``), ``spark_connect`` or ``dataproc``.
    :param connection: further connection fields of the table operators (``gcp_conn_id``,
        ``impersonation_chain``, ``metastore_conn_id``).
    """
    if not targets:
        raise ValueError("initial_snapshot needs a target: give targets=[a target spec, …]")
    bounds = snapshot_window_bounds(first_window_start)
    table_source = {
        "instance_id": instance_id,
        "database_id": database_id,
        "source": source,
        "staging_root": locations["staging_root"],
        "pipeline_id": pipeline_id,
        **({"project_id": project_id} if project_id is not None else {}),
        **bounds,
        **connection,
    }
    step_connection = {k: v for k, v in connection.items() if k in ("metastore_conn_id", "gcp_conn_id")}
    with TaskGroup(group_id=group_id, tooltip="the database's rows as of the first window's start") as group:
        open_snapshot = SpannerTableOpenWindowOperator(
            task_id="open", mode=SNAPSHOT, tables=tables, change_stream=change_stream, readers=readers,
            **table_source,
        )  # fmt: skip
        read = SpannerTableReadWindowOperator.partial(task_id="read", **table_source).expand(
            reader_index=list(range(readers))
        )
        # The steps after the read take the opening's window handle: the snapshot window, its source
        # key and staging location, and this opening of it (its epoch).
        common = {
            "locations": locations,
            "pipeline_id": pipeline_id,
            "window": open_snapshot.output,
            **step_connection,
        }
        merge = SparkMergeWindowOperator(task_id="merge", conn_id=spark_conn_id, **common)
        applies = [target.apply_step(common, {"conn_id": spark_conn_id}) for target in targets]
        steps: list[Any] = [open_snapshot, read, merge, *applies]
        steps.append(
            CdcCommitWindowOperator(
                task_id="commit",
                read_summaries=read.output,
                applied=[step.output for step in applies],
                outlets=list(outlets or []),
                **common,
            )
        )
        for before, after in zip(steps, steps[1:], strict=False):
            before >> after
    return group
