"""The open and read operators every source shares (thin: the source's hook does the I/O).

Opening a window first runs the preflight (:mod:`airflow_provider_cdc.preflight`: params, connections,
roots, Spark, the window's time and the source, before anything is recorded), then records the pipeline
(its first window), refuses a window whose predecessor was never run, opens the window through the
source's hook and returns the opening's
:class:`~airflow_provider_cdc.core.contract.window_handle.WindowHandle` (``to_dict()``: the later steps
take it whole, ``window=open_window.output``), also pushed as the XCom ``window`` with the epoch as the
XCom ``epoch``. Mapped readers ``expand`` over a fixed list (``reader_index=list(range(readers))``),
not over the open step's return value. An open step given the initial snapshot's
first tasks (``snapshot_task_ids``, directly downstream of it) is the DAG's branch: it follows them only in
the pipeline's first window after the snapshot and skips them in every other run, so the snapshot's
tasks never start a task process there. Reading maps the reader over the window and returns the
reader's summary with its ``reader_index``.

A source's operators derive from :class:`OpenWindowOperatorBase` / :class:`ReadWindowOperatorBase`
(after its connection fields' mixin) and implement :meth:`OpenWindowOperatorBase.open` (one hook call).
An error a retry cannot heal fails either step without retries (:mod:`airflow_provider_cdc.failures`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc import metrics
from airflow_provider_cdc._compat import AirflowFailException, BaseOperator, BranchMixIn, Context
from airflow_provider_cdc._errors import metastore_errors, require_absolute
from airflow_provider_cdc.core.contract.window_handle import WINDOW_XCOM_KEY, WindowHandle
from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, coerce_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.failures import FailsPermanentErrors
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook, check_predecessor
from airflow_provider_cdc.lineage import StepLineage, lineage_of, location_dataset, source_datasets
from airflow_provider_cdc.operators._observed import ObservedStep
from airflow_provider_cdc.operators._window import (
    EPOCH_XCOM_KEY,
    WINDOW_END,
    WINDOW_START,
    window_of,
    xcom_pull_expression,
)

if TYPE_CHECKING:
    from airflow_provider_cdc.core.findings import Finding
    from airflow_provider_cdc.metastore.model import PipelineRecord
    from airflow_provider_cdc.metastore.pipelines import WindowOrderError
    from airflow_provider_cdc.sources.hook import WindowSourceHook

__all__ = [
    "OpenWindowOperatorBase",
    "ReadWindowOperatorBase",
    "SourceWindowOperator",
    "WINDOW_FIELDS",
    "check_predecessor",
    "json_argument",
    "reader_owner",
    "record_pipeline",
    "refuse_never_run",
    "window_template",
]

#: The fields every window step of a source takes after its connection fields (all templated).
WINDOW_FIELDS: tuple[str, ...] = ("staging_root", "window_start", "window_end", "pipeline_id")


def json_argument(name: str, value: Any, kind: str = "a list") -> Any:
    """An argument as given, or parsed when a template rendered it as JSON text (``{{ params.x |
    tojson }}``); blank text is ``None``. Text that is not JSON fails without retries, naming ``name``."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise AirflowFailException(
            f"{name} must be {kind}, or its JSON text (render a param with '| tojson'), "
            f"got {text[:200]!r}: {exc}"
        ) from None


def window_template(open_task_id: str, field: str = "source_key") -> str:
    """The template of one field of the window handle the open task ``open_task_id`` pushed (its XCom
    ``window``), for a task of your own that takes one field; the window steps take the handle whole
    (``window=open.output``)."""
    if field not in WindowHandle.xcom_fields():
        raise ValueError(f"a window handle has no field {field!r}; it has {list(WindowHandle.xcom_fields())}")
    return f"{{{{ {xcom_pull_expression(open_task_id, WINDOW_XCOM_KEY)}['{field}'] }}}}"


def reader_owner(context: Context) -> str:
    """Lease owner of a reader task: the same across retries of one task instance, unique otherwise."""
    from airflow_provider_cdc.metastore.model import task_instance_name

    return task_instance_name(context["ti"])


def record_pipeline(
    metastore_conn_id: str, pipeline: str, window: Window, first_window_start: datetime
) -> tuple[PipelineRecord, WindowOrderError | None]:
    """Record the pipeline's first window (``first_window_start`` unless recorded before); returns the
    pipeline's record and why ``window`` cannot apply yet (``None``: its predecessor is applied, or it
    is the first)."""
    with metastore_errors(f"window {window} of pipeline {pipeline!r}: recording the pipeline"):
        with CdcMetastoreHook(metastore_conn_id) as metastore:
            recorded = metastore.metastore.record_pipeline(pipeline, first_window_start)
            error = metastore.metastore.predecessor_error(pipeline, window.start, window.end)
    return recorded, error


def refuse_never_run(error: WindowOrderError | None) -> None:
    """Fail without retries when the window's predecessor was never run (a retry cannot change it)."""
    if error is not None and error.never_run:
        raise AirflowFailException(str(error))


