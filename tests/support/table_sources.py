"""Table sources against an emulator: hooks, recorded staged rows, a reference apply, the database."""

from __future__ import annotations

import json
import random
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_cdc.core.collapse import collapse_window
from airflow_provider_cdc.core.values import decode_value
from airflow_provider_cdc.core.window import Window

PROJECT, INSTANCE = "test-project", "test-instance"


def now() -> datetime:
    return datetime.now(timezone.utc)


def sleep_until(moment: datetime) -> None:
    delay = (moment - now()).total_seconds()
    if delay > 0:
        time.sleep(delay)


def metastore_connection(url: str) -> str:
    """``AIRFLOW_CONN_CDC_METASTORE_DEFAULT`` for a metastore URL."""
    return json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": url}})


def point_airflow_at(monkeypatch: pytest.MonkeyPatch, emulator_host: str, metastore_url: str) -> str:
    """Airflow's Spanner hooks use the emulator at ``emulator_host`` and the metastore at ``metastore_url``
    (``SPANNER_EMULATOR_HOST``, ``AIRFLOW_CONN_CDC_METASTORE_DEFAULT``); returns the metastore URL."""
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", emulator_host)
    monkeypatch.setenv("AIRFLOW_CONN_CDC_METASTORE_DEFAULT", metastore_connection(metastore_url))
    return metastore_url


def table_hook(database: Any, source: str = "Snapshot") -> Any:
    from airflow_provider_cdc.sources.spanner.table_hook import SpannerTableHook

    return SpannerTableHook(
        project_id=PROJECT, instance_id=INSTANCE, database_id=database.database_id, source=source
    )


def staged_rows(hook: Any, root: Path, window: Window, folder: str | None = None) -> list[dict]:
    """The window's staged rows of the claims the metastore recorded (what the merge reads)."""
    from airflow_provider_cdc.staging.reading import read_staged_changes

    claims = {
        p.token: p.claim_id
        for p in hook.metastore.window_partitions(hook.stream_key, window.start, window.end)
    }
    assert all(claims.values()), "a partition of the window was not read"
    return read_staged_changes(str(root), folder or hook.stream, window, claims=claims).to_table().to_pylist()


def column_types(database: Any, table: str) -> dict[str, Any]:
    from airflow_provider_cdc.sources.spanner.table_schema import table_schema

    with database.snapshot(multi_use=True) as snapshot:
        return {c.name: c.type for c in table_schema(snapshot, table).columns}


def decoded(types: dict[str, Any], values: dict[str, Any]) -> tuple:
    return tuple(sorted((name, decode_value(types[name], value, name)) for name, value in values.items()))


def apply_window(state: dict[str, dict], rows: list[dict], types: dict[str, dict]) -> None:
    """Apply a window's collapsed changes to ``state`` (table → key → row), as a target does."""
    for table, changes in collapse_window(rows).items():
        target = state.setdefault(table, {})
        for change in changes:
            key = decoded(types[table], json.loads(change["_keys_json"]))
            if change["_CHANGE_TYPE"] == "DELETE":
                target.pop(key, None)
                continue
            values = dict(decoded(types[table], json.loads(change["_values_json"])))
            target[key] = values if change["_full_image"] else {**target.get(key, {}), **values}


def database_tables(database: Any, types: dict[str, dict], at: datetime) -> dict[str, dict]:
    """Every table's rows at ``at``, as :func:`apply_window` keeps them."""
    from airflow_provider_cdc.sources.spanner.table_schema import table_schema
    from airflow_provider_cdc.sources.spanner.wire_values import wire_rows

    tables: dict[str, dict] = {}
    with database.snapshot(read_timestamp=at, multi_use=True) as snapshot:
        for table in types:
            schema = table_schema(snapshot, table)
            names = schema.column_names
            sql = f"SELECT {', '.join(names)} FROM {table}"
            rows = {}
            for row in wire_rows(snapshot.execute_sql(sql, lazy_decode=True)):
                values = dict(zip(names, row, strict=True))
                key = decoded(types[table], {k: values.pop(k) for k in schema.key})
                rows[key] = dict(decoded(types[table], values))
            tables[table] = rows
    return {name: rows for name, rows in tables.items() if rows}


