"""One declaration of a pipeline: :func:`cdc_pipeline` builds a window's tasks from a source spec and
target specs, with every rule the steps rely on wired once.

A window's tasks (each source adds only what it needs)::

    [wait_parents | wait_for_files] ─► open_window ─► read (mapped) ─► [drained | complete]
        ─► merge ─► each target's apply step (e.g. upsert, to_bigquery) ─► commit

Each target spec builds its own apply step and says which targets it applies after; the commit
takes every apply step's output (``applied=[…]``).

With ``initial_snapshot`` (a Spanner change stream) ``open_window`` is the branch of the snapshot task
group: it follows ``initial_snapshot.open`` only in the pipeline's first window and skips it in every
other, so the snapshot's tasks never start there; the merge waits for the snapshot's commit
(``none_failed``: it runs when the snapshot was skipped).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from airflow_provider_cdc.core.identifiers import (
    InvalidIdentifierError,
    validate_identifier,
    validate_pipeline_id,
)
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.operators._window import epoch_template
from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator
from airflow_provider_cdc.pipeline.specs import (
    DatastreamFiles,
    Locations,
    PipelineSpecError,
    SourceSpec,
    SpannerChangeStream,
    SpannerTables,
    TablestoreStream,
    TargetSpec,
    apply_order,
    is_template,
)
from airflow_provider_cdc.sources.operators import window_template
from airflow_provider_cdc.task_groups import initial_snapshot as snapshot_group
from airflow_provider_cdc.task_groups import snapshot_start

try:  # Airflow 3
    from airflow.sdk import TaskGroup
except ImportError:  # Airflow 2.11
    from airflow.utils.task_group import TaskGroup  # type: ignore[no-redef]

__all__ = ["DEFAULT_GROUP_ID", "cdc_pipeline"]

#: The group of a pipeline built without a ``group_id``: its task ids are not prefixed.
DEFAULT_GROUP_ID = "cdc_pipeline"
_EXPRESSION = re.compile(r"^\{\{\s*(.+?)\s*\}\}$", re.DOTALL)


def _expression(name: str, value: Any) -> str:
    """The Jinja expression of ``value``: a literal's ``repr``, or the inside of ``{{ … }}``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if not is_template(value):
        return repr(str(value))
    matched = _EXPRESSION.match(str(value).strip())
    if matched is None or "{{" in matched.group(1):
        raise PipelineSpecError(
            f"cdc_pipeline {name}: {value!r} is not one template expression; give a literal or one "
            "'{{ expression }}', such as '{{ params.x }}'"
        )
    return f"({matched.group(1)})"


def _pipeline_id(value: str | None, group: Any) -> str:
    pipeline = value if value is not None else getattr(group, "dag_id", None)
    if pipeline is None:
        raise PipelineSpecError("cdc_pipeline pipeline_id: none given outside a DAG; give pipeline_id")
    if not is_template(pipeline):
        try:
            validate_pipeline_id(pipeline)
        except InvalidIdentifierError as exc:
            raise PipelineSpecError(
                f"cdc_pipeline pipeline_id: {exc}; give a valid id, or a template"
            ) from None
    return str(pipeline)


def _validate(
    source: SourceSpec,
    targets: Sequence[TargetSpec],
    locations: Locations,
    readers: int,
    initial_snapshot: bool | str,
    first_window_start: datetime | str | None,
) -> None:
    if not isinstance(source, SourceSpec):
        raise PipelineSpecError(
            f"cdc_pipeline source: {source!r} is no source spec; give SpannerChangeStream, SpannerTables, "
            "DatastreamFiles or TablestoreStream"
        )
    if not targets or not all(isinstance(target, TargetSpec) for target in targets):
        raise PipelineSpecError(
            f"cdc_pipeline targets: {targets!r}; give target specs, such as DeltaLake() and/or BigQueryCdc(…)"
        )
    kinds = [target.target for target in targets]
    if len(set(kinds)) != len(kinds):
        raise PipelineSpecError("cdc_pipeline targets: a target is given twice; give each target once")
    for target in targets:
        target.validate_locations(locations)
    if isinstance(readers, bool) or not isinstance(readers, int) or readers < 1:
        raise PipelineSpecError(
            f"cdc_pipeline readers: {readers!r}; give a positive number (mapped readers are fixed when "
            "the DAG is parsed: Airflow 2's backfill expands no task mapped over a task's output)"
        )
    if initial_snapshot is not False:
        if not source.takes_snapshot:
            raise PipelineSpecError(
                f"cdc_pipeline initial_snapshot: a {source.kind} takes no snapshot; leave it out"
            )
        if first_window_start is None or is_template(first_window_start):
            raise PipelineSpecError(
                f"cdc_pipeline first_window_start: {first_window_start!r}; the initial snapshot's window is "
                "fixed when the DAG is parsed: give the DAG's start date"
            )
    if first_window_start is not None and not is_template(first_window_start):
        try:
            coerce_timestamp(first_window_start)
        except (TypeError, ValueError):
            raise PipelineSpecError(
                f"cdc_pipeline first_window_start: {first_window_start!r}; give an aware datetime or "
                "RFC 3339 text (the DAG's start date)"
            ) from None


