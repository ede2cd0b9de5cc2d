"""The source conformance checks (tests/support/source_conformance.py) for the three Spanner sources
against the project's emulator: change streams, snapshots and commit-timestamp tables.

Each source is driven through an adapter of its own (the only code here that knows the hooks and the
staged-row columns). Claims and leases run on a :class:`ManualClock` metastore, so a dead reader's
lease lapses when the rescuing reader's waits move the clock, never on the machine's time. What a
source staged is read as the merge reads it: the units the metastore recorded, checked against the
staging (:func:`check_staged_units`), their recorded files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support.clock import ManualClock
from support.source_conformance import (
    PIPELINE,
    Opened,
    SourceConformanceChecks,
    SourceUnderTest,
    clocked_metastore,
    merge_input_rows,
    on_metastore,
)
from support.table_sources import INSTANCE, PROJECT

from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.testing.workload import (
    ALL_CHANGES_STREAM,
    TABLES_BY_NAME,
    WORKLOAD_TABLES,
    Workload,
    schema_ddl,
)

WINDOW = timedelta(seconds=10)
Decode = Callable[[str, dict[str, Any]], dict[str, Any]]


# ----- what every adapter shares: the metastore on a clock, and the staging as the merge reads it ----
def _clocked_hook(hook_class: type, url: str, database: Any, **arguments: Any) -> tuple[Any, ManualClock]:
    """A hook of ``hook_class`` on ``database`` whose metastore (at ``url``) runs its leases on a
    :class:`ManualClock` of its own; the hook and that clock."""
    clock = ManualClock()
    hook = on_metastore(hook_class, clocked_metastore(url, clock))
    return hook(
        project_id=PROJECT, instance_id=INSTANCE, database_id=database.database_id, **arguments
    ), clock


def _neutral(row: dict[str, Any], decode: Decode) -> dict[str, Any]:
    """A staged row as a neutral change."""
    table = row["table_name"]
    return {
        "table": table,
        "key": decode(table, json.loads(row["keys_json"])),
        "operation": row["operation"],
        "change_sequence_number": row["change_sequence_number"],
        "values": decode(table, json.loads(row["after_json"])),
    }


def _merge_input(source_key: str, location: Path, window: Window, decode: Decode) -> list[dict[str, Any]]:
    """The window's staged changes the merge reads: each recorded unit's recorded files."""
    return [_neutral(row, decode) for row in merge_input_rows(source_key, location, window)]


def _workload_values(table: str, values: dict[str, Any]) -> dict[str, Any]:
    return TABLES_BY_NAME[table].decode_values(values)


def _change(table: str, key: dict, operation: str, values: dict) -> dict[str, Any]:
    return {"table": table, "key": key, "operation": operation, "values": values}


@dataclass
class _Source:
    """What the adapters share: a hook on a clocked metastore, a staging root, a decoder."""

    name: str
    hook: Any
    root: Path
    lease_clock: ManualClock
    seeded: Window
    decode: Decode

    def window(self) -> Window:
        return self.seeded

    def read(self, window: Window, owner: str, **reader_kwargs: Any) -> Any:
        return self.hook.read_window(window, str(self.root), owner, **reader_kwargs)

    def staged(self, window: Window) -> list[dict[str, Any]]:
        return _merge_input(self.hook.stream_key, self.staging_location(window), window, self.decode)

    def staging_location(self, window: Window) -> Path:
        return self.root / self.hook.stream / window.window_id

    def open_tables(self, window: Window, mode: str, **arguments: Any) -> Opened:
        """Opens the window of a table source in ``mode``: its epoch and the units it recorded."""
        summary = self.hook.open_window(PIPELINE, window, str(self.root), mode=mode, **arguments)
        return Opened(summary["epoch"], self.units(window))

    def units(self, window: Window) -> list[str]:
        """The units the window's opening recorded."""
        items = self.hook.metastore.window_partitions(self.hook.stream_key, window.start, window.end)
        return [item.token for item in items]


# ----- the workload database: a snapshot at T, then the change stream from T ---------------------------
@dataclass(frozen=True)
class WorkloadHistory:
    database: Any
    workload: Workload
    first: datetime  # T: the snapshot is read at T - 1µs, the stream window is [T, T + WINDOW)
    emulator: Any


