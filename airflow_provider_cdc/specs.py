"""What a pipeline reads and where it writes, as small typed specs :func:`~airflow_provider_cdc.pipeline.
factory.cdc_pipeline` builds the window's tasks from.

A source is a plug-in: its spec (a :class:`SourceSpec` in ``sources/<name>/pipeline.py``) builds its
window's source tasks (:meth:`SourceSpec.window_tasks`, from a :class:`SourceWindow`) and, when it takes
one, the initial snapshot (:meth:`SourceSpec.snapshot_tasks`); the factory names no source.

Every field may be a template (``"{{ params.stream }}"``): it is then checked when the task renders it.
A literal value is checked when the DAG is parsed: identifiers (streams, sources, tables), roots
(absolute paths or URIs) and choices fail the parse with a :class:`PipelineSpecError` naming the spec, the
field and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_cdc.core.identifiers import InvalidIdentifierError, validate_identifier

__all__ = [
    "Locations",
    "PipelineSpecError",
    "SnapshotWindow",
    "SourceSpec",
    "SourceTasks",
    "SourceWindow",
    "TargetSpec",
    "apply_order",
    "is_template",
    "spec_error",
    "spec_identifier",
    "spec_root",
    "spec_text",
]


class PipelineSpecError(ValueError):
    """A pipeline spec's literal value that cannot work: names the spec, the field and the fix."""


def is_template(value: object) -> bool:
    """Whether ``value`` is Jinja text Airflow renders when the task runs."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def spec_error(spec: object, name: str, problem: str, fix: str) -> PipelineSpecError:
    """The error of a spec's field: names the spec, the field, the problem and the fix."""
    return PipelineSpecError(f"{type(spec).__name__}.{name}: {problem}; {fix}")


def spec_identifier(spec: object, name: str, kind: str) -> None:
    """Check that the spec's field ``name`` is a plain identifier (or ``None``, or a template)."""
    value = getattr(spec, name)
    if value is None or is_template(value):
        return
    try:
        validate_identifier(value, kind)
    except InvalidIdentifierError as exc:
        raise _refuse(spec, name, str(exc), f"give a plain {kind} name, or a template") from None


def spec_root(spec: object, name: str, *, required: bool = True) -> None:
    """Check that the spec's field ``name`` is an absolute path, a URI or a template."""
    value = getattr(spec, name)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise _refuse(spec, name, "is missing", "give an absolute path or a URI such as gs://bucket/path")
        return
    if not isinstance(value, str):
        raise _refuse(spec, name, f"is a {type(value).__name__}", "give an absolute path or a URI")
    text = value.strip()
    if is_template(text) or "://" in text or os.path.isabs(text):
        return
    raise _refuse(
        spec, name, f"{text!r} is a relative path (tasks run in other working directories)",
        f"use an absolute path such as {os.path.abspath(text)!r}, or a URI",
    )  # fmt: skip


def spec_text(spec: object, name: str) -> None:
    """Check that the spec's field ``name`` is non-blank text."""
    value = getattr(spec, name)
    if not isinstance(value, str) or not value.strip():
        raise _refuse(spec, name, f"is {value!r}", "give its name, or a template such as '{{ params.x }}'")


_refuse, _identifier, _root, _text = spec_error, spec_identifier, spec_root, spec_text


