"""``INFORMATION_SCHEMA`` views of the database's own tables: TABLES, COLUMNS, INDEXES, INDEX_COLUMNS
(the primary keys and secondary indexes) and COLUMN_OPTIONS, with the columns and values Spanner gives them,
DATABASE_OPTIONS (the dialect, and ``version_retention_period`` once set) and the change streams' scopes
(CHANGE_STREAMS, CHANGE_STREAM_TABLES, CHANGE_STREAM_COLUMNS).

Spanner's views also list its own system views (schemas ``INFORMATION_SCHEMA`` and ``SPANNER_SYS``), which
the emulator does not model: a query must keep to the database's tables, by ``TABLE_SCHEMA = ''`` or by
``TABLE_NAME`` equal to (or ``IN``) names that cannot be a system view's: names with a lower-case letter
(system views' are all upper case) or names of the database's tables that no system view has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .model import Table
from .values import SpannerType

STRING, INT64, BOOL = SpannerType("STRING"), SpannerType("INT64"), SpannerType("BOOL")
#: System views of ``INFORMATION_SCHEMA`` (as Google's emulator lists them in ``INFORMATION_SCHEMA.TABLES``).
SYSTEM_VIEWS = frozenset(
    """CHANGE_STREAMS CHANGE_STREAM_COLUMNS CHANGE_STREAM_OPTIONS CHANGE_STREAM_TABLES CHECK_CONSTRAINTS
    COLUMNS COLUMN_COLUMN_USAGE COLUMN_OPTIONS CONSTRAINT_COLUMN_USAGE CONSTRAINT_TABLE_USAGE
    DATABASE_OPTIONS INDEXES INDEX_COLUMNS KEY_COLUMN_USAGE MODELS MODEL_COLUMNS MODEL_COLUMN_OPTIONS
    MODEL_OPTIONS REFERENTIAL_CONSTRAINTS SCHEMATA SEQUENCES SEQUENCE_OPTIONS SPANNER_STATISTICS
    SUPPORTED_OPTIMIZER_VERSIONS TABLES TABLE_CONSTRAINTS VIEWS""".split()
)
_CATALOG = (("TABLE_CATALOG", STRING), ("TABLE_SCHEMA", STRING), ("TABLE_NAME", STRING))

Row = dict[str, Any]
Columns = tuple[tuple[str, SpannerType], ...]


def _tables(tables: list[Table]) -> list[Row]:
    return [
        {
            "TABLE_NAME": t.name,
            "PARENT_TABLE_NAME": t.parent,
            "ON_DELETE_ACTION": t.on_delete,
            "TABLE_TYPE": "BASE TABLE",
            "SPANNER_STATE": "COMMITTED",
            "INTERLEAVE_TYPE": "IN PARENT",
            "ROW_DELETION_POLICY_EXPRESSION": None,
        }
        for t in tables
    ]


def _columns(tables: list[Table]) -> list[Row]:
    return [
        {
            "TABLE_NAME": t.name,
            "COLUMN_NAME": c.name,
            "ORDINAL_POSITION": str(position),
            "COLUMN_DEFAULT": None,
            "DATA_TYPE": None,
            "IS_NULLABLE": "NO" if c.not_null else "YES",
            "SPANNER_TYPE": c.spanner_type,
            "IS_GENERATED": "NEVER",
            "GENERATION_EXPRESSION": None,
            "IS_STORED": None,
            "SPANNER_STATE": "COMMITTED",
            "IS_IDENTITY": "NO",
            "IDENTITY_GENERATION": None,
            "IDENTITY_KIND": None,
            "IDENTITY_START_WITH_COUNTER": None,
            "IDENTITY_SKIP_RANGE_MIN": None,
            "IDENTITY_SKIP_RANGE_MAX": None,
        }
        for t in tables
        for position, c in enumerate(t.columns, start=1)
    ]


def _index_columns(tables: list[Table]) -> list[Row]:
    rows = []
    for t in tables:
        for position, (name, desc) in enumerate(zip(t.primary_key, t.key_desc, strict=True), start=1):
            column = t.column(name)
            rows.append(
                {
                    "TABLE_NAME": t.name,
                    "INDEX_NAME": "PRIMARY_KEY",
                    "INDEX_TYPE": "PRIMARY_KEY",
                    "COLUMN_NAME": name,
                    "ORDINAL_POSITION": str(position),
                    "COLUMN_ORDERING": "DESC" if desc else "ASC",
                    "IS_NULLABLE": "NO" if column.not_null else "YES",
                    "SPANNER_TYPE": column.spanner_type,
                }
            )
    return rows


def _indexes(tables: list[Table]) -> list[Row]:
    return [
        {
            "TABLE_NAME": t.name,
            "INDEX_NAME": "PRIMARY_KEY",
            "INDEX_TYPE": "PRIMARY_KEY",
            "PARENT_TABLE_NAME": "",
            "IS_UNIQUE": True,
            "IS_NULL_FILTERED": False,
            "INDEX_STATE": None,
            "SPANNER_IS_MANAGED": False,
        }
        for t in tables
    ]


def _secondary_indexes(database: Any) -> list[Row]:
    return [
        {
            "TABLE_NAME": index.table,
            "INDEX_NAME": index.name,
            "INDEX_TYPE": "INDEX",
            "PARENT_TABLE_NAME": index.parent or "",
            "IS_UNIQUE": index.unique,
            "IS_NULL_FILTERED": index.null_filtered,
            "INDEX_STATE": "READ_WRITE",
            "SPANNER_IS_MANAGED": False,
        }
        for index in sorted(database.indexes.values(), key=lambda i: (i.table, i.name))
    ]


def _secondary_index_columns(database: Any) -> list[Row]:
    """Key columns with their position and order (NOT NULL in a NULL_FILTERED index); stored columns
    without either, as Spanner lists them."""
    rows = []
    for index in sorted(database.indexes.values(), key=lambda i: (i.table, i.name)):
        table = database.tables[index.table]
        of_index = {"TABLE_NAME": index.table, "INDEX_NAME": index.name, "INDEX_TYPE": "INDEX"}
        for position, (name, desc) in enumerate(zip(index.columns, index.desc, strict=True), start=1):
            column = table.column(name)
            rows.append(
                {
                    **of_index,
                    "COLUMN_NAME": name,
                    "ORDINAL_POSITION": str(position),
                    "COLUMN_ORDERING": "DESC" if desc else "ASC",
                    "IS_NULLABLE": "NO" if column.not_null or index.null_filtered else "YES",
                    "SPANNER_TYPE": column.spanner_type,
                }
            )
        for name in index.storing:
            column = table.column(name)
            rows.append(
                {
                    **of_index,
                    "COLUMN_NAME": name,
                    "ORDINAL_POSITION": None,
                    "COLUMN_ORDERING": None,
                    "IS_NULLABLE": "NO" if column.not_null else "YES",
                    "SPANNER_TYPE": column.spanner_type,
                }
            )
    return rows


def _column_options(tables: list[Table]) -> list[Row]:
    return [
        {
            "TABLE_NAME": t.name,
            "COLUMN_NAME": c.name,
            "OPTION_NAME": "allow_commit_timestamp",
            "OPTION_TYPE": "BOOL",
            "OPTION_VALUE": "TRUE",
        }
        for t in tables
        for c in t.columns
        if c.allow_commit_timestamp
    ]


def _s(*names: str) -> tuple[tuple[str, SpannerType], ...]:
    return tuple((name, STRING) for name in names)


VIEWS: dict[str, tuple[Columns, Callable[[list[Table]], list[Row]]]] = {
    "TABLES": (
        _CATALOG
        + _s("PARENT_TABLE_NAME", "ON_DELETE_ACTION", "TABLE_TYPE", "SPANNER_STATE", "INTERLEAVE_TYPE")
        + _s("ROW_DELETION_POLICY_EXPRESSION"),
        _tables,
    ),
    "COLUMNS": (
        _CATALOG
        + _s("COLUMN_NAME")
        + (("ORDINAL_POSITION", INT64),)
        + _s("COLUMN_DEFAULT", "DATA_TYPE", "IS_NULLABLE", "SPANNER_TYPE", "IS_GENERATED")
        + _s("GENERATION_EXPRESSION", "IS_STORED", "SPANNER_STATE", "IS_IDENTITY", "IDENTITY_GENERATION")
        + _s("IDENTITY_KIND", "IDENTITY_START_WITH_COUNTER", "IDENTITY_SKIP_RANGE_MIN")
        + _s("IDENTITY_SKIP_RANGE_MAX"),
        _columns,
    ),
    "INDEX_COLUMNS": (
        _CATALOG
        + _s("INDEX_NAME", "INDEX_TYPE", "COLUMN_NAME")
        + (("ORDINAL_POSITION", INT64),)
        + _s("COLUMN_ORDERING", "IS_NULLABLE", "SPANNER_TYPE"),
        _index_columns,
    ),
    "INDEXES": (
        _CATALOG
        + _s("INDEX_NAME", "INDEX_TYPE", "PARENT_TABLE_NAME")
        + (("IS_UNIQUE", BOOL), ("IS_NULL_FILTERED", BOOL))
        + _s("INDEX_STATE")
        + (("SPANNER_IS_MANAGED", BOOL),),
        _indexes,
    ),
    "COLUMN_OPTIONS": (
        _CATALOG + _s("COLUMN_NAME", "OPTION_NAME", "OPTION_TYPE", "OPTION_VALUE"),
        _column_options,
    ),
}


#: Rows the database's secondary indexes add to a view.
SECONDARY_INDEX_VIEWS: dict[str, Callable[[Any], list[Row]]] = {
    "INDEXES": _secondary_indexes,
    "INDEX_COLUMNS": _secondary_index_columns,
}


DATABASE_OPTIONS: Columns = (
    ("CATALOG_NAME", STRING),
    ("SCHEMA_NAME", STRING),
    *_s("OPTION_NAME", "OPTION_TYPE", "OPTION_VALUE"),
)


_STREAM_CATALOG = (
    ("CHANGE_STREAM_CATALOG", STRING),
    ("CHANGE_STREAM_SCHEMA", STRING),
    ("CHANGE_STREAM_NAME", STRING),
)
#: Views of the change streams' scopes, as Google's emulator answers them: a ``FOR ALL`` stream has
#: ``ALL = TRUE`` and no rows in CHANGE_STREAM_TABLES; a table listed with columns has ``ALL_COLUMNS =
#: FALSE`` and those columns in CHANGE_STREAM_COLUMNS; a table listed bare has ``ALL_COLUMNS = TRUE``.
STREAM_VIEWS: dict[str, Columns] = {
    "CHANGE_STREAMS": (*_STREAM_CATALOG, ("ALL", BOOL)),
    "CHANGE_STREAM_TABLES": (*_STREAM_CATALOG, *_CATALOG, ("ALL_COLUMNS", BOOL)),
    "CHANGE_STREAM_COLUMNS": (*_STREAM_CATALOG, *_CATALOG, ("COLUMN_NAME", STRING)),
}


def _stream_rows(view_name: str, database: Any) -> list[Row]:
    rows: list[Row] = []
    for stream in sorted(database.streams.values(), key=lambda s: s.name):
        of_stream = {
            "CHANGE_STREAM_CATALOG": "",
            "CHANGE_STREAM_SCHEMA": "",
            "CHANGE_STREAM_NAME": stream.name,
        }
        scope = stream.definition.scope
        if view_name == "CHANGE_STREAMS":
            rows.append({**of_stream, "ALL": scope is None})
            continue
        for table, columns in sorted((scope or {}).items()):
            of_table = {**of_stream, "TABLE_CATALOG": "", "TABLE_SCHEMA": "", "TABLE_NAME": table}
            if view_name == "CHANGE_STREAM_TABLES":
                rows.append({**of_table, "ALL_COLUMNS": columns is None})
            else:
                rows.extend({**of_table, "COLUMN_NAME": column} for column in columns or ())
    return rows


def view(name: str) -> tuple[Columns, Callable[[Any], list[Row]]] | None:
    """The columns of ``INFORMATION_SCHEMA.<name>`` and how to list its rows from a database (its
    ``tables``, ``streams`` and ``options``), or ``None``."""
    if name.upper() == "DATABASE_OPTIONS":
        return DATABASE_OPTIONS, _database_options
    if name.upper() in STREAM_VIEWS:
        view_name = name.upper()
        return STREAM_VIEWS[view_name], lambda database: _stream_rows(view_name, database)
    found = VIEWS.get(name.upper())
    if found is None:
        return None
    columns, build = found

    def rows(database: Any) -> list[Row]:
        ordered = sorted(database.tables.values(), key=lambda t: t.name)
        found = build(ordered)
        if name.upper() in SECONDARY_INDEX_VIEWS:  # per table: the primary key, then secondary indexes
            found += SECONDARY_INDEX_VIEWS[name.upper()](database)
            found.sort(key=lambda row: row["TABLE_NAME"])
        return [{"TABLE_CATALOG": "", "TABLE_SCHEMA": "", **row} for row in found]

    return columns, rows


def _database_options(database: Any) -> list[Row]:
    options = {"database_dialect": "GOOGLE_STANDARD_SQL", **database.options}
    return [
        {"CATALOG_NAME": "", "SCHEMA_NAME": "", "OPTION_NAME": n, "OPTION_TYPE": "STRING", "OPTION_VALUE": v}
        for n, v in options.items()
    ]


def user_only(table_schema: list[Any], table_names: list[list[Any]], tables: Mapping[str, Table]) -> bool:
    """Whether a view's filter keeps to the database's tables: some ``TABLE_SCHEMA = ''`` condition, or
    some ``TABLE_NAME`` condition whose names no system view can have."""
    if any(value == "" for value in table_schema):
        return True

    def user(name: Any) -> bool:
        if not isinstance(name, str):
            return name is None  # NULL matches nothing
        return any(ch.islower() for ch in name) or (name in tables and name not in SYSTEM_VIEWS)

    return any(all(user(name) for name in names) for names in table_names)
