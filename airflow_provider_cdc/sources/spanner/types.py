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

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_cdc.core.columns import ColumnType, parse_column_types
from airflow_provider_cdc.core.types import ARRAY, LogicalType, LogicalTypeError

#: Spanner type codes with a logical type (``ARRAY`` of any of them as well).
SPANNER_TYPE_CODES = frozenset(
    {"BOOL", "INT64", "FLOAT32", "FLOAT64", "NUMERIC", "STRING", "JSON", "BYTES", "DATE", "TIMESTAMP", "UUID"}
)

_TEXT_TYPE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(?:\(\s*(?:MAX|\d+)\s*\))?\s*$", re.IGNORECASE)
_ARRAY_TEXT_TYPE = re.compile(r"^\s*ARRAY\s*<(.*)>\s*$", re.IGNORECASE | re.DOTALL)


class SpannerTypeError(LogicalTypeError):
    """A Spanner type that is unknown, malformed or has no logical type."""


def parse_spanner_type(value: Any, column: str = "?") -> LogicalType:
    """The logical type of a Spanner type given as type JSON (dict or text) or DDL text.

    Unknown codes raise :class:`SpannerTypeError` naming the column and the type.
    """
    if isinstance(value, LogicalType):
        if value.element is None:
            return _scalar(value.code, column, value)
        return _array(parse_spanner_type(value.element, column), column, value)
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith("{"):
            return _parse_text(text, column)
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpannerTypeError(f"column {column!r}: malformed type JSON {value!r}") from exc
    if isinstance(value, Mapping):
        code = value.get("code")
        if not isinstance(code, str):
            raise SpannerTypeError(f"column {column!r}: type {value!r} has no 'code'")
        code = code.upper()
        if code != ARRAY:
            return _scalar(code, column, value)
        element = value.get("array_element_type", value.get("arrayElementType"))
        if element is None:
            raise SpannerTypeError(f"column {column!r}: ARRAY type {value!r} has no element type")
        try:
            element_type = parse_spanner_type(element, column)
        except SpannerTypeError as exc:
            raise SpannerTypeError(f"column {column!r}: unsupported Spanner type {value!r}: {exc}") from None
        return _array(element_type, column, value)
    raise SpannerTypeError(f"column {column!r}: unsupported type description {value!r}")


def _parse_text(text: str, column: str) -> LogicalType:
    array = _ARRAY_TEXT_TYPE.match(text)
    if array:
        return _array(_parse_text(array.group(1), column), column, text)
    match = _TEXT_TYPE.match(text)
    if not match:
        raise SpannerTypeError(f"column {column!r}: unsupported Spanner type {text!r}")
    return _scalar(match.group(1).upper(), column, text)


def _scalar(code: str, column: str, original: Any) -> LogicalType:
    if code not in SPANNER_TYPE_CODES:
        raise SpannerTypeError(f"column {column!r}: unsupported Spanner type {original!r} (code {code})")
    return LogicalType(code)


def _array(element: LogicalType, column: str, original: Any) -> LogicalType:
    if element.code == ARRAY:
        raise SpannerTypeError(f"column {column!r}: nested arrays are not Spanner types: {original!r}")
    return LogicalType(ARRAY, element)


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
