"""Compare Delta tables with the rows their source tables hold, given in the JSON value encoding.

The expected rows are ``{table: [{column: value}]}`` with values in the JSON value encoding of
:mod:`airflow_provider_cdc.core.types` (an export of the source tables, or the ground truth of a
replayed history). The lake's rows are encoded the same way, without the ``_change_sequence_number``
and ``_commit_timestamp`` columns, pending windows applied (merge-on-read), and both sides are
compared as sets of rows: NUMERIC and JSON values compare by value, everything else as encoded.
Column types come from each table's logical-type field metadata (``FIELD_METADATA_TYPE``, or its
earlier key in tables written by earlier versions) unless they are given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

import pyarrow as pa

from airflow_provider_cdc.changesets.arrow_values import field_type_text
from airflow_provider_cdc.core.values import LogicalType, encode_value, parse_logical_type

HIDDEN_COLUMNS = ("_change_sequence_number", "_commit_timestamp")

#: Column name → logical type (its JSON form such as ``{"code": "INT64"}``, its text form such as
#: ``ARRAY<STRING>``, or a :class:`LogicalType`).
ColumnTypes = Mapping[str, Any]


class LakeTables(Protocol):
    """What the comparison reads from a lake
    (:class:`~airflow_provider_cdc.targets.delta.target.DeltaLakeTarget`)."""

    def exists(self, table: str) -> bool: ...

    def read_table(self, table: str) -> pa.Table: ...


@dataclass
class TableComparison:
    """One table's verdict: row counts on both sides and up to three rows found on one side only."""

    table: str
    lake_rows: int
    truth_rows: int
    only_in_lake: list[str] = field(default_factory=list)
    only_in_truth: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.only_in_lake and not self.only_in_truth and self.lake_rows == self.truth_rows


def schema_column_types(schema: pa.Schema) -> dict[str, LogicalType]:
    """Column → logical type from the fields' type metadata (``FIELD_METADATA_TYPE`` or its earlier
    key; hidden, untyped columns left out)."""
    types: dict[str, LogicalType] = {}
    for column in schema:
        text = field_type_text(column)
        if text is not None and column.name not in HIDDEN_COLUMNS:
            types[column.name] = parse_logical_type(text, column.name)
    return types


def lake_rows_encoded(
    lake: LakeTables, table: str, column_types: ColumnTypes | None = None
) -> list[dict[str, Any]]:
    """Rows of a Delta table in the JSON value encoding, its typed columns only (the hidden CDC columns
    left out); types from the table's field metadata unless ``column_types`` gives them."""
    data = _latest(lake, table)
    types = _parsed(column_types) if column_types is not None else schema_column_types(data.schema)
    return _encoded(data, types)


def _latest(lake: LakeTables, table: str) -> pa.Table:
    """The table's latest state: with its pending windows applied when the lake defers applies."""
    read_latest = getattr(lake, "read_latest", None)
    return read_latest(table) if callable(read_latest) else lake.read_table(table)


def compare_lake_to_rows(
    lake: LakeTables,
    expected: Mapping[str, list[Mapping[str, Any]]],
    column_types: Mapping[str, ColumnTypes] | None = None,
) -> list[TableComparison]:
    """Per table of ``expected`` (rows in the JSON value encoding): does the Delta table hold exactly
    those rows?

    A table missing from the lake holds no rows. ``column_types`` gives each table's types; by default
    they come from the Delta table's field metadata.
    """
    results = []
    for table, rows in sorted(expected.items()):
        given = None if column_types is None else _parsed(column_types[table])
        if lake.exists(table):
            data = _latest(lake, table)
            types = given if given is not None else schema_column_types(data.schema)
            actual = _encoded(data, types)
        else:
            types, actual = given or {}, []
        lake_texts = sorted(_row_text(types, r) for r in actual)
        truth_texts = sorted(_row_text(types, r) for r in rows)
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


def _parsed(column_types: ColumnTypes) -> dict[str, LogicalType]:
    return {name: parse_logical_type(value, name) for name, value in column_types.items()}


def _encoded(data: pa.Table, types: Mapping[str, LogicalType]) -> list[dict[str, Any]]:
    return [
        {name: encode_value(types[name], value, name) for name, value in row.items() if name in types}
        for row in data.to_pylist()
    ]


def _canonical(value: Any, logical_type: LogicalType | None) -> Any:
    """NUMERIC compares by value ("1.50" == "1.5"), JSON by value (not its text's escaping); everything
    else, and a value of an unknown column, as encoded."""
    if value is None or logical_type is None:
        return value
    if logical_type.code == "ARRAY":
        return [_canonical(v, logical_type.element) for v in value]
    if logical_type.code == "NUMERIC":
        return format(Decimal(value).normalize(), "f")
    if logical_type.code == "JSON":
        return json.loads(value)
    return value


def _row_text(types: Mapping[str, LogicalType], row: Mapping[str, Any]) -> str:
    return json.dumps({k: _canonical(v, types.get(k)) for k, v in row.items()}, sort_keys=True)