@dataclass(frozen=True, init=False)
class Locations:
    """Where a pipeline's data lives, the same for every step after the read.

    :param staging_root: the staged changes (a source's staging belongs to the source: pipelines
        reading one stream may share it).
    :param changeset_root: the merged change sets, one per window.
    :param target_roots: the targets' roots by name, also given as keywords (``lake_root=…``): each
        registered target that keeps its tables under a root names it (its kind's ``location_field``);
        ``cdc_pipeline`` refuses a root no registered target names. A target's root reads as an
        attribute too (``locations.lake_root``; ``None`` when not given).
    """

    staging_root: str
    changeset_root: str
    target_roots: Mapping[str, str]

    def __init__(
        self,
        *,
        staging_root: str,
        changeset_root: str,
        target_roots: Mapping[str, str | None] | None = None,
        **roots: str | None,
    ) -> None:
        given = {**dict(target_roots or {}), **roots}
        object.__setattr__(self, "staging_root", staging_root)
        object.__setattr__(self, "changeset_root", changeset_root)
        object.__setattr__(self, "target_roots", {k: v for k, v in given.items() if v is not None})
        _root(self, "staging_root")
        _root(self, "changeset_root")
        for name in sorted(given):
            if name in ("staging_root", "changeset_root") or not name.endswith("_root"):
                raise _refuse(
                    self, name, "is not a target's root", "name each target's root by its *_root name"
                )
            _root(self, name, required=False)

    def __getattr__(self, name: str) -> str | None:
        if name.startswith("_") or not name.endswith("_root"):
            raise AttributeError(name)
        return self.__dict__.get("target_roots", {}).get(name)

    def root(self, name: str) -> str | None:
        """The root ``name`` (``None``: not given)."""
        return getattr(self, name)

    def as_argument(self) -> dict[str, str]:
        """The window steps' ``locations`` argument."""
        roots = {"staging_root": self.staging_root, "changeset_root": self.changeset_root}
        roots.update((name, root) for name, root in sorted(self.target_roots.items()) if root)
        return roots


@dataclass(frozen=True, kw_only=True)
class SourceWindow:
    """What a source's window tasks are built with (the factory gives it to :meth:`SourceSpec.
    window_tasks`).

    :param pipeline: the pipeline id (or its template).
    :param readers: how many mapped readers read the window (``reader_index`` over ``range(readers)``).
    :param locations: the pipeline's roots.
    :param first_window_start: the open step's ``first_window_start`` (``None``: none).
    :param predecessor_pipeline: the pipeline whose previous window must be applied before this one is
        read (a template in a pipeline that starts with the snapshot; blank: ``pipeline``).
    :param metastore: the metastore connection argument of every task (empty: the default).
    :param poke_interval: seconds between the completion sensors' checks.
    :param snapshot_task_ids: the initial snapshot's first tasks, which the open step branches to.
    """

    pipeline: str
    readers: int
    locations: Locations
    first_window_start: str | None = None
    predecessor_pipeline: str = ""
    metastore: Mapping[str, Any] = field(default_factory=dict)
    poke_interval: float = 2
    snapshot_task_ids: Sequence[str] = ()

    def window_arguments(self) -> dict[str, Any]:
        """The open and read steps' window arguments: the staging root, the pipeline, the metastore."""
        return {"staging_root": self.locations.staging_root, "pipeline_id": self.pipeline, **self.metastore}

    def reader_indices(self) -> list[int]:
        """The mapped readers' ``reader_index`` values (a fixed list: Airflow 2's backfill expands no
        task mapped over a task's output)."""
        return list(range(self.readers))


@dataclass(frozen=True, kw_only=True)
class SourceTasks:
    """A window's source tasks, in order: ``before`` ─► ``open_window`` ─► ``read`` ─► ``complete``.

    ``open_window`` returns the window handle the later steps take (``window=open_window.output``);
    ``read`` is the mapped readers (their summaries go to the commit); ``before`` (a wait before the
    window is opened) and ``complete`` (every unit staged, before the merge) are optional.
    """

    open_window: Any
    read: Any
    before: Any = None
    complete: Any = None

    def chain(self) -> list[Any]:
        """The tasks in order, without the missing ones."""
        tasks = (self.before, self.open_window, self.read, self.complete)
        return [task for task in tasks if task is not None]


