"""Datastream files converted a batch of events at a time give exactly the rows of the event-by-event
conversion: keys, images, sequence numbers, metadata, for every database and file format."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_cdc.sources.datastream import files
from airflow_provider_cdc.sources.datastream.events import DatastreamEventError
from airflow_provider_cdc.sources.datastream.files import read_file_change_columns, read_file_changes
from airflow_provider_cdc.sources.datastream.names import parse_file_name
from airflow_provider_cdc.sources.datastream.settings import DatastreamSettings
from airflow_provider_cdc.testing.datastream.scenario import DatastreamScenario
from airflow_provider_cdc.testing.datastream.writer import LocalFolderSink
from tests.support.datastream_scenarios import SCENARIOS


def written_files(tmp_path: Path, scenario: DatastreamScenario) -> list[str]:
    for window in range(len(scenario.windows)):
        scenario.write_window(window, LocalFolderSink(tmp_path))
    found = [
        os.path.relpath(os.path.join(folder, name), tmp_path)
        for folder, _, names in os.walk(tmp_path)
        for name in names
    ]
    return sorted(found)


def staged(root: Path, path: str, settings: DatastreamSettings) -> list[tuple[Any, ...]]:
    with open(root / path, "rb") as stream:
        return [
            row
            for batch in read_file_changes(stream, parse_file_name(path), "unit", settings)
            for row in batch
        ]


@pytest.mark.parametrize("file_format", ["avro", "jsonl", "jsonl.gz"])
@SCENARIOS
def test_batches_give_the_rows_of_the_event_by_event_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database: str, options: dict, file_format: str
) -> None:
    scenario = DatastreamScenario(database, file_format, seed=5, windows=2, events_per_window=300, **options)
    settings = DatastreamSettings.from_dict(
        {} if file_format == "avro" else {"column_types": scenario.jsonl_column_types()}
    )
    paths = written_files(tmp_path, scenario)
    monkeypatch.setattr(files, "CHUNK_EVENTS", 37)  # chunks that do not line up with files or batches
    taken = []
    uniform = files._FileEncoder._uniform_columns

    def counted(self: Any, events: list) -> Any:
        columns = uniform(self, events)
        taken.append(len(events))
        return columns

    monkeypatch.setattr(files._FileEncoder, "_uniform_columns", counted)
    batched = {path: staged(tmp_path, path, settings) for path in paths}
    assert sum(taken) > sum(len(rows) for rows in batched.values()) / 2  # most went column-wise

    def refused(self: Any, events: list) -> Any:
        raise files._NotUniform

    monkeypatch.setattr(files._FileEncoder, "_uniform_columns", refused)
    one_by_one = {path: staged(tmp_path, path, settings) for path in paths}
    assert batched == one_by_one
    assert sum(len(rows) for rows in batched.values()) == sum(
        len(planned.events) for planned in scenario.files
    )


def test_columns_are_the_rows_transposed(tmp_path: Path) -> None:
    scenario = DatastreamScenario("mysql", "avro", seed=2, windows=1, events_per_window=200)
    path = written_files(tmp_path, scenario)[0]
    settings = DatastreamSettings()
    with open(tmp_path / path, "rb") as stream:
        columns = [
            row
            for batch in read_file_change_columns(stream, parse_file_name(path), "unit", settings)
            for row in zip(*batch, strict=True)
        ]
    assert columns == staged(tmp_path, path, settings)


def test_jsonl_lines_blank_spaced_or_not_json() -> None:
    event = (
        '{"uuid":"u-%d","read_timestamp":1715234400000,"source_timestamp":1715234399000,'
        '"object":"shop_orders","read_method":"mysql-cdc-binlog","source_metadata":{"primary_keys":["id"],'
        '"log_file":"mysql-bin.000003","log_position":%d,"change_type":"INSERT"},"payload":{"id":%d}}'
    )
    path = "shop_orders/2024/05/09/06/00/" + "a" * 40 + "_mysql-cdc-binlog_1_0_0.jsonl"
    lines = [event % (1, 10, 1), "", "  " + event % (2, 20, 2) + " \t", "\ufeff" + event % (3, 30, 3)]
    data = "\n".join(lines).encode("utf-8") + b"\n\n"
    rows = list(read_file_changes(io.BytesIO(data), parse_file_name(path), "unit", DatastreamSettings()))[0]
    assert [row[7] for row in rows] == ['{"id":"1"}', '{"id":"2"}', '{"id":"3"}']
    for bad, number in ((event % (1, 10, 1) + " {}", 1), ("\n" + event % (1, 10, 1) + "x", 2)):
        with pytest.raises(DatastreamEventError, match=rf"file '{path}', line {number}: not JSON"):
            list(
                read_file_changes(
                    io.BytesIO(bad.encode()), parse_file_name(path), "unit", DatastreamSettings()
                )
            )


@pytest.mark.parametrize(
    ("text", "short_cut"),
    [
        ("2024-05-09T06:00:03.135Z", True),
        ("2024-05-09 06:00:03", True),
        ("2024-05-09t06:00:03.1234567891z", False),  # 10 fractional digits: parsed
        ("2024-05-09t06:00:03.123456789z", True),
        ("0001-01-01T00:00:00.000001Z", True),
        ("2024-02-30T06:00:03Z", False),
        ("2024-05-09T24:00:00Z", False),
        ("2024-05-09T06:00:03+02:00", False),
        ("2024-05-09T06:00:03.5 Z", False),
        ("2024-05-09T06:00", False),
    ],
)
def test_utc_text_short_cut_writes_what_parsing_and_formatting_write(text: str, short_cut: bool) -> None:
    from airflow_provider_cdc.core.timestamps import format_timestamp, parse_timestamp
    from airflow_provider_cdc.sources.datastream.types import utc_text_of

    if short_cut:
        assert utc_text_of(text) == format_timestamp(parse_timestamp(text))
    else:
        assert utc_text_of(text) is None


def test_jsonl_column_of_mixed_kinds_is_refused_naming_its_first_other_value() -> None:
    event = (
        '{"uuid":"u-%d","read_timestamp":1715234400000,"source_timestamp":1715234399000,'
        '"object":"shop_orders","read_method":"mysql-cdc-binlog","source_metadata":{"primary_keys":["id"],'
        '"log_file":"mysql-bin.000003","log_position":%d},"payload":{"id":%d,"note":%s,"size":%s}}'
    )
    path = "shop_orders/2024/05/09/06/00/" + "a" * 40 + "_mysql-cdc-binlog_1_0_0.jsonl"
    lines = [event % (1, 1, 1, "null", "1"), event % (2, 2, 2, '"x"', "2.5"), event % (3, 3, 3, "7", "true")]
    data = "\n".join(lines).encode()
    with pytest.raises(
        DatastreamEventError, match=r"column 'note' holds values of different kinds \(e.g. 7\)"
    ):
        list(read_file_changes(io.BytesIO(data), parse_file_name(path), "u", DatastreamSettings()))
    rows = list(
        read_file_changes(
            io.BytesIO(data[: data.rindex(b"\n")]), parse_file_name(path), "u", DatastreamSettings()
        )
    )[0]
    assert [row[8] for row in rows] == ['{"note":null,"size":1.0}', '{"note":"x","size":2.5}']
