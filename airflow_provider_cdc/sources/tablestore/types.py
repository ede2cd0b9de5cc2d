"""Table Store value types → logical types (:mod:`airflow_provider_cdc.core.types`).

Table Store has five column types and stores attribute columns without a schema, so a value's type is
read from the value itself (PlainBuffer tags each value): INTEGER → INT64, DOUBLE → FLOAT64, BOOLEAN →
BOOL, STRING → STRING, BINARY → BYTES. Declared types (``column_types``) name a column's type when a
change carries no value for it (a column deleted by an ``UPDATE_ROW``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_cdc.core.types import LogicalType, scalar_type

__all__ = ["TABLESTORE_TYPES", "TablestoreTypeError", "declared_types", "logical_type_of", "value_type"]

#: Table Store type names → logical type codes.
TABLESTORE_TYPES: dict[str, str] = {
    "INTEGER": "INT64",
    "DOUBLE": "FLOAT64",
    "BOOLEAN": "BOOL",
    "STRING": "STRING",
    "BINARY": "BYTES",
}


class TablestoreTypeError(ValueError):
    """A value or a declared type that has no logical type; the message names the table and column."""


def value_type(value: Any, table: str, column: str) -> str:
    """The Table Store type of a decoded value (``bool`` is checked before ``int``)."""
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "INTEGER"
    if isinstance(value, float):
        return "DOUBLE"
    if isinstance(value, str):
        return "STRING"
    if isinstance(value, (bytes, bytearray)):
        return "BINARY"
    raise TablestoreTypeError(
        f"table {table!r}, column {column!r}: a {type(value).__name__} value has no Table Store type "
        "(INTEGER, DOUBLE, BOOLEAN, STRING, BINARY)"
    )


def logical_type_of(tablestore_type: str, table: str, column: str) -> LogicalType:
    """The logical type of a Table Store type name."""
    code = TABLESTORE_TYPES.get(tablestore_type.upper())
    if code is None:
        raise TablestoreTypeError(
            f"table {table!r}, column {column!r}: Table Store type {tablestore_type!r} has no logical type "
            f"(expected one of {', '.join(TABLESTORE_TYPES)})"
        )
    return scalar_type(code, column)


def declared_types(types: Mapping[str, str] | None, table: str) -> dict[str, LogicalType]:
    """Validated declared column types of ``table`` (column → Table Store type name)."""
    return {column: logical_type_of(kind, table, column) for column, kind in (types or {}).items()}