@dataclass(frozen=True, kw_only=True)
class SnapshotWindow:
    """What the initial snapshot's tasks are built with (the factory gives it to :meth:`SourceSpec.
    snapshot_tasks`): the pipeline's settings and what its targets need.

    :param first_window_start: ``T``, the first stream window's start.
    :param targets: the pipeline's target specs, in the order they apply.
    :param spark_conn_id: the Spark connection of the merge and the upsert.
    :param assets: the commits' ``outlets``.
    """

    pipeline: str
    readers: int
    locations: Locations
    first_window_start: Any
    targets: Sequence[TargetSpec] = ()
    spark_conn_id: str = "spark_default"
    assets: Mapping[str, Any] = field(default_factory=dict)
    metastore: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class SourceSpec:
    """What every source spec has: the connections its tasks use (``None``: the operators' default).

    A source's spec builds its window's source tasks (:meth:`window_tasks`) and, when it takes one
    (:attr:`takes_snapshot`), the pipeline's initial snapshot (:meth:`snapshot_tasks`).
    """

    #: a short name of the source's kind, for errors and task ids
    kind: ClassVar[str] = "source"
    #: whether the pipeline may start with a snapshot of the source's database
    takes_snapshot: ClassVar[bool] = False
    #: whether its UPDATEs may carry partial row images (only the changed columns): a pipeline whose
    #: targets all need full images is then refused
    sends_partial_images: ClassVar[bool] = False

    def validate(self) -> None:
        """Check the literal fields (called when the spec is made)."""

    def __post_init__(self) -> None:
        self.validate()

    def window_tasks(self, window: SourceWindow) -> SourceTasks:
        """Build the window's source tasks in the current task group: the open step (task id
        ``open_window``, returning the window handle), the mapped readers (``read``), and the waits
        before and after them the source needs."""
        raise NotImplementedError(f"{type(self).__name__} builds no window tasks")

    def snapshot_tasks(self, snapshot: SnapshotWindow) -> Any:
        """Build the initial snapshot's task group (only a source that :attr:`takes_snapshot`)."""
        raise PipelineSpecError(
            f"cdc_pipeline initial_snapshot: a {self.kind} takes no snapshot; leave it out"
        )


@dataclass(frozen=True, kw_only=True)
class TargetSpec:
    """What every target spec has: each target's spec lives in its folder (``targets/<name>/pipeline.py``)
    and builds the target's apply step; the factory names no target.

    ``target`` is the registered target the spec applies to, ``task_id`` its apply step's task id and
    ``needs_full_images`` whether it writes whole rows only: it completes partial row images from a
    target of the same pipeline that keeps current rows (a kind with ``keeps_rows``), which applies
    before it.
    """

    #: the task id of the target's apply step
    task_id: ClassVar[str] = "apply"
    #: the registered target (its metastore key)
    target: ClassVar[str] = ""
    #: the target writes whole rows: partial images are completed from a target that keeps rows
    needs_full_images: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check the literal fields (called when the spec is made)."""

    def validate_locations(self, locations: Locations) -> None:
        """Refuse ``locations`` that lack what the target needs (called by the factory)."""

    def apply_step(self, common: Mapping[str, Any], spark: Mapping[str, Any]) -> Any:
        """The target's apply step of a window: ``common`` are the window steps' arguments
        (``locations``, ``pipeline_id``, ``epoch``, the metastore, the window), ``spark`` the Spark
        connection (``conn_id``) of a step that runs a Spark job. Its output is the commit's
        ``applied`` entry (a ``TargetApplied``)."""
        raise NotImplementedError(f"{type(self).__name__} builds no apply step")


def apply_order(targets: Sequence[TargetSpec], keeps_rows: Collection[str] = ()) -> list[TargetSpec]:
    """``targets`` in the order they apply: those whose target keeps current rows (``keeps_rows``, the
    names of such targets) first, then the others, each group as given."""
    keeping = [t for t in targets if t.target in keeps_rows]
    return [*keeping, *(t for t in targets if t.target not in keeps_rows)]
