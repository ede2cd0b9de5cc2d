"""JSONL files read columnar (pyarrow's JSON reader, explicit schema) stage exactly the rows of the
event by event path: every database's scenario, and lines with nulls, deletes, unicode, large
integers, timestamps, decimals and malformed lines (the error names the file and the line)."""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.sources.datastream import files, jsonl_arrow
from airflow_provider_cdc.sources.datastream.file_batches import read_file_change_batches
from airflow_provider_cdc.sources.datastream.files import read_file_change_columns
from airflow_provider_cdc.sources.datastream.names import parse_file_name
from airflow_provider_cdc.sources.datastream.settings import DatastreamSettings
from airflow_provider_cdc.staging.batches import record_batch
from airflow_provider_cdc.testing.datastream.scenario import DatastreamScenario
from airflow_provider_cdc.testing.datastream.writer import LocalFolderSink
from tests.support.datastream_scenarios import SCENARIOS

PATH = "shop_orders/2024/05/09/06/00/" + "a" * 40 + "_mysql-cdc-binlog_1_0_0.jsonl"


def _event_path(data: bytes, path: str, settings: DatastreamSettings) -> tuple[str, Any]:
    try:
        batches = [
            record_batch(dict(zip(STAGED_CHANGE_COLUMNS, columns, strict=True)))
            for columns in read_file_change_columns(io.BytesIO(data), parse_file_name(path), "u", settings)
        ]
    except (ValueError, AttributeError) as exc:
        return "error", f"{type(exc).__name__}: {exc}"
    return "rows", _rows(batches)


def _columnar(data: bytes, path: str, settings: DatastreamSettings) -> tuple[str, Any]:
    try:
        batches = list(read_file_change_batches(io.BytesIO(data), parse_file_name(path), "u", settings))
    except (ValueError, AttributeError) as exc:
        return "error", f"{type(exc).__name__}: {exc}"
    return "rows", _rows(batches)


def _rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return [row for batch in batches for row in batch.to_pylist()]


