"""Secondary indexes as schema objects: ``CREATE`` / ``DROP INDEX`` with the checks and messages of Google's
emulator, what they forbid of later column changes, and UNIQUE enforced at commit.

The emulator keeps no rows apart for an index: queries answer the same without one, and a read through an
index is refused as unsupported rather than answered from the base table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import grpc

from . import ddl
from .model import EmulatorError, Index, Table, lookup_table
from .values import debug_value

if TYPE_CHECKING:
    from .database import Database

FAILED = grpc.StatusCode.FAILED_PRECONDITION
INVALID = grpc.StatusCode.INVALID_ARGUMENT
Overlay = Mapping[tuple[str, tuple], dict[str, Any] | None]


def create_index(db: Database, statement: ddl.CreateIndex) -> None:
    """``CREATE INDEX``; a UNIQUE one first checks that no two rows share an index key."""
    if statement.if_not_exists and statement.name in db.indexes:
        return
    name = statement.name
    if db.name_in_use(name):
        raise EmulatorError(FAILED, f"Duplicate name in schema: {name}.")
    table = lookup_table(db.tables, statement.table)
    names = {c.name: c for c in table.columns}
    for position, column_name in enumerate(statement.columns):
        column = names.get(column_name)
        if column is None:
            raise _missing(name, column_name)
        if column_name in statement.columns[:position]:
            raise EmulatorError(INVALID, f"Index {name} specifies key column {column_name} twice.")
        if column.type.code in ("JSON", "ARRAY"):
            raise EmulatorError(
                FAILED, f"Cannot reference {column.type.code} {column_name} in the creation of index {name}."
            )
    for column_name in statement.storing:
        if column_name not in names:
            raise _missing(name, column_name)
        if column_name in table.primary_key:
            raise EmulatorError(
                FAILED,
                f"Index {name} specifies stored column {column_name} which is a key of table {table.name}.",
            )
        if column_name in statement.columns:
            raise EmulatorError(
                INVALID,
                f"Index {name} specifies stored column {column_name} already specified as primary key.",
            )
    if statement.parent is not None:
        _check_interleave(db, statement, table)
    index = Index(
        name,
        table.name,
        list(statement.columns),
        list(statement.desc),
        list(statement.storing),
        statement.unique,
        statement.null_filtered,
        statement.parent,
    )
    if index.unique:
        fill_entries(index, table)
    db.indexes[name] = index


def _missing(index: str, column: str) -> EmulatorError:
    return EmulatorError(
        INVALID,
        f"Index {index} specifies key column {column} which does not exist in the index's base table.",
    )


def _check_interleave(db: Database, statement: ddl.CreateIndex, table: Table) -> None:
    """``INTERLEAVE IN p``: ``p`` is ``table`` or an ancestor, and its key leads the index key."""
    parent = db.tables.get(statement.parent or "")
    if parent is None:
        raise EmulatorError(
            FAILED, f"Cannot interleave index {statement.name} within nonexistent table {statement.parent}."
        )
    ancestor: Table | None = table
    while ancestor is not None and ancestor.name != parent.name:
        ancestor = db.tables.get(ancestor.parent) if ancestor.parent else None
    if ancestor is None:
        raise EmulatorError(
            FAILED,
            f"Cannot interleave index {statement.name} of table {table.name} within table {parent.name} "
            f"because {parent.name} is not an ancestor of {table.name}.",
        )
    for position, key in enumerate(parent.primary_key):
        if key not in statement.columns:
            raise EmulatorError(
                FAILED, f"Index {statement.name} does not reference index parent key column {key}."
            )
        if statement.columns.index(key) != position:
            raise EmulatorError(
                FAILED,
                f"Index {statement.name} references parent key column {key} at incorrect position "
                f"{statement.columns.index(key)}.",
            )


def drop_index(db: Database, statement: ddl.DropIndex) -> None:
    if statement.name not in db.indexes:
        if statement.if_exists:
            return
        raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Index not found: {statement.name}")
    del db.indexes[statement.name]


def on_table(db: Database, table: str) -> list[Index]:
    """The indexes of ``table``, in creation order."""
    return [index for index in db.indexes.values() if index.table == table]


def check_drop_column(db: Database, table: Table, column: str) -> None:
    """A column an index keys on or stores cannot be dropped."""
    for index in on_table(db, table.name):
        if column in index.columns or column in index.storing:
            raise EmulatorError(
                FAILED,
                f"Cannot drop column {column} from table {table.name} because it is used by index "
                f"{index.name}.",
            )


def check_nullability_change(db: Database, table: Table, column: str) -> None:
    """An index key column cannot gain or lose NOT NULL."""
    for index in on_table(db, table.name):
        if column in index.columns:
            raise EmulatorError(
                FAILED,
                f"Changing NOT NULL constraints on column {column} is not allowed because it affects index "
                f"{index.name}.",
            )


def fill_entries(index: Index, table: Table) -> None:
    """Index the table's rows into a UNIQUE index; FAILED_PRECONDITION at the first shared key."""
    entries: dict[tuple, tuple] = {}
    for key, row in table.current_rows():
        index_key = index.key_of(row)
        if index_key is None:
            continue
        if index_key in entries:
            raise EmulatorError(
                FAILED,
                f"Found uniqueness violation on index {index.name},  duplicate key: "
                f"{_index_key_text(index, table, index_key)}",
            )
        entries[index_key] = key
    index.entries = entries


def unique_changes(db: Database, overlay: Overlay) -> list[tuple[Index, list[tuple], dict[tuple, tuple]]]:
    """The changes a transaction's rows make to UNIQUE indexes: per index, the index keys its rows leave
    and the ones they take; ALREADY_EXISTS when two rows would share one, as Spanner answers."""
    touched: dict[str, dict[tuple, dict[str, Any] | None]] = {}
    for (table_name, key), row in overlay.items():
        touched.setdefault(table_name, {})[key] = row
    changes = []
    for table_name, rows in touched.items():
        table = db.tables[table_name]
        for index in on_table(db, table_name):
            if not index.unique:
                continue
            left = [k for k in (_old_key(index, table, key) for key in rows) if k is not None]
            taken: dict[tuple, tuple] = {}
            for key, row in rows.items():
                index_key = None if row is None else index.key_of(row)
                if index_key is None:
                    continue
                owner = index.entries.get(index_key)
                if index_key in taken or (owner is not None and owner != key and owner not in rows):
                    raise EmulatorError(
                        grpc.StatusCode.ALREADY_EXISTS,
                        f"UNIQUE violation on index {index.name},  duplicate key: "
                        f"{_index_key_text(index, table, index_key)} in this transaction.",
                    )
                taken[index_key] = key
            changes.append((index, left, taken))
    return changes


def _old_key(index: Index, table: Table, key: tuple) -> tuple | None:
    row = table.rows.get(key)
    return None if row is None else index.key_of(row)


def apply_unique_changes(changes: list[tuple[Index, list[tuple], dict[tuple, tuple]]]) -> None:
    for index, left, taken in changes:
        for index_key in left:
            index.entries.pop(index_key, None)
        index.entries.update(taken)


def _index_key_text(index: Index, table: Table, index_key: tuple) -> str:
    parts = [
        debug_value(table.column(name).type, value) + ("↓" if desc else "")
        for name, desc, value in zip(index.columns, index.desc, index_key, strict=True)
    ]
    return "{" + ", ".join(parts) + "}"
