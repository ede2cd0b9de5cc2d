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

from collections.abc import Iterator, Mapping
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
    typed_change,
)
from support.table_sources import metastore_connection

from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.datastream.hook import DatastreamHook
from airflow_provider_cdc.testing.datastream.compare import TABLES, comparable
from airflow_provider_cdc.testing.datastream.scenario import DatastreamScenario
from airflow_provider_cdc.testing.datastream.writer import LocalFolderSink

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


@dataclass
class DatastreamSource(EpochSource):
    """The conformance adapter of one database's stream."""

    scenario: DatastreamScenario
    now: list[datetime]

    def window(self) -> Window:
        return Window(*self.scenario.windows[SEEDED_WINDOW])

    def change(self, row: Mapping[str, Any]) -> dict[str, Any]:
        change = typed_change(row)
        neutral = _neutral(change["table"], change["key"], change["operation"], change["values"])
        return {**neutral, "change_sequence_number": change["change_sequence_number"]}

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
    store = clocked_metastore(sqlite_url, clock)
    now = [scenario.windows[-1][1] + timedelta(hours=1)]
    settings = {"column_types": scenario.jsonl_column_types()} if file_format == "jsonl" else {}
    hook_class = on_metastore(DatastreamHook, store)
    hook = hook_class(str(tmp_path / "stream"), "shop", settings=settings, clock=lambda: now[0])
    yield DatastreamSource(
        f"datastream {database} {file_format}", hook, tmp_path / "staging", clock, scenario, now
    )
    store.dispose()


class TestDatastreamConformance(SourceConformanceChecks):
    refused_with = "WindowNotArrivedError"  # its files may still be arriving
