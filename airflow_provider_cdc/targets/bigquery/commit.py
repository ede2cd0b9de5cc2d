"""The BigQuery target's part of the commit, its upsert's output and its tables' names.

The upsert records each table in the ledger as soon as its rows are sent and reports each table's
``upsert_stream_apply_watermark`` (``None``: BigQuery has applied none of its row modifications yet);
the commit records those watermarks only forward and checks them against ``max_staleness``. A table
is named ``bigquery://{project}/{dataset}/{table}`` as an asset (the google provider's convention) and
``bigquery`` / ``{project}.{dataset}.{table}`` as an OpenLineage dataset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from airflow_provider_cdc.assets import AssetNameError
from airflow_provider_cdc.core.contract.target import (
    ALREADY_APPLIED,
    APPLIED,
    SKIPPED,
    CommitContext,
    TableApplyResult,
    TableName,
    TargetApplied,
)
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.targets.bigquery.names import bigquery_table_name

__all__ = ["BigQueryCdcCommit", "applied_output", "from_reported"]

#: The registered name of the BigQuery target (its metastore key).
BIGQUERY = "bigquery"
#: The key of a table's entry in the upsert's report that carries its watermark.
WATERMARK = "upsert_stream_apply_watermark"


def applied_output(summary: Mapping[str, Any], window: int) -> TargetApplied:
    """The upsert's output from the hook's report (``{"project", "dataset", "tables": {table: {...,
    "rows", "already_sent", "upsert_stream_apply_watermark"}}}``; a table without that key was not
    asked for its watermark), the report kept as the output's ``details``."""
    tables = summary.get("tables")
    if not isinstance(tables, Mapping):
        raise TypeError(
            f"the BigQuery upsert's report must map 'tables' to each table's entry, got {tables!r:.200}"
        )
    project, dataset = summary.get("project"), summary.get("dataset")
    location = f"{project}.{dataset}" if project and dataset else None
    results, names = [], {}
    for table, entry in sorted(tables.items()):
        name = validate_identifier(table, "BigQuery table")
        entry = entry if isinstance(entry, Mapping) else {}
        outcome = ALREADY_APPLIED if entry.get("already_sent") else APPLIED if entry.get("rows") else SKIPPED
        reported = WATERMARK in entry
        mark = entry.get(WATERMARK)
        try:
            watermark = None if mark is None else coerce_timestamp(mark)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"BigQuery table {table!r} has no valid {WATERMARK} ({exc})") from None
        detail = "the ledger records the table as sent for this window" if entry.get("already_sent") else ""
        results.append(TableApplyResult(BIGQUERY, name, window, outcome, int(entry.get("rows") or 0), None,
                                        detail, watermark, reported))  # fmt: skip
        if location:
            try:
                names[name] = bigquery_table_name(location, name)
            except AssetNameError:  # a project no asset can name (an emulator's): lineage names it only
                names[name] = TableName("bigquery", f"{location}.{name}")
    return TargetApplied(BIGQUERY, window, location, tuple(results), names, dict(summary))


def from_reported(value: Any, window: int) -> TargetApplied:
    """The commit's deprecated ``bigquery_watermarks``: the upsert's output (new or old form) or a
    mapping of table to its ``upsert_stream_apply_watermark`` (RFC 3339 text, datetime or ``None``)."""
    if isinstance(value, TargetApplied) or (isinstance(value, Mapping) and "target" in value):
        return TargetApplied.from_dict(value)
    if not isinstance(value, Mapping):
        raise TypeError(
            "bigquery_watermarks must be the BigQuery upsert's return value or a mapping of table to "
            f"{WATERMARK}, got {type(value).__name__}"
        )
    if isinstance(value.get("tables"), Mapping):
        return applied_output(value, window)
    return applied_output({"tables": {t: {WATERMARK: mark} for t, mark in value.items()}}, window)


class BigQueryCdcCommit:
    """The commit part of the BigQuery target (its ``TargetKind.commit``)."""

    storage_errors: tuple[type[BaseException], ...] = ()

    def window_results(self, applied: TargetApplied, context: CommitContext) -> list[TableApplyResult]:
        """Nothing more: the upsert recorded each table in the ledger as it was sent."""
        return []

    def apply_watermarks(self, applied: TargetApplied, context: CommitContext) -> dict[str, datetime | None]:
        """The ``upsert_stream_apply_watermark`` the upsert reported per table."""
        return applied.watermarks()

    def table_names(self, applied: TargetApplied, tables: Sequence[str]) -> dict[str, TableName]:
        """Each table of ``project.dataset`` (none when the output does not name them)."""
        if not applied.location:
            return {}
        return {t: applied.names.get(t) or bigquery_table_name(applied.location, t) for t in tables}

    def lineage_columns(
        self, applied: TargetApplied, table: str, storage_options: Mapping[str, str]
    ) -> list[str] | None:
        """Not known at commit time."""
        return None
