"""Planning a workload's transactions: which rows each writes, with which mutations, and the one mod
Spanner reports per row."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from .schema import WorkloadTable
from .truth import DELETE, INSERT, UPDATE, ExpectedMod
from .values import _REGIONS, _different_value, _max_length, _random_scalar, _random_value, _same


@dataclass
class _Planned:
    """One mutation of a transaction (``values`` is the key for a delete)."""

    table: WorkloadTable
    operation: str  # insert, update, insert_or_update, replace, delete
    columns: tuple[str, ...]
    values: tuple[Any, ...]

    def given(self) -> dict[str, Any]:
        """The non-key columns the mutation writes, with their values."""
        if self.operation == "delete":
            return {}
        keys = {column.name for column in self.table.key_columns}
        return {
            name: value for name, value in zip(self.columns, self.values, strict=True) if name not in keys
        }


@dataclass
class _RowWrites:
    """The writes of one row in one transaction and the one mod Spanner reports for them."""

    table: WorkloadTable
    key: tuple[Any, ...]
    before: dict[str, Any] | None  # non-key columns before the transaction (None: no row)
    after: dict[str, Any] | None = None
    writes: list[_Planned] = field(default_factory=list)
    recreated: bool = False  # deleted or replaced while it existed
    written: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.after = None if self.before is None else dict(self.before)

    @property
    def keys(self) -> dict[str, Any]:
        return {column.name: value for column, value in zip(self.table.key_columns, self.key, strict=True)}

    def add(self, change: _Planned) -> None:
        """Apply one mutation to the row's state inside the transaction."""
        self.writes.append(change)
        given = change.given()
        if change.operation == "delete":
            self.recreated = self.recreated or self.after is not None
            self.after = None
            return
        if change.operation == "replace" and self.after is not None:
            self.recreated = True
        if self.after is None or change.operation == "replace":
            self.after = {column.name: None for column in self.table.value_columns}
        self.after.update(given)
        self.written.update(given)

    def mod(self) -> ExpectedMod | None:
        """The mod a change stream watching every column reports (``None``: insert then delete).

        A row created, or deleted or replaced and written again, is an INSERT of its final row; a
        deleted row a DELETE with its values from before the transaction; otherwise an UPDATE of the
        columns the writes set (changed or not), old values from before the transaction.
        """
        if self.after is None:
            if self.before is None:
                return None
            return ExpectedMod(self.table.name, DELETE, self.keys, {}, dict(self.before))
        if self.before is None or self.recreated:
            return ExpectedMod(self.table.name, INSERT, self.keys, dict(self.after), {})
        columns = [column.name for column in self.table.value_columns if column.name in self.written]
        new = {name: self.after[name] for name in columns}
        return ExpectedMod(
            self.table.name, UPDATE, self.keys, new, {name: self.before[name] for name in columns}
        )


@dataclass
class _TableState:
    """A table as the workload knows it: live rows, deleted keys free to insert again, the key counter."""

    rows: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    deleted: list[tuple[Any, ...]] = field(default_factory=list)
    next_id: int = 1


