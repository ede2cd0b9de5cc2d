"""The scripted workload: seeded multi-table transactions through ``google-cloud-spanner``, with their
ground truth (see :mod:`airflow_provider_cdc.testing.workload`)."""

from __future__ import annotations

import base64
import logging
import random
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from google.cloud.spanner_v1 import COMMIT_TIMESTAMP, JsonObject, KeySet

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, coerce_timestamp, format_timestamp

from .planner import TransactionPlanner, _Planned, _RowWrites, _TableState
from .schema import WORKLOAD_TABLES, WorkloadColumn, WorkloadTable
from .truth import (
    _COMMIT_TS,
    DELETE,
    INSERT,
    CommittedTransaction,
    EmulatorControl,
    ExpectedMod,
    PartitionEvent,
    State,
    WorkloadSummary,
    _History,
    apply_mod,
)
from .values import FULL_PROFILE, VALUE_PROFILES

log = logging.getLogger(__name__)


class Workload:
    """Seeded multi-table change workload with ground truth; see :mod:`airflow_provider_cdc.testing.workload`.

    ``database`` is a ``google.cloud.spanner_v1.database.Database`` whose schema holds
    :data:`WORKLOAD_TABLES` (see :func:`schema_ddl`). ``emulator`` (optional) is the emulator serving
    it: the workload then advances its clock between commits and can split and merge partitions.
    """

    def __init__(
        self,
        database: Any,
        emulator: EmulatorControl | None = None,
        seed: int = 0,
        *,
        tables: Sequence[WorkloadTable] = WORKLOAD_TABLES,
        max_mods_per_transaction: int = 10,
        max_rows_per_table: int = 300,
        read_write_share: float = 0.1,
        progress_every: int = 5_000,
        max_writes_per_row: int = 1,
        value_profile: str = FULL_PROFILE,
    ) -> None:
        if max_mods_per_transaction < 1:
            raise ValueError("max_mods_per_transaction must be at least 1")
        if max_writes_per_row < 1:
            raise ValueError("max_writes_per_row must be at least 1")
        if value_profile not in VALUE_PROFILES:
            raise ValueError(f"value_profile must be one of {VALUE_PROFILES}, got {value_profile!r}")
        if not tables:
            raise ValueError("a workload needs at least one table")
        self.database = database
        self.emulator = emulator
        self.seed = seed
        self.tables = tuple(tables)
        self.max_mods_per_transaction = max_mods_per_transaction
        self.max_writes_per_row = max_writes_per_row
        self.value_profile = value_profile
        self.max_rows_per_table = max_rows_per_table
        self.read_write_share = read_write_share
        self.progress_every = progress_every
        self._rng = random.Random(seed)
        self._tables: dict[str, _TableState] = {table.name: _TableState() for table in self.tables}
        self._planner = TransactionPlanner(
            self._rng,
            self.tables,
            self._tables,
            max_mods_per_transaction=max_mods_per_transaction,
            max_rows_per_table=max_rows_per_table,
            max_writes_per_row=max_writes_per_row,
            value_profile=value_profile,
        )
        self._history = _History()
        self.partition_events: list[PartitionEvent] = []
        self.change_count = 0
        self.write_count = 0  # mutations sent; more than change_count when rows are written repeatedly

    # -- ground truth ------------------------------------------------------------------------

    @property
    def transactions(self) -> list[CommittedTransaction]:
        """Every committed transaction, in commit order."""
        return self._history.transactions

    @property
    def state(self) -> State:
        """Current rows per table: ``{table: {key tuple: {column: value}}}`` (a copy)."""
        return {
            name: {key: dict(row) for key, row in table.rows.items()} for name, table in self._tables.items()
        }

    @property
    def splits(self) -> list[PartitionEvent]:
        return [event for event in self.partition_events if event.kind == "split"]

    @property
    def merges(self) -> list[PartitionEvent]:
        return [event for event in self.partition_events if event.kind == "merge"]

    def history_between(self, start: datetime, end: datetime) -> list[CommittedTransaction]:
        """Transactions committed in the window ``[start, end)``."""
        return self._history.between(coerce_timestamp(start), coerce_timestamp(end))

    def state_at(self, timestamp: datetime) -> State:
        """Rows per table as of ``timestamp`` (every transaction committed at or before it applied)."""
        state: State = {table.name: {} for table in self.tables}
        for transaction in self._history.between(
            datetime.min.replace(tzinfo=timezone.utc), coerce_timestamp(timestamp) + ONE_MICROSECOND
        ):
            for mod in transaction.mods:
                apply_mod(state, mod)
        return state

    def mods_by_key(self) -> dict[tuple[str, tuple[Any, ...]], list[tuple[datetime, ExpectedMod]]]:
        """Per ``(table, key)``: its changes in commit order with their commit timestamps."""
        result: dict[tuple[str, tuple[Any, ...]], list[tuple[datetime, ExpectedMod]]] = {}
        for transaction in self.transactions:
            for mod in transaction.mods:
                result.setdefault((mod.table, mod.key), []).append((transaction.commit_timestamp, mod))
        return result

    # -- running -------------------------------------------------------------------------------

    def run(
        self,
        changes: int,
        step: timedelta = timedelta(seconds=1),
        split_every: int | None = None,
        merge_every: int | None = None,
    ) -> WorkloadSummary:
        """Commit transactions until ``changes`` more mods are committed.

        ``step`` is the mean emulator-clock advance between commits (some commits share a clock
        reading and get consecutive microseconds). ``split_every``/``merge_every`` split or merge a
        partition each time that many more changes have been committed (merges are offset by half
        an interval so they interleave with splits).
        """
        if changes < 1:
            raise ValueError("changes must be at least 1")
        self._check_partition_control(split_every, merge_every)
        started = time.monotonic()
        first_index = len(self.transactions)
        base = self.change_count
        target = base + changes
        next_split = base + split_every if split_every else None
        next_merge = base + merge_every + merge_every // 2 if merge_every else None
        next_progress = base + self.progress_every
        events_before = len(self.partition_events)
        while self.change_count < target:
            self._advance_clock(step)
            planned = self._planner.plan_transaction(target - self.change_count)
            if not planned:
                continue
            self._commit(planned)
            while next_split is not None and self.change_count >= next_split:
                self._partition_event("split", step)
                next_split += split_every or 0
            while next_merge is not None and self.change_count >= next_merge:
                self._partition_event("merge", step)
                next_merge += merge_every or 0
            if self.change_count >= next_progress:
                next_progress += self.progress_every
                self._log_progress(base, target, started)
        new = self.transactions[first_index:]
        events = self.partition_events[events_before:]
        summary = WorkloadSummary(
            changes=self.change_count - base,
            transactions=len(new),
            splits=sum(1 for event in events if event.kind == "split"),
            merges=sum(1 for event in events if event.kind == "merge"),
            first_commit=new[0].commit_timestamp if new else None,
            last_commit=new[-1].commit_timestamp if new else None,
            elapsed_seconds=time.monotonic() - started,
        )
        log.info(
            "workload committed %d changes in %d transactions (%d splits, %d merges) in %.1f s",
            summary.changes, summary.transactions, summary.splits, summary.merges, summary.elapsed_seconds,
        )  # fmt: skip
        return summary

    def split(self) -> PartitionEvent:
        """Split a partition now (one microsecond after the clock's current reading)."""
        self._check_partition_control(1, None)
        return self._partition_event("split", None)

    def merge(self) -> PartitionEvent:
        """Merge two adjacent partitions now (one microsecond after the clock's current reading)."""
        self._check_partition_control(None, 1)
        return self._partition_event("merge", None)

    def _check_partition_control(self, split_every: int | None, merge_every: int | None) -> None:
        for name, value in (("split_every", split_every), ("merge_every", merge_every)):
            if value is None:
                continue
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
            if self.emulator is None:
                raise ValueError(f"{name} needs an emulator to split or merge partitions")

    def _advance_clock(self, step: timedelta) -> None:
        clock = getattr(self.emulator, "clock", None)
        if clock is None or not hasattr(clock, "advance") or step <= timedelta(0):
            return
        if self._rng.random() < 0.15:
            return  # several commits at one clock reading
        micros = int(step / ONE_MICROSECOND)
        clock.advance(timedelta(microseconds=self._rng.randint(1, max(1, 2 * micros))))

    def _partition_event(self, kind: str, step: timedelta | None) -> PartitionEvent:
        assert self.emulator is not None
        clock = self.emulator.clock
        if hasattr(clock, "advance"):
            clock.advance(ONE_MICROSECOND)  # strictly after the last commit
        if kind == "split":
            self.emulator.split_partition(self.database.name)
        else:
            self.emulator.merge_partitions(self.database.name)
        event = PartitionEvent(kind, coerce_timestamp(clock.now()))
        self.partition_events.append(event)
        log.debug("workload %s at %s", kind, format_timestamp(event.at))
        return event

    def _log_progress(self, base: int, target: int, started: float) -> None:
        elapsed = max(time.monotonic() - started, 1e-9)
        done = self.change_count - base
        log.info(
            "workload: %d/%d changes, %d transactions, %d partition events, %.0f changes/s",
            done, target - base, len(self.transactions), len(self.partition_events), done / elapsed,
        )  # fmt: skip

    # -- committing ----------------------------------------------------------------------------

    def _commit(self, rows: list[_RowWrites]) -> None:
        planned = self._mutation_order(rows)
        if self._rng.random() < self.read_write_share:
            holder: dict[str, Any] = {}

            def work(transaction: Any) -> None:
                holder["transaction"] = transaction
                _write_mutations(transaction, planned)

            self.database.run_in_transaction(work)
            committed = holder["transaction"].committed
        else:
            with self.database.batch() as batch:
                _write_mutations(batch, planned)
            committed = batch.committed
        if committed is None:
            raise RuntimeError("the commit returned no commit timestamp")
        self.write_count += len(planned)
        commit_timestamp = coerce_timestamp(committed)
        mods = tuple(
            self._resolve(mod, commit_timestamp)
            for row in _spanner_order(rows)
            if (mod := row.mod()) is not None
        )
        for row in rows:
            if row.after is None and row.before is None:  # inserted and deleted: free to insert again
                self._tables[row.table.name].deleted.append(row.key)
        if not mods:
            return
        self._history.append(CommittedTransaction(len(self.transactions), commit_timestamp, mods))
        for mod in mods:
            state = self._tables[mod.table]
            if mod.mod_type == DELETE:
                del state.rows[mod.key]
                state.deleted.append(mod.key)
            elif mod.mod_type == INSERT:
                state.rows[mod.key] = {**mod.keys, **mod.new_values}
            else:
                state.rows[mod.key].update(mod.new_values)
        self.change_count += len(mods)

    def _mutation_order(self, rows: list[_RowWrites]) -> list[_Planned]:
        """The transaction's mutations: each row's in order; with several writes per row, the rows'
        writes interleaved at random."""
        if self.max_writes_per_row == 1:
            return [change for row in rows for change in row.writes]
        queues = [list(row.writes) for row in rows]
        order: list[_Planned] = []
        while queues:
            index = self._rng.randrange(len(queues))
            order.append(queues[index].pop(0))
            if not queues[index]:
                queues.pop(index)
        return order

    @staticmethod
    def _resolve(mod: ExpectedMod, commit_timestamp: datetime) -> ExpectedMod:
        if not any(value is _COMMIT_TS for value in mod.new_values.values()):
            return mod
        new = {
            name: commit_timestamp if value is _COMMIT_TS else value for name, value in mod.new_values.items()
        }
        return ExpectedMod(mod.table, mod.mod_type, mod.keys, new, mod.old_values)


