"""Operator that applies a window's change set to BigQuery CDC tables (Storage Write API default stream)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow_provider_cdc._compat import AirflowFailException, BaseOperator
from airflow_provider_cdc.core.contract.locations import TABLE_DIR_PREFIX
from airflow_provider_cdc.hooks.connection_fields import connection_arguments_of
from airflow_provider_cdc.hooks.pipeline import StaleEpochError
from airflow_provider_cdc.lineage import DatasetName, StepLineage, location_dataset
from airflow_provider_cdc.operators.window_step import (
    WINDOW_STEP_FIELDS,
    PipelineWindowStepFields,
    WindowStepMixin,
)
from airflow_provider_cdc.targets.bigquery.commit import applied_output
from airflow_provider_cdc.targets.bigquery.hook import BigQueryCdcHook
from airflow_provider_cdc.targets.bigquery.names import bigquery_table_name


class BigQueryCdcUpsertOperator(WindowStepMixin, BaseOperator):
    """Apply a window's change set ``{changeset_root}/{window_id}`` to ``{project_id}.{dataset}.{table}``.

    Run it after the apply step of the pipeline's target that keeps current rows (and before the
    commit): partial row images are completed from that target's tables (its root in ``locations``).
    Each table is recorded in the metastore
    ledger (pipeline, target ``bigquery``, table) as soon as its rows are sent, and a table recorded
    for the window is never sent again (retry, clear, backfill; reported ``already_sent``); a table
    sent again after a partial failure while those tables hold later windows sends only the rows
    those windows did not supersede. The return value is a ``TargetApplied.to_dict()`` (per table: rows
    sent and ``upsert_stream_apply_watermark``; its ``details`` the send's report per table, with the
    staleness): the commit's ``applied`` takes it.

    :param locations: the pipeline's roots (templated), as for the merge, upsert and commit:
        ``changeset_root`` (required) and the root of a target that keeps current rows (needed to
        complete partial row images).
    :param dataset: BigQuery dataset of the target tables. Templated.
    :param project_id: BigQuery project (default: the connection's). Templated.
    :param pipeline_id: names the window in the metastore; the sends are recorded under it with the
        target ``bigquery``. Templated.
    :param window_start: inclusive window start (templated; default the data interval start).
    :param window_end: exclusive window end (templated; default the data interval end).
    :param max_staleness: the tables' ``max_staleness`` (set on create and kept in line).
    :param table_names: source table → BigQuery table, where they differ.
    :param gcp_conn_id: Google Cloud connection; ``impersonation_chain`` as for the google provider.
    :param api_endpoint: BigQuery REST endpoint override; ``write_endpoint`` the Storage Write API's
        (both templated; blank means unset). Loopback endpoints (a local fake) are reached with
        anonymous credentials and no connection.
    :param report_watermarks: read each table's ``upsert_stream_apply_watermark`` after the apply
        (one INFORMATION_SCHEMA query per table) and return it with the staleness.
    :param metastore_conn_id: the metastore that records the sends (templated).
    :param derived_key: ``"auto"`` (default), ``"always"`` or ``"never"``, or a mapping of source table
        to one of them (tables not named: ``"auto"``): whether a table's BigQuery primary key is the
        derived STRING column ``_cdc_key`` (the source key's canonical JSON, the key columns kept as
        ordinary columns). ``"auto"`` uses it for keys of types BigQuery refuses as primary keys
        (BYTES, FLOAT64, FLOAT32) and for tables already keyed on it; use ``"always"`` for tables with
        nullable key columns; ``"never"`` refuses a table BigQuery cannot key, before anything of the
        window is sent.
    :param writer_options: ``BigQueryCdcTarget`` options (``max_request_bytes``, ``max_in_flight``,
        ``max_attempts``, ``backoff_seconds``, ``schema_wait_seconds``, ``batch_rows``).
    """

    connection_class = PipelineWindowStepFields
    cdc_step, cdc_target = "upsert", "bigquery"
    template_fields: Sequence[str] = (
        *WINDOW_STEP_FIELDS,
        "dataset",
        "project_id",
        "api_endpoint",
        "write_endpoint",
    )
    template_fields_renderers = {"locations": "json"}
    ui_color = "#e8f0fe"

    @connection_arguments_of(PipelineWindowStepFields)
    def __init__(
        self,
        *,
        dataset: str,
        project_id: str | None = None,
        max_staleness: timedelta | str | None = timedelta(minutes=15),
        table_names: Mapping[str, str] | None = None,
        api_endpoint: str | None = None,
        write_endpoint: str | None = None,
        location: str | None = None,
        report_watermarks: bool = True,
        writer_options: Mapping[str, Any] | None = None,
        derived_key: str | Mapping[str, str] = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.dataset = dataset
        self.project_id = project_id
        self.max_staleness = max_staleness
        self.table_names = dict(table_names or {})
        self.api_endpoint = api_endpoint
        self.write_endpoint = write_endpoint
        self.location = location
        self.report_watermarks = report_watermarks
        self.writer_options = dict(writer_options or {})
        self.derived_key = derived_key if isinstance(derived_key, str) else dict(derived_key)

    def execute(self, context: Any) -> dict[str, Any]:
        hook = BigQueryCdcHook(
            self.gcp_conn_id,
            self.impersonation_chain,
            api_endpoint=_unless_blank(self.api_endpoint),
            write_endpoint=_unless_blank(self.write_endpoint),
            location=self.location,
        )
        try:
            self._summary = self._apply(hook)
            return applied_output(self._summary, self.window().end_micros).to_dict()
        except StaleEpochError as exc:  # the window was opened again: a retry cannot change that
            raise AirflowFailException(str(exc)) from exc

    _summary: dict[str, Any] | None = None

    def step_lineage(self) -> StepLineage | None:
        """Each table of the window's change set in, the BigQuery table it was sent to out."""
        summary = self._summary
        if not summary or not summary.get("project"):
            return None
        change_set = self.window_locations("changeset_root").change_set(self.window())
        project_dataset = f"{summary['project']}.{summary['dataset']}"
        inputs, outputs = [], []
        for table, entry in sorted((summary.get("tables") or {}).items()):
            source = entry.get("source_table", table) if isinstance(entry, dict) else table
            inputs.append(location_dataset(f"{change_set}/{TABLE_DIR_PREFIX}{source}"))
            name = bigquery_table_name(project_dataset, table)
            outputs.append(DatasetName(name.namespace, name.name))
        return StepLineage(inputs=inputs, outputs=outputs)

    def _apply(self, hook: BigQueryCdcHook) -> dict[str, Any]:
        return hook.apply_window(
            str(self.pipeline_of({})),
            self.window(),
            self.window_locations("changeset_root"),
            str(self.dataset),
            _unless_blank(self.project_id),
            max_staleness=self.max_staleness,
            table_names=self.table_names,
            metastore_conn_id=self.metastore_conn_id,  # type: ignore[arg-type]
            report_watermarks=self.report_watermarks,
            writer_options=self.writer_options,
            derived_key=self.derived_key,
            epoch=self.window_epoch(),
        )


def _unless_blank(value: Any) -> str | None:
    """A rendered optional text argument: ``None`` when unset or blank."""
    text = "" if value is None else str(value).strip()
    return text or None
