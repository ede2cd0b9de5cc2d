"""The JSON value encoding staged rows and change sets carry: decoding values and encoding them back.

Each type's encoding is declared in :mod:`.types` (the table there lists every rule):
:func:`decode_value` gives a value's Python value (exact error messages), :func:`encode_value`
its encoding. Column types (:class:`ColumnType`, :func:`parse_column_types`,
:func:`union_column_types`, :func:`column_types_json`) live in :mod:`.columns` and are importable
from here too; the Arrow forms of types and values are :mod:`airflow_provider_cdc.changesets.arrow_values`.
"""

from __future__ import annotations

from airflow_provider_cdc.core.columns import (
    ColumnType,
    canonical_column_types_json,
    column_types_json,
    parse_column_types,
    union_column_types,
)
from airflow_provider_cdc.core.types import (
    BIGNUMERIC_PRECISION,
    BIGNUMERIC_SCALE,
    NUMERIC_PRECISION,
    NUMERIC_SCALE,
    SCALAR_TYPE_CODES,
    SUPPORTED_TYPE_CODES,
    LogicalType,
    LogicalTypeError,
    ValueEncodingError,
    decode_value,
    encode_value,
    parse_logical_type,
)

__all__ = [
    "BIGNUMERIC_PRECISION",
    "BIGNUMERIC_SCALE",
    "NUMERIC_PRECISION",
    "NUMERIC_SCALE",
    "SCALAR_TYPE_CODES",
    "SUPPORTED_TYPE_CODES",
    "ColumnType",
    "LogicalType",
    "LogicalTypeError",
    "ValueEncodingError",
    "canonical_column_types_json",
    "column_types_json",
    "decode_value",
    "encode_value",
    "parse_column_types",
    "parse_logical_type",
    "union_column_types",
]
