"""Ground truth of a workload: the mods a change stream must report, per committed transaction."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from airflow_provider_cdc.core.timestamps import format_timestamp, to_micros

from .schema import TABLES_BY_NAME

INSERT = "INSERT"
UPDATE = "UPDATE"
DELETE = "DELETE"


class _CommitTimestampPlaceholder:
    """Stands for the commit timestamp in planned values until the commit returns it."""

    def __repr__(self) -> str:
        return "COMMIT_TIMESTAMP"


_COMMIT_TS: Any = _CommitTimestampPlaceholder()


@dataclass(frozen=True)
class ExpectedMod:
    """A mod a change stream watching every column reports for one row of one transaction."""

    table: str
    mod_type: str
    keys: dict[str, Any]
    new_values: dict[str, Any]
    old_values: dict[str, Any]

    @property
    def key(self) -> tuple[Any, ...]:
        return TABLES_BY_NAME[self.table].key_of(self.keys)

    def project(self, columns: Sequence[str] | None) -> ExpectedMod | None:
        """The mod as a stream watching only ``columns`` of its table reports it (``None``: no mod).

        An UPDATE that changes none of the watched columns is not reported.
        """
        if columns is None:
            return self
        watched = set(columns)
        new_values = {name: value for name, value in self.new_values.items() if name in watched}
        old_values = {name: value for name, value in self.old_values.items() if name in watched}
        if self.mod_type == UPDATE and not new_values:
            return None
        return ExpectedMod(self.table, self.mod_type, dict(self.keys), new_values, old_values)


@dataclass(frozen=True)
class CommittedTransaction:
    """One committed transaction: its position in the history, commit timestamp and mods."""

    index: int
    commit_timestamp: datetime
    mods: tuple[ExpectedMod, ...]


@dataclass(frozen=True)
class PartitionEvent:
    """A split or merge the workload asked the emulator for, at emulator time ``at``."""

    kind: str  # "split" or "merge"
    at: datetime


@dataclass(frozen=True)
class WorkloadSummary:
    """What one ``run``/``run_bulk`` call wrote."""

    changes: int
    transactions: int
    splits: int
    merges: int
    first_commit: datetime | None
    last_commit: datetime | None
    elapsed_seconds: float


class EmulatorControl(Protocol):
    """The parts of the emulator a workload drives: its clock and partition splits/merges."""

    clock: Any

    def split_partition(self, database_path: str) -> Any: ...

    def merge_partitions(self, database_path: str) -> Any: ...


State = dict[str, dict[tuple[Any, ...], dict[str, Any]]]


def apply_mod(state: State, mod: ExpectedMod) -> None:
    """Apply one mod to a ``{table: {key: row}}`` state (rows hold key and non-key columns).

    An INSERT of an existing key replaces the row: Spanner reports a row that a transaction replaced,
    or deleted and wrote again, as an INSERT of its new values.
    """
    rows = state.setdefault(mod.table, {})
    key = mod.key
    if mod.mod_type == INSERT:
        rows[key] = {**mod.keys, **mod.new_values}
    elif mod.mod_type == UPDATE:
        if key not in rows:
            raise ValueError(f"UPDATE of missing key {key} in {mod.table}")
        rows[key].update(mod.new_values)
    elif mod.mod_type == DELETE:
        if rows.pop(key, None) is None:
            raise ValueError(f"DELETE of missing key {key} in {mod.table}")
    else:
        raise ValueError(f"unknown mod type {mod.mod_type!r}")


class _History:
    """Committed transactions in commit order with a timestamp index."""

    def __init__(self) -> None:
        self.transactions: list[CommittedTransaction] = []
        self._micros: list[int] = []

    def append(self, transaction: CommittedTransaction) -> None:
        micros = to_micros(transaction.commit_timestamp)
        if self._micros and micros <= self._micros[-1]:
            raise AssertionError(
                f"commit timestamp {format_timestamp(transaction.commit_timestamp)} is not after the "
                f"previous commit {format_timestamp(self.transactions[-1].commit_timestamp)}"
            )
        self.transactions.append(transaction)
        self._micros.append(micros)

    def between(self, start: datetime, end: datetime) -> list[CommittedTransaction]:
        low = bisect_left(self._micros, to_micros(start))
        high = bisect_left(self._micros, to_micros(end))
        return self.transactions[low:high]
