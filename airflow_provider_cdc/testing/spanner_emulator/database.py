"""An emulated Spanner database: schema, rows, change streams and their partitions, behind one lock.

A commit applies its mutations (:mod:`.transaction`), keeps the rows' new versions (:mod:`.storage`)
and logs a data change record per stream and partition (:mod:`.records`); change-stream queries read
those logs (:mod:`.reads`), table reads the versions (:mod:`.table_reads`).
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import random
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta

import grpc

from airflow_provider_cdc.core.timestamps import format_timestamp, from_micros

from . import ddl, indexes, reads, schema_changes
from .clock import Clock
from .model import (
    FLUSH,
    MAX_HEARTBEAT_MS,
    MIN_HEARTBEAT_MS,
    ChangeStream,
    ChangeStreamQuery,
    EmulatorError,
    Index,
    PartitionLog,
    PartitionSchedule,
    StatementError,
    Table,
    lookup_table,
)
from .partitions import Partition, PartitionMap
from .records import record_for_stream
from .transaction import TransactionWrites, _Mod
from .values import ValueError_

__all__ = [
    "FLUSH",
    "MAX_HEARTBEAT_MS",
    "MIN_HEARTBEAT_MS",
    "ChangeStream",
    "ChangeStreamQuery",
    "Database",
    "EmulatorError",
    "PartitionLog",
    "PartitionSchedule",
    "Table",
]


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
        self.indexes: dict[str, Index] = {}
        self.ddl_statements: list[str] = []
        self.version_retention = ddl.DEFAULT_VERSION_RETENTION
        self.options: dict[str, str] = {}  # database options set by ALTER DATABASE, as written
        self.last_commit_us = self.created_us = clock.now_us()
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
        """Apply DDL statements; each takes a commit timestamp (µs), returned in order.

        As Spanner does, the batch is first checked against the schema alone, as a whole: a statement
        that does not parse or fit refuses the batch and nothing changes. Then each statement checks the
        data it changes and takes effect; one that fails there (``StatementError.applied`` set) leaves the
        statements before it in effect and the rest not applied.
        """
        with self.lock:
            parsed = []
            for index, sql in enumerate(statements):
                try:
                    parsed.append(ddl.parse_statement(sql))
                except ddl.DdlError as exc:
                    error = EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                    raise StatementError(error, index, sql, None) from exc
            schema = self._schema_copy()
            for index, statement in enumerate(parsed):
                try:
                    schema._apply_statement(statement, self.last_commit_us + 1)
                except EmulatorError as exc:
                    raise StatementError(exc, index, statements[index], None) from exc
            applied: list[int] = []
            for index, statement in enumerate(parsed):
                at = self.clock.next_commit_us(self.last_commit_us)
                try:
                    self._apply_statement(statement, at)
                except EmulatorError as exc:
                    raise StatementError(exc, index, statements[index], applied) from exc
                self.last_commit_us = at
                applied.append(at)
                self.ddl_statements.append(statements[index])
            return applied

    def _schema_copy(self) -> Database:
        """This database's schema without its rows: what a DDL batch is checked against first."""
        schema = copy.copy(self)
        schema.tables = {name: table.schema_copy() for name, table in self.tables.items()}
        schema.streams = dict(self.streams)
        schema.indexes = {
            name: dataclasses.replace(index, entries={}) for name, index in self.indexes.items()
        }
        schema.options = dict(self.options)
        schema.ddl_statements = []
        return schema

    def _apply_statement(self, statement: ddl.Statement, at_us: int) -> None:
        exists = grpc.StatusCode.FAILED_PRECONDITION
        if isinstance(statement, ddl.CreateTable):
            if self.name_in_use(statement.name):
                raise EmulatorError(exists, f"Duplicate name in schema: {statement.name}.")
            for column in statement.columns:
                schema_changes.check_column(statement.name, column)
            self.tables[statement.name] = Table(
                statement.name,
                list(statement.columns),
                list(statement.primary_key),
                key_desc=statement.key_desc,
                parent=statement.parent,
                on_delete=statement.on_delete,
            )
        elif isinstance(statement, ddl.AlterDatabase):
            self.version_retention = statement.version_retention or ddl.DEFAULT_VERSION_RETENTION
            self.options.pop("version_retention_period", None)
            if statement.version_retention_text is not None:
                self.options["version_retention_period"] = statement.version_retention_text
        elif isinstance(statement, ddl.AddColumn):
            schema_changes.add_column(self, statement)
        elif isinstance(statement, ddl.DropColumn):
            schema_changes.drop_column(self, statement)
        elif isinstance(statement, ddl.AlterColumn):
            schema_changes.alter_column(self, statement)
        elif isinstance(statement, ddl.AlterColumnOptions):
            schema_changes.alter_column_options(self, statement, at_us)
        elif isinstance(statement, ddl.DropColumnDefault):
            schema_changes.drop_column_default(self, statement)
        elif isinstance(statement, ddl.DropTable):
            self._drop_table(statement.name)
        elif isinstance(statement, ddl.CreateIndex):
            indexes.create_index(self, statement)
        elif isinstance(statement, ddl.DropIndex):
            indexes.drop_index(self, statement)
        elif isinstance(statement, ddl.CreateChangeStream):
            if self.name_in_use(statement.name):
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
            self.stream(statement.name)
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

    def name_in_use(self, name: str) -> bool:
        """Whether a table, index or change stream has this name (they share one namespace)."""
        return name in self.tables or name in self.indexes or name in self.streams

    def _drop_table(self, name: str) -> None:
        """``DROP TABLE``: not one a change stream lists, with interleaved tables, or with an index."""
        table = self._table(name)
        failed = grpc.StatusCode.FAILED_PRECONDITION
        listing = [s.name for s in self.streams.values() if table.name in (s.definition.scope or {})]
        if listing:
            raise EmulatorError(
                failed,
                f"Cannot drop table {table.name}. Table {table.name} is tracked by {len(listing)} Change "
                f"Stream: {','.join(listing)}. Tables explicitly tracked by a Change Stream cannot be "
                "dropped. Please drop the Change Stream or modify its FOR clause to stop tracking the table "
                "explicitly before dropping the table.",
            )
        children = [t.name for t in self.tables.values() if t.parent == table.name]
        if children:
            raise EmulatorError(
                failed, f"Cannot drop table {table.name} with interleaved tables: {','.join(children)}."
            )
        on_table = indexes.on_table(self, table.name)
        if on_table:
            names = ",".join(index.name for index in on_table)
            raise EmulatorError(failed, f"Cannot drop table {table.name} with indices: {names}.")
        del self.tables[table.name]

    def _table(self, name: str) -> Table:
        return lookup_table(self.tables, name)

    def stream(self, name: str) -> ChangeStream:
        """The change stream ``name``, or ``NOT_FOUND``."""
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

    def oldest_readable_us(self) -> int:
        """The oldest timestamp a read may use: now minus the version retention period."""
        return self.clock.now_us() - int(self.version_retention / timedelta(microseconds=1))

    def earliest_version_us(self) -> int:
        """The oldest timestamp whose data a read can see: since the creation, within the retention."""
        return max(self.created_us, self.oldest_readable_us())

    # ----- writes ---------------------------------------------------------------------------------
    def commit(self, mutations: list) -> int:
        """Apply protobuf ``Mutation`` messages atomically; return the commit timestamp in µs."""
        with self.lock:
            self.run_schedule(self.clock.now_us())
            commit_us = self.clock.next_commit_us(self.last_commit_us)
            commit_text = format_timestamp(from_micros(commit_us))
            transaction = TransactionWrites(self.tables, commit_text, commit_us)
            try:
                for mutation in mutations:
                    transaction.apply(mutation)
            except ValueError_ as exc:
                raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
            mods = transaction.mods()
            unique = indexes.unique_changes(self, transaction.overlay) if self.indexes else []
            oldest = self.oldest_readable_us()
            for (table_name, key), row in transaction.overlay.items():
                table = self.tables[table_name]
                if row is None:
                    table.rows.pop(key, None)
                else:
                    table.rows[key] = row
                table.history.write(key, row, commit_us, oldest)
            indexes.apply_unique_changes(unique)
            self.last_commit_us = commit_us
            if mods:
                self._record_changes(mods, commit_us, commit_text)
            self.clock.notify()
            return commit_us

    def _record_changes(self, mods: list[_Mod], commit_us: int, commit_text: str) -> None:
        self._transactions += 1
        transaction_id = hashlib.blake2b(
            f"{self.path}/{self._seed}/{self._transactions}".encode(), digest_size=10
        ).hexdigest()
        for stream in self.streams.values():
            record_for_stream(stream, self.partitions, mods, commit_us, commit_text, transaction_id)

    # ----- change-stream reads --------------------------------------------------------------------
    def validate_query(self, query: ChangeStreamQuery) -> tuple[ChangeStream, Partition | None]:
        """The stream and partition a query reads (``None``: the initial query), or its error."""
        return reads.validate_query(self, query)

    def read(self, query: ChangeStreamQuery, is_active: Callable[[], bool]) -> Iterator[bytes | object]:
        """Rows of one change-stream query, in order; ``FLUSH`` before blocking on the clock."""
        return reads.read(self, query, is_active)