def cdc_pipeline(
    *,
    source: SourceSpec,
    targets: Sequence[TargetSpec],
    locations: Locations | Mapping[str, str],
    pipeline_id: str | None = None,
    readers: int = 2,
    spark_conn_id: str | None = None,
    initial_snapshot: bool | str = False,
    first_window_start: datetime | str | None = None,
    metastore_conn_id: str | None = None,
    poke_interval: float = 2,
    outlets: Sequence[Any] | None = None,
    group_id: str | None = None,
) -> TaskGroup:
    """Build a pipeline's window (call it inside a DAG whose data intervals are the windows).

    :param source: :class:`SpannerChangeStream`, :class:`SpannerTables`, :class:`DatastreamFiles` or
        :class:`TablestoreStream`.
    :param targets: target specs: ``DeltaLake`` and/or ``BigQueryCdc`` (each applied after the targets
        it reads: BigQuery completes partial rows from the Delta tables).
    :param locations: the roots (:class:`Locations`, or its fields as a mapping).
    :param pipeline_id: names the pipeline in the metastore and the targets (default the DAG id).
    :param readers: mapped readers per window (a fixed list: Airflow 2's ``dags backfill`` never
        expands a task mapped over the output of a task that is not a root of the DAG).
    :param spark_conn_id: where the merge and the Delta upsert run (``spark``, ``spark_connect`` or
        ``dataproc`` connection; default the operators' ``spark_default``).
    :param initial_snapshot: a Spanner change stream's pipeline starts with a snapshot of the watched
        tables as of ``first_window_start - 1µs`` (``True``, or a template such as
        ``"{{ params.initial_snapshot }}"``).
    :param first_window_start: the pipeline's first window start (the DAG's start date); needed with
        ``initial_snapshot``. Without it the first window opened is the pipeline's first.
    :param metastore_conn_id: the metastore connection (default ``cdc_metastore_default``).
    :param poke_interval: seconds between the completion sensors' checks.
    :param outlets: the commits' outlets, e.g. ``[AssetAlias(alias_name(pipeline))]``: an asset event
        per table a window applied (BigQuery's tables named by the :class:`BigQueryCdc` spec's project
        and dataset, as its apply step reports them).
    :param group_id: prefix every task id with it (default: no prefix, the group ``cdc_pipeline``).
    """
    if isinstance(locations, Mapping):
        locations = Locations(**locations)
    _validate(source, targets, locations, readers, initial_snapshot, first_window_start)
    ordered = apply_order(targets)
    with TaskGroup(
        group_id=group_id or DEFAULT_GROUP_ID,
        prefix_group_id=group_id is not None,
        tooltip=f"{source.kind} to {', '.join(type(target).__name__ for target in ordered)}",
    ) as group:
        _Builder(
            source, ordered, locations, _pipeline_id(pipeline_id, group), readers, spark_conn_id,
            initial_snapshot, first_window_start, metastore_conn_id, poke_interval, outlets,
        ).build()  # fmt: skip
    return group


