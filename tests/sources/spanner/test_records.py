"""Change-stream records: the documented JSON form and rows as google-cloud-spanner decodes them."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from typing import Any

import pytest
from google.cloud.spanner_v1 import PartialResultSet
from google.cloud.spanner_v1.streamed import StreamedResultSet

from airflow_provider_cdc.core.columns import ColumnType, parse_column_types
from airflow_provider_cdc.core.timestamps import format_timestamp, parse_timestamp
from airflow_provider_cdc.core.types import LogicalType
from airflow_provider_cdc.sources.spanner.record_parser import (
    parse_change_record_json,
    parse_change_record_row,
    parse_record_dict,
)
from airflow_provider_cdc.sources.spanner.records import (
    ChildPartition,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
    MalformedRecordError,
    Mod,
    ModType,
)
from airflow_provider_cdc.sources.spanner.types import SpannerTypeError, parse_spanner_column_types

UTC = timezone.utc

# --- the seed document's records -----------------------------------------------------------------

_ACCOUNT_BALANCE_COLUMNS = [
    {"name": "AccountId", "type": {"code": "STRING"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "LastUpdate", "type": {"code": "TIMESTAMP"}, "is_primary_key": False, "ordinal_position": 2},
    {"name": "Balance", "type": {"code": "INT"}, "is_primary_key": False, "ordinal_position": 3},
]


def _transfer(sequence: str, account: str, balance: int, updated_before: str) -> dict:
    """A record of the seed document's transfer: one transaction of two records, one account's update
    each, its balance from 1500."""
    return {
        "commit_timestamp": "2022-09-27T12:30:00.123456Z",
        "record_sequence": sequence,
        "server_transaction_id": "6329047911",
        "is_last_record_in_transaction_in_partition": True,
        "table_name": "AccountBalance",
        "column_types": _ACCOUNT_BALANCE_COLUMNS,
        "mods": [
            {
                "keys": {"AccountId": account},
                "new_values": {"LastUpdate": "2022-09-27T12:30:00.123456Z", "Balance": balance},
                "old_values": {"LastUpdate": updated_before, "Balance": 1500},
            }
        ],
        "mod_type": "UPDATE",
        "value_capture_type": "OLD_AND_NEW_VALUES",
        "number_of_records_in_transaction": 2,
        "number_of_partitions_in_transaction": 2,
    }


TRANSFER_FIRST = _transfer("00000000", "Id1", 1000, updated_before="2022-09-26T11:28:00.189413Z")
TRANSFER_SECOND = _transfer("00000001", "Id2", 2000, updated_before="2022-01-20T11:25:00.199915Z")

HEARTBEAT = {"timestamp": "2022-09-27T12:35:00.312486Z"}

CHILDREN_WITH_TWO_PARENTS = {
    "start_timestamp": "2022-09-27T12:40:00.562986Z",
    "record_sequence": "00000001",
    "child_partitions": [
        {"token": "child_token_1", "parent_partition_tokens": ["parent_token_1", "parent_token_2"]}
    ],
}

INITIAL_CHILDREN_FIRST = {
    "record_type": "child_partitions",
    "start_timestamp": "2022-05-01 09:00:01-00",
    "record_sequence": 1000012389,
    "child_partitions": [
        {"token": "child_token_1", "parent_partition_tokens": [None]},
        {"token": "child_token_2", "parent_partition_tokens": [None]},
    ],
}

INITIAL_CHILDREN_SECOND = {
    "record_type": "child_partitions",
    "start_timestamp": "2022-05-01 09:00:01-00",
    "record_sequence": 1000012390,
    "child_partitions": [{"token": "child_token_3", "parent_partition_tokens": [None]}],
}

MERGED_CHILD = {
    "record_type": "child_partitions",
    "start_timestamp": "2022-05-01 09:30:15-00",
    "record_sequence": 1000012389,
    "child_partitions": [
        {"token": "child_token_4", "parent_partition_tokens": ["child_token_2", "child_token_3"]}
    ],
}

# --- rows as the Spanner client returns them -------------------------------------------------------
# The test encodes a record in Spanner's wire format (a PartialResultSet in its JSON form, as the
# server streams it) and lets the real client's StreamedResultSet decode it into a row.


def _t(code: str, **extra: Any) -> dict[str, Any]:
    return {"code": code, **extra}


def _struct(*fields: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return _t("STRUCT", structType={"fields": [{"name": name, "type": type_} for name, type_ in fields]})


def _array(element: dict[str, Any]) -> dict[str, Any]:
    return _t("ARRAY", arrayElementType=element)


_COLUMN_TYPE = _struct(
    ("name", _t("STRING")),
    ("type", _t("JSON")),
    ("is_primary_key", _t("BOOL")),
    ("ordinal_position", _t("INT64")),
)
_MOD = _struct(("keys", _t("JSON")), ("new_values", _t("JSON")), ("old_values", _t("JSON")))
_DATA_CHANGE_FIELDS = [
    ("commit_timestamp", _t("TIMESTAMP")),
    ("record_sequence", _t("STRING")),
    ("server_transaction_id", _t("STRING")),
    ("is_last_record_in_transaction_in_partition", _t("BOOL")),
    ("table_name", _t("STRING")),
    ("column_types", _array(_COLUMN_TYPE)),
    ("mods", _array(_MOD)),
    ("mod_type", _t("STRING")),
    ("value_capture_type", _t("STRING")),
    ("number_of_records_in_transaction", _t("INT64")),
    ("number_of_partitions_in_transaction", _t("INT64")),
    ("transaction_tag", _t("STRING")),
    ("is_system_transaction", _t("BOOL")),
]
_HEARTBEAT = _struct(("timestamp", _t("TIMESTAMP")))
_CHILD_PARTITIONS = _struct(
    ("start_timestamp", _t("TIMESTAMP")),
    ("record_sequence", _t("STRING")),
    (
        "child_partitions",
        _array(_struct(("token", _t("STRING")), ("parent_partition_tokens", _array(_t("STRING"))))),
    ),
)


def _change_record_type(legacy: bool) -> dict[str, Any]:
    data_change = _struct(*(_DATA_CHANGE_FIELDS[:11] if legacy else _DATA_CHANGE_FIELDS))
    return _array(
        _struct(
            ("data_change_record", _array(data_change)),
            ("heartbeat_record", _array(_HEARTBEAT)),
            ("child_partitions_record", _array(_CHILD_PARTITIONS)),
        )
    )


def _wire(value: Any, type_: dict[str, Any]) -> Any:
    """``value`` in Spanner's wire encoding (google.protobuf.Value as JSON) for ``type_``."""
    if value is None:
        return None
    code = type_["code"]
    if code == "STRUCT":
        fields = type_["structType"]["fields"]
        return [_wire(value.get(field["name"]), field["type"]) for field in fields]
    if code == "ARRAY":
        return [_wire(item, type_["arrayElementType"]) for item in value]
    if code == "TIMESTAMP":
        return value if "T" in value else format_timestamp(parse_timestamp(value))
    if code in ("INT64", "STRING"):
        return str(value)
    if code == "JSON":
        return value if isinstance(value, str) else json.dumps(value)
    return value


