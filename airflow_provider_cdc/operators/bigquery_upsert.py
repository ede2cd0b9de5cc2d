"""Operator that applies a window's change set to BigQuery CDC tables (Storage Write API default stream)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._compat import AirflowException, BaseOperator
from airflow_provider_cdc.domain.identifiers import validate_pipeline_id
from airflow_provider_cdc.domain.timestamps import format_timestamp
from airflow_provider_cdc.hooks.bigquery_cdc import BigQueryCdcHook, is_loopback

if TYPE_CHECKING:  # pragma: no cover
    try:
        from airflow.sdk import Context
    except ImportError:
        from airflow.utils.context import Context  # type: ignore[no-redef]

#: Suffix of the metastore ledger id under which BigQuery sends are recorded per window and table.
LEDGER_SUFFIX = ".bigquery"


def ledger_id(pipeline_id: str) -> str:
    """The metastore pipeline id that records a pipeline's BigQuery sends (kept apart from the
    Delta tables' records, which the Delta upsert checks against the lake)."""
    return validate_pipeline_id(f"{validate_pipeline_id(pipeline_id)}{LEDGER_SUFFIX}")


class BigQueryCdcUpsertOperator(BaseOperator):
    """Apply the change set ``{changeset_root}/{window_id}`` to ``{project_id}.{dataset}.{table}``.

    Run it after the Delta upsert of the same window (and before the commit): partial row images are
    completed from the Delta tables under ``lake_root``. Re-running a window sends the same rows with
    the same sequence numbers, which leaves the tables unchanged.

    :param changeset_root: where the merge writes change sets. Templated.
    :param dataset: BigQuery dataset of the target tables. Templated.
    :param project_id: BigQuery project (default: the connection's). Templated.
    :param pipeline_id: names the window in the metastore; the sends are recorded under
        ``{pipeline_id}.bigquery``. Templated.
    :param window_id: ``{start_us}-{end_us}``; default: the run's data interval. Templated.
    :param lake_root: Delta tables the pipeline applied (needed for partial images). Templated.
    :param max_staleness: the tables' ``max_staleness`` (set on create and kept in line).
    :param table_names: source table → BigQuery table, where they differ.
    :param gcp_conn_id: Google Cloud connection; ``impersonation_chain`` as for the google provider.
    :param api_endpoint: BigQuery REST endpoint override; ``write_endpoint`` the Storage Write API's.
    :param report_watermarks: read each table's ``upsert_stream_apply_watermark`` after the apply
        (one INFORMATION_SCHEMA query per table) and return it with the staleness.
    :param metastore_conn_id: the metastore that records the sends.
    :param writer_options: ``BigQueryCdcTarget`` options (``max_request_bytes``, ``max_in_flight``,
        ``max_attempts``, ``backoff_seconds``, ``schema_wait_seconds``, ``batch_rows``).
    """

    template_fields: Sequence[str] = (
        "changeset_root",
        "dataset",
        "project_id",
        "pipeline_id",
        "window_id",
        "lake_root",
    )
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        changeset_root: str,
        dataset: str,
        pipeline_id: str,
        project_id: str | None = None,
        window_id: str | None = None,
        lake_root: str | None = None,
        max_staleness: timedelta | str | None = timedelta(minutes=15),
        table_names: Mapping[str, str] | None = None,
        gcp_conn_id: str = "google_cloud_default",
        impersonation_chain: str | Sequence[str] | None = None,
        api_endpoint: str | None = None,
        write_endpoint: str | None = None,
        location: str | None = None,
        metastore_conn_id: str = "cdc_metastore_default",
        report_watermarks: bool = True,
        writer_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.changeset_root = changeset_root
        self.dataset = dataset
        self.project_id = project_id
        self.pipeline_id = pipeline_id
        self.window_id = window_id
        self.lake_root = lake_root
        self.max_staleness = max_staleness
        self.table_names = dict(table_names or {})
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.api_endpoint = api_endpoint
        self.write_endpoint = write_endpoint
        self.location = location
        self.metastore_conn_id = metastore_conn_id
        self.report_watermarks = report_watermarks
        self.writer_options = dict(writer_options or {})

    def _window(self, context: Mapping[str, Any]) -> Any:
        from airflow_provider_cdc.domain.window import Window

        if self.window_id:
            return Window.from_window_id(str(self.window_id))
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if start is None or end is None:
            raise AirflowException("window_id is not set and the run has no data interval")
        return Window(start, end)

    def _storage_options(self) -> dict[str, str]:
        roots = [r for r in (self.changeset_root, self.lake_root) if r]
        if not any("://" in r and not r.startswith("file://") for r in roots):
            return {}
        from airflow_provider_cdc.operators.upsert import gcp_lake_storage_options

        return gcp_lake_storage_options(self.gcp_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:  # type: ignore[override]
        from airflow_provider_cdc.bigquery.target import staleness_seconds
        from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
        from airflow_provider_cdc.lake.change_set import ChangeSetReader
        from airflow_provider_cdc.lake.delta import DeltaLakeTarget

        pipeline = validate_pipeline_id(str(self.pipeline_id))
        window = self._window(context)
        options = self._storage_options()
        reader = ChangeSetReader(f"{str(self.changeset_root).rstrip('/')}/{window.window_id}", options)
        tables = reader.tables()  # checks the manifest before anything is sent
        lake = DeltaLakeTarget(str(self.lake_root), options) if self.lake_root else None
        if lake is not None:
            behind = [
                t.name
                for t in tables
                if t.expected_rows != 0
                and (lake.applied_window_version(t.name, pipeline) or -1) < window.end_micros
            ]
            if behind:
                raise AirflowException(
                    f"the Delta tables {behind} under {self.lake_root!r} have not applied window "
                    f"{window.window_id} of pipeline {pipeline!r}; run the Delta upsert first (partial row "
                    "images are completed from them)"
                )
        hook = BigQueryCdcHook(
            self.gcp_conn_id,
            self.impersonation_chain,
            api_endpoint=self.api_endpoint,
            write_endpoint=self.write_endpoint,
            location=self.location,
        )
        project = self.project_id or (None if is_loopback(self.api_endpoint) else hook.project_id)
        target = hook.get_target(
            str(self.dataset),
            project,
            max_staleness=self.max_staleness,
            lake=lake,
            table_names=self.table_names,
            **self.writer_options,
        )
        self.log.info(
            "applying change set %s to BigQuery dataset %s.%s", reader.uri, target.project, target.dataset
        )
        results = [target.apply_table(table) for table in tables]
        store = CdcMetastoreHook(self.metastore_conn_id).metastore
        store.record_window_tables(
            ledger_id(pipeline),
            window.start,
            window.end,
            {r.table: (None, r.rows) for r in results},
            replace=True,
        )
        summary: dict[str, Any] = {"window_id": window.window_id, "tables": {}}
        for result in results:
            entry = result.to_dict()
            if self.report_watermarks:
                watermark = target.apply_watermark(result.table)
                entry["upsert_stream_apply_watermark"] = (
                    None if watermark is None else format_timestamp(watermark)
                )
                entry["staleness_seconds"] = staleness_seconds(watermark)
                self.log.info(
                    "%s: upsert_stream_apply_watermark %s (%s s behind)",
                    target.table_id(result.table),
                    entry["upsert_stream_apply_watermark"],
                    entry["staleness_seconds"],
                )
            summary["tables"][result.table] = entry
        return summary
