"""Operator that commits an applied window: window state, apply watermarks (Delta and BigQuery),
staleness check, and an asset event per applied table."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow_provider_cdc import assets, metrics
from airflow_provider_cdc._compat import AirflowFailException, Asset, AssetAlias, BaseOperator
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.pipeline import StaleEpochError
from airflow_provider_cdc.lineage import (
    DatasetName,
    StepLineage,
    bigquery_dataset,
    delta_table_dataset,
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


class CdcCommitWindowOperator(WindowStepMixin, BaseOperator):
    """Marks a window applied and advances each table's apply watermark to the window end.

    The apply watermark is the analog of BigQuery's ``upsert_stream_apply_watermark``: every change
    committed before it is in the target table. With ``max_staleness`` set, the task fails when a
    table's watermark lags the current time (or ``staleness_reference``) by more than that.

    A window commits only after the pipeline's previous window (the one ending at its start) is
    applied, or when it is the pipeline's first window. With ``lake_root`` in ``locations`` every
    table of the change set must hold the window (the upsert applied it), and the Delta version that
    applied it is recorded per window and table in the metastore: the next upsert checks the tables
    against it. The work is :meth:`CdcPipelineHook.commit_window`.

    With ``bigquery_watermarks`` (the BigQuery upsert's return value, e.g. ``to_bigquery.output``)
    the BigQuery tables' ``upsert_stream_apply_watermark`` is recorded too, only forward, under the
    pipeline and the target ``bigquery``, and ``max_staleness`` covers those tables: one whose
    watermark lags by more fails the task naming it and its lag. A table BigQuery has not applied
    anything to yet (a NULL watermark) is logged as a warning.

    Any target's results are taken the same way: ``results`` (the targets' per-table
    ``TableApplyResult``, as dicts) are recorded in the ledger under their target and table, and
    ``watermarks`` (target → the watermarks that target reported) like ``bigquery_watermarks``.

    Data-aware scheduling: each :class:`AssetAlias` among the task's ``outlets`` (see
    :func:`table_asset_outlets`) gets, on success, one asset event per table with an apply watermark:
    the Delta tables as ``{lake_root}/{table}`` URIs (``file:///...``, ``gs://...``), the BigQuery
    tables as ``bigquery://{project}/{dataset}/{table}`` when ``bigquery_dataset`` names their
    dataset; the event's extra holds the window (``window_start``, ``window_end``, ``window_id``), the
    ``target``, the ``table``, its apply ``watermark`` after the commit and the window's change
    ``rows`` of it (see :mod:`airflow_provider_cdc.assets`). A window committed again (a retry, a
    backfill) emits again: Airflow records outlet events only when the task succeeds, so a commit
    whose task failed after the metastore write emits on its retry; consumers key on ``window_id``.

    :param locations: the pipeline's roots (templated), as for the merge and the upsert: the tables
        of the ``changeset_root`` change set's manifest get watermarks (as do all tables already
        applied by the pipeline); ``lake_root`` is checked to hold the window.
    :param read_summaries: the readers' summaries (XCom), summed into the window's counts.
    :param bigquery_watermarks: the BigQuery upsert's return value (``{"tables": {table: {...,
        "upsert_stream_apply_watermark": ...}}}``) or a mapping of BigQuery table to its
        ``upsert_stream_apply_watermark`` (RFC 3339 text, datetime or ``None``). Templated.
    :param results: the targets' per-table apply results (``TableApplyResult.to_dict()``; a list, or
        a list of lists from several tasks). Templated.
    :param watermarks: target name → that target's reported watermarks (as ``bigquery_watermarks``).
        Templated.
    :param bigquery_dataset: ``project.dataset`` of the BigQuery tables (templated): names their
        assets; without it only the Delta tables get asset events.
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
        "bigquery_watermarks",
        "results",
        "watermarks",
        "staleness_reference",
        "bigquery_dataset",
    )
    template_fields_renderers = {
        "locations": "json", "bigquery_watermarks": "json", "results": "json", "watermarks": "json"
    }
    cdc_step = "commit"

    @window_step_arguments
    def __init__(
        self,
        *,
        read_summaries: Any = None,
        bigquery_watermarks: Any = None,
        results: Any = None,
        watermarks: Any = None,
        max_staleness: timedelta | None = None,
        staleness_reference: Any = None,
        bigquery_dataset: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.read_summaries = read_summaries
        self.bigquery_watermarks = bigquery_watermarks
        self.results = results
        self.watermarks = watermarks
        self.max_staleness = max_staleness
        self.staleness_reference = staleness_reference
        self.bigquery_dataset = bigquery_dataset

    def execute(self, context: Any) -> dict[str, Any]:
        pipeline = str(self.pipeline_of(context))
        window = self.window()
        locations = self.window_locations()
        now = coerce_timestamp(self.staleness_reference) if self.staleness_reference else None
        aliases = [o for o in self.outlets or () if isinstance(o, AssetAlias)]
        if aliases:  # a name no asset can have fails before anything is written
            if locations.lake_root:
                assets.lake_root_uri(str(locations.lake_root))
            if self.bigquery_dataset:
                assets.split_bigquery_dataset(str(self.bigquery_dataset))
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
                bigquery_watermarks=self.bigquery_watermarks,
                epoch=self.window_epoch(),
                results=_flattened(self.results),
                watermarks=self.watermarks or None,
            )
        except StaleEpochError as exc:  # the window was opened again: a retry cannot change that
            raise AirflowFailException(str(exc)) from exc
        metrics.window_committed(self.metric_tags(context, source_key=summary.get("source_key")), window.end,
                                 summary)  # fmt: skip
        if aliases:
            self._emit_table_events(context, aliases, pipeline, window, summary)
        if lineage_enabled():  # here, not in the lineage callback: that runs in a forked process,
            # where delta-rs (whose runtime this process started) cannot run
            try:
                self._lineage = self._commit_lineage(pipeline, summary)
            except Exception as error:  # lineage is reported on the side: the commit itself succeeded
                self.log.warning(
                    "No OpenLineage datasets for this commit: %s: %s", type(error).__name__, error
                )
        return summary

    _lineage: StepLineage | None = None

    def step_lineage(self) -> StepLineage | None:
        return self._lineage

    def _commit_lineage(self, pipeline: str, summary: dict[str, Any]) -> StepLineage:
        """The window end to end: the source's tables (the metastore's key of the window's source) in,
        the target tables that hold the window out, each Delta table's columns copied one to one
        from the source table of its name (its schema without the CDC columns)."""
        from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
        from airflow_provider_cdc.targets.delta.compare import HIDDEN_COLUMNS
        from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

        window = self.window()
        with CdcMetastoreHook(self.metastore_conn_id) as hook:  # type: ignore[arg-type]
            source_key = hook.metastore.get_window(pipeline, window.start, window.end).stream
        delta_tables = sorted(assets.watermarks_of(summary, "watermarks"))
        bigquery_tables = sorted(assets.watermarks_of(summary, "bigquery_watermarks"))
        outputs: list[DatasetName] = []
        columns: dict[DatasetName, dict[str, DatasetName]] = {}
        lake_root = self.window_locations().lake_root
        if lake_root:
            lake = DeltaLakeTarget(str(lake_root), self.storage_options())
            for table in delta_tables:
                output = delta_table_dataset(str(lake_root), table)
                outputs.append(output)
                source = source_table_dataset(source_key, table)
                if source is not None:
                    names = [f.name for f in lake.open(table).schema().fields if f.name not in HIDDEN_COLUMNS]
                    columns.update(identity_columns(output, names, source))
        if self.bigquery_dataset:
            outputs += [bigquery_dataset(str(self.bigquery_dataset), table) for table in bigquery_tables]
        return StepLineage(
            inputs=source_datasets(source_key, sorted({*delta_tables, *bigquery_tables})),
            outputs=outputs,
            columns=columns,
        )

    def _emit_table_events(
        self, context: Any, aliases: list[Any], pipeline: str, window: Window, summary: dict[str, Any]
    ) -> None:
        """One asset event per table with a watermark, through each of ``aliases``."""
        outlet_events = context.get("outlet_events") if hasattr(context, "get") else None
        if outlet_events is None:
            self.log.warning("No outlet events in the task context: the tables' asset events are not emitted")
            return
        lake_root = self.window_locations().lake_root
        events = assets.table_events(
            summary,
            window,
            lake_root=str(lake_root) if lake_root else None,
            bigquery_dataset=str(self.bigquery_dataset) if self.bigquery_dataset else None,
            rows=self._table_rows(pipeline, window, summary),
        )
        for alias in aliases:
            for uri, extra in events:
                outlet_events[alias].add(Asset(uri=uri), extra=extra)
        self.log.info(
            "Asset events of window %s through %s: %s",
            window,
            ", ".join(a.name for a in aliases),
            ", ".join(uri for uri, _ in events) or "none (no table has a watermark or a named location)",
        )

    def _table_rows(
        self, pipeline: str, window: Window, summary: dict[str, Any]
    ) -> dict[str, dict[str, int | None]]:
        """Target → table → the window's change rows: the Delta tables' from the ledger (a table it
        does not record for the window had none), the BigQuery tables' from the upsert's output."""
        from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
        from airflow_provider_cdc.metastore.model import BIGQUERY_TARGET, DELTA_TARGET

        with CdcMetastoreHook(self.metastore_conn_id) as hook:  # type: ignore[arg-type]
            records = hook.metastore.window_tables(
                pipeline, target=DELTA_TARGET, window=(window.start, window.end)
            )
        recorded = {r.table: r.rows for r in records}
        rows = {DELTA_TARGET: {t: recorded.get(t, 0) for t in summary.get("watermarks") or {}}}
        output = self.bigquery_watermarks
        tables = output.get("tables") if isinstance(output, dict) else None
        if isinstance(tables, dict):
            rows[BIGQUERY_TARGET] = {
                t: e.get("rows") for t, e in tables.items() if isinstance(e, dict) and "rows" in e
            }
        return rows


def table_asset_outlets(pipeline: str) -> list[Any]:
    """The commit task's ``outlets`` for data-aware scheduling: the pipeline's asset alias
    (``cdc:{pipeline}``), through which the commit emits an asset event per applied table."""
    return [AssetAlias(name=assets.alias_name(pipeline))]


def _flattened(results: Any) -> list[Any] | None:
    """The results of one task (a list) or of several (a list of lists, e.g. a mapped task's output)."""
    if results is None:
        return None
    if not isinstance(results, (list, tuple)):
        raise TypeError(f"results must be a list of table apply results, got {type(results).__name__}")
    flat: list[Any] = []
    for item in results:
        flat.extend(item if isinstance(item, (list, tuple)) else [item])
    return flat
