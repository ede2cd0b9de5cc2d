"""The emulated database's objects: tables, change streams, their partition logs and queries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import grpc

from . import ddl
from .storage import RowHistory

FLUSH = object()  # yielded by a change-stream read before it blocks, so buffered rows go out first
MIN_HEARTBEAT_MS, MAX_HEARTBEAT_MS = 1000, 300_000


class EmulatorError(Exception):
    """An error the emulator returns to the client with a gRPC status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


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

    def column(self, name: str) -> ddl.ColumnDef:
        for column in self.columns:
            if column.name == name:
                return column
        raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Column not found in table {self.name}: {name}")

    def ordinal(self, name: str) -> int:
        return next(i for i, c in enumerate(self.columns, start=1) if c.name == name)

    @property
    def non_key_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.name not in self.primary_key]


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
