"""The Delta target's part of the commit and its tables' names (assets, lineage).

At commit time every table of the window's change set must hold the window in the lake (the upsert
applied it); the table version that applied it is what the ledger records. A table's apply watermark
is the window end, except for a table with windows pending (deferred apply), whose watermark is the
end of the last window folded into it (it lags the appended windows, as a target's reported apply
watermark may).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from airflow_provider_cdc.core.contract.target import (
    APPLIED,
    CommitContext,
    TableApplyResult,
    TableName,
    TargetApplied,
    WindowNotHeldError,
)
from airflow_provider_cdc.targets.delta.names import delta_table_name

#: The registered name of the Delta target (its metastore key).
DELTA = "delta"


def applied_output(lake_root: str | None, window: int, results: Sequence[TableApplyResult] = (),
                   details: Mapping[str, Any] | None = None) -> TargetApplied:  # fmt: skip
    """The Delta upsert's output: its results, each table named under ``lake_root``."""
    names = {r.table: delta_table_name(lake_root, r.table) for r in results} if lake_root else {}
    return TargetApplied(DELTA, window, lake_root, tuple(results), names, dict(details or {}))


def held_output(
    lake_root: str,
    storage_options: Mapping[str, str] | None,
    changed: Mapping[str, int | None],
    pipeline: str,
    window: Any,
) -> TargetApplied:
    """The Delta upsert's output after its job: per table of the change set (``changed``: table →
    rows), the version of the lake table that holds the window (a table that does not hold it is left
    out: the commit refuses the window)."""
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

    lake = DeltaLakeTarget(lake_root, dict(storage_options or {}))
    results = []
    for table, rows in sorted(changed.items()):
        result = lake.window_result(table, pipeline, window)
        if result is not None:
            results.append(replace(result, rows=rows or 0))
    return applied_output(lake_root, window.end_micros, results)


class DeltaCommit:
    """The commit part of the Delta target (its ``TargetKind.commit``)."""

    @property
    def storage_errors(self) -> tuple[type[BaseException], ...]:
        """delta-rs's errors (a lake that cannot be read)."""
        from deltalake.exceptions import DeltaError

        return (DeltaError,)

    def _lake(self, applied: TargetApplied, context: CommitContext) -> Any:
        from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

        return DeltaLakeTarget(str(applied.location), dict(context.storage_options or {}))

    def window_results(self, applied: TargetApplied, context: CommitContext) -> list[TableApplyResult]:
        """Per table of the change set, the version of the lake table that holds the window, with the
        change set's rows; without a lake root, the change set's tables and rows."""
        window, pipeline = context.window, context.pipeline
        if not applied.location:
            return [
                TableApplyResult(DELTA, table, window.end_micros, APPLIED, rows or 0)
                for table, rows in sorted(context.changed.items())
            ]
        lake = self._lake(applied, context)
        results = []
        for table, rows in sorted(context.changed.items()):
            result = lake.window_result(table, pipeline, window)
            if result is None:
                held = lake.applied_window(table, pipeline)
                raise WindowNotHeldError(
                    f"window {window} of pipeline {pipeline!r}: table {table!r} does not hold it (its last "
                    f"applied window version is {held}); the upsert must apply the window before it commits"
                )
            results.append(replace(result, rows=rows or 0))
        return results

    def apply_watermarks(self, applied: TargetApplied, context: CommitContext) -> dict[str, datetime | None]:
        """Every table the pipeline applied and every table of the change set: the window end, or for a
        table with pending windows the end of the last window folded into it."""
        window = context.window
        tables = sorted({*context.recorded, *context.changed})
        if not applied.location or not tables:
            return dict.fromkeys(tables, window.end)
        lake = self._lake(applied, context)
        marks: dict[str, datetime | None] = {}
        for table in tables:
            deferred = bool(lake.pending_windows(table, context.pipeline))
            marks[table] = lake.apply_watermark(table, context.pipeline) if deferred else window.end
        return marks

    def table_names(self, applied: TargetApplied, tables: Sequence[str]) -> dict[str, TableName]:
        """Each table's location under the lake root (none without one)."""
        if not applied.location:
            return {}
        return {
            table: applied.names.get(table) or delta_table_name(applied.location, table) for table in tables
        }

    def lineage_columns(
        self, applied: TargetApplied, table: str, storage_options: Mapping[str, str]
    ) -> list[str] | None:
        """The table's columns without the CDC columns (its schema in the lake)."""
        if not applied.location:
            return None
        from airflow_provider_cdc.targets.delta.compare import HIDDEN_COLUMNS
        from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

        lake = DeltaLakeTarget(str(applied.location), dict(storage_options or {}))
        return [f.name for f in lake.open(table).schema().fields if f.name not in HIDDEN_COLUMNS]
