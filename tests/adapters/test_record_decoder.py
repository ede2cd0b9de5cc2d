"""The protobuf fast path stages exactly what the general record parser stages, and fails as precisely."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from google.cloud.spanner_v1._helpers import _get_type_decoder, _parse_nullable
from google.protobuf import struct_pb2

from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.sources.spanner.change_row import change_rows
from airflow_provider_cdc.sources.spanner.change_stream_query import ChangeStreamQuery
from airflow_provider_cdc.sources.spanner.record_decoder import ChangeRecordDecoder, DataRecordRows
from airflow_provider_cdc.sources.spanner.record_parser import parse_change_record_row
from airflow_provider_cdc.sources.spanner.records import DataChangeRecord, MalformedRecordError
from airflow_provider_cdc.testing.spanner_emulator import wire
from airflow_provider_cdc.testing.workload import ALL_CHANGES_STREAM, Workload, schema_ddl

_DECODE = _get_type_decoder(wire.CHANGE_RECORD, "ChangeRecord")


def _decode_row(row: list[Any]) -> list[Any]:
    return [_parse_nullable(row[0], _DECODE)]


def _row(**overrides: Any) -> list[struct_pb2.Value]:
    fields: dict[str, Any] = dict(
        commit_ts="2026-01-01T00:00:01.000001Z",
        record_sequence="00000003",
        transaction_id="tx-1",
        is_last=True,
        table="Singers",
        column_types=[
            {"name": "SingerId", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
            {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
        ],
        mods=[({"SingerId": "1"}, {"Name": "Ann"}, {}), ({"SingerId": "2"}, {"Name": None}, {})],
        mod_type="INSERT",
        value_capture_type="OLD_AND_NEW_VALUES",
        records_in_transaction=4,
        partitions_in_transaction=2,
    )
    fields.update(overrides)
    return [struct_pb2.Value.FromString(wire.data_change_row(**fields))]


def _general(row: list[Any], token: str) -> list[tuple]:
    rows: list[tuple] = []
    for record in parse_change_record_row(_decode_row(row)):
        assert isinstance(record, DataChangeRecord)
        rows.extend(tuple(r[c] for c in STAGED_CHANGE_COLUMNS) for r in change_rows(record, token))
    return rows


def test_fast_path_equals_the_record_parser_on_a_hand_built_row() -> None:
    row = _row()
    fast = ChangeRecordDecoder("tok").decode(row, _decode_row)
    assert isinstance(fast, DataRecordRows)
    assert fast.rows == _general(row, "tok")
    assert fast.is_last_record_in_transaction_in_partition and fast.number_of_partitions_in_transaction == 2


def test_both_paths_add_the_nullability_the_lookup_gives_per_table() -> None:
    asked: list[str] = []

    def nullability(table: str) -> dict[str, bool]:
        asked.append(table)
        return {"SingerId": False, "Name": True} if table == "Singers" else {"SingerId": True}

    decoder = ChangeRecordDecoder("tok", nullability)
    fast = decoder.decode(_row(), _decode_row)
    assert isinstance(fast, DataRecordRows)
    types = json.loads(fast.rows[0][STAGED_CHANGE_COLUMNS.index("column_types_json")])
    assert [(c["name"], c["is_nullable"]) for c in types] == [("SingerId", False), ("Name", True)]
    again = decoder.decode(_row(record_sequence="00000004"), _decode_row)
    assert isinstance(again, DataRecordRows) and asked == ["Singers"]  # column types are cached
    # Another table with the same column types: its own nullability ("Name" unknown there).
    other = decoder.decode(_row(table="Albums"), _decode_row)
    assert isinstance(other, DataRecordRows)
    types = json.loads(other.rows[0][STAGED_CHANGE_COLUMNS.index("column_types_json")])
    assert [(c["name"], c.get("is_nullable")) for c in types] == [("SingerId", True), ("Name", None)]
    # The general path (a text with surrounding whitespace) stages the same column types.
    spaced = _with_mod_texts(_row(), '{"SingerId":"1"} ', '{"Name":"Ann"}', "{}")
    (record,) = ChangeRecordDecoder("tok", nullability).decode(spaced, _decode_row)
    assert isinstance(record, DataChangeRecord)
    assert [(c.name, c.is_nullable) for c in record.column_types] == [("SingerId", False), ("Name", True)]
    staged = next(change_rows(record, "tok"))["column_types_json"]
    assert staged == fast.rows[0][STAGED_CHANGE_COLUMNS.index("column_types_json")]


def _with_mod_texts(row: list[struct_pb2.Value], *texts: str | None) -> list[struct_pb2.Value]:
    """``row`` with the JSON texts of its first mod replaced (``None``: a NULL value)."""
    record = row[0].list_value.values[0].list_value.values[0].list_value.values[0].list_value.values
    for value, text in zip(record[6].list_value.values[0].list_value.values, texts, strict=True):
        if text is None:
            value.null_value = struct_pb2.NULL_VALUE
        else:
            value.string_value = text
    return row


@pytest.mark.parametrize(
    "texts",
    [
        ('{"SingerId":"1"}', '{"Name":"Ann"}', "{}"),  # canonical already: kept as sent
        ('{"b":"1","a":"2"}', '{"Name": "Ann"}', "{ }"),  # unsorted, spaced
        ('{"SingerId":1.5}', '{"x":1e16,"y":1E+2,"z":-0.0}', '{"w":0.1}'),  # floats
        ('{"SingerId":"\u00e9"}', '{"Name":"\\u00e9"}', '{"n":"\\ud83d\\ude00"}'),  # non-ASCII
        ('{"SingerId":"\x7f"}', '{"Name":"\\u007f"}', '{"t":"a\\"b\\\\c\\n\\u0001/"}'),  # DEL, escapes
        ('{"SingerId":"\x7f"}', '{"Name":"Ann"}', "{}"),  # DEL, escaped by json only
        ('{"SingerId":"1"}', '{"x":1e16}', "{}"),  # a float msgspec writes as it was sent
        ('{"SingerId":"1"}', '{"Name":"\\u00e9"}', "{}"),  # one text of a record not canonical
        ('{"SingerId":123456789012345678901234567890}', '{"a":{"d":1,"c":[1,{"z":2,"y":3}]}}', "null"),
        ('{"SingerId":-0,"SingerId":2}', "null", None),  # duplicate keys, JSON null, NULL
        ('{"SingerId":true}', None, '{"a":null,"b":false,"c":[]}'),
    ],
)
def test_fast_path_equals_the_record_parser_on_any_json_text(texts: tuple) -> None:
    row = _with_mod_texts(_row(), *texts)
    fast = ChangeRecordDecoder("tok").decode(row, _decode_row)
    assert isinstance(fast, DataRecordRows)
    assert fast.rows == _general(row, "tok")


@pytest.mark.parametrize(
    "texts",
    [('{"SingerId":"1"} ', '{"Name":"Ann"}', "{}"), ('{"SingerId":"1"}', '{"Name":"Ann"}', " {}")],
)
def test_a_text_with_surrounding_whitespace_goes_the_general_way(texts: tuple) -> None:
    row = _with_mod_texts(_row(), *texts)
    general = ChangeRecordDecoder("tok").decode(row, _decode_row)
    assert isinstance(general, list) and len(general) == 1
    assert isinstance(general[0], DataChangeRecord)
    assert general[0].mods[0].keys == {"SingerId": "1"} and general[0].mods[0].old_values == {}


@pytest.mark.parametrize(
    ("texts", "field"),
    [
        (("null", "{}", "{}"), "keys"),
        (("{}", "{}", "{}"), "keys"),
        ((None, "{}", "{}"), "keys"),
        (('{"SingerId":"1"}', '"text"', "{}"), "new_values"),
        (('{"SingerId":"1"}', "{}", "[{}]"), "old_values"),
    ],
)
def test_a_malformed_mod_fails_naming_the_field(texts: tuple, field: str) -> None:
    with pytest.raises(MalformedRecordError, match=field):
        ChangeRecordDecoder("tok").decode(_with_mod_texts(_row(), *texts), _decode_row)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"mod_type": "UPSERT"}, "mod_type"),
        ({"record_sequence": "x1"}, "record_sequence"),
        ({"record_sequence": str(1 << 64)}, "record_sequence"),
        ({"value_capture_type": "EVERYTHING"}, "value_capture_type"),
        ({"records_in_transaction": 0}, "number_of_records_in_transaction"),
        ({"mods": [([1, 2], {}, {})]}, "keys"),
        ({"mods": [({"SingerId": "1"}, [1], {})]}, "new_values"),
        ({"mods": []}, "mods"),
        ({"column_types": []}, "column_types"),
        ({"table": ""}, "table_name"),
    ],
)
def test_a_malformed_record_fails_naming_the_field(override: dict, field: str) -> None:
    with pytest.raises(MalformedRecordError, match=field):
        ChangeRecordDecoder("tok").decode(_row(**override), _decode_row)


def test_fast_path_equals_the_record_parser_on_a_real_stream(
    spanner_emulator: Any, new_spanner_database: Any
) -> None:
    database = new_spanner_database(schema_ddl(), prefix="decoder")
    begin = spanner_emulator.clock.advance(timedelta(seconds=1))
    workload = Workload(database, spanner_emulator, seed=5)
    workload.run(changes=1_500, step=timedelta(milliseconds=200), split_every=500)
    end = spanner_emulator.clock.advance(timedelta(seconds=1))
    query = ChangeStreamQuery(database, ALL_CHANGES_STREAM)
    pending = [(c.token, begin) for r in query.records(None, begin, end) for c in r.child_partitions]
    seen: set[str] = set()
    compared = 0
    while pending:
        token, start = pending.pop()
        if token in seen:
            continue
        seen.add(token)
        decoder = ChangeRecordDecoder(token)
        for (row, decode_row), record in zip(
            query.lazy_rows(token, start, end), query.records(token, start, end), strict=True
        ):
            fast = decoder.decode(row, decode_row)
            if isinstance(record, DataChangeRecord):
                assert isinstance(fast, DataRecordRows)
                assert fast.rows == [
                    tuple(r[c] for c in STAGED_CHANGE_COLUMNS) for r in change_rows(record, token)
                ]
                compared += len(fast.rows)
            else:
                assert fast == [record]
                pending.extend((c.token, record.timestamp) for c in getattr(record, "child_partitions", ()))
    assert compared == 1_500
