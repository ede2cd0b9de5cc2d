"""Compare target tables (Delta, or the BigQuery fake) with a Datastream scenario's truth.

Values are compared by meaning, not by type: decimals numerically (the target keeps NUMERIC's nine
fractional digits), timestamps as instants, JSON columns as parsed JSON, MySQL and Oracle booleans
as the 0/1 integers those databases store. A target row the truth lacks, a truth row the target
lacks, and every differing column are reported with the table and the key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from .history import CUSTOMERS, CUSTOMERS_WITH_TIER, ORDERS, TableSpec, Truth

__all__ = ["TableDifference", "comparable", "compare_rows", "compare_to_truth", "delta_rows"]

TABLES: dict[str, TableSpec] = {CUSTOMERS.object_name: CUSTOMERS_WITH_TIER, ORDERS.object_name: ORDERS}


@dataclass
class TableDifference:
    """What differs between one target table and the truth."""

    table: str
    missing: list[tuple[Any, ...]] = field(default_factory=list)
    unexpected: list[tuple[Any, ...]] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.differing)

    def __str__(self) -> str:
        return (
            f"table {self.table}: {len(self.missing)} row(s) missing (e.g. {self.missing[:3]}), "
            f"{len(self.unexpected)} unexpected (e.g. {self.unexpected[:3]}), "
            f"{len(self.differing)} differing (e.g. {self.differing[:3]})"
        )


def comparable(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "json":
        return json.loads(value) if isinstance(value, (str, bytes)) else value
    if kind == "decimal":
        return Decimal(str(value)).normalize()
    if kind == "timestamp":
        if isinstance(value, str):
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)
    if kind == "bool":
        return int(value) if isinstance(value, (bool, int)) else value
    if kind in ("int", "long"):
        return int(value)
    if kind == "double":
        return float(value)
    return value


def compare_rows(
    table: str, expected: Mapping[tuple[Any, ...], Mapping[str, Any]], rows: Iterable[Mapping[str, Any]]
) -> TableDifference:
    """Compare ``rows`` (a target table's rows) with ``expected`` (the truth of ``table``)."""
    spec = TABLES[table]
    kinds = {column.name: column.kind for column in spec.columns}
    difference = TableDifference(table)
    actual: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for row in rows:
        key = tuple(comparable(kinds[name], row[name]) for name in spec.key)
        actual[key] = row
    wanted = {
        tuple(comparable(kinds[n], v) for n, v in zip(spec.key, key, strict=True)): row
        for key, row in expected.items()
    }
    difference.missing = sorted(set(wanted) - set(actual), key=repr)
    difference.unexpected = sorted(set(actual) - set(wanted), key=repr)
    for key in sorted(set(wanted) & set(actual), key=repr):
        for column, kind in kinds.items():
            want = comparable(kind, wanted[key].get(column))
            got = comparable(kind, actual[key].get(column))
            if want != got:
                difference.differing.append(f"key {key} column {column}: expected {want!r}, got {got!r}")
    return difference


def delta_rows(
    lake_root: str, table: str, storage_options: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The rows of the Delta table ``{lake_root}/{table}`` (none when it does not exist)."""
    from deltalake import DeltaTable

    uri = f"{lake_root.rstrip('/')}/{table}"
    if not DeltaTable.is_deltatable(uri, storage_options=storage_options):
        return []
    return DeltaTable(uri, storage_options=storage_options).to_pyarrow_table().to_pylist()


def compare_to_truth(truth: Truth, read_rows: Any) -> list[TableDifference]:
    """The differences of every truth table with the rows ``read_rows(table)`` gives (empty: equal)."""
    differences = []
    for table in sorted(TABLES):
        difference = compare_rows(table, truth.get(table, {}), read_rows(table))
        if difference:
            differences.append(difference)
    return differences
