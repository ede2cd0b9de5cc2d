"""An emulated Spanner database: tables, mutations, change streams and their partitioned logs."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import threading
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import grpc

from airflow_provider_cdc.domain.timestamps import format_timestamp, from_micros

from . import ddl, wire
from .clock import Clock
from .partitions import Partition, PartitionMap, key_hash
from .values import SpannerType, ValueError_, decode_cell, sort_key

FLUSH = object()  # yielded by a change-stream read before it blocks, so buffered rows go out first
MIN_HEARTBEAT_MS, MAX_HEARTBEAT_MS = 1000, 300_000


class EmulatorError(Exception):
    """An error the emulator returns to the client with a gRPC status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass
class Table:
    name: str
    columns: list[ddl.ColumnDef]
    primary_key: list[str]
    rows: dict[tuple, dict[str, Any]] = field(default_factory=dict)

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
    stream: str
    start_us: int
    end_us: int | None
    token: str | None
    heartbeat_ms: int


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


class Database:
    """One database's schema, rows, change streams and partitions, guarded by one lock."""

    def __init__(
        self, path: str, clock: Clock, seed: int, initial_partitions: int, schedule: PartitionSchedule | None
    ) -> None:
        self.path = path
        self.clock = clock
        self.lock = threading.RLock()
        self.tables: dict[str, Table] = {}
        self.streams: dict[str, ChangeStream] = {}
        self.ddl_statements: list[str] = []
        self.last_commit_us = clock.now_us()
        self._rng = random.Random(seed)
        self._seed = seed
        self._transactions = 0
        self.partitions = PartitionMap(initial_partitions, self.last_commit_us, random.Random(seed + 1))
        self.schedule = schedule
        self._schedule_rng = random.Random(schedule.seed if schedule else 0)
        self._next_event_us = (
            self.last_commit_us + int(schedule.every / timedelta(microseconds=1)) if schedule else None
        )

    # ----- schema ---------------------------------------------------------------------------------
    def apply_ddl(self, statements: list[str]) -> list[int]:
        """Apply DDL statements; each takes a commit timestamp (µs), returned in order."""
        with self.lock:
            parsed = []
            for sql in statements:
                try:
                    parsed.append(ddl.parse_statement(sql))
                except ddl.DdlError as exc:
                    raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
            applied = []
            for statement in parsed:
                at = self.clock.next_commit_us(self.last_commit_us)
                self._apply_statement(statement, at)
                self.last_commit_us = at
                applied.append(at)
            self.ddl_statements.extend(statements)
            return applied

    def _apply_statement(self, statement: ddl.Statement, at_us: int) -> None:
        exists = grpc.StatusCode.FAILED_PRECONDITION
        if isinstance(statement, ddl.CreateTable):
            if statement.name in self.tables:
                raise EmulatorError(exists, f"Duplicate name in schema: {statement.name}.")
            self.tables[statement.name] = Table(statement.name, statement.columns, statement.primary_key)
        elif isinstance(statement, ddl.AddColumn):
            table = self._table(statement.table)
            if any(c.name == statement.column.name for c in table.columns):
                raise EmulatorError(
                    exists, f"Duplicate column name {statement.table}.{statement.column.name}."
                )
            if statement.column.not_null:
                raise EmulatorError(exists, "Cannot add a NOT NULL column to an existing table.")
            table.columns.append(statement.column)
        elif isinstance(statement, ddl.DropTable):
            self._table(statement.name)
            del self.tables[statement.name]
        elif isinstance(statement, ddl.CreateChangeStream):
            if statement.name in self.streams:
                raise EmulatorError(exists, f"Duplicate name in schema: {statement.name}.")
            for table_name, columns in (statement.scope or {}).items():
                table = self._table(table_name)
                for column in columns or []:
                    if column in table.primary_key:
                        raise EmulatorError(
                            grpc.StatusCode.INVALID_ARGUMENT,
                            f"Change stream {statement.name} lists key column {table_name}.{column}; "
                            "key columns are always tracked.",
                        )
                    table.column(column)
            self.streams[statement.name] = ChangeStream(statement.name, statement, at_us)
        elif isinstance(statement, ddl.DropChangeStream):
            self._stream(statement.name)
            del self.streams[statement.name]

    def change_stream_options(self) -> list[dict[str, str]]:
        """Rows of ``INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS``: the options streams' DDL sets, as written."""
        with self.lock:
            return [
                {
                    "change_stream_catalog": "",
                    "change_stream_schema": "",
                    "change_stream_name": stream.name,
                    "option_name": name,
                    "option_type": "BOOL" if value.lower() in ("true", "false") else "STRING",
                    "option_value": value,
                }
                for stream in sorted(self.streams.values(), key=lambda s: s.name)
                for name, value in sorted(stream.definition.options.items())
            ]

    def _table(self, name: str) -> Table:
        table = self.tables.get(name)
        if table is None:
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Table not found: {name}")
        return table

    def _stream(self, name: str) -> ChangeStream:
        stream = self.streams.get(name)
        if stream is None:
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Change stream not found: {name}")
        return stream

    # ----- partitions -----------------------------------------------------------------------------
    def token(self, stream: ChangeStream, partition: Partition) -> str:
        token = stream.token_of.get(partition.pid)
        if token is None:
            digest = hashlib.blake2b(
                f"{self.path}/{stream.name}/{stream.created_us}/{partition.pid}".encode(), digest_size=24
            ).digest()
            token = base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")
            stream.token_of[partition.pid] = token
            stream.tokens[token] = partition.pid
        return token

    def split(self) -> None:
        with self.lock:
            at = self._event_time(self.clock.now_us())
            self.partitions.split(at)

    def merge(self) -> None:
        with self.lock:
            at = self._event_time(self.clock.now_us())
            self.partitions.merge(at)

    def _event_time(self, wanted_us: int) -> int:
        """A timestamp for a partition event: after every commit so far, consumed like a commit."""
        self.last_commit_us = self.clock.next_commit_us(max(wanted_us - 1, self.last_commit_us))
        return self.last_commit_us

    def run_schedule(self, until_us: int) -> None:
        """Apply the scheduled splits and merges due at or before ``until_us``."""
        schedule = self.schedule
        if schedule is None or self._next_event_us is None:
            return
        every = int(schedule.every / timedelta(microseconds=1))
        while self._next_event_us <= until_us:
            at = self._event_time(self._next_event_us)
            count = len(self.partitions.current)
            can_split, can_merge = count < schedule.max_partitions, count > max(schedule.min_partitions, 1)
            if can_split and (not can_merge or self._schedule_rng.random() < 0.5):
                self.partitions.split(at)
            elif can_merge:
                self.partitions.merge(at)
            self._next_event_us += every

    def readable_until_us(self) -> int:
        """Every commit at or before this timestamp is final (later commits get later timestamps)."""
        return self.clock.now_us()

    # ----- writes ---------------------------------------------------------------------------------
    def commit(self, mutations: list) -> int:
        """Apply protobuf ``Mutation`` messages atomically; return the commit timestamp in µs."""
        with self.lock:
            self.run_schedule(self.clock.now_us())
            commit_us = self.clock.next_commit_us(self.last_commit_us)
            commit_text = format_timestamp(from_micros(commit_us))
            overlay: dict[tuple[str, tuple], dict[str, Any] | None] = {}
            writes: dict[tuple[str, tuple], _RowWrites] = {}
            try:
                for mutation in mutations:
                    self._apply_mutation(mutation, overlay, writes, commit_text)
            except ValueError_ as exc:
                raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
            mods = self._coalesce(writes, overlay)
            for (table_name, key), row in overlay.items():
                rows = self.tables[table_name].rows
                if row is None:
                    rows.pop(key, None)
                else:
                    rows[key] = row
            self.last_commit_us = commit_us
            if mods:
                self._record_changes(mods, commit_us, commit_text)
            self.clock.notify()
            return commit_us

    def _current(self, overlay: dict, table: Table, key: tuple) -> dict[str, Any] | None:
        if (table.name, key) in overlay:
            return overlay[(table.name, key)]
        return table.rows.get(key)

    @staticmethod
    def _writes(writes: dict[tuple[str, tuple], _RowWrites], table: Table, key: tuple) -> _RowWrites:
        entry = writes.get((table.name, key))
        if entry is None:
            entry = writes[(table.name, key)] = _RowWrites(table, key, table.rows.get(key))
        return entry

    def _coalesce(
        self, writes: dict[tuple[str, tuple], _RowWrites], overlay: dict[tuple[str, tuple], Any]
    ) -> list[_Mod]:
        """One mod per written row: tables in the order the transaction first wrote them, each
        table's rows in key order (as Spanner orders a transaction's mods)."""
        by_table: dict[str, list[_RowWrites]] = {}
        for (table_name, _key), entry in writes.items():
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

    def _apply_mutation(self, mutation: Any, overlay: dict, writes: dict, commit_text: str) -> None:
        kind = mutation.WhichOneof("operation")
        if kind is None:
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, "Mutation has no operation")
        if kind == "delete":
            self._apply_delete(mutation.delete, overlay, writes)
            return
        write = getattr(mutation, kind)
        table = self._table(write.table)
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
                cell = decode_cell(
                    value, column.type, where, commit_text if column.allow_commit_timestamp else None
                )
                if cell is None and column.not_null:
                    raise EmulatorError(
                        grpc.StatusCode.FAILED_PRECONDITION, f"{where} is NOT NULL and cannot be set to NULL"
                    )
                given[column.name] = cell
            key = tuple(given[k] for k in table.primary_key)
            before = self._current(overlay, table, key)
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
            entry = self._writes(writes, table, key)
            if kind == "replace" and before is not None:
                entry.recreated = True
            entry.written.update(c for c in columns if c not in table.primary_key)
            overlay[(table.name, key)] = after

    def _apply_delete(self, delete: Any, overlay: dict, writes: dict) -> None:
        table = self._table(delete.table)
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
            before = self._current(overlay, table, key)
            if before is None:
                continue
            self._writes(writes, table, key).recreated = True
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

    def _record_changes(self, mods: list[_Mod], commit_us: int, commit_text: str) -> None:
        self._transactions += 1
        transaction_id = hashlib.blake2b(
            f"{self.path}/{self._seed}/{self._transactions}".encode(), digest_size=10
        ).hexdigest()
        for stream in self.streams.values():
            self._record_for_stream(stream, mods, commit_us, commit_text, transaction_id)

    def _record_for_stream(
        self, stream: ChangeStream, mods: list[_Mod], commit_us: int, commit_text: str, transaction_id: str
    ) -> None:
        capture = stream.definition.value_capture_type
        # records in creation order: (partition, table, mod_type, non-key columns, [(keys, new, old)]);
        # a mod joins its partition's last record when table, mod type and columns are the same
        records: list[tuple[Partition, Table, str, tuple[str, ...], list[tuple[dict, dict, dict]]]] = []
        open_record: dict[int, int] = {}
        for mod in mods:
            tracked = stream.tracked_columns(mod.table)
            if tracked is None:
                continue
            entry = self._mod_values(mod, tracked, capture)
            if entry is None:
                continue
            new, old, columns = entry
            keys = dict(zip(mod.table.primary_key, mod.key, strict=True))
            partition = self.partitions.owner(key_hash(mod.table.name, _dumps(keys)))
            index = open_record.get(partition.pid)
            record = records[index] if index is not None else None
            if record is not None and record[1] is mod.table and record[2:4] == (mod.mod_type, columns):
                record[4].append((keys, new, old))
            else:
                open_record[partition.pid] = len(records)
                records.append((partition, mod.table, mod.mod_type, columns, [(keys, new, old)]))
        if not records:
            return
        partitions_in_transaction = len({r[0].pid for r in records})
        last_of = {r[0].pid: i for i, r in enumerate(records)}
        for sequence, (partition, table, mod_type, columns, entries) in enumerate(records):
            column_types = [
                {
                    "name": c.name,
                    "type": c.type.to_json(),
                    "is_primary_key": c.name in table.primary_key,
                    "ordinal_position": table.ordinal(c.name),
                }
                for c in table.columns
                if c.name in table.primary_key or c.name in columns
            ]
            row = wire.data_change_row(
                commit_ts=commit_text,
                record_sequence=f"{sequence:08d}",
                transaction_id=transaction_id,
                is_last=last_of[partition.pid] == sequence,
                table=table.name,
                column_types=column_types,
                mods=entries,
                mod_type=mod_type,
                value_capture_type=capture,
                records_in_transaction=len(records),
                partitions_in_transaction=partitions_in_transaction,
            )
            log = stream.logs.setdefault(partition.pid, PartitionLog())
            log.timestamps.append(commit_us)
            log.rows.append(row)

    @staticmethod
    def _mod_values(mod: _Mod, tracked: list[str], capture: str) -> tuple[dict, dict, tuple[str, ...]] | None:
        """New values, old values and the non-key columns ``column_types`` lists for one mod.

        INSERT and DELETE list every tracked column. An UPDATE lists the tracked columns the
        transaction wrote (whether or not their values changed), and is not reported when it wrote
        none; with ``NEW_ROW`` and ``NEW_ROW_AND_OLD_VALUES`` it carries and lists every tracked column
        and is reported whenever the stream tracks a non-key column of the table.
        """
        before, after = mod.before or {}, mod.after or {}
        every = tuple(tracked)
        if mod.mod_type == "INSERT":
            return {c: after.get(c) for c in tracked}, {}, every
        if mod.mod_type == "DELETE":
            old = {c: before.get(c) for c in tracked}
            return {}, (old if capture in ("OLD_AND_NEW_VALUES", "NEW_ROW_AND_OLD_VALUES") else {}), every
        written = tuple(c for c in tracked if c in mod.written)
        if capture in ("OLD_AND_NEW_VALUES", "NEW_VALUES"):
            if not written:
                return None
            new = {c: after.get(c) for c in written}
            old = {c: before.get(c) for c in written} if capture == "OLD_AND_NEW_VALUES" else {}
            return new, old, written
        if not every:
            return None
        new = {c: after.get(c) for c in tracked}
        old = {c: before.get(c) for c in written} if capture == "NEW_ROW_AND_OLD_VALUES" else {}
        return new, old, every

    # ----- change-stream reads --------------------------------------------------------------------
    def validate_query(self, query: ChangeStreamQuery) -> tuple[ChangeStream, Partition | None]:
        with self.lock:
            stream = self._stream(query.stream)
            invalid, out_of_range = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE
            if not MIN_HEARTBEAT_MS <= query.heartbeat_ms <= MAX_HEARTBEAT_MS:
                raise EmulatorError(
                    invalid,
                    f"heartbeat_milliseconds must be between {MIN_HEARTBEAT_MS} and {MAX_HEARTBEAT_MS}, "
                    f"got {query.heartbeat_ms}",
                )
            start = format_timestamp(from_micros(query.start_us))
            if query.end_us is not None and query.end_us < query.start_us:
                end = format_timestamp(from_micros(query.end_us))
                raise EmulatorError(invalid, f"end_timestamp {end} is before start_timestamp {start}")
            if query.start_us < stream.created_us:
                created = format_timestamp(from_micros(stream.created_us))
                raise EmulatorError(
                    out_of_range,
                    f"start_timestamp {start} is before the creation of change stream {stream.name} "
                    f"at {created}",
                )
            oldest = self.clock.now_us() - stream.retention_us
            if query.start_us < oldest:
                raise EmulatorError(
                    out_of_range,
                    f"start_timestamp {start} is outside the retention period of change stream {stream.name} "
                    f"(oldest readable: {format_timestamp(from_micros(oldest))})",
                )
            if query.token is None:
                return stream, None
            pid = stream.tokens.get(query.token)
            if pid is None:
                raise EmulatorError(
                    invalid,
                    f"partition_token {query.token!r} is not a partition of change stream {stream.name}",
                )
            partition = self.partitions.all[pid]
            if query.start_us < partition.start_us:
                raise EmulatorError(
                    invalid,
                    f"start_timestamp {start} is before the start of partition {query.token} at "
                    f"{format_timestamp(from_micros(partition.start_us))}",
                )
            return stream, partition

    def read(self, query: ChangeStreamQuery, is_active) -> Iterator[bytes | object]:
        """Rows of one change-stream query, in order; ``FLUSH`` before blocking on the clock."""
        stream, partition = self.validate_query(query)
        if partition is None:
            yield from self._initial(stream, query, is_active)
        else:
            yield from self._partition(stream, partition, query, is_active)

    def _wait(self, is_active) -> None:
        if not is_active():
            raise EmulatorError(grpc.StatusCode.CANCELLED, "the client cancelled the change-stream query")
        self.clock.wait(0.5)

    def _initial(self, stream: ChangeStream, query: ChangeStreamQuery, is_active) -> Iterator[bytes | object]:
        while True:
            with self.lock:
                self.run_schedule(self.clock.now_us())
                if self.readable_until_us() >= query.start_us:
                    alive = sorted(self.partitions.alive_at(query.start_us), key=lambda p: p.low)
                    tokens = [self.token(stream, p) for p in alive]
                    break
            yield FLUSH
            self._wait(is_active)
        start = format_timestamp(from_micros(query.start_us))
        for sequence, i in enumerate(range(0, len(tokens), 2)):
            yield wire.child_partitions_row(
                start, f"{sequence:08d}", [(t, [None]) for t in tokens[i : i + 2]]
            )

    def _partition(
        self, stream: ChangeStream, partition: Partition, query: ChangeStreamQuery, is_active
    ) -> Iterator[bytes | object]:
        heartbeat_us = query.heartbeat_ms * 1000
        progress = query.start_us - 1
        log = stream.logs.setdefault(partition.pid, PartitionLog())
        index = bisect_left(log.timestamps, query.start_us)
        query_end = query.end_us

        def heartbeats(until_us: int) -> Iterator[bytes]:
            nonlocal progress
            while progress + heartbeat_us <= until_us:
                progress += heartbeat_us
                yield wire.heartbeat_row(format_timestamp(from_micros(progress)))

        while True:
            with self.lock:
                self.run_schedule(self.clock.now_us())
                limit = self.readable_until_us()
                if query_end is not None:
                    limit = min(limit, query_end)
                available = len(log.timestamps)
                end_us = partition.end_us
            while index < available and log.timestamps[index] <= limit:
                ts = log.timestamps[index]
                yield from heartbeats(ts - 1)
                yield log.rows[index]
                progress = ts
                index += 1
            if end_us is not None and (query_end is None or end_us <= query_end) and index >= available:
                yield from heartbeats(end_us - 1)
                yield self._children_row(stream, partition)
                return
            if query_end is not None and limit >= query_end:
                yield from heartbeats(query_end)
                return
            yield from heartbeats(limit)
            yield FLUSH
            self._wait(is_active)

    def _children_row(self, stream: ChangeStream, partition: Partition) -> bytes:
        with self.lock:
            children = [self.partitions.all[c] for c in partition.children]
            entries = [
                (self.token(stream, c), [self.token(stream, self.partitions.all[p]) for p in c.parents])
                for c in children
            ]
        assert partition.end_us is not None
        return wire.child_partitions_row(format_timestamp(from_micros(partition.end_us)), "00000000", entries)
