"""A Spanner table's columns (with their nullability), key and commit-timestamp columns from
``INFORMATION_SCHEMA``.

``INFORMATION_SCHEMA.COLUMNS.IS_NULLABLE`` is ``NO`` for a column declared ``NOT NULL`` and ``YES``
otherwise, key columns included: Spanner allows NULL in a key column not declared ``NOT NULL``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.cloud.spanner_v1 import param_types

from airflow_provider_cdc.core.columns import ColumnType
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.sources.spanner.types import SpannerTypeError, parse_spanner_type

COLUMNS_QUERY = (
    "SELECT COLUMN_NAME, SPANNER_TYPE, ORDINAL_POSITION, IS_NULLABLE FROM INFORMATION_SCHEMA.COLUMNS "
    "WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @table ORDER BY ORDINAL_POSITION"
)
KEY_QUERY = (
    "SELECT COLUMN_NAME FROM INFORMATION_SCHEMA.INDEX_COLUMNS "
    "WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @table AND INDEX_TYPE = 'PRIMARY_KEY' "
    "ORDER BY ORDINAL_POSITION"
)
COMMIT_TIMESTAMP_QUERY = (
    "SELECT COLUMN_NAME FROM INFORMATION_SCHEMA.COLUMN_OPTIONS "
    "WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @table AND OPTION_NAME = 'allow_commit_timestamp' "
    "AND OPTION_VALUE = 'TRUE'"
)


class TableSchemaError(ValueError):
    """A table that is missing or has a column the provider cannot type (names table and column)."""


@dataclass(frozen=True)
class TableSchema:
    """A table's columns in ordinal order (key columns flagged), its key order and its
    commit-timestamp columns."""

    table: str
    columns: tuple[ColumnType, ...]
    key: tuple[str, ...]
    commit_timestamp_columns: frozenset[str]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def _spanner_type_json(text: str, table: str, column: str) -> dict[str, Any]:
    try:
        parsed = parse_spanner_type(text, column)
    except SpannerTypeError as exc:
        raise TableSchemaError(f"table {table!r}: {exc}") from None
    if parsed.code == "ARRAY":
        assert parsed.element is not None
        return {"code": "ARRAY", "array_element_type": {"code": parsed.element.code}}
    return {"code": parsed.code}


def is_nullable(value: Any) -> bool | None:
    """``INFORMATION_SCHEMA.COLUMNS.IS_NULLABLE`` (``YES``/``NO``) as a flag; ``None`` for anything else."""
    text = str(value).strip().upper() if value is not None else ""
    return {"YES": True, "NO": False}.get(text)


def table_schema(snapshot: Any, table: str) -> TableSchema:
    """The schema of ``table`` read in ``snapshot`` (a ``google-cloud-spanner`` read-only snapshot
    that allows several reads, e.g. ``database.snapshot(multi_use=True)``)."""
    validate_identifier(table, "table")
    params, types = {"table": table}, {"table": param_types.STRING}
    rows = list(snapshot.execute_sql(COLUMNS_QUERY, params=params, param_types=types))
    if not rows:
        raise TableSchemaError(f"table {table!r} does not exist in the database")
    key = tuple(row[0] for row in snapshot.execute_sql(KEY_QUERY, params=params, param_types=types))
    if not key:
        raise TableSchemaError(f"table {table!r} has no primary key")
    commit_columns = frozenset(
        row[0] for row in snapshot.execute_sql(COMMIT_TIMESTAMP_QUERY, params=params, param_types=types)
    )
    columns = tuple(
        ColumnType(
            str(name),
            _spanner_type_json(str(text), table, str(name)),
            name in key,
            int(position),
            is_nullable(nullable),
        )
        for name, text, position, nullable in rows
    )
    return TableSchema(table, columns, key, commit_columns)


NULLABILITY_QUERY = (
    "SELECT COLUMN_NAME, IS_NULLABLE FROM INFORMATION_SCHEMA.COLUMNS "
    "WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @table"
)


class ColumnNullability:
    """Each column's nullability, per table, read from ``INFORMATION_SCHEMA.COLUMNS`` of ``database``
    (a ``google.cloud.spanner_v1.database.Database``) once per table and kept.

    A change stream's data change records describe column types without nullability; a window's read
    asks this, one query per table of the window. A table that no longer exists, or a column dropped
    since, is of unknown nullability. Errors are the client's (a read retries them as it retries its
    query).
    """

    def __init__(self, database: Any) -> None:
        self.database = database
        self._tables: dict[str, dict[str, bool]] = {}

    def of(self, table: str) -> Mapping[str, bool]:
        """``{column: is nullable}`` of ``table`` (empty when the table is not found)."""
        known = self._tables.get(table)
        if known is None:
            params, types = {"table": table}, {"table": param_types.STRING}
            with self.database.snapshot() as snapshot:
                rows = list(snapshot.execute_sql(NULLABILITY_QUERY, params=params, param_types=types))
            known = {}
            for name, nullable in rows:
                flag = is_nullable(nullable)
                if flag is not None:
                    known[str(name)] = flag
            self._tables[table] = known
        return known
