"""The tables and columns a change stream watches, from ``INFORMATION_SCHEMA``.

A snapshot that starts a change-stream pipeline reads exactly what the stream will report: every table
of a ``FOR ALL`` stream, the tables it lists, and of a table listed with columns only its key and those
columns (``FOR Orders(Status)``; ``FOR Orders()`` watches the key alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.cloud.spanner_v1 import param_types

from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.sources.spanner.table_schema import TableSchema, TableSchemaError

STREAM_QUERY = "SELECT `ALL` FROM INFORMATION_SCHEMA.CHANGE_STREAMS WHERE CHANGE_STREAM_NAME = @stream"
ALL_TABLES_QUERY = (
    "SELECT TABLE_NAME FROM INFORMATION_SCHEMA.TABLES "
    "WHERE TABLE_SCHEMA = '' AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME"
)
STREAM_TABLES_QUERY = (
    "SELECT TABLE_NAME, ALL_COLUMNS FROM INFORMATION_SCHEMA.CHANGE_STREAM_TABLES "
    "WHERE CHANGE_STREAM_NAME = @stream ORDER BY TABLE_NAME"
)
STREAM_COLUMNS_QUERY = (
    "SELECT TABLE_NAME, COLUMN_NAME FROM INFORMATION_SCHEMA.CHANGE_STREAM_COLUMNS "
    "WHERE CHANGE_STREAM_NAME = @stream ORDER BY TABLE_NAME, COLUMN_NAME"
)


@dataclass(frozen=True)
class StreamScope:
    """What ``stream`` watches: table name → its watched non-key columns (``None``: every column)."""

    stream: str
    tables: dict[str, frozenset[str] | None]

    def restrict(self, schema: TableSchema) -> TableSchema:
        """``schema`` reduced to the key and the columns the stream watches of it."""
        if schema.table not in self.tables:
            raise TableSchemaError(
                f"table {schema.table!r} is not watched by change stream {self.stream!r} (it watches "
                f"{', '.join(sorted(self.tables)) or 'no table'})"
            )
        watched = self.tables[schema.table]
        if watched is None:
            return schema
        columns = tuple(c for c in schema.columns if c.is_primary_key or c.name in watched)
        return TableSchema(schema.table, columns, schema.key, schema.commit_timestamp_columns & watched)


def stream_scope(snapshot: Any, stream: str) -> StreamScope:
    """The scope of change stream ``stream`` read in ``snapshot`` (a multi-use read-only snapshot)."""
    validate_identifier(stream, "change stream")
    params, types = {"stream": stream}, {"stream": param_types.STRING}
    found = list(snapshot.execute_sql(STREAM_QUERY, params=params, param_types=types))
    if not found:
        raise TableSchemaError(f"change stream {stream!r} does not exist in the database")
    if found[0][0]:
        names = [str(row[0]) for row in snapshot.execute_sql(ALL_TABLES_QUERY)]
        return StreamScope(stream, dict.fromkeys(names))
    listed = {
        str(table): all_columns
        for table, all_columns in snapshot.execute_sql(STREAM_TABLES_QUERY, params=params, param_types=types)
    }
    columns: dict[str, set[str]] = {table: set() for table, every in listed.items() if not every}
    for table, column in snapshot.execute_sql(STREAM_COLUMNS_QUERY, params=params, param_types=types):
        columns.setdefault(str(table), set()).add(str(column))
    return StreamScope(
        stream, {table: None if every else frozenset(columns[table]) for table, every in listed.items()}
    )