@pytest.fixture(scope="module")
def workload_history(spanner_emulator: Any, new_spanner_database: Any) -> WorkloadHistory:
    """Seeded changes before T (the snapshot's) and in [T, T + 10s) (the stream's, with splits); keys are
    few, so most change several times in the window."""
    database = new_spanner_database(schema_ddl(tables=WORKLOAD_TABLES), prefix="conform")
    clock = spanner_emulator.clock
    clock.advance(timedelta(seconds=1))
    workload = Workload(database, spanner_emulator, seed=23, max_rows_per_table=8, max_mods_per_transaction=4)
    workload.run(changes=60, step=timedelta(milliseconds=40))
    first = (clock.now() + timedelta(seconds=1)).replace(microsecond=0)
    clock.set(first)
    workload.run(changes=150, step=timedelta(milliseconds=40), split_every=50)
    assert workload.transactions[-1].commit_timestamp < first + WINDOW, "the workload outgrew the window"
    assert workload.splits, "the stream window holds no split"
    clock.set(first + WINDOW + timedelta(seconds=1))
    return WorkloadHistory(database, workload, first, spanner_emulator)


@dataclass
class ChangeStreamSource(_Source):
    """A change stream watching every table (retention 7 days)."""

    history_of: WorkloadHistory

    def open(self, window: Window) -> Opened:
        epoch, tokens = self.hook.open_window_epoch(PIPELINE, window, str(self.root), "opener")
        return Opened(epoch, tokens)

    def history(self, window: Window) -> list[dict[str, Any]]:
        return [
            _change(m.table, m.keys, m.mod_type, m.new_values)
            for t in self.history_of.workload.history_between(window.start, window.end)
            for m in t.mods
        ]

    def retention_error(self) -> Window | None:
        start = (self.history_of.emulator.clock.now() - timedelta(days=8)).replace(microsecond=0)
        return Window(start, start + WINDOW)  # the stream keeps 7 days


@dataclass
class SnapshotSource(_Source):
    """A snapshot of every table the change stream watches, at T - 1µs."""

    history_of: WorkloadHistory

    def open(self, window: Window) -> Opened:
        return self.open_tables(window, "snapshot", change_stream=ALL_CHANGES_STREAM)

    def history(self, window: Window) -> list[dict[str, Any]]:
        changes = []
        for table, rows in self.history_of.workload.state_at(window.start).items():
            keys = [c.name for c in TABLES_BY_NAME[table].key_columns]
            for row in rows.values():
                key = {name: row[name] for name in keys}
                changes.append(_change(table, key, "INSERT", {n: v for n, v in row.items() if n not in keys}))
        return changes

    def retention_error(self) -> Window | None:
        from airflow_provider_cdc.sources.spanner.snapshot import snapshot_window

        # Spanner keeps row versions for an hour unless the database says otherwise.
        now = self.history_of.emulator.clock.now()
        return snapshot_window((now - timedelta(hours=2)).replace(microsecond=0))


# ----- commit-timestamp tables: a changelog of account entries and the accounts' balances ------------
COMMIT_TIMESTAMP_DDL = [
    "CREATE TABLE AccountLog (AccountId INT64 NOT NULL, "
    "At TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp=true), Amount INT64, Note STRING(MAX)) "
    "PRIMARY KEY (AccountId, At)",
    "CREATE TABLE Balances (AccountId INT64 NOT NULL, Balance INT64, Closed BOOL, "
    "UpdatedAt TIMESTAMP OPTIONS (allow_commit_timestamp=true)) PRIMARY KEY (AccountId)",
]
COMMIT_TIMESTAMP_TABLES = [
    {
        "table": "AccountLog",
        "timestamp_column": "At",
        "entity_key": ["AccountId"],
        "target_table": "Accounts",
    },
    {"table": "Balances", "timestamp_column": "UpdatedAt", "soft_delete_column": "Closed"},
]


@dataclass(frozen=True)
class Write:
    """One committed write: a changelog entry, or a balance (closed or not)."""

    table: str
    account: int
    at: datetime
    values: dict[str, Any]


@dataclass(frozen=True)
class CommitTimestampHistory:
    database: Any
    writes: list[Write]  # in commit order
    window: Window
    emulator: Any