def _spanner_order(rows: Sequence[_RowWrites]) -> list[_RowWrites]:
    """Rows in the order a change stream lists a transaction's mods: tables in the order the
    transaction first wrote them, each table's rows in key order."""
    tables: dict[str, list[_RowWrites]] = {}
    for row in rows:
        tables.setdefault(row.table.name, []).append(row)
    return [row for group in tables.values() for row in sorted(group, key=lambda r: r.key)]


def _write_mutations(target: Any, planned: Sequence[_Planned]) -> None:
    """Send the planned changes as mutations on a batch or a read-write transaction."""
    for change in planned:
        table = change.table
        if change.operation == "delete":
            target.delete(table.name, KeySet(keys=[list(change.values)]))
            continue
        values = [
            _client_value(value, table.column(name))
            for name, value in zip(change.columns, change.values, strict=True)
        ]
        write: Callable[..., Any] = getattr(target, change.operation)
        write(table.name, columns=list(change.columns), values=[values])


def _client_value(value: Any, column: WorkloadColumn) -> Any:
    """The value as ``google-cloud-spanner`` mutations take it."""
    if value is _COMMIT_TS:
        return COMMIT_TIMESTAMP
    if value is None:
        return None
    code = column.code
    if code == "BYTES":
        return base64.b64encode(value)
    if code == "JSON":
        return JsonObject(value)
    return value