SNAPSHOT_DDL = [
    "CREATE TABLE Accounts (Id INT64 NOT NULL, Name STRING(MAX), Balance INT64, Active BOOL, Score FLOAT64) "
    "PRIMARY KEY (Id)",
    "CREATE TABLE Notes (Owner INT64 NOT NULL, Seq INT64 NOT NULL, Text STRING(MAX)) "
    "PRIMARY KEY (Owner, Seq)",
    "CREATE CHANGE STREAM Everything FOR ALL",
]


class Writes:
    """Random inserts, partial updates, deletes and re-inserts of Accounts and Notes."""

    def __init__(self, database: Any, seed: int) -> None:
        self.database, self.rng = database, random.Random(seed)
        self.accounts: set[int] = set()
        self.gone: set[int] = set()
        self.notes: set[tuple[int, int]] = set()
        self.next_id = 1

    def insert_accounts(self, count: int) -> None:
        with self.database.batch() as batch:
            for _ in range(count):
                self._insert(batch, self.next_id)
                self.next_id += 1

    def _insert(self, batch: Any, key: int) -> None:
        rng = self.rng
        batch.insert(
            "Accounts",
            ["Id", "Name", "Balance", "Active", "Score"],
            [
                (
                    key,
                    f"name-{rng.randint(0, 999)}",
                    rng.randint(0, 10**6),
                    rng.random() < 0.5,
                    round(rng.random() * 100, 3),
                )
            ],
        )
        self.accounts.add(key)
        self.gone.discard(key)

    def step(self) -> None:
        rng, alive = self.rng, sorted(self.accounts)
        with self.database.batch() as batch:
            action = rng.random()
            if action < 0.35 and alive:  # a partial update: one column
                batch.update("Accounts", ["Id", "Balance"], [(rng.choice(alive), rng.randint(0, 10**6))])
            elif action < 0.5 and alive:
                batch.update("Accounts", ["Id", "Name", "Active"], [(rng.choice(alive), "renamed", False)])
            elif action < 0.65 and alive:
                key = rng.choice(alive)
                batch.delete("Accounts", keyset([[key]]))
                self.accounts.discard(key)
                self.gone.add(key)
            elif action < 0.75 and self.gone:
                self._insert(batch, rng.choice(sorted(self.gone)))
            elif action < 0.9:
                owner, seq = rng.randint(1, 5), rng.randint(1, 8)
                if (owner, seq) in self.notes:
                    batch.delete("Notes", keyset([[owner, seq]]))
                    self.notes.discard((owner, seq))
                else:
                    batch.insert(
                        "Notes", ["Owner", "Seq", "Text"], [(owner, seq, f"note {rng.random():.4f}")]
                    )
                    self.notes.add((owner, seq))
            else:
                self._insert(batch, self.next_id)
                self.next_id += 1


def seeded_writes(
    database: Any, clock: Any, *, seed: int, accounts: int, steps: int
) -> tuple[Writes, datetime]:
    """``accounts`` accounts inserted a second on the emulator's ``clock``, then ``steps`` random writes
    10 ms apart; returns the writes and T, the first whole second at least 2 s after them."""
    clock.advance(timedelta(seconds=1))
    writes = Writes(database, seed=seed)
    writes.insert_accounts(accounts)
    for _ in range(steps):
        writes.step()
        clock.advance(timedelta(milliseconds=10))
    return writes, (clock.now() + timedelta(seconds=2)).replace(microsecond=0)


def write_across(writes: Writes, clock: Any, start: datetime, end: datetime, step: timedelta) -> None:
    """Random writes ``step`` apart on the emulator's ``clock`` from ``start`` until 100 ms before ``end``;
    the clock is then a second past ``end``, so every window up to it is complete."""
    clock.set(start)
    while clock.now() < end - timedelta(milliseconds=100):
        writes.step()
        clock.advance(step)
    clock.set(end + timedelta(seconds=1))


def keyset(keys: list[list[int]]) -> Any:
    from google.cloud.spanner_v1 import KeySet

    return KeySet(keys=keys)