def _commit_timestamp_writes(database: Any, emulator: Any, seed: int, transactions: int) -> list[Write]:
    """Seeded transactions: changelog entries of one or two accounts, and their balances (some closed)."""
    from google.cloud.spanner_v1 import COMMIT_TIMESTAMP

    rng, writes = random.Random(seed), []
    for _ in range(transactions):
        emulator.clock.advance(timedelta(milliseconds=rng.randint(20, 120)))
        accounts = rng.sample(range(1, 7), rng.randint(1, 2))
        entries = [(a, rng.randint(-500, 500), f"entry {rng.randint(0, 99)}") for a in accounts]
        balances = [(a, rng.randint(0, 10_000), rng.random() < 0.2) for a in accounts if rng.random() < 0.6]
        with database.batch() as batch:
            batch.insert(
                "AccountLog",
                ["AccountId", "At", "Amount", "Note"],
                [(a, COMMIT_TIMESTAMP, amount, note) for a, amount, note in entries],
            )
            if balances:
                rows = [(a, balance, closed, COMMIT_TIMESTAMP) for a, balance, closed in balances]
                batch.insert_or_update("Balances", ["AccountId", "Balance", "Closed", "UpdatedAt"], rows)
        at = batch.committed
        writes += [Write("AccountLog", a, at, {"Amount": n, "Note": note}) for a, n, note in entries]
        writes += [Write("Balances", a, at, {"Balance": b, "Closed": c}) for a, b, c in balances]
    return writes


@pytest.fixture(scope="module")
def commit_timestamp_history(spanner_emulator: Any, new_spanner_database: Any) -> CommitTimestampHistory:
    database = new_spanner_database(COMMIT_TIMESTAMP_DDL, prefix="conformct")
    clock = spanner_emulator.clock
    start = (clock.now() + timedelta(seconds=1)).replace(microsecond=0)
    clock.set(start)
    writes = _commit_timestamp_writes(database, spanner_emulator, seed=5, transactions=40)
    window = Window(start, start + WINDOW)
    assert writes[-1].at < window.end, "the writes outgrew the window"
    clock.set(window.end + timedelta(seconds=1))
    return CommitTimestampHistory(database, writes, window, spanner_emulator)


def _typed_values(types_of: dict[str, dict[str, Any]]) -> Decode:
    from airflow_provider_cdc.core.values import decode_value

    def decode(table: str, values: dict[str, Any]) -> dict[str, Any]:
        return {name: decode_value(types_of[table][name], value, name) for name, value in values.items()}

    return decode


@dataclass
class CommitTimestampSource(_Source):
    """A changelog table (each entry a change of its account) and a table with a soft-delete column."""

    history_of: CommitTimestampHistory

    def open(self, window: Window) -> Opened:
        return self.open_tables(window, "commit_timestamp", tables=COMMIT_TIMESTAMP_TABLES)

    def history(self, window: Window) -> list[dict[str, Any]]:
        """The changelog's entries in the window; of each balance, its state at the window end when it
        was last written in the window (deletes: closed)."""
        changes, last_balance = [], {}
        for write in self.history_of.writes:
            if write.table == "Balances" and write.at < window.end:
                last_balance[write.account] = write
            if write.table == "AccountLog" and window.start <= write.at < window.end:
                changes.append(
                    (
                        write.at,
                        _change(
                            "Accounts",
                            {"AccountId": write.account},
                            "INSERT",
                            {"At": write.at, **write.values},
                        ),
                    )
                )
        for write in last_balance.values():
            if window.start <= write.at:
                operation = "DELETE" if write.values["Closed"] else "INSERT"
                values = (
                    {}
                    if write.values["Closed"]
                    else {"Balance": write.values["Balance"], "UpdatedAt": write.at}
                )
                key = {"AccountId": write.account}
                changes.append((write.at, _change("Balances", key, operation, values)))
        return [change for _, change in sorted(changes, key=lambda item: item[0])]

    def retention_error(self) -> Window | None:
        """A window after one read before a row was written into it late (a past commit timestamp)."""
        emulator, database = self.history_of.emulator, self.history_of.database
        start = (emulator.clock.now() + timedelta(seconds=1)).replace(microsecond=0)
        read, late = Window(start, start + WINDOW), Window(start + WINDOW, start + 2 * WINDOW)
        emulator.clock.set(read.end + timedelta(seconds=1))
        self.hook.metastore.record_pipeline(PIPELINE, read.start)  # as the open operator does
        self.open(read)
        self.read(read, "reader-0")
        with database.batch() as batch:
            batch.insert(
                "AccountLog",
                ["AccountId", "At", "Amount", "Note"],
                [(99, read.start + timedelta(seconds=1), 1, "late")],
            )
        emulator.clock.set(late.end + timedelta(seconds=1))
        return late