class _Builder:
    """Builds one pipeline's tasks inside its group."""

    def __init__(
        self,
        source: SourceSpec,
        targets: Sequence[TargetSpec],
        locations: Locations,
        pipeline: str,
        readers: int,
        spark_conn_id: str | None,
        initial_snapshot: bool | str,
        first_window_start: datetime | str | None,
        metastore_conn_id: str | None,
        poke_interval: float,
        outlets: Sequence[Any] | None,
    ) -> None:
        self.source, self.targets, self.locations = source, targets, locations
        self.pipeline, self.readers, self.poke_interval = pipeline, readers, poke_interval
        self.spark = {"conn_id": spark_conn_id} if spark_conn_id is not None else {}
        self.metastore = {"metastore_conn_id": metastore_conn_id} if metastore_conn_id is not None else {}
        self.snapshot = initial_snapshot
        self.first = first_window_start
        self.assets = self.commit_assets(outlets)

    def commit_assets(self, outlets: Sequence[Any] | None) -> dict[str, Any]:
        """The commits' ``outlets`` (the tables' asset names come with the apply steps' outputs)."""
        return {"outlets": list(outlets)} if outlets else {}

    # --- the pipeline's first window -------------------------------------------------------------

    def first_window_start(self) -> str | None:
        """The open step's ``first_window_start``: the snapshot's start when it is on, else ``T``."""
        if self.first is None:
            return None
        if is_template(self.first):
            return str(self.first)
        stream_start = coerce_timestamp(self.first).isoformat()
        if self.snapshot is False:
            return stream_start
        if self.snapshot is True:
            return snapshot_start(self.first)
        enabled = _expression("initial_snapshot", self.snapshot)
        return f"{{{{ '{snapshot_start(self.first)}' if {enabled} else '{stream_start}' }}}}"

    def predecessor_pipeline(self) -> str:
        """``wait_parents``' ``pipeline_id``: the pipeline, except in the window at ``T``: its
        predecessor is the snapshot this run applies after it (or none)."""
        if self.snapshot is False or self.first is None or is_template(self.first):
            return self.pipeline
        stream_start = coerce_timestamp(self.first).isoformat()
        pipeline = _expression("pipeline_id", self.pipeline)
        return f"{{{{ '' if (data_interval_start | ts) == '{stream_start}' else {pipeline} }}}}"

    # --- the window's tasks ----------------------------------------------------------------------

    def build(self) -> None:
        source = self.source
        # The snapshot's tasks first: Airflow lists a DAG's tasks in the order they were made.
        snapshot = self.snapshot_tasks(source) if self.snapshot is not False else None  # type: ignore[arg-type]
        window = {"staging_root": self.locations.staging_root, "pipeline_id": self.pipeline, **self.metastore}
        if isinstance(source, SpannerChangeStream):
            snapshot_ids = [root.task_id for root in snapshot.roots] if snapshot is not None else []
            first, open_window, read, complete = self.change_stream(source, window, snapshot_ids)
        elif isinstance(source, SpannerTables):
            first, open_window, read, complete = self.tables(source, window)
        elif isinstance(source, DatastreamFiles):
            first, open_window, read, complete = self.datastream(source, window)
        elif isinstance(source, TablestoreStream):
            first, open_window, read, complete = self.tablestore(source, window)
        else:  # pragma: no cover - _validate refuses it
            raise PipelineSpecError(f"cdc_pipeline source: no pipeline for {type(source).__name__}")
        steps = self.window_steps(open_window.task_id, read)
        chain = [task for task in (first, open_window, read, complete, *steps) if task is not None]
        for before, after in zip(chain, chain[1:], strict=False):
            before >> after
        if snapshot is not None:
            open_window >> snapshot
            snapshot >> steps[0]

    def change_stream(
        self, source: SpannerChangeStream, window: dict[str, Any], snapshot_ids: list[str]
    ) -> tuple[Any, ...]:
        from airflow_provider_cdc.sensors.partitions_drained import SpannerChangeStreamPartitionsDrainedSensor
        from airflow_provider_cdc.sources.spanner.change_stream_operators import (
            SpannerChangeStreamOpenWindowOperator,
            SpannerChangeStreamReadWindowOperator,
        )

        stream = source.connection()
        timeout = source.drain_timeout
        wait_parents = SpannerChangeStreamPartitionsDrainedSensor(
            task_id="wait_parents",
            timestamp="{{ data_interval_start }}",
            # The window before this one must be applied: a window run out of order, or after a window
            # that failed for good, fails here at once naming the window it waits for.
            pipeline_id=self.predecessor_pipeline(),
            poke_interval=5, timeout=timeout, **stream, **self.metastore,
        )  # fmt: skip
        open_window = SpannerChangeStreamOpenWindowOperator(
            task_id="open_window", readers=self.readers, first_window_start=self.first_window_start(),
            snapshot_task_ids=snapshot_ids, **stream, **window,
        )  # fmt: skip
        read = SpannerChangeStreamReadWindowOperator.partial(task_id="read", **stream, **window).expand(
            reader_index=list(range(self.readers))
        )
        drained = SpannerChangeStreamPartitionsDrainedSensor(
            task_id="drained",
            timestamp="{{ data_interval_end }}",
            window_start="{{ data_interval_start }}",
            window_end="{{ data_interval_end }}",
            poke_interval=self.poke_interval, timeout=timeout, **stream, **self.metastore,
        )  # fmt: skip
        return wait_parents, open_window, read, drained

    def tables(self, source: SpannerTables, window: dict[str, Any]) -> tuple[Any, ...]:
        from airflow_provider_cdc.sources.spanner.table_operators import (
            COMMIT_TIMESTAMP,
            SpannerTableOpenWindowOperator,
            SpannerTableReadWindowOperator,
        )

        connection = source.connection()
        open_window = SpannerTableOpenWindowOperator(
            task_id="open_window", mode=COMMIT_TIMESTAMP, tables=source.tables, readers=self.readers,
            first_window_start=self.first_window_start(), on_late_rows=source.on_late_rows,
            page_rows=source.page_rows, **connection, **window,
        )  # fmt: skip
        read = SpannerTableReadWindowOperator.partial(task_id="read", **connection, **window).expand(
            reader_index=list(range(self.readers))
        )
        return None, open_window, read, None

    def datastream(self, source: DatastreamFiles, window: dict[str, Any]) -> tuple[Any, ...]:
        from airflow_provider_cdc.sources.datastream.operators import (
            DatastreamOpenWindowOperator,
            DatastreamReadWindowOperator,
            DatastreamWindowArrivedSensor,
        )

        stream = source.connection()
        wait_for_files = DatastreamWindowArrivedSensor(
            task_id="wait_for_files", timeout=source.wait_timeout, **stream, **self.metastore
        )
        open_window = DatastreamOpenWindowOperator(
            task_id="open_window", readers=self.readers, first_window_start=self.first_window_start(),
            **stream, **window,
        )  # fmt: skip
        read = DatastreamReadWindowOperator.partial(task_id="read", **stream, **window).expand(
            reader_index=list(range(self.readers))
        )
        return wait_for_files, open_window, read, self.complete(open_window.task_id, source.wait_timeout)

    def tablestore(self, source: TablestoreStream, window: dict[str, Any]) -> tuple[Any, ...]:
        from airflow_provider_cdc.sources.tablestore.operators import (
            TablestoreOpenWindowOperator,
            TablestoreReadWindowOperator,
        )

        stream = source.connection()
        open_window = TablestoreOpenWindowOperator(
            task_id="open_window", readers=self.readers, first_window_start=self.first_window_start(),
            **stream, **window,
        )  # fmt: skip
        read = TablestoreReadWindowOperator.partial(task_id="read", **stream, **window).expand(
            reader_index=list(range(self.readers))
        )
        return None, open_window, read, self.complete(open_window.task_id, source.wait_timeout)

    def complete(self, open_task_id: str, timeout: float) -> Any:
        """Every unit of the window staged (from the metastore alone) before the merge."""
        from airflow_provider_cdc.sensors.window_complete import WindowCompleteSensor

        return WindowCompleteSensor(
            task_id="complete", source_key=window_template(open_task_id),
            poke_interval=self.poke_interval, timeout=timeout, **self.metastore,
        )  # fmt: skip

    def window_steps(self, open_task_id: str, read: Any) -> list[Any]:
        """merge ─► each target's apply ─► commit, all of this opening of the window (its epoch)."""
        locations = self.locations.as_argument()
        common = {
            "locations": locations,
            "pipeline_id": self.pipeline,
            # This run's opening of the window: a run whose window was opened again since changes nothing.
            "epoch": epoch_template(open_task_id),
            **self.metastore,
        }
        # With the snapshot, the merge follows its commit, and runs when it was skipped.
        after_snapshot = {"trigger_rule": "none_failed"} if self.snapshot is not False else {}
        merge = SparkMergeWindowOperator(
            task_id="merge",
            # The source's key and window basis as the opening recorded them (its window handle).
            stream_key=window_template(open_task_id),
            window_basis=window_template(open_task_id, "window_basis"),
            **after_snapshot, **self.spark, **common,
        )  # fmt: skip
        applies = [self.apply(target, common) for target in self.targets]
        commit = CdcCommitWindowOperator(
            task_id="commit",
            read_summaries=read.output,
            applied=[step.output for step in applies],
            **self.assets,
            **common,
        )
        return [merge, *applies, commit]

    def apply(self, target: TargetSpec, common: dict[str, Any]) -> Any:
        """A target's apply step (its spec builds it); its output is the commit's ``applied`` entry."""
        return target.apply_step(common, self.spark)

    # --- the initial snapshot --------------------------------------------------------------------

    def snapshot_tasks(self, source: SpannerChangeStream) -> Any:
        """The snapshot window ``[T - 1µs, T)`` (``task_groups.initial_snapshot``)."""
        assert self.first is not None  # _validate requires it
        name = source.snapshot_source or f"{self.pipeline}_snapshot"
        if not is_template(name):
            try:
                validate_identifier(name, "snapshot source")
            except InvalidIdentifierError as exc:
                raise PipelineSpecError(
                    f"SpannerChangeStream.snapshot_source: {exc}; give a plain identifier (the pipeline id "
                    f"{self.pipeline!r} names no snapshot source)"
                ) from None
        connection = {k: v for k, v in source.connection().items() if k not in ("stream", "retention")}
        return snapshot_group(
            first_window_start=self.first,
            source=name,
            change_stream=source.stream,
            tables=source.snapshot_tables,
            locations=self.locations.as_argument(),
            pipeline_id=self.pipeline,
            readers=self.readers,
            targets=self.targets,
            spark_conn_id=self.spark.get("conn_id", "spark_default"),
            group_id="initial_snapshot",
            **self.assets,
            **connection,
            **self.metastore,
        )
