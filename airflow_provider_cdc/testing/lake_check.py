"""Compare the Delta tables of a pipeline with the ground truth of the workload history that was committed.

:mod:`airflow_provider_cdc.targets.delta.compare` with the column types of the workload tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_cdc.targets.delta.compare import (
    HIDDEN_COLUMNS,
    LakeTables,
    TableComparison,
    compare_lake_to_rows,
)
from airflow_provider_cdc.targets.delta.compare import lake_rows_encoded as _lake_rows_encoded
from airflow_provider_cdc.testing.workload import TABLES_BY_NAME

__all__ = ["HIDDEN_COLUMNS", "TableComparison", "compare_lake_to_truth", "lake_rows_encoded"]


def _column_types(table: str) -> dict[str, Mapping[str, Any]]:
    """Column name → Spanner type (JSON form) of a workload table."""
    return {c["name"]: c["type"] for c in TABLES_BY_NAME[table].column_types()}


def lake_rows_encoded(lake: LakeTables, table: str) -> list[dict[str, Any]]:
    """Rows of a Delta table in Spanner's JSON encoding (the hidden CDC columns left out)."""
    return _lake_rows_encoded(lake, table, _column_types(table))


def compare_lake_to_truth(
    lake: LakeTables, truth: Mapping[str, list[Mapping[str, Any]]]
) -> list[TableComparison]:
    """Per table of ``truth`` (Spanner-JSON-encoded rows): does the Delta table hold exactly those rows?"""
    return compare_lake_to_rows(lake, truth, {table: _column_types(table) for table in truth})
