"""Operator that commits an applied window: window state, each target's results and apply watermarks,
staleness check, and an asset event per applied table."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow_provider_cdc import assets, metrics
from airflow_provider_cdc._compat import AirflowFailException, Asset, AssetAlias, BaseOperator
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.pipeline import StaleEpochError, applied_outputs
from airflow_provider_cdc.lineage import (
    DatasetName,
    StepLineage,
    identity_columns,
    lineage_enabled,
    source_datasets,
    source_table_dataset,
)
from airflow_provider_cdc.operators.window_step import (
    WINDOW_STEP_FIELDS,
    WindowStepMixin,
    window_step_arguments,
)
from airflow_provider_cdc.plugins import target_kind, target_names

#: The suffix of the deprecated per-target arguments (``{target}_watermarks``: a target's former apply
#: step output), each converted into that target's ``applied`` entry.
_REPORTED = "_watermarks"


class CdcCommitWindowOperator(WindowStepMixin, BaseOperator):
    """Marks a window applied, records what each target applied and advances each table's apply
    watermark.

    ``applied`` takes the target apply steps' outputs (``[apply.output, …]``: each a
    ``TargetApplied``, see :mod:`airflow_provider_cdc.core.contract.target`), any number of targets. Each
    target's commit part checks what it must hold (e.g. every table of the change set holds the
    window) and gives the results recorded in the metastore ledger per (pipeline, target, table),
    against which the next apply checks the tables, and the tables' apply watermarks (every change
    committed before it is in the target table: a window end, or the watermark a target reports),
    recorded only forward. A table a target has applied nothing to yet is logged as a
    warning. With ``max_staleness`` set, the task fails when a table's watermark, in any target, lags
    the current time (or ``staleness_reference``) by more than that, naming table and lag.

    Without ``applied`` the targets whose root is in ``locations`` (their kind's ``location_field``) are
    committed from what they hold. The former ``{target}_watermarks=`` arguments are deprecated: each
    is converted into that target's ``applied`` entry.

    A window commits only after the pipeline's previous window (the one ending at its start) is
    applied, or when it is the pipeline's first window. The work is
    :meth:`CdcPipelineHook.commit_window`.

    Data-aware scheduling: each :class:`AssetAlias` among the task's ``outlets`` (see
    :func:`table_asset_outlets`) gets, on success, one asset event per table with an apply watermark
    and an asset URI, as its target names it (a table under a root: ``file:///...``, ``gs://...``; a
    warehouse table: the warehouse's own URI); the event's extra holds
    the window (``window_start``, ``window_end``, ``window_id``), the ``target``, the ``table``, its
    apply ``watermark`` after the commit and the window's change ``rows`` of it (see
    :mod:`airflow_provider_cdc.assets`). A window committed again (a retry, a backfill) emits again:
    Airflow records outlet events only when the task succeeds, so a commit whose task failed after the
    metastore write emits on its retry; consumers key on ``window_id``.

    :param applied: the target apply steps' outputs (a list; a list of lists from several tasks).
        Templated.
    :param locations: the pipeline's roots (templated), as for the merge and the apply steps: the tables
        of the ``changeset_root`` change set's manifest are the window's.
    :param read_summaries: the readers' summaries (XCom), summed into the window's counts.
    :param gcp_conn_id: Google Cloud connection for ``gs://`` locations (default
        ``google_cloud_default``, only read for object-store locations); ``impersonation_chain`` as
        for the google provider.
    :param metastore_conn_id: the metastore of the pipeline's windows.
    :param pipeline_id: the pipeline (templated; default the DAG id).
    :param epoch: the opening of the window this run commits (templated: the open task's ``epoch``
        XCom, see ``epoch_template``; default the epoch the change set's manifest records). The
        compare-and-set that marks the window applied is on it: a window opened again since, or a
        change set of another epoch, fails the commit and changes nothing.
    """

    template_fields: Sequence[str] = (
        *WINDOW_STEP_FIELDS,
        "read_summaries",
        "applied",
        "staleness_reference",
    )
    template_fields_renderers = {"locations": "json", "applied": "json"}
    cdc_step = "commit"

    @window_step_arguments
    def __init__(
        self,
        *,
        applied: Any = None,
        read_summaries: Any = None,
        max_staleness: timedelta | None = None,
        staleness_reference: Any = None,
        **kwargs: Any,
    ) -> None:
        reported = {
            name[: -len(_REPORTED)]: kwargs.pop(name)
            for name in [k for k in kwargs if k.endswith(_REPORTED)]
            if name[: -len(_REPORTED)] in target_names()
        }
        super().__init__(**kwargs)
        self._applied_given = applied is not None
        # The deprecated arguments ride in the templated ``applied`` (rendered, XComs resolved), marked.
        extra = [
            {_REPORTED: {target: value}} for target, value in sorted(reported.items()) if value is not None
        ]
        if extra:
            applied = [*(_listed(applied) if applied is not None else []), *extra]
        self.applied = applied
        self.read_summaries = read_summaries
        self.max_staleness = max_staleness
        self.staleness_reference = staleness_reference

    def _outputs(self) -> tuple[Any, dict[str, Any]]:
        """``applied`` (``None``: not given) and the deprecated ``{target}_watermarks`` values."""
        if self.applied is None:
            return None, {}
        given, reported = [], {}
        for item in _listed(self.applied):
            if isinstance(item, dict) and set(item) == {_REPORTED}:
                reported.update(item[_REPORTED])
            else:
                given.append(item)
        return (given if self._applied_given else None), reported

    def execute(self, context: Any) -> dict[str, Any]:
        pipeline = str(self.pipeline_of(context))
        window = self.window()
        locations = self.window_locations()
        now = coerce_timestamp(self.staleness_reference) if self.staleness_reference else None
        applied, reported = self._outputs()
        aliases = [o for o in self.outlets or () if isinstance(o, AssetAlias)]
        if aliases:  # a name no asset can have fails before anything is written
            for output in applied_outputs(applied, window, locations, reported):
                part = target_kind(output.target).committer()
                # its location is checked with any table name (the window's are read later)
                part.table_names(output, [r.table for r in output.tables] or ["Table"])
        hook = self.pipeline_hook()
        try:
            summary = hook.commit_window(
                pipeline,
                window,
                locations,
                self.read_summaries,
                max_staleness=self.max_staleness,
                now=now,
                log=self.log,
                applied=applied,
                epoch=self.window_epoch(),
                reported=reported,
            )
        except StaleEpochError as exc:  # the window was opened again: a retry cannot change that
            raise AirflowFailException(str(exc)) from exc
        metrics.window_committed(self.metric_tags(context, source_key=summary.get("source_key")), window.end,
                                 summary)  # fmt: skip
        if aliases:
            self._emit_table_events(context, aliases, window, summary)
        if lineage_enabled():  # here, not in the lineage callback: that runs in a forked process,
            # where a target's storage runtime this process started cannot run
            try:
                self._lineage = self._commit_lineage(pipeline, summary, applied, reported)
            except Exception as error:  # lineage is reported on the side: the commit itself succeeded
                self.log.warning(
                    "No OpenLineage datasets for this commit: %s: %s", type(error).__name__, error
                )
        return summary

    _lineage: StepLineage | None = None

    def step_lineage(self) -> StepLineage | None:
        return self._lineage

    def _commit_lineage(
        self, pipeline: str, summary: dict[str, Any], applied: Any, reported: dict[str, Any]
    ) -> StepLineage:
        """The window end to end: the source's tables (the metastore's key of the window's source) in,
        the target tables that hold the window out (as each target names them), each table's columns
        its target copies one to one from the source table of its name."""
        from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook

        window = self.window()
        with CdcMetastoreHook(self.metastore_conn_id) as hook:  # type: ignore[arg-type]
            source_key = hook.metastore.get_window(pipeline, window.start, window.end).stream
        outputs: list[DatasetName] = []
        columns: dict[DatasetName, dict[str, DatasetName]] = {}
        tables: set[str] = set()
        targets = {o.target: o for o in applied_outputs(applied, window, self.window_locations(), reported)}
        for target, entries in sorted((summary.get("tables") or {}).items()):
            for table, entry in sorted(entries.items()):
                if entry.get("watermark") is None or not entry.get("name"):
                    continue
                tables.add(table)
                output = DatasetName(str(entry["namespace"]), str(entry["name"]))
                outputs.append(output)
                source = source_table_dataset(source_key, table)
                if source is not None and target in targets:
                    part = target_kind(target).committer()
                    names = part.lineage_columns(targets[target], table, self.storage_options())
                    if names:
                        columns.update(identity_columns(output, names, source))
        return StepLineage(
            inputs=source_datasets(source_key, sorted(tables)), outputs=outputs, columns=columns
        )

    def _emit_table_events(
        self, context: Any, aliases: list[Any], window: Window, summary: dict[str, Any]
    ) -> None:
        """One asset event per table with a watermark and an asset URI, through each of ``aliases``."""
        outlet_events = context.get("outlet_events") if hasattr(context, "get") else None
        if outlet_events is None:
            self.log.warning("No outlet events in the task context: the tables' asset events are not emitted")
            return
        events = assets.table_events(summary, window)
        for alias in aliases:
            for uri, extra in events:
                outlet_events[alias].add(Asset(uri=uri), extra=extra)
        self.log.info(
            "Asset events of window %s through %s: %s",
            window,
            ", ".join(a.name for a in aliases),
            ", ".join(uri for uri, _ in events) or "none (no table has a watermark and an asset name)",
        )


def table_asset_outlets(pipeline: str) -> list[Any]:
    """The commit task's ``outlets`` for data-aware scheduling: the pipeline's asset alias
    (``cdc:{pipeline}``), through which the commit emits an asset event per applied table."""
    return [AssetAlias(name=assets.alias_name(pipeline))]


def _listed(value: Any) -> list[Any]:
    """``applied`` as a list (one output given alone is a list of one)."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, dict):
        return [value]
    if hasattr(value, "__getitem__") and hasattr(value, "__len__"):  # a lazy XCom sequence
        return list(value[:])
    return [value]
