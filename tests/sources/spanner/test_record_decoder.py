"""The protobuf fast path stages exactly what the general record parser stages, and fails as precisely."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from google.cloud.spanner_v1._helpers import _get_type_decoder, _parse_nullable
from google.cloud.spanner_v1.types import ResultSetMetadata
from google.protobuf import struct_pb2

from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.sources.spanner.change_row import change_rows
from airflow_provider_cdc.sources.spanner.change_stream_query import ChangeStreamQuery
from airflow_provider_cdc.sources.spanner.record_decoder import (
    ChangeRecordDecoder,
    DataRecordRows,
    DataRecordRun,
)
from airflow_provider_cdc.sources.spanner.record_parser import parse_change_record_row
from airflow_provider_cdc.sources.spanner.records import DataChangeRecord, MalformedRecordError
from airflow_provider_cdc.sources.spanner.result_batches import RowBatch, row_batches
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


def _real_stream(emulator: Any, new_database: Any, prefix: str, seed: int) -> tuple[Any, datetime, datetime]:
    """A change stream over 1,500 seeded changes with splits: its query and the bounds that hold them."""
    database = new_database(schema_ddl(), prefix=prefix)
    begin = emulator.clock.advance(timedelta(seconds=1))
    workload = Workload(database, emulator, seed=seed)
    workload.run(changes=1_500, step=timedelta(milliseconds=200), split_every=500)
    end = emulator.clock.advance(timedelta(seconds=1))
    return ChangeStreamQuery(database, ALL_CHANGES_STREAM), begin, end


def _read_every_partition(
    query: Any, begin: datetime, end: datetime, read: Callable[[str, datetime], list[Any]]
) -> None:
    """Reads each partition of ``[begin, end)`` once, the root's children first: ``read(token, start)``
    returns the partition's records, whose child partitions are read next."""
    pending = [(c.token, begin) for r in query.records(None, begin, end) for c in r.child_partitions]
    seen: set[str] = set()
    while pending:
        token, start = pending.pop()
        if token in seen:
            continue
        seen.add(token)
        for record in read(token, start):
            pending.extend((c.token, record.timestamp) for c in getattr(record, "child_partitions", ()))


def test_fast_path_equals_the_record_parser_on_a_real_stream(
    spanner_emulator: Any, new_spanner_database: Any
) -> None:
    query, begin, end = _real_stream(spanner_emulator, new_spanner_database, "decoder", seed=5)
    compared = 0

    def read(token: str, start: datetime) -> list[Any]:
        nonlocal compared
        decoder, records = ChangeRecordDecoder(token), []
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
            records.append(record)
        return records

    _read_every_partition(query, begin, end, read)
    assert compared == 1_500


# ----- batches: a PartialResultSet's rows decoded together ---------------------------------------

_METADATA = ResultSetMetadata.pb().FromString(wire.change_record_metadata())


def _batch(*rows: list[struct_pb2.Value], metadata: Any = _METADATA) -> RowBatch:
    return RowBatch([row[0] for row in rows], _decode_row, metadata)


def _flat(items: list[Any], token: str) -> list[Any]:
    """Records as comparable tuples: a data change record's fields the read uses and its staged rows."""
    flat: list[Any] = []
    for item in items:
        if isinstance(item, DataRecordRun):
            rows, start = item.rows, 0
            for index, count in enumerate(item.counts):
                flat.append((
                    item.commit_timestamps[index], item.server_transaction_ids[index],
                    item.record_sequences[index], item.is_last_record_in_transaction_in_partition[index],
                    item.number_of_partitions_in_transaction[index], rows[start : start + count],
                ))  # fmt: skip
                start += count
        elif isinstance(item, DataChangeRecord):
            flat.append((
                item.commit_timestamp, item.server_transaction_id, item.record_sequence,
                item.is_last_record_in_transaction_in_partition, item.number_of_partitions_in_transaction,
                [tuple(r[c] for c in STAGED_CHANGE_COLUMNS) for r in change_rows(item, token)],
            ))  # fmt: skip
        else:
            flat.append(item)
    return flat


def _general_records(rows: list[list[struct_pb2.Value]]) -> list[Any]:
    return [record for row in rows for record in parse_change_record_row(_decode_row(row))]


def _heartbeat(ts: str = "2026-01-01T00:00:02Z") -> list[struct_pb2.Value]:
    return [struct_pb2.Value.FromString(wire.heartbeat_row(ts))]


def _children() -> list[struct_pb2.Value]:
    row = wire.child_partitions_row("2026-01-01T00:00:03Z", "00000001", [("child", ["tok"])])
    return [struct_pb2.Value.FromString(row)]


def _record_fields(row: list[struct_pb2.Value]) -> Any:
    return row[0].list_value.values[0].list_value.values[0].list_value.values[0].list_value.values


