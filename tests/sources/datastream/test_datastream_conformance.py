"""The source conformance checks (tests/support/source_conformance.py) for the Datastream source, over
each database's stream written as Datastream lays it out (local folder, arrival = modification time).

The adapter's history of a window is the events of the files that arrived in it, each key's in the
order Datastream's ordering rule gives them: log events in the source's log order, backfill events
(a consistent read, "consumed in any order") below every log event of their row. The stream has no
re-deliveries here (a re-delivered event shares its sequence number with the first, which the merge
keeps once); the pipeline tests cover them. A window whose files may still be arriving is the one the
source refuses.
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

from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.sources.datastream.hook import DatastreamHook
from airflow_provider_cdc.testing.datastream.compare import TABLES, comparable
from airflow_provider_cdc.testing.datastream.scenario import DatastreamScenario
from airflow_provider_cdc.testing.datastream.writer import LocalFolderSink

PIPELINE = "conformance"
#: The window the checks read: the second, where the backfill, CDC and the schema change meet.
SEEDED_WINDOW = 1


def _neutral(table: str, key: dict[str, Any], operation: str, values: dict[str, Any]) -> dict[str, Any]:
    kinds = {column.name: column.kind for column in TABLES[table].columns}
    return {
        "table": table,
        "key": {name: comparable(kinds[name], value) for name, value in sorted(key.items())},
        "operation": operation,
        "values": {name: comparable(kinds[name], value) for name, value in sorted(values.items())},
    }


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    """A staged row's key and image as Python values (its column types decode them)."""
    from airflow_provider_cdc.core.types import decode_value, parse_logical_type

    types = {
        c["name"]: parse_logical_type(c["type"], c["name"]) for c in json.loads(row["column_types_json"])
    }
    key = {
        name: decode_value(types[name], value, name) for name, value in json.loads(row["keys_json"]).items()
    }
    values = {
        name: decode_value(types[name], value, name) for name, value in json.loads(row["after_json"]).items()
    }
    neutral = _neutral(row["table_name"], key, row["operation"], values)
    return {**neutral, "change_sequence_number": row["change_sequence_number"]}


@dataclass
class DatastreamSource:
    """The conformance adapter of one database's stream."""

    name: str
    hook: DatastreamHook
    root: Path
    lease_clock: ManualClock
    scenario: DatastreamScenario
    now: list[datetime]

    def window(self) -> Window:
        return Window(*self.scenario.windows[SEEDED_WINDOW])

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
        index = self.scenario.windows.index((window.start, window.end))
        events = [event for planned in self.scenario.files_for(index) for event in planned.events]
        # Datastream's ordering rule: per row, backfill events below log events, each in source order.
        events.sort(key=lambda event: (not event.is_backfill, event.ordinal))
        changes = []
        for event in events:
            spec = TABLES[event.object_name]
            key = dict(zip(spec.key, event.key, strict=True))
            if event.removes_key:
                changes.append(_neutral(event.object_name, key, "DELETE", {}))
            else:
                values = {name: value for name, value in event.payload.items() if name not in spec.key}
                changes.append(_neutral(event.object_name, key, "INSERT", values))
        return changes

    def retention_error(self) -> Window | None:
        """A window that ended 30 s ago: its files may still be arriving (the margin is 3 minutes)."""
        end = self.now[0] - timedelta(seconds=30)
        return Window(end - timedelta(minutes=1), end)


@pytest.fixture(params=["mysql", "oracle", "postgresql", "sqlserver"])
def source(
    request: pytest.FixtureRequest, sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SourceUnderTest]:
    monkeypatch.setenv("AIRFLOW_CONN_CDC_METASTORE_DEFAULT", metastore_connection(sqlite_url))
    database = request.param
    file_format = "avro" if database in ("mysql", "postgresql") else "jsonl"
    scenario = DatastreamScenario(database, file_format, seed=31, windows=3, duplicate_fraction=0.0)
    for index in range(len(scenario.windows)):
        scenario.write_window(index, LocalFolderSink(str(tmp_path / "stream")))
    clock = ManualClock()
    store = Metastore(sqlite_url, clock=clock)
    store.ensure_schema()

    class Clocked(DatastreamHook):
        @property
        def metastore(self) -> Metastore:
            return store

    now = [scenario.windows[-1][1] + timedelta(hours=1)]
    settings = {"column_types": scenario.jsonl_column_types()} if file_format == "jsonl" else {}
    hook = Clocked(str(tmp_path / "stream"), "shop", settings=settings, clock=lambda: now[0])
    yield DatastreamSource(
        f"datastream {database} {file_format}", hook, tmp_path / "staging", clock, scenario, now
    )
    store.dispose()


def test_a_window_read_fresh_and_after_a_killed_reader_stages_the_history(source: SourceUnderTest) -> None:
    check_reads_stage_the_history(source)


def test_sequence_numbers_order_each_keys_changes_as_committed(source: SourceUnderTest) -> None:
    check_sequence_numbers_order_each_key(source)


def test_only_recorded_claims_are_read(source: SourceUnderTest) -> None:
    check_only_recorded_claims_are_read(source)


def test_a_window_still_arriving_is_refused_naming_it(source: SourceUnderTest) -> None:
    error = check_a_refused_window_is_named_and_loses_nothing(source)
    assert type(error).__name__ == "WindowNotArrivedError", error
