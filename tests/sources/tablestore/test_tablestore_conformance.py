"""The source conformance checks (tests/support/source_conformance.py) for the Table Store stream source,
over the project's Table Store emulator: a seeded workload of full puts, partial updates (columns set and
deleted), deletes and re-puts across a shard split and a merge, each write logged as the history.

The adapter's history of a window is the writes whose time falls in it, in the order the emulator
applied them; a staged change is compared by its key, operation and image (a partial update's image
holds the columns it set, and its deleted columns as nulls). A window that ended less than the settle
margin ago is the one the source refuses.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support.clock import ManualClock
from support.source_conformance import (
    EpochSource,
    SourceConformanceChecks,
    SourceUnderTest,
    clocked_metastore,
    on_metastore,
)
from support.table_sources import metastore_connection

from airflow_provider_cdc.core.timestamps import from_micros, to_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.tablestore.client import TablestoreStreamClient
from airflow_provider_cdc.sources.tablestore.hook import TablestoreStreamHook
from airflow_provider_cdc.testing.tablestore_emulator import ManualClock as EmulatorClock
from airflow_provider_cdc.testing.tablestore_emulator import TablestoreEmulator
from airflow_provider_cdc.testing.tablestore_emulator.workload import (
    COLUMN_TYPES,
    TABLE,
    TablestoreWorkload,
)

START = datetime.fromisoformat("2026-03-01T12:00:00+00:00")
WINDOW_SECONDS = 60
SEEDED_WINDOW = 1  # the window with the split


class LoggingEmulator:
    """The emulator, logging every write (time, key, operation, image) as the committed history."""

    def __init__(self, emulator: TablestoreEmulator) -> None:
        self.emulator = emulator
        self.log: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.emulator, name)

    def _logged(self, key: dict[str, Any], operation: str, values: dict[str, Any]) -> None:
        self.log.append(
            {
                "at": self.emulator.clock(),
                "table": TABLE,
                "key": dict(key),
                "operation": operation,
                "values": values,
            }
        )

    def put_row(self, table: str, key: dict[str, Any], columns: dict[str, Any]) -> None:
        self.emulator.put_row(table, key, columns)
        self._logged(key, "INSERT", dict(columns))

    def update_row(self, table: str, key: dict[str, Any], *, put: Any = None, delete_all: Any = ()) -> None:
        self.emulator.update_row(table, key, put=put, delete_all=delete_all)
        self._logged(key, "UPDATE", {**dict(put or {}), **dict.fromkeys(delete_all)})

    def delete_row(self, table: str, key: dict[str, Any]) -> None:
        self.emulator.delete_row(table, key)
        self._logged(key, "DELETE", {})


@dataclass
class TablestoreSource(EpochSource):
    logged: LoggingEmulator
    workload: TablestoreWorkload

    def window(self) -> Window:
        return Window(*self.workload.window(SEEDED_WINDOW))

    def history(self, window: Window) -> list[dict[str, Any]]:
        start, end = to_micros(window.start), to_micros(window.end)
        return [
            {key: value for key, value in change.items() if key != "at"}
            for change in self.logged.log
            if start <= change["at"] < end
        ]

    def retention_error(self) -> Window | None:
        """A window that ended a minute before the emulator's clock (the settle margin is 5 minutes)."""
        end = from_micros(self.logged.emulator.clock()) - timedelta(minutes=1)
        return Window(end - timedelta(minutes=1), end)


@pytest.fixture
def source(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SourceUnderTest]:
    monkeypatch.setenv("AIRFLOW_CONN_CDC_METASTORE_DEFAULT", metastore_connection(sqlite_url))
    with TablestoreEmulator(EmulatorClock(to_micros(START) - 1_000_000), shards=2, seed=3) as emulator:
        logged = LoggingEmulator(emulator)
        workload = TablestoreWorkload(logged, START, WINDOW_SECONDS, changes_per_window=60, seed=9)  # type: ignore[arg-type]
        workload.create()
        for index in range(3):
            workload.write_window(index)
        emulator.clock.advance(600)  # every window settled
        now = lambda: from_micros(emulator.clock())  # noqa: E731
        client = TablestoreStreamClient(
            emulator.endpoint, emulator.instance, "test-key", "test-secret", sleep=lambda _: None, clock=now
        )
        lease_clock = ManualClock()
        store = clocked_metastore(sqlite_url, lease_clock)
        hook = on_metastore(TablestoreStreamHook, store)(
            TABLE, client=client, clock=now, column_types=COLUMN_TYPES
        )
        yield TablestoreSource("tablestore", hook, tmp_path / "staging", lease_clock, logged, workload)
        store.dispose()


class TestTablestoreConformance(SourceConformanceChecks):
    refused_with = "WindowNotSettledError"  # it ended less than the settle margin ago
