"""``ALTER TABLE … ADD / DROP / ALTER COLUMN`` as Google's emulator answers them: its checks in its order,
with its status codes and messages, then the change to the table's rows and to every version kept of them.

Checks of the schema alone refuse the whole DDL batch (the call fails and nothing changes). Checks of the
data (a NULL where NOT NULL is wanted, a value too long for the new length, BYTES that are not UTF-8, a
future time in a column that is to allow commit timestamps) fail the statement itself, after the
statements before it took effect; they scan the current rows in key order and name the first bad key.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from airflow_provider_cdc.core.timestamps import parse_timestamp, to_micros

from . import ddl, indexes
from .model import EmulatorError, Table, find_column, lookup_table
from .values import SpannerType, display_timestamp

if TYPE_CHECKING:
    from .database import Database

FAILED = grpc.StatusCode.FAILED_PRECONDITION
INVALID = grpc.StatusCode.INVALID_ARGUMENT


# ----- checks of a column definition ----------------------------------------------------------------
def type_name(type_: SpannerType) -> str:
    """A type as Google's emulator names it in messages: ``FLOAT`` for FLOAT32, no lengths."""
    if type_.code == "ARRAY":
        assert type_.element is not None
        return f"ARRAY<{type_name(type_.element)}>"
    return "FLOAT" if type_.code == "FLOAT32" else type_.code


def _base(type_: SpannerType) -> SpannerType:
    return type_.element if type_.code == "ARRAY" and type_.element is not None else type_


def check_column(table: str, column: ddl.ColumnDef) -> None:
    """A column's declared length within the type's range, and ``allow_commit_timestamp`` only on
    TIMESTAMP (CREATE TABLE, ADD COLUMN and ALTER COLUMN alike)."""
    limit = ddl.MAX_LENGTH.get(_base(column.type).code)
    if limit is not None and column.max_length is not None and not 1 <= column.max_length <= limit:
        raise EmulatorError(
            INVALID,
            f"Bad length for column {table}.{column.name}: {column.max_length} : "
            f"Allowed length range: [1, {limit}].",
        )
    if column.allow_commit_timestamp and column.type.code != "TIMESTAMP":
        raise EmulatorError(
            FAILED,
            f"Column {table}.{column.name} has invalid allow_commit_timestamp option.  Option only allowed "
            "on TIMESTAMP columns.",
        )


def _column(table: Table, name: str) -> ddl.ColumnDef:
    column = find_column(table, name)
    if column is None:
        raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Column not found in table {table.name}: {name}")
    return column


def _children(db: Database, table: Table) -> list[Table]:
    return [t for t in db.tables.values() if t.parent == table.name]


def _check_key_column_change(db: Database, table: Table, column: ddl.ColumnDef) -> None:
    """A key column shared with the parent or with a child table cannot change at all."""
    parent = db.tables.get(table.parent) if table.parent else None
    if parent is not None and find_column(parent, column.name) is not None:
        raise EmulatorError(INVALID, f"Cannot alter parent key column {table.name}.{column.name}.")
    if any(column.name in child.primary_key for child in _children(db, table)):
        raise EmulatorError(
            INVALID, f"Requested change to key column {table.name}.{column.name} could not be made."
        )


# ----- the statements -------------------------------------------------------------------------------
def add_column(db: Database, statement: ddl.AddColumn) -> None:
    """``ADD COLUMN``: a new nullable column, NULL in every row (``IF NOT EXISTS``: none if one exists)."""
    table = lookup_table(db.tables, statement.table)
    column = statement.column
    if find_column(table, column.name) is not None:
        if statement.if_not_exists:
            return
        raise EmulatorError(FAILED, f"Duplicate column name {table.name}.{column.name}.")
    check_column(table.name, column)
    if column.not_null:
        raise EmulatorError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"Cannot add NOT NULL column {table.name}.{column.name} to existing table {table.name}.",
        )
    table.columns = [*table.columns, column]