class TransactionPlanner:
    """Draws the rows and mutations of one transaction at a time from the workload's seeded ``rng``.

    ``states`` is the workload's live view of each table (rows, deleted keys, key counter), which its
    commits keep up to date.
    """

    def __init__(
        self,
        rng: random.Random,
        tables: Sequence[WorkloadTable],
        states: dict[str, _TableState],
        *,
        max_mods_per_transaction: int,
        max_rows_per_table: int,
        max_writes_per_row: int,
        value_profile: str,
    ) -> None:
        self._rng = rng
        self.tables = tuple(tables)
        self._tables = states
        self.max_mods_per_transaction = max_mods_per_transaction
        self.max_rows_per_table = max_rows_per_table
        self.max_writes_per_row = max_writes_per_row
        self.value_profile = value_profile

    def plan_transaction(self, remaining: int) -> list[_RowWrites]:
        """Rows to write in one transaction (at most ``remaining``), each with its mutations."""
        rng = self._rng
        size = min(remaining, rng.randint(1, self.max_mods_per_transaction))
        rows: dict[tuple[str, tuple[Any, ...]], _RowWrites] = {}
        for _ in range(size * 3):
            if len(rows) >= size:
                break
            table = rng.choice(self.tables)
            change = self._plan_change(table, rows)
            if change is None:
                continue
            key = self._key_of(change)
            before = self._tables[table.name].rows.get(key)
            row = _RowWrites(
                table, key, None if before is None else {c.name: before[c.name] for c in table.value_columns}
            )
            row.add(change)
            rows[(table.name, key)] = row
            if self.max_writes_per_row > 1 and rng.random() < 0.5:
                for _ in range(rng.randint(1, self.max_writes_per_row - 1)):
                    row.add(self._plan_follow_up(row))
        return list(rows.values())

    @staticmethod
    def _key_of(change: _Planned) -> tuple[Any, ...]:
        if change.operation == "delete":
            return tuple(change.values)
        by_name = dict(zip(change.columns, change.values, strict=True))
        return tuple(by_name[column.name] for column in change.table.key_columns)

    def _plan_change(
        self, table: WorkloadTable, touched: Mapping[tuple[str, tuple[Any, ...]], Any]
    ) -> _Planned | None:
        """The first write of a row in a transaction: a new or deleted key, or a live row not touched yet."""
        rng = self._rng
        state = self._tables[table.name]
        live = len(state.rows)
        crowded = live >= self.max_rows_per_table
        weights = {
            "insert": 5 if crowded else 30,
            "update": 30 if live else 0,
            "upsert_existing": 8 if live else 0,
            "upsert_new": 2 if crowded else 5,
            "replace": 7 if live else 0,
            "delete": (25 if crowded else 10) if live else 0,
            "reinsert": 8 if state.deleted else 0,
        }
        choice = rng.choices(list(weights), weights=list(weights.values()))[0]
        if choice in ("insert", "upsert_new"):
            key = self._new_key(table)
            return self._plan_insert(table, key, "insert" if choice == "insert" else "insert_or_update")
        if choice == "reinsert":
            index = rng.randrange(len(state.deleted))
            key = state.deleted[index]
            if (table.name, key) in touched or key in state.rows:
                return None
            state.deleted[index] = state.deleted[-1]
            state.deleted.pop()
            return self._plan_insert(table, key, "insert")
        key = rng.choice(list(state.rows))
        if (table.name, key) in touched:
            return None
        row = state.rows[key]
        if choice == "delete":
            return _Planned(table, "delete", (), key)
        if choice == "replace":
            chosen = list(table.value_columns)
        else:
            count = rng.randint(1, max(1, len(table.value_columns) - 1))
            chosen = sorted(rng.sample(list(table.value_columns), count), key=table.columns.index)
        profile = self.value_profile
        new = {column.name: _different_value(rng, column, row[column.name], profile) for column in chosen}
        operation = {"update": "update", "upsert_existing": "insert_or_update", "replace": "replace"}[choice]
        columns = tuple(column.name for column in table.key_columns) + tuple(new)
        return _Planned(table, operation, columns, tuple(key) + tuple(new.values()))

    def _plan_insert(self, table: WorkloadTable, key: tuple[Any, ...], operation: str) -> _Planned:
        new = {
            column.name: _random_value(self._rng, column, self.value_profile)
            for column in table.value_columns
        }
        return _Planned(table, operation, table.column_names, tuple(key) + tuple(new.values()))

    def _plan_follow_up(self, row: _RowWrites) -> _Planned:
        """Another write of a row the transaction already wrote: insert, insert-or-update or replace
        of a missing row; update (a new value, or a column set back to its value before the
        transaction), insert-or-update, replace or delete of a present one."""
        rng, table, profile = self._rng, row.table, self.value_profile
        key_names = tuple(column.name for column in table.key_columns)
        current = row.after
        if current is None:
            operation = rng.choice(("insert", "insert_or_update", "replace"))
            count = (
                len(table.value_columns)
                if operation == "insert"
                else rng.randint(1, len(table.value_columns))
            )
            chosen = sorted(rng.sample(list(table.value_columns), count), key=table.columns.index)
            new = {column.name: _random_value(rng, column, profile) for column in chosen}
            return _Planned(table, operation, key_names + tuple(new), tuple(row.key) + tuple(new.values()))
        before = row.before or {}
        revertible = [
            column
            for column in table.value_columns
            if not column.commit_timestamp
            and column.name in row.written
            and column.name in before
            and not _same(current[column.name], before[column.name])
        ]
        weights = {
            "update": 30,
            "revert": 20 if revertible else 0,
            "insert_or_update": 15,
            "replace": 15,
            "delete": 20,
        }
        choice = rng.choices(list(weights), weights=list(weights.values()))[0]
        if choice == "delete":
            return _Planned(table, "delete", (), tuple(row.key))
        # Google's emulator refuses an update of a row deleted and then replaced in the transaction;
        # insert-or-update of the existing row writes the same
        operations = [change.operation for change in row.writes]
        replaced_after_delete = ("delete", "replace") in zip(operations, operations[1:], strict=False)
        update = "insert_or_update" if replaced_after_delete else "update"
        if choice == "revert":
            chosen = sorted(rng.sample(revertible, rng.randint(1, len(revertible))), key=table.columns.index)
            new = {column.name: before[column.name] for column in chosen}
            return _Planned(table, update, key_names + tuple(new), tuple(row.key) + tuple(new.values()))
        count = rng.randint(1, len(table.value_columns))
        chosen = sorted(rng.sample(list(table.value_columns), count), key=table.columns.index)
        new = {column.name: _different_value(rng, column, current[column.name], profile) for column in chosen}
        operation = update if choice == "update" else choice
        return _Planned(table, operation, key_names + tuple(new), tuple(row.key) + tuple(new.values()))

    def _new_key(self, table: WorkloadTable) -> tuple[Any, ...]:
        """A key never used before in ``table``: random leading parts, a counter in the last part."""
        rng = self._rng
        state = self._tables[table.name]
        serial = state.next_id
        state.next_id += 1
        parts: list[Any] = []
        key_columns = table.key_columns
        for position, column in enumerate(key_columns):
            last = position == len(key_columns) - 1
            code = column.code
            if code == "INT64":
                parts.append(serial * 1_000 + rng.randrange(1_000) if last else rng.randrange(1, 200))
            elif code == "STRING":
                limit = _max_length(column.ddl_type) or 36
                if table.name == "Customers":
                    prefix = rng.choice(_REGIONS)
                else:
                    prefix = f"{column.name[:1].lower()}{rng.randrange(40):02d}"
                parts.append((f"{prefix}-{serial:x}" if last else prefix)[:limit])
            elif code == "DATE":
                parts.append(date(2026, 1, 1) + timedelta(days=rng.randrange(30)))
            else:
                parts.append(_random_scalar(rng, code))
        return tuple(parts)

    # -- committing ----------------------------------------------------------------------------
