"""Spanner's column types as logical types (:mod:`airflow_provider_cdc.core.types`).

A change stream describes a column's type as Spanner's type JSON, e.g. ``{"code": "INT64"}`` or
``{"code": "ARRAY", "array_element_type": {"code": "STRING"}}`` (``arrayElementType`` in the
protobuf JSON spelling); ``INFORMATION_SCHEMA`` gives it as DDL text, e.g. ``STRING(MAX)`` or
``ARRAY<BYTES(1024)>``. Every Spanner type the provider supports has the logical type of the same
code:

| Spanner | logical |
| --- | --- |
| BOOL, INT64, FLOAT32, FLOAT64, NUMERIC, STRING, JSON, BYTES, DATE, TIMESTAMP, UUID | same code |
| ARRAY<T> | ARRAY<T> |

A PostgreSQL-dialect type carries a ``type_annotation`` (``PG_NUMERIC``, ``PG_JSONB``) on the code
it travels as (``NUMERIC``, ``JSON``): the code decides. STRUCT, PROTO, ENUM, INTERVAL and nested
arrays are refused naming the column.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_cdc.core.columns import ColumnType, parse_column_types
from airflow_provider_cdc.core.types import LogicalType, LogicalTypeError, parse_logical_type

#: Spanner type codes with a logical type (``ARRAY`` of any of them as well).
SPANNER_TYPE_CODES = frozenset(
    {"BOOL", "INT64", "FLOAT32", "FLOAT64", "NUMERIC", "STRING", "JSON", "BYTES", "DATE", "TIMESTAMP", "UUID"}
)

class SpannerTypeError(LogicalTypeError):
    """A Spanner type that is unknown, malformed or has no logical type."""


def parse_spanner_type(value: Any, column: str = "?") -> LogicalType:
    """The logical type of a Spanner type given as type JSON (dict or text) or DDL text.

    Spanner's type JSON and DDL text are the logical types' own forms
    (:func:`~airflow_provider_cdc.core.types.parse_logical_type`), with ``arrayElementType`` for
    ``array_element_type`` in the protobuf JSON spelling; a code Spanner does not have raises
    :class:`SpannerTypeError` naming the column and the type.
    """
    try:
        parsed = parse_logical_type(_snake_case_elements(value), column)
    except LogicalTypeError as exc:
        detail = str(exc).removeprefix(f"column {column!r}: ")
        raise SpannerTypeError(f"column {column!r}: unsupported Spanner type {value!r}: {detail}") from None
    scalar = parsed.element or parsed
    if scalar.code not in SPANNER_TYPE_CODES:
        raise SpannerTypeError(f"column {column!r}: unsupported Spanner type {value!r} (code {scalar.code})")
    return parsed


def _snake_case_elements(value: Any) -> Any:
    """``value`` with the protobuf JSON key ``arrayElementType`` spelled ``array_element_type``."""
    if not isinstance(value, Mapping) or "arrayElementType" not in value:
        return value
    renamed = {k: v for k, v in value.items() if k != "arrayElementType"}
    renamed.setdefault("array_element_type", _snake_case_elements(value["arrayElementType"]))
    return renamed


def parse_spanner_column_types(value: str | Iterable[Mapping[str, Any] | ColumnType]) -> list[ColumnType]:
    """A change stream's ``column_types`` as columns of logical types (see
    :func:`~airflow_provider_cdc.core.columns.parse_column_types`)."""
    return parse_column_types(value, parse_spanner_type)


__all__ = [
    "SPANNER_TYPE_CODES",
    "SpannerTypeError",
    "parse_spanner_column_types",
    "parse_spanner_type",
]