def _with_null_tag(row: list[struct_pb2.Value]) -> list[struct_pb2.Value]:
    _record_fields(row)[11].null_value = struct_pb2.NULL_VALUE
    return row


def _with_null_kinds(row: list[struct_pb2.Value]) -> list[struct_pb2.Value]:
    kinds = row[0].list_value.values[0].list_value.values
    kinds[1].null_value = struct_pb2.NULL_VALUE
    kinds[2].null_value = struct_pb2.NULL_VALUE
    return row


def _two_elements(first: list[struct_pb2.Value], second: list[struct_pb2.Value]) -> list[struct_pb2.Value]:
    row = [struct_pb2.Value()]
    row[0].list_value.values.extend([*first[0].list_value.values, *second[0].list_value.values])
    return row


def _data_rows() -> list[list[struct_pb2.Value]]:
    mods = [({"SingerId": str(i)}, {"Name": f"n{i}"}, {}) for i in range(3)]
    return [
        _row(),
        _row(record_sequence="00000004", mods=mods, is_last=False),
        _row(transaction_id="tx-2", commit_ts="2026-01-01T00:00:01.5Z", table="Albums", mod_type="UPDATE",
             mods=[({"SingerId": "9"}, {"Name": "x"}, {"Name": "y"})]),
        _row(transaction_id="tx-3", record_sequence="18446744073709551615", mod_type="DELETE",
             mods=[({"SingerId": "7"}, {}, {"Name": "z"})] * 300),
    ]  # fmt: skip


BATCHES = {
    "data records": lambda: _data_rows(),
    "heartbeats and children between": lambda: [
        _heartbeat(),
        *_data_rows()[:2],
        _heartbeat("2026-01-01T00:00:02.5Z"),
        *_data_rows()[2:],
        _children(),
    ],
    "texts to re-encode": lambda: [
        *_data_rows()[:2],
        _with_mod_texts(_row(), '{"b":"1","a":"2"}', '{"Name": "Ann", "x": 1.5}', "{ }"),
        _with_mod_texts(_row(), '{"SingerId":"\\u00e9"}', '{"n":1e16}', "null"),
    ],
    "a NULL image": lambda: [*_data_rows()[:2], _with_mod_texts(_row(), '{"SingerId":"1"}', None, None)],
    "a NULL transaction tag": lambda: [_data_rows()[0], _with_null_tag(_row()), _data_rows()[1]],
    "NULL kinds": lambda: [_with_null_kinds(_row()), _with_null_kinds(_row(record_sequence="00000009"))],
    "two records in a row, none in another": lambda: [
        _two_elements(_row(), _heartbeat()),
        [struct_pb2.Value(list_value=struct_pb2.ListValue())],
        _row(),
    ],
    "one row": lambda: [_row()],
}


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_a_batch_decodes_as_the_record_parser_decodes_its_rows(name: str) -> None:
    rows = BATCHES[name]()
    items = ChangeRecordDecoder("tok").decode_batch(_batch(*rows))
    assert _flat(items, "tok") == _flat(_general_records(rows), "tok")

    # with nullability, and without the metadata that lets rows be read together: the same again
    def nullability(table: str) -> dict[str, bool]:
        return {"SingerId": False, "Name": True}

    assert _flat(ChangeRecordDecoder("tok", nullability).decode_batch(_batch(*rows)), "tok") == _flat(
        ChangeRecordDecoder("tok", nullability).decode_batch(_batch(*rows, metadata=None)), "tok"
    )


def test_consecutive_data_records_make_one_run() -> None:
    items = ChangeRecordDecoder("tok").decode_batch(_batch(*BATCHES["heartbeats and children between"]()))
    assert [type(item).__name__ for item in items] == [
        "HeartbeatRecord", "DataRecordRun", "HeartbeatRecord", "DataRecordRun", "ChildPartitionsRecord"
    ]  # fmt: skip
    assert [item.counts for item in items if isinstance(item, DataRecordRun)] == [[2, 3], [1, 300]]


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"mod_type": "UPSERT"}, "mod_type"),
        ({"record_sequence": str(1 << 64)}, "record_sequence"),
        ({"records_in_transaction": 0}, "number_of_records_in_transaction"),
        ({"mods": [([1, 2], {}, {})]}, "keys"),
        ({"mods": []}, "mods"),
        ({"table": ""}, "table_name"),
    ],
)
def test_a_malformed_record_in_a_batch_fails_naming_the_field(override: dict, field: str) -> None:
    rows = [*_data_rows()[:2], _row(**override), _data_rows()[2]]
    with pytest.raises(MalformedRecordError, match=field):
        ChangeRecordDecoder("tok").decode_batch(_batch(*rows))


def test_a_null_row_in_a_batch_fails_as_alone() -> None:
    rows = [_row(), [struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)]]
    with pytest.raises(MalformedRecordError, match="ChangeRecord"):
        ChangeRecordDecoder("tok").decode_batch(_batch(*rows))