class SourceWindowOperator(ObservedStep, FailsPermanentErrors, BaseOperator):
    """The window fields of a source's open and read operators: the staging root (a ``gs://`` URI or
    an absolute path; a relative one is refused, tasks run in other working directories), the window
    (default the run's data interval) and the pipeline id (default the DAG id). Put the source's
    connection fields' mixin before it and start ``template_fields`` with its fields. The open and
    read steps send their metrics and keep a failure on the window
    (:class:`~airflow_provider_cdc.operators._observed.ObservedStep`)."""

    template_fields: Sequence[str] = WINDOW_FIELDS

    def __init__(
        self,
        *,
        staging_root: str,
        window_start: Any = WINDOW_START,
        window_end: Any = WINDOW_END,
        pipeline_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.staging_root = staging_root
        self.window_start = window_start
        self.window_end = window_end
        self.pipeline_id = pipeline_id

    def window(self) -> Window:
        require_absolute("staging_root", self.staging_root)
        return window_of(self.window_start, self.window_end)

    def pipeline(self, context: Context) -> str:
        return self.pipeline_id or context["ti"].dag_id

    def source_hook(self) -> WindowSourceHook:
        """The source's hook (the connection fields' ``to_hook``)."""
        return self.to_hook()  # type: ignore[attr-defined,no-any-return]


class OpenWindowOperatorBase(SourceWindowOperator, BranchMixIn):
    """Opens a window of a source: runs the preflight (:meth:`preflight`), records the pipeline, refuses
    a window whose predecessor was never run, opens the window (:meth:`open`), pushes the epoch (XCom
    ``epoch``) and the window handle (XCom ``window``) and returns the handle
    (:meth:`WindowHandle.to_dict`) for the later steps' ``window`` argument (``window=open.output``).

    Changed: the open step used to return ``list(range(readers))``; map readers over a fixed list,
    ``.expand(reader_index=list(range(readers)))``, and give the later steps its return value.

    ``first_window_start``: the pipeline's first window start (default this window's start), recorded
    by the first window opened for the pipeline; windows apply in order from there.

    ``snapshot_task_ids``: the initial snapshot's first tasks, directly downstream of this one (the
    snapshot window ``[T - 1µs, T)`` with ``first_window_start`` = ``T - 1µs``). The open step follows
    them only when its window is the pipeline's first after the snapshot (it starts at ``T`` and the
    pipeline is recorded as starting at ``T - 1µs``): its predecessor, the snapshot, is then applied by
    this run, not refused as never run. In every other run it skips them, and Airflow skips the rest of
    the snapshot without starting a task.
    """

    template_fields: Sequence[str] = (*WINDOW_FIELDS, "readers", "first_window_start")
    cdc_step = "open"
    #: the open step may skip the snapshot's tasks: Airflow keeps them skipped when they are cleared
    inherits_from_skipmixin = True

    def __init__(
        self,
        *,
        readers: int | str = 1,
        first_window_start: Any = None,
        snapshot_task_ids: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.readers = readers
        self.first_window_start = first_window_start
        self.snapshot_task_ids = tuple(snapshot_task_ids)

    def preflight(self, context: Context) -> None:
        """Check the pipeline's settings before anything is recorded (:mod:`airflow_provider_cdc.
        preflight`); fail without retries, naming every problem, when one cannot be healed by a retry."""
        from airflow_provider_cdc.preflight import open_step_preflight

        found = open_step_preflight(self, context)
        found.log_to(self.log)
        found.raise_permanent(f"task {self.task_id}")

    def source_check_options(self) -> dict[str, Any]:
        """The open step's own settings the source's ``check_source`` takes (none by default)."""
        return {}

    def settings_findings(self) -> list[Finding]:
        """The preflight's findings about this step's own settings (``readers``)."""
        from airflow_provider_cdc.core.findings import Finding

        try:
            self.reader_count()
        except (TypeError, ValueError) as exc:
            return [Finding("readers", str(exc), "give a positive number of readers")]
        return []

    def reader_count(self) -> int:
        readers = int(self.readers)
        if readers < 1:
            raise ValueError(f"readers must be at least 1, got {readers}")
        return readers

    def first_start(self, window: Window) -> datetime:
        """The pipeline's first window start as this opening records it."""
        return coerce_timestamp(self.first_window_start) if self.first_window_start else window.start

    def record_pipeline(
        self, context: Context, window: Window
    ) -> tuple[PipelineRecord, WindowOrderError | None]:
        """Record the pipeline (see :func:`record_pipeline`)."""
        return record_pipeline(
            self.metastore_conn_id,  # type: ignore[attr-defined]
            self.pipeline(context),
            window,
            self.first_start(window),
        )

    def follows_snapshot(self, recorded: PipelineRecord, window: Window) -> bool:
        """Whether this run applies the initial snapshot before ``window``: the open step has the
        snapshot's tasks, it was told the pipeline starts with the snapshot (``first_window_start`` =
        ``window.start - 1µs``) and the pipeline is recorded so."""
        if not self.snapshot_task_ids or not self.first_window_start:
            return False
        snapshot_start = window.start - ONE_MICROSECOND
        told = coerce_timestamp(self.first_window_start) == snapshot_start
        return told and coerce_timestamp(recorded.first_window_start) == snapshot_start

    def choose_snapshot(self, context: Context, snapshot: bool, handle: dict[str, Any]) -> None:
        """Follow the snapshot's tasks (``snapshot``) or skip them; every other downstream task is
        followed. Nothing to do without snapshot tasks."""
        if not self.snapshot_task_ids:
            return
        if snapshot:
            self.log.info("Window %s is the pipeline's first after the initial snapshot: running it",
                          self.window())  # fmt: skip
            return
        self.log.info(
            "Window %s is not the pipeline's first after the initial snapshot: skipping its tasks %s",
            self.window(), list(self.snapshot_task_ids),
        )  # fmt: skip
        follow = [task_id for task_id in self.downstream_task_ids if task_id not in self.snapshot_task_ids]
        # Airflow 3 ends the task on a skip without pushing its return value: push it first.
        context["ti"].xcom_push(key="return_value", value=handle)
        self.do_branch(context, follow)

    def push_opened(self, context: Context, handle: WindowHandle) -> None:
        """Push the opening's epoch (XCom ``epoch``) and its window handle (XCom ``window``)."""
        self.note_source(handle.source_key)
        if handle.epoch is not None:
            context["ti"].xcom_push(key=EPOCH_XCOM_KEY, value=handle.epoch)
        context["ti"].xcom_push(key=WINDOW_XCOM_KEY, value=handle.to_dict())

    def open(self, context: Context, window: Window, pipeline: str) -> WindowHandle:
        """Open the window through the source's hook (the pipeline is recorded); returns its handle."""
        hook = self.source_hook()
        epoch, tokens = hook.open_window_epoch(pipeline, window, self.staging_root, reader_owner(context))
        self.log.info(
            "Window %s opened (epoch %d) with %d partition(s) to read by %d reader(s)",
            window, epoch, len(tokens), int(self.readers),
        )  # fmt: skip
        return hook.window_handle(pipeline, window, self.staging_root, epoch)

    def execute(self, context: Context) -> dict[str, Any]:
        self.preflight(context)
        self.reader_count()
        window = self.window()
        recorded, error = self.record_pipeline(context, window)
        self.log.info(
            "Pipeline %s starts with the window at %s", self.pipeline(context), recorded.first_window_start
        )
        snapshot = self.follows_snapshot(recorded, window)
        if not snapshot:  # the snapshot before this window is this run's: its later steps wait for it
            refuse_never_run(error)
        handle = self.open(context, window, self.pipeline(context))
        self.push_opened(context, handle)
        self.choose_snapshot(context, snapshot, handle.to_dict())
        return handle.to_dict()


class ReadWindowOperatorBase(SourceWindowOperator):
    """Reads units of one window into Parquet staging; several instances (mapped over the open task's
    return value) share a window. Returns the reader's summary with ``reader_index``, never rows.

    ``lease_seconds``: how long a reader holds a unit without renewing its lease;
    ``retries_per_unit``: tries of a unit after a retryable error of the source.
    """

    template_fields: Sequence[str] = (*WINDOW_FIELDS, "reader_index")
    cdc_step = "read"

    def __init__(
        self,
        *,
        reader_index: int | str = 0,
        lease_seconds: float = 300.0,
        retries_per_unit: int = 5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.reader_index = reader_index
        self.lease_seconds = lease_seconds
        self.retries_per_unit = retries_per_unit

    def execute(self, context: Context) -> dict[str, Any]:
        window = self.window()  # a relative staging root fails before any connection is looked up
        hook = self.source_hook()
        self.note_source(hook.source_key)
        summary = hook.read_window(
            window,
            self.staging_root,
            reader_owner(context),
            lease_seconds=self.lease_seconds,
            retries=self.retries_per_unit,
        )
        self._summary = {**summary.to_dict(), "reader_index": self.reader_index}
        metrics.units_read(self.metric_tags(context), self._summary)
        return self._summary

    _summary: dict[str, Any] | None = None

    def step_lineage(self) -> StepLineage | None:
        """The source (its tables, when the read names them) in, the window's staging folder out."""
        if self._summary is None:
            return None
        tables = self._summary.get("tables") or {}
        return StepLineage(
            inputs=source_datasets(self.source_hook().source_key, tables),
            outputs=[location_dataset(str(self._summary["staging_uri"]))],
        )

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: :meth:`step_lineage`'s datasets and the window as the run facet ``cdcWindow``."""
        return lineage_of(self, task_instance, self.step_lineage, self.window(), None)
