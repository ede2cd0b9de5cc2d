"""The emulated database's objects: tables, change streams, their partition logs and queries."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import grpc

from . import ddl
from .storage import RowHistory
from .values import debug_value

FLUSH = object()  # yielded by a change-stream read before it blocks, so buffered rows go out first
MIN_HEARTBEAT_MS, MAX_HEARTBEAT_MS = 1000, 300_000


class EmulatorError(Exception):
    """An error the emulator returns to the client with a gRPC status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StatementError(EmulatorError):
    """A DDL statement the database refused: the ``index``-th of its batch, ``statement``.

    ``applied`` is ``None`` when the batch was refused as a whole (a statement does not parse or does not
    fit the schema: nothing changed, and the call itself fails); otherwise a check of the data failed,
    the statements before this one took effect at the commit timestamps (µs) ``applied`` lists, and the
    long-running operation reports the error.
    """

    def __init__(self, error: EmulatorError, index: int, statement: str, applied: list[int] | None) -> None:
        super().__init__(error.code, error.message)
        self.index = index
        self.statement = statement
        self.applied = applied


@dataclass
class Table:
    """A table: its columns, primary key, current rows (by key tuple) and their versions."""

    name: str
    columns: list[ddl.ColumnDef]
    primary_key: list[str]
    rows: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    key_desc: list[bool] = field(default_factory=list)
    parent: str | None = None  # the table it is interleaved in
    on_delete: str | None = None
    history: RowHistory = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.key_desc = list(self.key_desc) or [False] * len(self.primary_key)
        self.history = RowHistory([self.column(k).type for k in self.primary_key], self.key_desc)

    def schema_copy(self) -> Table:
        """The table's definition without its rows: what a DDL batch is checked against first."""
        return Table(
            self.name,
            list(self.columns),
            list(self.primary_key),
            key_desc=list(self.key_desc),
            parent=self.parent,
            on_delete=self.on_delete,
        )

    def column(self, name: str) -> ddl.ColumnDef:
        for column in self.columns:
            if column.name == name:
                return column
        raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Column not found in table {self.name}: {name}")

    def current_rows(self) -> Iterator[tuple[tuple, dict[str, Any]]]:
        """The current rows with their keys, in key order (the caller holds the database lock)."""
        rows = self.rows
        for key in self.history.keys():
            row = rows.get(key)
            if row is not None:
                yield key, row

    def key_text(self, key: tuple) -> str:
        """A key as Google's emulator prints it in messages: ``{Int64(1), String("a")}``, ``↓`` after
        DESC parts."""
        parts = [
            debug_value(self.column(name).type, value) + ("↓" if desc else "")
            for name, desc, value in zip(self.primary_key, self.key_desc, key, strict=True)
        ]
        return "{" + ", ".join(parts) + "}"

    def ordinal(self, name: str) -> int:
        return next(i for i, c in enumerate(self.columns, start=1) if c.name == name)

    @property
    def non_key_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.name not in self.primary_key]


@dataclass
class Index:
    """A secondary index: its definition and, when UNIQUE, which row holds each index key (the schema's
    object; reads through it are not served)."""

    name: str
    table: str
    columns: list[str]
    desc: list[bool]
    storing: list[str] = field(default_factory=list)
    unique: bool = False
    null_filtered: bool = False
    parent: str | None = None
    entries: dict[tuple, tuple] = field(default_factory=dict, repr=False)  # UNIQUE: index key -> row key

    def key_of(self, row: dict[str, Any]) -> tuple | None:
        """The row's index key, or ``None`` when a NULL_FILTERED index leaves the row out."""
        values = tuple(row.get(c) for c in self.columns)
        if self.null_filtered and any(v is None for v in values):
            return None
        return values


@dataclass
class PartitionLog:
    """Data change rows of one stream in one partition, in commit order."""

    timestamps: list[int] = field(default_factory=list)
    rows: list[bytes] = field(default_factory=list)


@dataclass
class ChangeStream:
    """A change stream: its DDL, creation time, per-partition logs and partition tokens."""

    name: str
    definition: ddl.CreateChangeStream
    created_us: int
    logs: dict[int, PartitionLog] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    token_of: dict[int, str] = field(default_factory=dict)

    @property
    def retention_us(self) -> int:
        return int(self.definition.retention / timedelta(microseconds=1))

    def tracked_columns(self, table: Table) -> list[str] | None:
        """Non-key columns of ``table`` the stream records, or None if it does not watch the table."""
        scope = self.definition.scope
        if scope is None:
            return table.non_key_columns
        if table.name not in scope:
            return None
        listed = scope[table.name]
        return table.non_key_columns if listed is None else [c for c in table.non_key_columns if c in listed]


@dataclass
class PartitionSchedule:
    """Split or merge a random partition every ``every`` of clock time (seeded)."""

    every: timedelta
    seed: int = 0
    min_partitions: int = 1
    max_partitions: int = 8


@dataclass
class ChangeStreamQuery:
    """A parsed ``READ_<stream>(...)`` query (timestamps in µs)."""

    stream: str
    start_us: int
    end_us: int | None
    token: str | None
    heartbeat_ms: int


def lookup_table(tables: Mapping[str, Table], name: str) -> Table:
    """The table ``name``, or ``NOT_FOUND``."""
    table = tables.get(name)
    if table is None:
        raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Table not found: {name}")
    return table


def find_table(tables: Mapping[str, Table], name: str) -> Table | None:
    """The table ``name``, matched case-insensitively as GoogleSQL names are."""
    table = tables.get(name)
    if table is not None:
        return table
    folded = name.casefold()
    return next((t for n, t in tables.items() if n.casefold() == folded), None)


def find_column(table: Table, name: str) -> ddl.ColumnDef | None:
    """The column ``name`` of ``table``, matched case-insensitively."""
    folded = name.casefold()
    return next((c for c in table.columns if c.name.casefold() == folded), None)