def client_rows(kind: str, record: dict[str, Any], *, legacy: bool = False, others: Any = ()) -> list[Any]:
    """Rows the Spanner client yields for a change-stream query returning ``record``."""
    row_type = {"fields": [{"name": "ChangeRecord", "type": _change_record_type(legacy)}]}
    element = {
        name: (list(others) if others is not None else None)
        for name in ("data_change_record", "heartbeat_record", "child_partitions_record")
    }
    element[kind] = [record]
    value = _wire([element], row_type["fields"][0]["type"])
    response = PartialResultSet.from_json(json.dumps({"metadata": {"rowType": row_type}, "values": [value]}))
    return list(StreamedResultSet(iter([response])))


def parse_one_row(kind: str, record: dict[str, Any], **kwargs: Any) -> Any:
    rows = client_rows(kind, record, **kwargs)
    assert len(rows) == 1
    records = parse_change_record_row(rows[0])
    assert len(records) == 1
    return records[0]


# --- data change records ---------------------------------------------------------------------------


def test_cross_partition_transfer_from_dict_form():
    first = parse_record_dict("data_change_record", TRANSFER_FIRST)
    second = parse_record_dict("data_change_record", TRANSFER_SECOND)

    commit = datetime(2022, 9, 27, 12, 30, 0, 123456, tzinfo=UTC)
    assert isinstance(first, DataChangeRecord)
    assert first.commit_timestamp == commit and first.timestamp == commit
    assert first.commit_timestamp.tzinfo is UTC
    assert (first.record_sequence, second.record_sequence) == ("00000000", "00000001")
    assert first.server_transaction_id == second.server_transaction_id == "6329047911"
    assert first.is_last_record_in_transaction_in_partition is True
    assert first.table_name == "AccountBalance"
    assert first.column_types == (
        ColumnType("AccountId", {"code": "STRING"}, True, 1),
        ColumnType("LastUpdate", {"code": "TIMESTAMP"}, False, 2),
        ColumnType("Balance", {"code": "INT"}, False, 3),
    )
    assert first.mods == (
        Mod(
            keys={"AccountId": "Id1"},
            new_values={"LastUpdate": "2022-09-27T12:30:00.123456Z", "Balance": 1000},
            old_values={"LastUpdate": "2022-09-26T11:28:00.189413Z", "Balance": 1500},
        ),
    )
    assert second.mods[0].keys == {"AccountId": "Id2"}
    assert second.mods[0].old_values["LastUpdate"] == "2022-01-20T11:25:00.199915Z"
    assert first.mod_type is ModType.UPDATE
    assert first.value_capture_type == "OLD_AND_NEW_VALUES"
    assert first.number_of_records_in_transaction == second.number_of_records_in_transaction == 2
    assert first.number_of_partitions_in_transaction == 2
    assert first.transaction_tag == "" and first.is_system_transaction is False