def drop_column(db: Database, statement: ddl.DropColumn) -> None:
    """``DROP COLUMN``: not a key column nor one a change stream lists; its values leave every row and
    version, and change records leave it out from now on."""
    table = lookup_table(db.tables, statement.table)
    column = _column(table, statement.column)
    streams = db.streams.values()
    if any(column.name in ((s.definition.scope or {}).get(table.name) or ()) for s in streams):
        tracking = [s.name for s in streams if _tracks(s.definition.scope, table.name, column.name)]
        where = f"{table.name}.{column.name}"
        raise EmulatorError(
            FAILED,
            f"Cannot drop column {where} . Column {where} is tracked by {len(tracking)} Change Stream: "
            f"{','.join(tracking)}. Columns explicitly tracked by a Change Stream cannot be dropped. Please "
            "alter the Change Stream to stop tracking the column before dropping the column.",
        )
    if column.name in table.primary_key:
        raise EmulatorError(INVALID, f"Cannot drop key column {column.name} from table {table.name}.")
    indexes.check_drop_column(db, table, column.name)
    table.columns = [c for c in table.columns if c is not column]

    def without(row: dict[str, Any]) -> dict[str, Any]:
        return {name: value for name, value in row.items() if name != column.name}

    rewrite_rows(table, without)


def _tracks(scope: dict[str, list[str] | None] | None, table: str, column: str) -> bool:
    if scope is None:
        return True
    return table in scope and (scope[table] is None or column in (scope[table] or ()))


def alter_column(db: Database, statement: ddl.AlterColumn) -> None:
    """``ALTER COLUMN c <type> [NOT NULL]``: a new length, nullability or type (STRING <-> BYTES only);
    the column keeps its options. Stored values are checked against the new definition, then converted."""
    table = lookup_table(db.tables, statement.table)
    old = _column(table, statement.column.name)
    new = dataclasses.replace(
        statement.column, name=old.name, allow_commit_timestamp=old.allow_commit_timestamp
    )
    if not _allowed_type_change(old.type, new.type):
        raise EmulatorError(
            INVALID,
            f"Cannot change type of column `{old.name}` from `{type_name(old.type)}` to "
            f"`{type_name(new.type)}`",
        )
    check_column(table.name, new)
    if old.name in table.primary_key:
        _check_key_column_change(db, table, old)
        if old.not_null != new.not_null:
            raise EmulatorError(INVALID, f"Cannot change key column {table.name}.{old.name}.")
    if old.not_null != new.not_null:
        indexes.check_nullability_change(db, table, old.name)
    if new.not_null and not old.not_null:
        for key, row in table.current_rows():
            if row.get(old.name) is None:
                raise EmulatorError(
                    FAILED,
                    f"Cannot specify a null value for column: {old.name} in table: {table.name} "
                    f"referenced by key: {table.key_text(key)}",
                )
    converting = _base(old.type).code != _base(new.type).code
    old_limit, new_limit = old.effective_max_length, new.effective_max_length
    if new_limit is not None and (converting or (old_limit is not None and new_limit < old_limit)):
        _check_lengths(table, old, new, new_limit)
    table.columns = [new if c is old else c for c in table.columns]
    if converting:
        _convert(table, old, new)
        for index in indexes.on_table(db, table.name):
            if index.unique:
                indexes.fill_entries(index, table)


def alter_column_options(db: Database, statement: ddl.AlterColumnOptions, commit_us: int) -> None:
    """``ALTER COLUMN c SET OPTIONS (allow_commit_timestamp = …)``: allowing commit timestamps checks
    that no row holds a time at or after this statement's commit timestamp."""
    table = lookup_table(db.tables, statement.table)
    old = _column(table, statement.column)
    new = dataclasses.replace(old, allow_commit_timestamp=statement.allow_commit_timestamp)
    check_column(table.name, new)
    if old.name in table.primary_key and new.allow_commit_timestamp == old.allow_commit_timestamp:
        _check_key_column_change(db, table, old)
    if new.allow_commit_timestamp and not old.allow_commit_timestamp:
        for key, row in table.current_rows():
            value = row.get(old.name)
            if value is not None and to_micros(parse_timestamp(value)) >= commit_us:
                raise EmulatorError(
                    FAILED,
                    f"Setting allow_commit_timestamp option on column {old.name} is not allowed because it "
                    f"has a timestamp in the future at key: {table.key_text(key)} "
                    f"{display_timestamp(value)}",
                )
    table.columns = [new if c is old else c for c in table.columns]


