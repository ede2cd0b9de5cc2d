"""One declaration of a pipeline: :func:`cdc_pipeline` builds a window's tasks from a source spec and
target specs, with every rule the steps rely on wired once.

A window's tasks (each source adds only what it needs)::

    [wait_parents | wait_for_files] ─► open_window ─► read (mapped) ─► [drained | complete]
        ─► merge ─► each target's apply step ─► commit

Each target spec builds its own apply step; the targets that keep current rows apply first (a target
that writes whole rows completes partial images from them); the commit
takes every apply step's output (``applied=[…]``).

The source's tasks are its spec's (:meth:`~airflow_provider_cdc.specs.SourceSpec.window_tasks`:
each source is a plug-in in ``sources/<name>/pipeline.py``); the open step returns the window handle and
every later step takes it whole (``window=open_window.output``).

With ``initial_snapshot`` (a source that takes one builds it: ``SourceSpec.snapshot_tasks``)
``open_window`` is the branch of the snapshot task group: it follows ``initial_snapshot.open`` only in
the pipeline's first window and skips it in every other, so the snapshot's tasks never start there; the
merge waits for the snapshot's commit (``none_failed``: it runs when the snapshot was skipped).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from airflow_provider_cdc.core.identifiers import InvalidIdentifierError, validate_pipeline_id
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.core.window import snapshot_start
from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator
from airflow_provider_cdc.specs import (
    Locations,
    PipelineSpecError,
    SnapshotWindow,
    SourceSpec,
    SourceTasks,
    SourceWindow,
    TargetSpec,
    apply_order,
    is_template,
)

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


def _keeping_rows(targets: Sequence[TargetSpec]) -> set[str]:
    """The targets among ``targets`` whose kind keeps current rows (partial images complete from them)."""
    from airflow_provider_cdc.plugins import target_kind, target_names

    known = set(target_names())
    return {t.target for t in targets if t.target in known and target_kind(t.target).keeps_rows}


def _row_keepers() -> str:
    """The registered targets that keep current rows, by their titles."""
    from airflow_provider_cdc.plugins import target_kinds

    return ", ".join(kind.title for kind in target_kinds() if kind.keeps_rows)


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
            f"cdc_pipeline source: {source!r} is no source spec; give a source's spec (a SourceSpec: "
            "airflow_provider_cdc.pipeline exports every source's)"
        )
    if not targets or not all(isinstance(target, TargetSpec) for target in targets):
        raise PipelineSpecError(
            f"cdc_pipeline targets: {targets!r}; give target specs (each a TargetSpec: "
            "airflow_provider_cdc.pipeline exports every target's)"
        )
    kinds = [target.target for target in targets]
    if len(set(kinds)) != len(kinds):
        raise PipelineSpecError("cdc_pipeline targets: a target is given twice; give each target once")
    from airflow_provider_cdc.plugins import location_fields

    known = location_fields()
    unknown = sorted(set(locations.target_roots) - set(known))
    if unknown:
        raise PipelineSpecError(
            f"cdc_pipeline locations: {unknown} is no registered target's root; give staging_root, "
            f"changeset_root and the roots of the pipeline's targets among {known}"
        )
    for target in targets:
        target.validate_locations(locations)
    keeping = _keeping_rows(targets)
    whole = [type(t).__name__ for t in targets if t.needs_full_images]
    if whole and not keeping and source.sends_partial_images:
        raise PipelineSpecError(
            f"cdc_pipeline targets: {whole} write whole rows and a {source.kind} sends partial row images; "
            f"add a target that keeps current rows ({_row_keepers()}) before it, to complete them from"
        )
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

    :param source: the source's spec (a :class:`~airflow_provider_cdc.specs.SourceSpec`;
        :mod:`airflow_provider_cdc.pipeline` exports every source's).
    :param targets: target specs (:mod:`airflow_provider_cdc.pipeline` exports every target's), applied
        as given except that the targets that keep current rows apply first (a target that writes whole
        rows completes partial row images from them).
    :param locations: the roots (:class:`Locations`, or its fields as a mapping).
    :param pipeline_id: names the pipeline in the metastore and the targets (default the DAG id).
    :param readers: mapped readers per window (a fixed list: Airflow 2's ``dags backfill`` never
        expands a task mapped over the output of a task that is not a root of the DAG).
    :param spark_conn_id: where the merge and the targets' Spark jobs run (``spark``, ``spark_connect`` or
        ``dataproc`` connection; default the operators' ``spark_default``).
    :param initial_snapshot: the pipeline starts with a snapshot of the source's tables as of
        ``first_window_start - 1µs``, for a source that takes one (``True``, or a template such as
        ``"{{ params.initial_snapshot }}"``).
    :param first_window_start: the pipeline's first window start (the DAG's start date); needed with
        ``initial_snapshot``. Without it the first window opened is the pipeline's first.
    :param metastore_conn_id: the metastore connection (default ``cdc_metastore_default``).
    :param poke_interval: seconds between the completion sensors' checks.
    :param outlets: the commits' outlets, e.g. ``[AssetAlias(alias_name(pipeline))]``: an asset event
        per table a window applied (each table named as its target's apply step reports it).
    :param group_id: prefix every task id with it (default: no prefix, the group ``cdc_pipeline``).
    """
    if isinstance(locations, Mapping):
        locations = Locations(**locations)
    _validate(source, targets, locations, readers, initial_snapshot, first_window_start)
    ordered = apply_order(targets, _keeping_rows(targets))
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
        snapshot = self.snapshot_tasks() if self.snapshot is not False else None
        snapshot_ids = [root.task_id for root in snapshot.roots] if snapshot is not None else []
        tasks: SourceTasks = source.window_tasks(
            SourceWindow(
                pipeline=self.pipeline, readers=self.readers, locations=self.locations,
                first_window_start=self.first_window_start(),
                predecessor_pipeline=self.predecessor_pipeline(),
                metastore=self.metastore, poke_interval=self.poke_interval, snapshot_task_ids=snapshot_ids,
            )
        )  # fmt: skip
        steps = self.window_steps(tasks.open_window, tasks.read)
        chain = [*tasks.chain(), *steps]
        for before, after in zip(chain, chain[1:], strict=False):
            before >> after
        if snapshot is not None:
            tasks.open_window >> snapshot
            snapshot >> steps[0]

    def window_steps(self, open_window: Any, read: Any) -> list[Any]:
        """merge ─► each target's apply ─► commit, all of this opening of the window: each takes the
        open step's window handle (its window, pipeline, epoch, source key and staging location)."""
        locations = self.locations.as_argument()
        common = {
            "locations": locations,
            "pipeline_id": self.pipeline,
            # This run's opening of the window: a run whose window was opened again since changes nothing.
            "window": open_window.output,
            **self.metastore,
        }
        # With the snapshot, the merge follows its commit, and runs when it was skipped.
        after_snapshot = {"trigger_rule": "none_failed"} if self.snapshot is not False else {}
        merge = SparkMergeWindowOperator(task_id="merge", **after_snapshot, **self.spark, **common)
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

    def snapshot_tasks(self) -> Any:
        """The snapshot window ``[T - 1µs, T)``, as the source's spec builds it."""
        assert self.first is not None  # _validate requires it
        return self.source.snapshot_tasks(
            SnapshotWindow(
                pipeline=self.pipeline,
                readers=self.readers,
                locations=self.locations,
                first_window_start=self.first,
                targets=self.targets,
                spark_conn_id=self.spark.get("conn_id", "spark_default"),
                assets=self.assets,
                metastore=self.metastore,
            )
        )
