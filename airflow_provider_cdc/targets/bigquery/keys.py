"""A BigQuery CDC table's primary key: the source key itself, or the derived key column ``_cdc_key``.

BigQuery allows primary keys only on BIGNUMERIC, BOOL, DATE, DATETIME, INT64, NUMERIC, STRING and
TIMESTAMP columns, and a primary-key value must not be NULL. A source key may be BYTES, FLOAT64 or
FLOAT32 and, in a nullable key column, NULL. Such a table gets the **derived key** ``_cdc_key``
(STRING): the canonical JSON text of the row's source key, which is its BigQuery primary key and
clustering column; the source key columns stay in the table as ordinary columns.

The canonical text is a compact JSON object (no spaces) with the key columns sorted by name, each
value in the JSON value encoding of the typed value, ASCII-escaped: INT64 and NUMERIC as strings
(NUMERIC without trailing zeros), FLOAT64 and FLOAT32 as the shortest number that reads back as the
same value (``-0.0`` as ``0.0``; ``"NaN"``, ``"Infinity"``, ``"-Infinity"``), BOOL as ``true`` /
``false``, STRING and UUID as strings, BYTES as base64, DATE as ``YYYY-MM-DD``, TIMESTAMP as RFC 3339
UTC with six fractional digits, NULL as ``null``. For example ``{"Id":"42","Sku":"A-1"}`` or
``{"Hash":"3q2+7w==","Version":1.5}``.

The choice per table (:data:`DERIVED_KEY_MODES`): ``"auto"`` uses the derived key when a key column's
type is one BigQuery refuses, when the source says a key column is nullable (``is_nullable`` of the
change set's column types) and the BigQuery table does not exist yet, or when the existing BigQuery
table is keyed on ``_cdc_key``; ``"always"`` for every table, ``"never"`` for none (a table BigQuery
cannot key is refused). A table already keyed on its nullable source key keeps that key, and a key
column of unknown nullability (a source that does not say) counts as not nullable: a NULL key value in
a table keyed on its source key is refused before anything of the window is sent.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_provider_cdc.core.columns import ColumnType
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.targets.bigquery.schema import BigQueryColumn, BigQuerySchemaError, bigquery_column

#: The derived key column (a source column name starts with a letter, so none is called so).
DERIVED_KEY_COLUMN = "_cdc_key"
DERIVED_KEY = BigQueryColumn(DERIVED_KEY_COLUMN, "STRING")
#: Types BigQuery allows in a primary key.
PRIMARY_KEY_TYPES = frozenset(
    {"BIGNUMERIC", "BOOL", "DATE", "DATETIME", "INT64", "NUMERIC", "STRING", "TIMESTAMP"}
)
AUTO, ALWAYS, NEVER = "auto", "always", "never"
DERIVED_KEY_MODES = (AUTO, ALWAYS, NEVER)
_SHOWN_KEYS = 5


class DerivedKeyOption:
    """The ``derived_key`` option: one mode for every table, or ``{source table: mode}`` (tables not
    named use ``"auto"``)."""

    def __init__(self, option: str | Mapping[str, str] | None = AUTO) -> None:
        if option is None:
            option = AUTO
        if isinstance(option, str):
            self.default, self.tables = _mode(option, "derived_key"), {}
        elif isinstance(option, Mapping):
            self.default = AUTO
            self.tables = {
                validate_identifier(table, "table"): _mode(mode, f"derived_key[{table!r}]")
                for table, mode in option.items()
            }
        else:
            raise BigQuerySchemaError(
                f"derived_key must be one of {DERIVED_KEY_MODES} or a mapping of table to one, got {option!r}"
            )

    def mode(self, source_table: str) -> str:
        return self.tables.get(source_table, self.default)


def _mode(value: object, what: str) -> str:
    text = str(value).strip().lower() if isinstance(value, str) else value
    if text not in DERIVED_KEY_MODES:
        raise BigQuerySchemaError(f"{what} must be one of {DERIVED_KEY_MODES}, got {value!r}")
    return str(text)


def refused_key_columns(key: Sequence[ColumnType], table: str) -> list[tuple[str, str]]:
    """``(column, logical type)`` of each key column whose BigQuery type cannot be a primary key."""
    refused = []
    for column in key:
        mapped = bigquery_column(column, table)
        if mapped.mode == "REPEATED" or mapped.type not in PRIMARY_KEY_TYPES:
            refused.append((column.name, str(column.logical_type)))
    return refused


def nullable_key_columns(key: Sequence[ColumnType]) -> list[str]:
    """The key columns the source says may hold NULL (``is_nullable`` true)."""
    return [column.name for column in key if column.is_nullable]


def uses_derived_key(
    table: str, bigquery_table: str, key: Sequence[ColumnType], mode: str, declared: Sequence[str] | None
) -> bool:
    """Whether ``bigquery_table`` (of the source table ``table``) is keyed on :data:`DERIVED_KEY_COLUMN`.

    ``declared`` is the primary key of the existing BigQuery table (``None`` when there is none yet).
    Raises :class:`BigQuerySchemaError` naming table, column and type when ``mode`` is ``"never"`` and
    a key column has a type BigQuery refuses, and when an existing table declares another key.
    """
    natural = [c.name for c in key]
    refused = refused_key_columns(key, table)
    if mode == NEVER and refused:
        shown = ", ".join(f"column {name!r} is {kind}" for name, kind in refused)
        raise BigQuerySchemaError(
            f"table {table!r}: {shown}, which BigQuery does not allow in a primary key (allowed: "
            f"{', '.join(sorted(PRIMARY_KEY_TYPES))}); derived_key='never' refuses the table (with "
            f"'auto' or 'always' its BigQuery key is the STRING column {DERIVED_KEY_COLUMN}, the key's "
            "canonical JSON)"
        )
    is_derived = declared is not None and [c.lower() for c in declared] == [DERIVED_KEY_COLUMN]
    if mode == ALWAYS:
        derived = True
    elif mode == NEVER:
        derived = False
    else:
        nullable = declared is None and bool(nullable_key_columns(key))
        derived = bool(refused) or is_derived or nullable
    if declared is not None:
        wanted = [DERIVED_KEY_COLUMN] if derived else natural
        if not declared:
            raise BigQuerySchemaError(
                f"table {bigquery_table!r} has no primary key; BigQuery CDC needs PRIMARY KEY "
                f"({', '.join(wanted)}) NOT ENFORCED"
            )
        if [c.lower() for c in declared] != [c.lower() for c in wanted]:
            raise BigQuerySchemaError(
                f"table {bigquery_table!r} declares primary key ({', '.join(declared)}) but the source "
                f"table {table!r} has key ({', '.join(natural)}), which with derived_key={mode!r} is "
                f"the BigQuery key ({', '.join(wanted)})"
            )
    return derived


def null_key_problem(
    table: str, key: Sequence[ColumnType], keys: pa.Table, texts: Sequence[str]
) -> str | None:
    """The refusal of NULL key values in a table keyed on its source key (``None`` when there are
    none); ``keys`` holds the decoded key columns of the rows whose ``_keys_json`` are ``texts``."""
    for column in key:
        values = keys.column(column.name)
        if not values.null_count:
            continue
        nulls = [text for text, value in zip(texts, values.is_null().to_pylist(), strict=True) if value]
        shown = ", ".join(nulls[:_SHOWN_KEYS]) + (" …" if len(nulls) > _SHOWN_KEYS else "")
        return (
            f"table {table!r}: key column {column.name!r} is NULL in {len(nulls)} change(s) (keys "
            f"{shown}) and BigQuery primary-key values must not be NULL; key the table on the derived "
            f"STRING column {DERIVED_KEY_COLUMN} (the key's canonical JSON, which carries NULLs) with "
            f"derived_key={{{table!r}: 'always'}} (a BigQuery table already keyed on "
            f"({', '.join(c.name for c in key)}) must be dropped first)"
        )
    return None


# --------------------------------------------------------------------------- the canonical text
def _float(value: float) -> Any:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value + 0.0  # -0.0 → 0.0


def _float32(value: float) -> Any:
    if math.isnan(value) or math.isinf(value):
        return _float(value)
    return _float(float(str(np.float32(value))))


def _numeric(value: Decimal) -> str:
    if value == 0:
        return "0"
    return format(value.normalize(), "f")


_ENCODERS: dict[str, Callable[[Any], Any]] = {
    "INT64": str,
    "NUMERIC": _numeric,
    "FLOAT64": _float,
    "FLOAT32": _float32,
    "BOOL": bool,
    "STRING": str,
    "UUID": str,
    "BYTES": lambda value: base64.b64encode(value).decode("ascii"),
    "DATE": lambda value: value.isoformat(),
    "TIMESTAMP": format_timestamp,
}


def canonical_key(key: Sequence[ColumnType], values: Sequence[Any]) -> str:
    """The canonical JSON text of one key (see the module docstring)."""
    encoded = {}
    for column, value in zip(key, values, strict=True):
        encoded[column.name] = None if value is None else _encoder(column)(value)
    return json.dumps(encoded, sort_keys=True, separators=(",", ":"))


def _encoder(column: ColumnType) -> Callable[[Any], Any]:
    try:
        return _ENCODERS[column.logical_type.code]
    except KeyError:
        raise BigQuerySchemaError(
            f"column {column.name!r}: a key of type {column.logical_type} has no canonical text"
        ) from None


def derived_keys(decoded: pa.Table, key: Sequence[ColumnType]) -> pa.Array:
    """The :data:`DERIVED_KEY_COLUMN` values of a decoded change set's rows."""
    encoders = [_encoder(column) for column in key]
    names = [column.name for column in key]
    columns = [decoded.column(name).to_pylist() for name in names]
    texts = []
    for values in zip(*columns, strict=True):
        encoded = {
            name: None if value is None else encode(value)
            for name, encode, value in zip(names, encoders, values, strict=True)
        }
        texts.append(json.dumps(encoded, sort_keys=True, separators=(",", ":")))
    return pa.array(texts, pa.string())