def drop_column_default(db: Database, statement: ddl.DropColumnDefault) -> None:
    """``ALTER COLUMN c DROP DEFAULT``: the column must exist; the emulator's columns have no default."""
    _column(lookup_table(db.tables, statement.table), statement.column)


# ----- types and values -----------------------------------------------------------------------------
def _allowed_type_change(old: SpannerType, new: SpannerType) -> bool:
    """The same type, or STRING <-> BYTES (also as ARRAY elements), as Google's emulator allows."""
    if old == new:
        return True
    if (old.code == "ARRAY") != (new.code == "ARRAY"):
        return False
    return {_base(old).code, _base(new).code} == {"STRING", "BYTES"}


def _check_lengths(table: Table, old: ddl.ColumnDef, new: ddl.ColumnDef, limit: int) -> None:
    """Every stored value fits ``new``: STRING counted in characters, BYTES in bytes, BYTES that become
    STRING valid UTF-8."""
    old_code, new_code = _base(old.type).code, _base(new.type).code
    for key, row in table.current_rows():
        value = row.get(old.name)
        for item in value if isinstance(value, list) else [value]:
            if item is None:
                continue
            if old_code == "STRING":
                length = len(item) if new_code == "STRING" else len(item.encode("utf-8"))
            else:
                raw = base64.b64decode(item)
                length = len(raw)
                if new_code == "STRING":
                    try:
                        length = len(raw.decode("utf-8"))
                    except UnicodeDecodeError:
                        raise EmulatorError(
                            FAILED,
                            f"Alteration of column {old.name} is not allowed because it has an invalid UTF-8 "
                            f"character at key: {table.key_text(key)}",
                        ) from None
            if length > limit:
                raise EmulatorError(
                    FAILED,
                    f"Reducing the length of column {old.name} to {limit} is not allowed because it has a "
                    f"value of length {length} at key: {table.key_text(key)}",
                )


def _convert(table: Table, old: ddl.ColumnDef, new: ddl.ColumnDef) -> None:
    """Re-encode the column's values (STRING text <-> BYTES base64) in every row and version; a key
    column's keys too (UTF-8 keeps their order)."""
    if _base(new.type).code == "BYTES":

        def scalar(value: str) -> str:
            return base64.b64encode(value.encode("utf-8")).decode("ascii")
    else:

        def scalar(value: str) -> str:
            return base64.b64decode(value).decode("utf-8")

    def cell(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, list):
            return [None if item is None else scalar(item) for item in value]
        return scalar(value)

    def row(values: dict[str, Any]) -> dict[str, Any]:
        return {**values, old.name: cell(values.get(old.name))}

    key_of: Callable[[tuple], tuple] | None = None
    if old.name in table.primary_key:
        position = table.primary_key.index(old.name)

        def key_of(key: tuple) -> tuple:
            return (*key[:position], cell(key[position]), *key[position + 1 :])

        table.history.key_types[position] = new.type
    rewrite_rows(table, row, key_of)


def rewrite_rows(
    table: Table,
    row_of: Callable[[dict[str, Any]], dict[str, Any]],
    key_of: Callable[[tuple], tuple] | None = None,
) -> None:
    """Replace every current row and kept version of ``table`` by a converted copy (a row both current and
    kept stays one object), and re-key them with ``key_of`` when given. New objects throughout: a read
    in progress keeps the images it has."""
    converted: dict[int, dict[str, Any]] = {}

    def new(row: dict[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        found = converted.get(id(row))
        if found is None:
            found = converted[id(row)] = row_of(row)
        return found

    rekey = key_of or (lambda key: key)
    table.history.rewrite(new, rekey)
    table.rows = {rekey(key): new(row) for key, row in table.rows.items()}  # type: ignore[misc]