@pytest.mark.parametrize("record", [TRANSFER_FIRST, TRANSFER_SECOND], ids=["Id1", "Id2"])
def test_cross_partition_transfer_from_client_row(record):
    parsed = parse_one_row("data_change_record", record)
    assert parsed == parse_record_dict("data_change_record", record)
    assert type(parsed.commit_timestamp) is datetime  # not the client's DatetimeWithNanoseconds
    assert type(parsed.mods[0].keys) is dict  # not the client's JsonObject
    assert parsed.column_types[0].type == {"code": "STRING"}


def test_record_columns_keep_the_stream_type_json_and_parse_as_column_types():
    numeric = {"code": "NUMERIC", "type_annotation": "PG_NUMERIC"}
    columns = [
        {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
        {"name": "Amount", "type": numeric, "is_primary_key": False, "ordinal_position": 2},
    ]
    record = parse_record_dict("data_change_record", {**TRANSFER_FIRST, "column_types": columns})
    assert [c.to_json_dict() for c in record.column_types] == columns  # staged as the stream sent it
    assert str(record.column_types[1].logical_type) == "NUMERIC"
    assert (
        parse_column_types(record.column_types)
        == parse_spanner_column_types(record.column_types)
        == [
            ColumnType("Id", LogicalType("INT64"), True, 1),
            ColumnType("Amount", {"code": "NUMERIC"}, False, 2),
        ]
    )
    assert len({*record.column_types, *record.column_types}) == 2
    unknown = parse_record_dict("data_change_record", TRANSFER_FIRST).column_types
    with pytest.raises(SpannerTypeError, match="column 'Balance': unsupported Spanner type"):
        parse_spanner_column_types(unknown)


def test_row_from_server_without_transaction_tag_fields():
    parsed = parse_one_row("data_change_record", TRANSFER_FIRST, legacy=True)
    assert parsed == parse_record_dict("data_change_record", TRANSFER_FIRST)
    assert parsed.transaction_tag == "" and parsed.is_system_transaction is False


def test_transaction_tag_and_system_transaction_are_read():
    record = {**TRANSFER_FIRST, "transaction_tag": "app=billing", "is_system_transaction": True}
    parsed = parse_one_row("data_change_record", record)
    assert parsed.transaction_tag == "app=billing"
    assert parsed.is_system_transaction is True


def test_empty_arrays_may_be_null_instead_of_empty():
    assert parse_one_row("data_change_record", TRANSFER_FIRST, others=None).record_sequence == "00000000"
    assert isinstance(parse_one_row("heartbeat_record", HEARTBEAT, others=None), HeartbeatRecord)


def test_nanoseconds_are_truncated_to_microseconds():
    record = {**TRANSFER_FIRST, "commit_timestamp": "2022-09-27T12:30:00.123456789Z"}
    assert parse_one_row("data_change_record", record).commit_timestamp.microsecond == 123456
    assert parse_record_dict("data_change_record", record).commit_timestamp.microsecond == 123456


def test_insert_and_delete_with_missing_values_become_empty_objects():
    insert = {
        **TRANSFER_FIRST,
        "mod_type": "INSERT",
        "value_capture_type": "NEW_VALUES",
        "mods": [{"keys": {"AccountId": "Id3"}, "new_values": {"Balance": "5"}, "old_values": None}],
    }
    delete = {
        **TRANSFER_FIRST,
        "mod_type": "DELETE",
        "value_capture_type": "NEW_ROW",
        "mods": [{"keys": {"AccountId": "Id3"}, "new_values": "null", "old_values": "{}"}],
    }
    for form in (
        lambda r: parse_record_dict("data_change_record", r),
        lambda r: parse_one_row("data_change_record", r),
    ):
        parsed_insert, parsed_delete = form(insert), form(delete)
        assert parsed_insert.mod_type is ModType.INSERT
        assert parsed_insert.mods[0] == Mod({"AccountId": "Id3"}, {"Balance": "5"}, {})
        assert parsed_delete.mod_type is ModType.DELETE
        assert parsed_delete.mods[0] == Mod({"AccountId": "Id3"}, {}, {})


def test_json_fields_may_be_json_text_in_dict_form():
    record = copy.deepcopy(TRANSFER_FIRST)
    record["mods"][0] = {key: json.dumps(value) for key, value in record["mods"][0].items()}
    record["column_types"] = [
        {**column, "type": json.dumps(column["type"])} for column in record["column_types"]
    ]
    assert parse_record_dict("data_change_record", record) == parse_record_dict(
        "data_change_record", TRANSFER_FIRST
    )
    assert parse_record_dict("data_change_record", json.dumps(TRANSFER_FIRST)).mods[0].keys == {
        "AccountId": "Id1"
    }


def test_structs_given_as_mappings_are_accepted():
    row = [
        [{"data_change_record": [TRANSFER_SECOND], "heartbeat_record": [], "child_partitions_record": None}]
    ]
    assert parse_change_record_row(row) == [parse_record_dict("data_change_record", TRANSFER_SECOND)]
    assert parse_change_record_row({"ChangeRecord": [[[], [HEARTBEAT], []]]}) == [
        HeartbeatRecord(datetime(2022, 9, 27, 12, 35, 0, 312486, tzinfo=UTC))
    ]


# --- heartbeat and child partitions records --------------------------------------------------------


def test_heartbeat_from_both_forms():
    expected = HeartbeatRecord(datetime(2022, 9, 27, 12, 35, 0, 312486, tzinfo=UTC))
    assert parse_record_dict("heartbeat_record", HEARTBEAT) == expected
    assert parse_one_row("heartbeat_record", HEARTBEAT) == expected
    assert expected.timestamp == datetime(2022, 9, 27, 12, 35, 0, 312486, tzinfo=UTC)


def test_children_of_the_initial_query_have_no_parents():
    start = datetime(2022, 5, 1, 9, 0, 1, tzinfo=UTC)
    first = parse_record_dict("child_partitions_record", INITIAL_CHILDREN_FIRST)
    second = parse_record_dict("child_partitions_record", INITIAL_CHILDREN_SECOND)
    assert first == ChildPartitionsRecord(
        start_timestamp=start,
        record_sequence="1000012389",
        child_partitions=(ChildPartition("child_token_1", ()), ChildPartition("child_token_2", ())),
    )
    assert second.record_sequence == "1000012390"
    assert second.child_partitions == (ChildPartition("child_token_3", ()),)
    assert first.timestamp == second.timestamp == start

    assert parse_one_row("child_partitions_record", INITIAL_CHILDREN_FIRST) == first
    assert parse_one_row("child_partitions_record", INITIAL_CHILDREN_SECOND) == second
    null_array = {**INITIAL_CHILDREN_SECOND, "child_partitions": [{"token": "child_token_3"}]}
    assert parse_one_row("child_partitions_record", null_array) == second  # ARRAY itself NULL


def test_merged_child_lists_both_parents():
    merged = parse_record_dict("child_partitions_record", MERGED_CHILD)
    assert merged.start_timestamp == datetime(2022, 5, 1, 9, 30, 15, tzinfo=UTC)
    assert merged.child_partitions == (ChildPartition("child_token_4", ("child_token_2", "child_token_3")),)
    assert parse_one_row("child_partitions_record", MERGED_CHILD) == merged

    two_parents = parse_one_row("child_partitions_record", CHILDREN_WITH_TWO_PARENTS)
    assert two_parents == parse_record_dict("child_partitions_record", CHILDREN_WITH_TWO_PARENTS)
    assert two_parents.start_timestamp == datetime(2022, 9, 27, 12, 40, 0, 562986, tzinfo=UTC)
    assert two_parents.record_sequence == "00000001"
    assert two_parents.child_partitions[0].parent_partition_tokens == ("parent_token_1", "parent_token_2")


# --- malformed records -----------------------------------------------------------------------------


def _with(base: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    record = copy.deepcopy(base)
    target = record
    for step in path[:-1]:
        target = target[step]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return record


_DELETE = object()

MALFORMED_DATA_CHANGES = [
    (("mod_type",), "UPSERT", "data_change_record.mod_type: expected one of INSERT, UPDATE, DELETE"),
    (("mods", 0, "keys"), ["Id1"], "data_change_record.mods[0].keys: expected a JSON object, got list"),
    (("mods", 0, "keys"), {}, "data_change_record.mods[0].keys: expected a non-empty JSON object"),
    (("mods", 0, "keys"), None, "data_change_record.mods[0].keys: expected a JSON object, got NULL"),
    (("mods", 0, "new_values"), 5, "data_change_record.mods[0].new_values: expected a JSON object, got int"),
    (
        ("mods", 0, "old_values"),
        "[1, 2]",
        "data_change_record.mods[0].old_values: expected a JSON object, got list",
    ),
    (("mods", 0, "old_values"), "{not json", "data_change_record.mods[0].old_values: not valid JSON text"),
    (("mods",), [], "data_change_record.mods: expected at least one mod"),
    (("mods",), _DELETE, "data_change_record.mods: missing"),
    (
        ("number_of_records_in_transaction",),
        0,
        "data_change_record.number_of_records_in_transaction: expected a value of at least 1, got 0",
    ),
    (
        ("number_of_partitions_in_transaction",),
        -1,
        "data_change_record.number_of_partitions_in_transaction: expected a value of at least 1",
    ),
    (
        ("number_of_partitions_in_transaction",),
        True,
        "data_change_record.number_of_partitions_in_transaction: expected an INT64, got bool",
    ),
    (("commit_timestamp",), "yesterday", "data_change_record.commit_timestamp: not an RFC 3339 timestamp"),
    (("commit_timestamp",), None, "data_change_record.commit_timestamp: expected a TIMESTAMP, got NULL"),
    (("record_sequence",), "0001a", "data_change_record.record_sequence: expected a decimal sequence number"),
    (("record_sequence",), str(1 << 64), "data_change_record.record_sequence: expected a decimal sequence"),
    (("server_transaction_id",), "", "data_change_record.server_transaction_id: expected a non-empty STRING"),
    (("table_name",), 7, "data_change_record.table_name: expected a STRING, got int"),
    (
        ("is_last_record_in_transaction_in_partition",),
        "true",
        "data_change_record.is_last_record_in_transaction_in_partition: expected a BOOL, got str",
    ),
    (("value_capture_type",), "EVERYTHING", "data_change_record.value_capture_type: expected one of"),
    (
        ("column_types", 1, "type"),
        {"kind": "STRING"},
        "data_change_record.column_types[1].type: expected a type object with a 'code'",
    ),
    (
        ("column_types", 2, "ordinal_position"),
        0,
        "data_change_record.column_types[2].ordinal_position: expected a value of at least 1",
    ),
    (
        ("column_types", 0, "is_primary_key"),
        None,
        "data_change_record.column_types[0].is_primary_key: expected a BOOL, got NULL",
    ),
    (("transaction_tag",), 3, "data_change_record.transaction_tag: expected a STRING, got int"),
]


@pytest.mark.parametrize(("path", "value", "message"), MALFORMED_DATA_CHANGES)
def test_malformed_data_change_record_names_the_field(path, value, message):
    with pytest.raises(MalformedRecordError) as error:
        parse_record_dict("data_change_record", _with(TRANSFER_FIRST, path, value))
    assert str(error.value).startswith(message)
    assert isinstance(error.value, ValueError)


MALFORMED_CHILDREN = [
    (
        ("child_partitions", 0, "token"),
        "",
        "child_partitions_record.child_partitions[0].token: expected a non-empty",
    ),
    (
        ("child_partitions", 1, "token"),
        None,
        "child_partitions_record.child_partitions[1].token: expected a STRING",
    ),
    (
        ("child_partitions", 0, "parent_partition_tokens"),
        ["", None],
        "child_partitions_record.child_partitions[0].parent_partition_tokens[0]: expected a non-empty STRING",
    ),
    (("child_partitions",), [], "child_partitions_record.child_partitions: expected at least one child"),
    (("start_timestamp",), 12, "child_partitions_record.start_timestamp: expected a TIMESTAMP, got int"),
]


@pytest.mark.parametrize(("path", "value", "message"), MALFORMED_CHILDREN)
def test_malformed_child_partitions_record_names_the_field(path, value, message):
    with pytest.raises(MalformedRecordError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        parse_record_dict("child_partitions_record", _with(INITIAL_CHILDREN_FIRST, path, value))


def test_malformed_heartbeat_names_the_field():
    with pytest.raises(MalformedRecordError, match=r"^heartbeat_record\.timestamp: expected a TIMESTAMP"):
        parse_record_dict("heartbeat_record", {"timestamp": None})
    with pytest.raises(MalformedRecordError, match=r"^heartbeat_record\.timestamp: missing"):
        parse_record_dict("heartbeat_record", {})


def test_malformed_client_row_names_the_field():
    record = _with(TRANSFER_FIRST, ("mods", 0, "keys"), [1, 2])  # decodes to an array-backed JsonObject
    with pytest.raises(MalformedRecordError, match=r"^data_change_record\.mods\[0\]\.keys: .*got list"):
        parse_one_row("data_change_record", record)
    record = _with(TRANSFER_FIRST, ("mod_type",), "MERGE")
    with pytest.raises(MalformedRecordError, match=r"^data_change_record\.mod_type: .*'MERGE'"):
        parse_one_row("data_change_record", record)


def test_row_shape_errors():
    heartbeat = [HEARTBEAT["timestamp"]]
    with pytest.raises(MalformedRecordError, match=r"^ChangeRecord\[0\]: expected exactly one .* found none"):
        parse_change_record_row([[[[], [], None]]])
    with pytest.raises(MalformedRecordError, match=r"found data_change_record, heartbeat_record"):
        parse_change_record_row([[[[TRANSFER_FIRST], [heartbeat], []]]])
    with pytest.raises(
        MalformedRecordError, match=r"^ChangeRecord\[0\]\.heartbeat_record: expected at most one"
    ):
        parse_change_record_row([[[[], [heartbeat, heartbeat], []]]])
    with pytest.raises(MalformedRecordError, match=r"^row: expected one column \(ChangeRecord\), got 2"):
        parse_change_record_row([[], []])
    with pytest.raises(MalformedRecordError, match=r"^ChangeRecord: expected an ARRAY .*got NULL"):
        parse_change_record_row([None])
    with pytest.raises(MalformedRecordError, match=r"MUTABLE_KEY_RANGE"):
        parse_change_record_row([b"\x0a\x02"])
    with pytest.raises(MalformedRecordError, match=r"^data_change_record: expected a STRUCT of 11 fields"):
        parse_change_record_row([[[[["2022-09-27T12:30:00Z", "0"]], [], []]]])
    with pytest.raises(MalformedRecordError, match=r"^record: unknown record kind 'partition_end_record'"):
        parse_record_dict("partition_end_record", {})


def test_row_with_several_change_records_yields_each():
    row = [[[[], [HEARTBEAT], []], [[], [], [MERGED_CHILD]]]]
    records = parse_change_record_row(row)
    assert [type(record) for record in records] == [HeartbeatRecord, ChildPartitionsRecord]


def test_json_change_records_as_postgresql_databases_return_them():
    from google.cloud.spanner_v1.data_types import JsonObject

    text = json.dumps({"data_change_record": TRANSFER_FIRST})
    expected = parse_record_dict("data_change_record", TRANSFER_FIRST)
    assert parse_change_record_json(text) == expected
    assert parse_change_record_json(JsonObject.from_str(text)) == expected  # JSONB as the client decodes it
    assert parse_change_record_json({"heartbeat_record": [HEARTBEAT], "data_change_record": []}) == (
        parse_record_dict("heartbeat_record", HEARTBEAT)
    )
    with pytest.raises(MalformedRecordError, match=r"^ChangeRecord: expected exactly one .* found none"):
        parse_change_record_json({"partition_end_record": {}})
    with pytest.raises(MalformedRecordError, match=r"^ChangeRecord: expected a JSON object, got list"):
        parse_change_record_json("[1]")
    with pytest.raises(MalformedRecordError, match=r"^child_partitions_record\.child_partitions\[0\]\.token"):
        parse_change_record_json(
            {"child_partitions_record": _with(MERGED_CHILD, ("child_partitions", 0, "token"), "")}
        )