# ----- the sources -----------------------------------------------------------------------------------
def _change_stream(request: pytest.FixtureRequest, url: str, root: Path) -> SourceUnderTest:
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook

    history: WorkloadHistory = request.getfixturevalue("workload_history")
    hook, clock = _clocked_hook(SpannerChangeStreamHook, url, history.database, stream=ALL_CHANGES_STREAM)
    seeded = Window(history.first, history.first + WINDOW)
    return ChangeStreamSource("change stream", hook, root, clock, seeded, _workload_values, history)


def _snapshot(request: pytest.FixtureRequest, url: str, root: Path) -> SourceUnderTest:
    from airflow_provider_cdc.sources.spanner.snapshot import snapshot_window
    from airflow_provider_cdc.sources.spanner.table_hook import SpannerTableHook

    history: WorkloadHistory = request.getfixturevalue("workload_history")
    hook, clock = _clocked_hook(SpannerTableHook, url, history.database, source="Snapshot")
    seeded = snapshot_window(history.first)
    return SnapshotSource("snapshot", hook, root, clock, seeded, _workload_values, history)


def _commit_timestamp(request: pytest.FixtureRequest, url: str, root: Path) -> SourceUnderTest:
    from support.table_sources import column_types

    from airflow_provider_cdc.sources.spanner.table_hook import SpannerTableHook

    history: CommitTimestampHistory = request.getfixturevalue("commit_timestamp_history")
    hook, clock = _clocked_hook(SpannerTableHook, url, history.database, source="Accounts")
    types = {name: column_types(history.database, name) for name in ("AccountLog", "Balances")}
    decode = _typed_values({"Accounts": types["AccountLog"], "Balances": types["Balances"]})
    name = "commit-timestamp tables"
    return CommitTimestampSource(name, hook, root, clock, history.window, decode, history)


SOURCES = {"change_stream": _change_stream, "snapshot": _snapshot, "commit_timestamp": _commit_timestamp}
#: The error each source refuses its refused window with (past the retention, or late rows).
REFUSALS = {
    "change stream": "RetentionExpiredError",
    "snapshot": "RetentionExpiredError",
    "commit-timestamp tables": "LateRowsError",
}


@pytest.fixture(params=sorted(SOURCES))
def source(
    request: pytest.FixtureRequest, spanner_airflow_env: str, tmp_path: Path
) -> Iterator[SourceUnderTest]:
    made = SOURCES[request.param](request, spanner_airflow_env, tmp_path / "staging")
    yield made
    made.hook.metastore.dispose()


# ----- the checks ------------------------------------------------------------------------------------
class TestSpannerSourceConformance(SourceConformanceChecks):
    def refusal(self, source: SourceUnderTest) -> str:
        return REFUSALS[source.name]


def test_the_seeded_windows_change_keys_more_than_once(
    workload_history: WorkloadHistory, commit_timestamp_history: CommitTimestampHistory
) -> None:
    """The ordering check has something to order: keys changed several times in the stream's and the
    commit-timestamp source's windows."""
    first = workload_history.first
    per_key: dict[tuple, int] = {}
    for transaction in workload_history.workload.history_between(first, first + WINDOW):
        for mod in transaction.mods:
            per_key[(mod.table, mod.key)] = per_key.get((mod.table, mod.key), 0) + 1
    assert sum(1 for count in per_key.values() if count > 1) >= 5
    entries: dict[int, int] = {}
    for write in commit_timestamp_history.writes:
        if write.table == "AccountLog":
            entries[write.account] = entries.get(write.account, 0) + 1
    assert sum(1 for count in entries.values() if count > 1) >= 3