def test_a_run_keeps_the_selected_records() -> None:
    (run,) = ChangeRecordDecoder("tok").decode_batch(_batch(*_data_rows()))
    assert isinstance(run, DataRecordRun)
    kept = run.select([False, True, False, True])
    assert kept.counts == [3, 300] and kept.record_sequences == ["00000004", "18446744073709551615"]
    assert run.counts == [2, 3, 1, 300] and kept.rows == run.rows[2:5] + run.rows[6:]
    assert run.select([True] * 4) is run


def _split(value: struct_pb2.Value, path: list[int]) -> tuple[struct_pb2.Value, struct_pb2.Value]:
    """``value`` as two chunks that the client merges back, split inside the string at ``path``."""
    if not path:
        text = value.string_value
        return struct_pb2.Value(string_value=text[:3]), struct_pb2.Value(string_value=text[3:])
    items = list(value.list_value.values)
    left, right = _split(items[path[0]], path[1:])
    return (
        struct_pb2.Value(list_value=struct_pb2.ListValue(values=[*items[: path[0]], left])),
        struct_pb2.Value(list_value=struct_pb2.ListValue(values=[right, *items[path[0] + 1 :]])),
    )


def test_row_batches_are_the_result_sets_rows_also_across_chunked_values() -> None:
    from google.cloud.spanner_v1.streamed import StreamedResultSet
    from google.cloud.spanner_v1.types import PartialResultSet

    rows = _data_rows()
    # a row split inside a mod's new values text: ChangeRecord[0].data_change_record[0].mods[1]
    left, right = _split(rows[1][0], [0, 0, 0, 6, 1, 1])
    messages = [
        PartialResultSet.pb()(values=[rows[0][0], left], chunked_value=True, metadata=_METADATA),
        PartialResultSet.pb()(values=[right, rows[2][0]], resume_token=b"2"),
        PartialResultSet.pb()(values=[rows[3][0]], resume_token=b"3", last=True),
    ]

    def results() -> StreamedResultSet:
        return StreamedResultSet(iter([PartialResultSet.wrap(m) for m in messages]), lazy_decode=True)

    expected = [row[0] for row in results()]
    assert expected == [row[0] for row in rows]
    batches = list(row_batches(results()))
    assert [len(batch) for batch in batches] == [1, 2, 1]
    assert [value for batch in batches for value in batch.values] == expected
    decoder = ChangeRecordDecoder("tok")
    decoded = [item for batch in batches for item in decoder.decode_batch(batch)]
    assert _flat(decoded, "tok") == _flat(_general_records(rows), "tok")
    # a result set without the attributes the batches need: its rows one by one, decoded alike
    single = list(row_batches(_Iterable(expected, _decode_row)))
    assert [batch.rows for batch in single] == [[[value]] for value in expected]
    assert _flat([i for b in single for i in ChangeRecordDecoder("tok").decode_batch(b)], "tok") == _flat(
        decoded, "tok"
    )


class _Iterable:
    def __init__(self, values: list[struct_pb2.Value], decode_row: Any) -> None:
        self._values, self.decode_row = values, decode_row

    def __iter__(self) -> Any:
        return iter([[value] for value in self._values])


def test_batches_of_a_real_stream_decode_as_the_record_parser(
    spanner_emulator: Any, new_spanner_database: Any
) -> None:
    query, begin, end = _real_stream(spanner_emulator, new_spanner_database, "batches", seed=6)
    staged = runs = 0

    def read(token: str, start: datetime) -> list[Any]:
        nonlocal staged, runs
        decoder = ChangeRecordDecoder(token)
        batches = query.row_batches(token, start, end)
        items = [item for batch in batches for item in decoder.decode_batch(batch)]
        records = list(query.records(token, start, end))
        assert _flat(items, token) == _flat(records, token)
        runs += sum(isinstance(item, DataRecordRun) and len(item.counts) > 1 for item in items)
        staged += sum(len(item.columns[0]) for item in items if isinstance(item, DataRecordRun))
        return records

    _read_every_partition(query, begin, end, read)
    assert staged == 1_500 and runs


def test_a_record_the_batch_checks_refuse_is_decoded_alone_and_the_rest_together() -> None:
    rows = [_row(record_sequence=f"{index:08d}") for index in range(40)]
    rows[23] = _with_mod_texts(_row(record_sequence="00000023"), '{"SingerId":"1"}', None, None)
    items = ChangeRecordDecoder("tok").decode_batch(_batch(*rows))
    assert _flat(items, "tok") == _flat(_general_records(rows), "tok")
    assert all(isinstance(item, DataRecordRun) for item in items)
    assert len(items) < 10 and [len(item.counts) for item in items].count(1) <= 8
