"""Compare the Delta tables of a pipeline with the ground truth of the history that was committed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from airflow_provider_cdc.domain.spanner_types import write_json_value
from airflow_provider_cdc.testing.workload import TABLES_BY_NAME

HIDDEN_COLUMNS = ("_change_sequence_number", "_commit_timestamp")


@dataclass
class TableComparison:
    table: str
    lake_rows: int
    truth_rows: int
    only_in_lake: list[str] = field(default_factory=list)
    only_in_truth: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.only_in_lake and not self.only_in_truth and self.lake_rows == self.truth_rows


def _canonical(value: Any, type_json: Mapping[str, Any]) -> Any:
    """NUMERIC compares by value ("1.50" == "1.5"); everything else as encoded."""
    if value is None:
        return None
    if type_json.get("code") == "ARRAY":
        return [_canonical(v, type_json["array_element_type"]) for v in value]
    if type_json.get("code") == "NUMERIC":
        return format(Decimal(value).normalize(), "f")
    if type_json.get("code") == "JSON":  # JSON compares by value, not by its text's escaping
        return json.loads(value)
    return value


def _column_types(table: str) -> dict[str, Mapping[str, Any]]:
    """Column name → Spanner type (JSON form) of a workload table."""
    return {c["name"]: c["type"] for c in TABLES_BY_NAME[table].column_types()}


def _row_text(types: Mapping[str, Mapping[str, Any]], row: Mapping[str, Any]) -> str:
    return json.dumps({k: _canonical(v, types[k]) for k, v in row.items()}, sort_keys=True)


def lake_rows_encoded(lake: Any, table: str) -> list[dict[str, Any]]:
    """Rows of a Delta table in Spanner's JSON encoding (the hidden CDC columns left out)."""
    types = _column_types(table)
    rows = []
    for row in lake.read_table(table).to_pylist():
        rows.append(
            {name: write_json_value(types[name], value, name) for name, value in row.items() if name in types}
        )
    return rows


def compare_lake_to_truth(lake: Any, truth: Mapping[str, list[Mapping[str, Any]]]) -> list[TableComparison]:
    """Per table of ``truth`` (Spanner-JSON-encoded rows): does the Delta table hold exactly those rows?"""
    results = []
    for table, expected in sorted(truth.items()):
        actual = lake_rows_encoded(lake, table) if lake.exists(table) else []
        types = _column_types(table)
        lake_texts = sorted(_row_text(types, r) for r in actual)
        truth_texts = sorted(_row_text(types, r) for r in expected)
        lake_set, truth_set = set(lake_texts), set(truth_texts)
        results.append(
            TableComparison(
                table,
                len(lake_texts),
                len(truth_texts),
                sorted(lake_set - truth_set)[:3],
                sorted(truth_set - lake_set)[:3],
            )
        )
    return results
