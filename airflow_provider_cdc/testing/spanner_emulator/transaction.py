"""One transaction's mutations: applied to an overlay of the tables, then coalesced into one mod per row
as Spanner reports them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from .model import EmulatorError, Table, lookup_table
from .values import COMMIT_TIMESTAMP_PLACEHOLDER, SpannerType, decode_cell, display_timestamp, sort_key


@dataclass
class _RowWrites:
    """Every write of one row in one transaction, coalesced as Spanner reports them: one mod per row."""

    table: Table
    key: tuple
    before: dict[str, Any] | None  # the row before the transaction
    recreated: bool = False  # deleted or replaced while it existed
    written: set[str] = field(default_factory=set)  # non-key columns the writes set

    def mod(self, after: dict[str, Any] | None) -> _Mod | None:
        """The row's one mod given its state at commit (``None``: nothing to report).

        A row that did not exist before and does not exist after (insert then delete) has no mod; one
        created, or deleted or replaced and written again, is an INSERT of its final row; one deleted is
        a DELETE with its values from before the transaction; otherwise it is an UPDATE of the union of
        the columns its writes set, values from before the transaction against the final ones.
        """
        if after is None:
            if self.before is None:
                return None
            return _Mod(self.table, "DELETE", self.key, self.before, None, ())
        if self.before is None or self.recreated:
            return _Mod(self.table, "INSERT", self.key, None, after, ())
        written = tuple(c for c in self.table.non_key_columns if c in self.written)
        return _Mod(self.table, "UPDATE", self.key, self.before, after, written)


@dataclass
class _Mod:
    table: Table
    mod_type: str
    key: tuple
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    written: tuple[str, ...]  # UPDATE: the non-key columns the transaction wrote, in table order


class TransactionWrites:
    """The rows a transaction's mutations leave (an overlay on the tables, ``None`` for a deleted row)
    and, per written row, what its writes add up to."""

    def __init__(self, tables: Mapping[str, Table], commit_text: str, commit_us: int) -> None:
        self._tables = tables
        self._commit_text = commit_text
        self._commit_us = commit_us
        self.overlay: dict[tuple[str, tuple], dict[str, Any] | None] = {}
        self.writes: dict[tuple[str, tuple], _RowWrites] = {}

    def apply(self, mutation: Any) -> None:
        """Apply one protobuf ``Mutation`` to the transaction's view of the tables."""
        kind = mutation.WhichOneof("operation")
        if kind is None:
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, "Mutation has no operation")
        if kind == "delete":
            self._apply_delete(mutation.delete)
        else:
            self._apply_write(kind, getattr(mutation, kind))

    def mods(self) -> list[_Mod]:
        """One mod per written row: tables in the order the transaction first wrote them, each
        table's rows in key order (as Spanner orders a transaction's mods)."""
        overlay = self.overlay
        by_table: dict[str, list[_RowWrites]] = {}
        for (table_name, _key), entry in self.writes.items():
            by_table.setdefault(table_name, []).append(entry)
        mods: list[_Mod] = []
        for entries in by_table.values():
            table = entries[0].table
            key_types = [table.column(k).type for k in table.primary_key]
            for entry in sorted(entries, key=lambda e: self._order(e.key, key_types)):
                mod = entry.mod(overlay[(table.name, entry.key)])
                if mod is not None:
                    mods.append(mod)
        return mods

    def _current(self, table: Table, key: tuple) -> dict[str, Any] | None:
        if (table.name, key) in self.overlay:
            return self.overlay[(table.name, key)]
        return table.rows.get(key)

    def _writes(self, table: Table, key: tuple) -> _RowWrites:
        entry = self.writes.get((table.name, key))
        if entry is None:
            entry = self.writes[(table.name, key)] = _RowWrites(table, key, table.rows.get(key))
        return entry

    def _apply_write(self, kind: str, write: Any) -> None:
        """An insert, update, insert-or-update or replace."""
        overlay = self.overlay
        table = lookup_table(self._tables, write.table)
        columns = list(write.columns)
        defs = [table.column(c) for c in columns]
        if len(set(columns)) != len(columns):
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT, f"Duplicate column in mutation on {table.name}"
            )
        missing = [k for k in table.primary_key if k not in columns]
        if missing:
            raise EmulatorError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{kind} on {table.name} is missing key column(s) {missing}",
            )
        for values in write.values:
            if len(values.values) != len(columns):
                raise EmulatorError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{kind} on {table.name}: {len(values.values)} values for {len(columns)} columns",
                )
            given = {}
            for column, value in zip(defs, values.values, strict=True):
                where = f"table {table.name} column {column.name}"
                cell = self._cell(table, column, value, where)
                if cell is None and column.not_null:
                    raise EmulatorError(
                        grpc.StatusCode.FAILED_PRECONDITION, f"{where} is NOT NULL and cannot be set to NULL"
                    )
                given[column.name] = cell
            key = tuple(given[k] for k in table.primary_key)
            before = self._current(table, key)
            if kind == "insert" and before is not None:
                raise EmulatorError(
                    grpc.StatusCode.ALREADY_EXISTS, f"Row {list(key)} in table {table.name} already exists"
                )
            if kind == "update" and before is None:
                raise EmulatorError(
                    grpc.StatusCode.NOT_FOUND, f"Row {list(key)} in table {table.name} not found"
                )
            if before is None or kind == "replace":
                after = {c.name: None for c in table.columns}
                after.update(given)
                for column in table.columns:
                    if column.not_null and after[column.name] is None:
                        raise EmulatorError(
                            grpc.StatusCode.FAILED_PRECONDITION,
                            f"{kind} on {table.name}: NOT NULL column {column.name} has no value",
                        )
            else:
                after = dict(before)
                after.update(given)
            entry = self._writes(table, key)
            if kind == "replace" and before is not None:
                entry.recreated = True
            entry.written.update(c for c in columns if c not in table.primary_key)
            overlay[(table.name, key)] = after

    def _cell(self, table: Table, column: Any, value: Any, where: str) -> Any:
        """A written value, with Spanner's rules for commit timestamps: the placeholder only in a column
        that allows it, and no explicit timestamp after the commit's in such a column."""
        failed = grpc.StatusCode.FAILED_PRECONDITION
        placeholder = value.WhichOneof("kind") == "string_value" and (
            value.string_value == COMMIT_TIMESTAMP_PLACEHOLDER
        )
        if placeholder and column.type.code == "TIMESTAMP" and not column.allow_commit_timestamp:
            raise EmulatorError(
                failed,
                "Cannot write commit timestamp because the allow_commit_timestamp column option is not "
                f"set to true for column {table.name}.{column.name}, or for all corresponding shared key "
                "columns in this table's interleaved table hierarchy.",
            )
        commit_text = self._commit_text if column.allow_commit_timestamp else None
        cell = decode_cell(value, column.type, where, commit_text)
        if column.max_length is not None and cell is not None:
            self._check_length(table, column, cell)
        if (
            column.allow_commit_timestamp
            and not placeholder
            and cell is not None
            and cell > self._commit_text
        ):
            raise EmulatorError(
                failed, f"Cannot write timestamps in the future, found: {display_timestamp(cell)}"
            )
        return cell

    @staticmethod
    def _check_length(table: Table, column: Any, cell: Any) -> None:
        """A STRING(n) value (or ARRAY element) of at most n characters, a BYTES(n) one of n bytes."""
        code = (column.type.element or column.type).code
        for item in cell if isinstance(cell, list) else (cell,):
            if item is None:
                continue
            size = len(item) if code == "STRING" else len(item) * 3 // 4 - item[-2:].count("=")
            if size > column.max_length:
                raise EmulatorError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "New value exceeds the maximum size limit for this column: "
                    f"{table.name}.{column.name}, size: {size}, limit: {column.max_length}.",
                )

    def _apply_delete(self, delete: Any) -> None:
        overlay = self.overlay
        table = lookup_table(self._tables, delete.table)
        key_types = [table.column(k).type for k in table.primary_key]
        keys: list[tuple] = []
        key_set = delete.key_set
        for key_pb in key_set.keys:
            if len(key_pb.values) != len(key_types):
                raise EmulatorError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"delete on {table.name}: key needs {len(key_types)} parts",
                )
            keys.append(
                tuple(
                    decode_cell(v, t, f"table {table.name} key", None)
                    for v, t in zip(key_pb.values, key_types, strict=True)
                )
            )
        candidates = set(table.rows) | {
            k for (t, k), row in overlay.items() if t == table.name and row is not None
        }
        if key_set.all_:
            keys.extend(sorted(candidates, key=lambda k: self._order(k, key_types)))
        for key_range in key_set.ranges:
            keys.extend(
                k
                for k in sorted(candidates, key=lambda k: self._order(k, key_types))
                if self._in_range(k, key_range, key_types, table.name)
            )
        for key in keys:
            before = self._current(table, key)
            if before is None:
                continue
            self._writes(table, key).recreated = True
            overlay[(table.name, key)] = None

    @staticmethod
    def _order(key: tuple, types: list[SpannerType]) -> tuple:
        return tuple(sort_key(v, t) for v, t in zip(key, types, strict=False))

    def _in_range(self, key: tuple, key_range: Any, types: list[SpannerType], table: str) -> bool:
        def bound(name: str) -> tuple | None:
            if not key_range.HasField(name):
                return None
            values = getattr(key_range, name).values
            decoded = tuple(
                decode_cell(v, t, f"table {table} key range", None)
                for v, t in zip(values, types, strict=False)
            )
            return self._order(decoded, types[: len(decoded)])

        position = self._order(key, types)
        start_closed, start_open = bound("start_closed"), bound("start_open")
        end_closed, end_open = bound("end_closed"), bound("end_open")
        if start_closed is not None and position[: len(start_closed)] < start_closed:
            return False
        if start_open is not None and position[: len(start_open)] <= start_open:
            return False
        if end_closed is not None and position[: len(end_closed)] > end_closed:
            return False
        return not (end_open is not None and position[: len(end_open)] >= end_open)