class _Paths:
    """Counts the chunks and files the event path converted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.chunks = self.files = 0
        chunk, whole = jsonl_arrow._event_batches, jsonl_arrow._event_path

        def event_batches(*args: Any) -> Any:
            self.chunks += 1
            return chunk(*args)

        def event_path(*args: Any) -> Any:
            self.files += 1
            return whole(*args)

        monkeypatch.setattr(jsonl_arrow, "_event_batches", event_batches)
        monkeypatch.setattr(jsonl_arrow, "_event_path", event_path)


@pytest.mark.parametrize("file_format", ["jsonl", "jsonl.gz"])
@SCENARIOS
def test_scenario_files_stage_the_rows_of_the_event_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database: str, options: dict, file_format: str
) -> None:
    scenario = DatastreamScenario(database, file_format, seed=5, windows=2, events_per_window=400, **options)
    for window in range(len(scenario.windows)):
        scenario.write_window(window, LocalFolderSink(tmp_path))
    paths = sorted(
        os.path.relpath(os.path.join(folder, name), tmp_path)
        for folder, _, names in os.walk(tmp_path)
        for name in names
    )
    settings = DatastreamSettings.from_dict({"column_types": scenario.jsonl_column_types()})
    monkeypatch.setattr(files, "BATCH_ROWS", 50)  # chunks that do not line up with files
    monkeypatch.setattr(jsonl_arrow, "_BLOCK_BYTES", 4096)
    taken = _Paths(monkeypatch)
    for path in paths:
        data = (tmp_path / path).read_bytes()
        assert _columnar(data, path, settings) == _event_path(data, path, settings), path
    assert taken.files == 0 and taken.chunks == 0  # every chunk went column-wise


def _event(number: int, payload: Any, **fields: Any) -> dict[str, Any]:
    metadata = {
        "table": "orders",
        "database": "shop",
        "primary_keys": ["id"],
        "log_file": "mysql-bin.000003",
        "log_position": 100 + number,
        "change_type": "INSERT",
        "is_deleted": False,
    }
    metadata.update(fields.pop("metadata", {}))
    event = {
        "uuid": f"u-{number}",
        "read_timestamp": "2024-05-09T06:00:29.913Z",
        "source_timestamp": "2024-05-09T05:59:59",
        "object": "shop_orders",
        "read_method": "mysql-cdc-binlog",
        "stream_name": "projects/p/locations/l/streams/s",
        "schema_key": "k1",
        "sort_keys": [1715234399000, "mysql-bin.000003", 100 + number],
        "source_metadata": metadata,
        "payload": payload,
    }
    event.update(fields)
    return event


def _payload(number: int, **values: Any) -> dict[str, Any]:
    payload = {
        "id": number,
        "name": f"name {number}",
        "amount": 1.5 * number,
        "price": 12.25,
        "paid": number % 2 == 0,
        "updated_at": "2024-05-09T06:00:02.098841",
        "note": None,
    }
    payload.update(values)
    return payload


SETTINGS = DatastreamSettings.from_dict(
    {"column_types": {"shop_orders": {"price": "NUMERIC", "updated_at": "TIMESTAMP", "note": "STRING"}}}
)
EDGES: dict[str, list[Any]] = {
    "nulls": [_payload(9, name=None, amount=None, paid=None, updated_at=None, price=None)],
    "deletes": [
        {"payload": _payload(9), "metadata": {"change_type": "DELETE", "is_deleted": True}},
        {"payload": _payload(9), "metadata": {"change_type": "UPDATE-DELETE"}},
        {"payload": _payload(9), "metadata": {"change_type": "update-insert"}},
        {"payload": _payload(9), "metadata": {"change_type": None, "is_deleted": None}},
        {"payload": _payload(9), "metadata": {"change_type": "MERGE"}},
    ],
    "delete without payload": [{"payload": None, "metadata": {"is_deleted": True, "id": 9}}],
    "unicode": [
        _payload(9, name='quote " back \\ slash', note="é ü 漢字 \U0001f600"),
        _payload(9, name="tab\tnew\nline\x7f\x00"),
    ],
    "large integers": [
        _payload(9, id=2**63 - 1),
        _payload(9, id=-(2**63)),
        _payload(9, id=2**64),
        _payload(9, price=2**60),
        _payload(9, amount=2**70),
    ],
    "decimals": [
        _payload(9, price=0),
        _payload(9, price=0.0000001),
        _payload(9, price=-0.0),
        _payload(9, price=1e20),
        _payload(9, price=0.1234567891),
        _payload(9, price="12.5"),
        _payload(9, price=123456789012345678901234567890),
    ],
    "floats": [_payload(9, amount=3), _payload(9, amount=1e300), _payload(9, amount=-2.5e-300)],
    "timestamps": [
        _payload(9, updated_at="2024-05-09 06:00:02"),
        _payload(9, updated_at="2024-05-09T06:00:02.123456789Z"),
        _payload(9, updated_at="2024-05-09T06:00:02+02:00"),
        _payload(9, updated_at="2024-02-30T06:00:02"),
        _payload(9, updated_at="0000-01-01T00:00:00"),
        {"payload": _payload(9), "source_timestamp": "2024-05-09T05:59:59.5+01:00"},
        {"payload": _payload(9), "source_timestamp": 1715234399000},
        {"payload": _payload(9), "read_timestamp": None},
        {"payload": _payload(9), "read_timestamp": "2024-05-09T06:00:29"},
        {"payload": _payload(9), "source_timestamp": "1969-12-31T23:59:59"},
    ],
    "kinds": [
        _payload(9, paid=1),
        _payload(9, name=5),
        _payload(9, id=1.5),
        _payload(9, id="9"),
        _payload(9, note=7),
        _payload(9, amount="x"),
    ],
    "keys": [
        {"payload": {k: v for k, v in _payload(9).items() if k != "id"}},
        _payload(9, id=None),
        {"payload": _payload(9), "metadata": {"primary_keys": ["id", "name"]}},
        {"payload": _payload(9), "metadata": {"primary_keys": []}},
    ],
    "metadata": [
        {"payload": _payload(9), "metadata": {"tx_id": ""}},
        {"payload": _payload(9), "metadata": {"log_position": "77"}},
        {"payload": _payload(9), "metadata": {"log_file": ""}},
        {"payload": _payload(9), "metadata": {"log_file": None, "log_position": None}},
        {"payload": _payload(9), "metadata": {"extra": [1, "a"], "scn": 5}},
        {"payload": _payload(9), "read_method": "mysql-backfill-fulldump"},
        {"payload": _payload(9), "schema_key": "k2"},
        {"payload": _payload(9), "object": "other_table"},
    ],
    "columns": [
        {"payload": {**_payload(9), "extra": 1}, "schema_key": "k2"},
        {"payload": {"id": 9, "name": "few"}},
    ],
}


def _lines(edge: Any, position: int) -> list[str]:
    """Clean events around one edge event at ``position``."""
    events = [_event(number, _payload(number)) for number in range(12)]
    if isinstance(edge, dict) and "payload" in edge:
        events[position] = _event(position, **edge)
    else:
        events[position] = _event(position, edge)
    return [json.dumps(event, ensure_ascii=False, separators=(",", ":")) for event in events]


@pytest.mark.parametrize(
    "edge", [(group, index) for group, edges in EDGES.items() for index in range(len(edges))]
)
@pytest.mark.parametrize("position", [0, 9])
def test_edge_events_stage_what_the_event_path_stages(
    monkeypatch: pytest.MonkeyPatch, edge: tuple[str, int], position: int
) -> None:
    monkeypatch.setattr(files, "BATCH_ROWS", 4)  # the edge in the head (0) or in a later chunk (9)
    monkeypatch.setattr(jsonl_arrow, "_BLOCK_BYTES", 64)
    group, index = edge
    data = ("\n".join(_lines(EDGES[group][index], position)) + "\n").encode()
    assert _columnar(data, PATH, SETTINGS) == _event_path(data, PATH, SETTINGS)
    compressed = PATH + ".gz"
    packed = gzip.compress(data)
    assert _columnar(packed, compressed, SETTINGS) == _event_path(packed, compressed, SETTINGS)


@pytest.mark.parametrize(
    ("broken", "line"),
    [
        ("{not json", 7),
        ('{"uuid": "u-x"} {"uuid": "u-y"}', 7),
        ("[1, 2]", None),  # not an event: refused as the event path refuses it
        ("   ", None),
        ("\x0c", None),
        ('{"uuid": "a", "uuid": "b", "payload": {"id": 1}}', None),
    ],
)
def test_malformed_lines_are_refused_naming_file_and_line(
    monkeypatch: pytest.MonkeyPatch, broken: str, line: int | None
) -> None:
    monkeypatch.setattr(files, "BATCH_ROWS", 4)
    monkeypatch.setattr(jsonl_arrow, "_BLOCK_BYTES", 64)
    lines = _lines(_payload(1), 1)
    lines.insert(6, broken)
    data = "\n".join(lines).encode()  # no newline at the end
    columnar, event_path = _columnar(data, PATH, SETTINGS), _event_path(data, PATH, SETTINGS)
    assert columnar == event_path
    if line is not None:
        assert columnar[0] == "error"
        assert f"file {PATH!r}, line {line}: not JSON" in columnar[1]


def test_clean_files_go_column_wise_and_blank_lines_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "BATCH_ROWS", 5)
    monkeypatch.setattr(jsonl_arrow, "_BLOCK_BYTES", 64)  # chunks of about 5 lines
    taken = _Paths(monkeypatch)
    lines = _lines(_payload(1), 1)
    lines[8] = json.dumps(json.loads(lines[8]))  # spaced as json.dumps writes it (after the head)
    data = ("\n".join(lines[:3]) + "\n\n  \n" + "\r\n".join(lines[3:]) + "\n\n").encode()
    result = _columnar(data, PATH, SETTINGS)
    assert result == _event_path(data, PATH, SETTINGS)
    assert len(result[1]) == 12
    assert taken.files == 0 and taken.chunks == 0


def test_a_column_null_in_the_head_takes_its_kind_from_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "BATCH_ROWS", 4)
    monkeypatch.setattr(jsonl_arrow, "_BLOCK_BYTES", 64)
    lines = [json.dumps(_event(n, _payload(n, extra=None if n < 8 else n))) for n in range(12)]
    data = "\n".join(lines).encode()
    columnar = _columnar(data, PATH, DatastreamSettings())
    assert columnar == _event_path(data, PATH, DatastreamSettings())
    assert columnar[0] == "rows" and '"extra":"11"' in columnar[1][-1]["after_json"]


def test_the_head_holds_as_many_events_as_the_event_path_types_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blank lines do not shorten the head: a float in its last event makes the column FLOAT64 (the
    head then goes to the event path, as a column typed INT64 from a shorter head would differ)."""
    monkeypatch.setattr(files, "BATCH_ROWS", 5)
    monkeypatch.setattr(jsonl_arrow, "_BLOCK_BYTES", 64)
    taken = _Paths(monkeypatch)
    lines = [
        json.dumps(_event(n, _payload(n, size=2.5 if n == 4 else n)), separators=(",", ":"))
        for n in range(12)
    ]
    data = "\n\n".join(lines).encode()
    columnar = _columnar(data, PATH, DatastreamSettings())
    assert columnar == _event_path(data, PATH, DatastreamSettings())
    assert '"size":2.5' in columnar[1][4]["after_json"] and '"size":11.0' in columnar[1][11]["after_json"]
    assert taken.files == 1
