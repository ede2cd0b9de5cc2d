"""The source conformance checks (tests/support/source_conformance.py) for the Table Store stream source,
over the project's Table Store emulator: a seeded workload of full puts, partial updates (columns set and
deleted), deletes and re-puts across a shard split and a merge, each write logged as the history.

The adapter's history of a window is the writes whose time falls in it, in the order the emulator
applied them; a staged change is compared by its key, operation and image (a partial update's image
holds the columns it set, and its deleted columns as nulls). A window that ended less than the settle
margin ago is the one the source refuses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from support.clock import ManualClock
from support.source_conformance import (
    Opened,
    SourceUnderTest,
    check_a_refused_window_is_named_and_loses_nothing,
    check_only_recorded_claims_are_read,
    check_reads_stage_the_history,
    check_sequence_numbers_order_each_key,
)
from support.table_sources import metastore_connection

from airflow_provider_cdc.core.timestamps import from_micros, to_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.sources.tablestore.client import TablestoreStreamClient
from airflow_provider_cdc.sources.tablestore.hook import TablestoreStreamHook
from airflow_provider_cdc.testing.tablestore_emulator import ManualClock as EmulatorClock
from airflow_provider_cdc.testing.tablestore_emulator import TablestoreEmulator
from airflow_provider_cdc.testing.tablestore_emulator.workload import (
    COLUMN_TYPES,
    TABLE,
    TablestoreWorkload,
)

PIPELINE = "conformance"
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


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    from airflow_provider_cdc.core.types import decode_value, parse_logical_type

    types = {
        c["name"]: parse_logical_type(c["type"], c["name"]) for c in json.loads(row["column_types_json"])
    }

    def decode(text: str) -> dict[str, Any]:
        return {name: decode_value(types[name], value, name) for name, value in json.loads(text).items()}

    return {
        "table": row["table_name"],
        "key": decode(row["keys_json"]),
        "operation": row["operation"],
        "values": decode(row["after_json"]),
        "change_sequence_number": row["change_sequence_number"],
    }


@dataclass
class TablestoreSource:
    name: str
    hook: TablestoreStreamHook
    root: Path
    lease_clock: ManualClock
    logged: LoggingEmulator
    workload: TablestoreWorkload

    def window(self) -> Window:
        return Window(*self.workload.window(SEEDED_WINDOW))

    def open(self, window: Window) -> Opened:
        epoch, units = self.hook.open_window_epoch(PIPELINE, window, str(self.root), "opener")
        return Opened(epoch, units)

    def read(self, window: Window, owner: str, **reader_kwargs: Any) -> Any:
        return self.hook.read_window(window, str(self.root), owner, **reader_kwargs)

    def staging_location(self, window: Window) -> Path:
        return self.root / self.hook.staging_folder / window.window_id

    def staged(self, window: Window) -> list[dict[str, Any]]:
        from airflow_provider_cdc.hooks.pipeline import CdcPipelineHook
        from airflow_provider_cdc.merge.input import check_staged_units

        units = CdcPipelineHook().merge_input(self.hook.source_key, window).units
        checked = check_staged_units(str(self.staging_location(window)), window, units)
        return [
            _decoded(row)
            for unit in checked
            for path in unit.files
            for row in pq.read_table(path).to_pylist()
        ]

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
        store = Metastore(sqlite_url, clock=lease_clock)
        store.ensure_schema()

        class Clocked(TablestoreStreamHook):
            @property
            def metastore(self) -> Metastore:
                return store

        hook = Clocked(TABLE, client=client, clock=now, column_types=COLUMN_TYPES)
        yield TablestoreSource("tablestore", hook, tmp_path / "staging", lease_clock, logged, workload)
        store.dispose()


def test_a_window_read_fresh_and_after_a_killed_reader_stages_the_history(source: SourceUnderTest) -> None:
    check_reads_stage_the_history(source)


def test_sequence_numbers_order_each_keys_changes_as_committed(source: SourceUnderTest) -> None:
    check_sequence_numbers_order_each_key(source)


def test_only_recorded_claims_are_read(source: SourceUnderTest) -> None:
    check_only_recorded_claims_are_read(source)


def test_a_window_too_recent_is_refused_naming_it(source: SourceUnderTest) -> None:
    error = check_a_refused_window_is_named_and_loses_nothing(source)
    assert type(error).__name__ == "WindowNotSettledError", error
