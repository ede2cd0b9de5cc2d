"""The stream messages: field names, numbers, labels and types exactly as the service's proto2 text."""

# ruff: noqa: E501 - the proto text is quoted as published

from __future__ import annotations

import re

import pytest
from google.protobuf.message import EncodeError

from airflow_provider_cdc.sources.tablestore.protocol import messages

# The service's proto2 text (ots_internal_api.proto, API 2015-12-31) for the stream calls and errors.
PROTO = """
message CapacityUnit { optional int32 read = 1; optional int32 write = 2; }
message ConsumedCapacity { required CapacityUnit capacity_unit = 1; }
message Error { required string code = 1; optional string message = 2; optional string access_denied_detail = 3; }
message StreamSpecification { required bool enable_stream = 1; optional int32 expiration_time = 2; repeated string columns_to_get = 3; }
message StreamDetails { required bool enable_stream = 1; optional string stream_id = 2; optional int32 expiration_time = 3;
                        optional int64 last_enable_time = 4; repeated string column_to_get = 5; }
message ListStreamRequest { optional string table_name = 1; }
message Stream { required string stream_id = 1; required string table_name = 2; required int64 creation_time = 3; }
message ListStreamResponse { repeated Stream streams = 1; }
message StreamShard { required string shard_id = 1; optional string parent_id = 2; optional string parent_sibling_id = 3; }
enum StreamStatus { STREAM_ENABLING = 1; STREAM_ACTIVE = 2; }
message DescribeStreamRequest { required string stream_id = 1; optional string inclusive_start_shard_id = 2;
                                optional int32 shard_limit = 3; optional bool support_timeseries_data_table = 4; }
message DescribeStreamResponse { required string stream_id = 1; required int32 expiration_time = 2; required string table_name = 3;
  required int64 creation_time = 4; required StreamStatus stream_status = 5; repeated StreamShard shards = 6;
  optional string next_shard_id = 7; optional bool is_timeseries_data_table = 8; }
message GetShardIteratorRequest { required string stream_id = 1; required string shard_id = 2; optional int64 timestamp = 3; optional string token = 4; }
message GetShardIteratorResponse { required string shard_iterator = 1; optional string next_token = 2; }
message GetStreamRecordRequest { required string shard_iterator = 1; optional int32 limit = 2; optional string table_name = 3; }
enum ActionType { PUT_ROW = 1; UPDATE_ROW = 2; DELETE_ROW = 3; }
message GetStreamRecordResponse {
  message StreamRecord { required ActionType action_type = 1; required bytes record = 2; optional bytes origin_record = 3; }
  repeated StreamRecord stream_records = 1; optional string next_shard_iterator = 2;
  optional ConsumedCapacity consumed = 3; optional bool may_more_record = 4; }
"""

FIELD = re.compile(r"(required|optional|repeated)\s+(\w+)\s+(\w+)\s*=\s*(\d+)\s*;")
LABELS = {1: "optional", 2: "required", 3: "repeated"}
SCALARS = {8: "bool", 5: "int32", 3: "int64", 9: "string", 12: "bytes"}


def quoted_messages() -> dict[str, list[tuple[str, str, str, int]]]:
    found: dict[str, list[tuple[str, str, str, int]]] = {}
    text = PROTO.replace("\n", " ")
    nested = re.search(r"message GetStreamRecordResponse \{\s*message StreamRecord \{([^}]*)\}", text)
    assert nested is not None
    found["GetStreamRecordResponse.StreamRecord"] = [
        (label, type_, name, int(number)) for label, type_, name, number in FIELD.findall(nested.group(1))
    ]
    text = text.replace(nested.group(0), "message GetStreamRecordResponse {")
    for name, body in re.findall(r"message (\w+) \{([^}]*)\}", text):
        found[name] = [
            (label, type_, field, int(number)) for label, type_, field, number in FIELD.findall(body)
        ]
    return found


def described(message_class) -> list[tuple[str, str, str, int]]:
    fields = []
    for field in message_class.DESCRIPTOR.fields:
        if field.message_type is not None:
            type_ = field.message_type.name
        elif field.enum_type is not None:
            type_ = field.enum_type.name
        else:
            type_ = SCALARS[field.type]
        label = "repeated" if field.is_repeated else ("required" if field.is_required else "optional")
        fields.append((label, type_, field.name, field.number))
    return fields


def test_every_quoted_message_is_built_with_its_exact_fields():
    quoted = quoted_messages()
    assert len(quoted) == 16
    for name, fields in quoted.items():
        outer, _, inner = name.partition(".")
        message_class = getattr(messages, outer)
        if inner:
            message_class = getattr(message_class, inner)
        assert described(message_class) == fields, name


def test_enums_match_the_quoted_values():
    for enum_name, body in re.findall(r"enum (\w+) \{([^}]*)\}", PROTO):
        quoted = {name: int(number) for name, number in re.findall(r"(\w+)\s*=\s*(\d+)", body)}
        for name, number in quoted.items():
            assert getattr(messages, name) == number
        assert dict(messages.ENUMS[enum_name]) == quoted


def test_a_record_response_round_trips():
    response = messages.GetStreamRecordResponse(next_shard_iterator="it", may_more_record=False)
    response.stream_records.add(
        action_type=messages.UPDATE_ROW, record=b"\x75\x00\x00\x00", origin_record=b"o"
    )
    response.consumed.capacity_unit.read = 2
    parsed = messages.GetStreamRecordResponse.FromString(response.SerializeToString())
    assert parsed == response
    assert parsed.stream_records[0].action_type == messages.UPDATE_ROW


def test_required_fields_are_enforced():
    with pytest.raises(EncodeError):
        messages.GetShardIteratorRequest(stream_id="s").SerializeToString()
    partial = messages.GetShardIteratorRequest(stream_id="s").SerializePartialToString()
    parsed = messages.GetShardIteratorRequest.FromString(partial)
    assert parsed.FindInitializationErrors() == ["shard_id"]
