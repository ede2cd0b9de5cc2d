"""The Tablestore Stream proto2 messages, built at runtime from their field lists (no protoc).

Field names and numbers follow the service's ``ots_internal_api.proto`` (API version 2015-12-31),
newer fields included. Package names do not appear on the wire; ours is ``tablestore.stream``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "tablestore.stream"

_F = descriptor_pb2.FieldDescriptorProto
_LABELS = {"required": _F.LABEL_REQUIRED, "optional": _F.LABEL_OPTIONAL, "repeated": _F.LABEL_REPEATED}
_SCALARS = {
    "bool": _F.TYPE_BOOL,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}

ENUMS: dict[str, tuple[tuple[str, int], ...]] = {
    "StreamStatus": (("STREAM_ENABLING", 1), ("STREAM_ACTIVE", 2)),
    "ActionType": (("PUT_ROW", 1), ("UPDATE_ROW", 2), ("DELETE_ROW", 3)),
}

# message name → fields (label, type, name, number); a type that is not a scalar names an enum or message.
# A nested message (``Outer.Inner``) follows its outer message.
MESSAGES: dict[str, tuple[tuple[str, str, str, int], ...]] = {
    "CapacityUnit": (("optional", "int32", "read", 1), ("optional", "int32", "write", 2)),
    "ConsumedCapacity": (("required", "CapacityUnit", "capacity_unit", 1),),
    "Error": (
        ("required", "string", "code", 1),
        ("optional", "string", "message", 2),
        ("optional", "string", "access_denied_detail", 3),
    ),
    "StreamSpecification": (
        ("required", "bool", "enable_stream", 1),
        ("optional", "int32", "expiration_time", 2),
        ("repeated", "string", "columns_to_get", 3),
    ),
    "StreamDetails": (
        ("required", "bool", "enable_stream", 1),
        ("optional", "string", "stream_id", 2),
        ("optional", "int32", "expiration_time", 3),
        ("optional", "int64", "last_enable_time", 4),
        ("repeated", "string", "column_to_get", 5),
    ),
    "ListStreamRequest": (("optional", "string", "table_name", 1),),
    "Stream": (
        ("required", "string", "stream_id", 1),
        ("required", "string", "table_name", 2),
        ("required", "int64", "creation_time", 3),
    ),
    "ListStreamResponse": (("repeated", "Stream", "streams", 1),),
    "StreamShard": (
        ("required", "string", "shard_id", 1),
        ("optional", "string", "parent_id", 2),
        ("optional", "string", "parent_sibling_id", 3),
    ),
    "DescribeStreamRequest": (
        ("required", "string", "stream_id", 1),
        ("optional", "string", "inclusive_start_shard_id", 2),
        ("optional", "int32", "shard_limit", 3),
        ("optional", "bool", "support_timeseries_data_table", 4),
    ),
    "DescribeStreamResponse": (
        ("required", "string", "stream_id", 1),
        ("required", "int32", "expiration_time", 2),
        ("required", "string", "table_name", 3),
        ("required", "int64", "creation_time", 4),
        ("required", "StreamStatus", "stream_status", 5),
        ("repeated", "StreamShard", "shards", 6),
        ("optional", "string", "next_shard_id", 7),
        ("optional", "bool", "is_timeseries_data_table", 8),
    ),
    "GetShardIteratorRequest": (
        ("required", "string", "stream_id", 1),
        ("required", "string", "shard_id", 2),
        ("optional", "int64", "timestamp", 3),
        ("optional", "string", "token", 4),
    ),
    "GetShardIteratorResponse": (
        ("required", "string", "shard_iterator", 1),
        ("optional", "string", "next_token", 2),
    ),
    "GetStreamRecordRequest": (
        ("required", "string", "shard_iterator", 1),
        ("optional", "int32", "limit", 2),
        ("optional", "string", "table_name", 3),
    ),
    "GetStreamRecordResponse": (
        ("repeated", "GetStreamRecordResponse.StreamRecord", "stream_records", 1),
        ("optional", "string", "next_shard_iterator", 2),
        ("optional", "ConsumedCapacity", "consumed", 3),
        ("optional", "bool", "may_more_record", 4),
    ),
    "GetStreamRecordResponse.StreamRecord": (
        ("required", "ActionType", "action_type", 1),
        ("required", "bytes", "record", 2),
        ("optional", "bytes", "origin_record", 3),
    ),
}


def _field(label: str, type_: str, name: str, number: int) -> descriptor_pb2.FieldDescriptorProto:
    field = _F(name=name, number=number, label=_LABELS[label])
    if type_ in _SCALARS:
        field.type = _SCALARS[type_]
    elif type_ in ENUMS:
        field.type = _F.TYPE_ENUM
        field.type_name = f".{PACKAGE}.{type_}"
    else:
        field.type = _F.TYPE_MESSAGE
        field.type_name = f".{PACKAGE}.{type_}"
    return field


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="tablestore_stream.proto", package=PACKAGE, syntax="proto2"
    )
    for enum_name, values in ENUMS.items():
        enum = proto.enum_type.add(name=enum_name)
        for value_name, number in values:
            enum.value.add(name=value_name, number=number)
    top_level: dict[str, descriptor_pb2.DescriptorProto] = {}
    for full_name, fields in MESSAGES.items():
        outer, _, inner = full_name.partition(".")
        if inner:
            message = top_level[outer].nested_type.add(name=inner)
        else:
            message = proto.message_type.add(name=outer)
            top_level[outer] = message
        message.field.extend(_field(*spec) for spec in fields)
    return proto


FILE_DESCRIPTOR = _file_descriptor()
_POOL = descriptor_pool.DescriptorPool()
_POOL.AddSerializedFile(FILE_DESCRIPTOR.SerializeToString())


def _message_class(name: str) -> Any:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


CapacityUnit = _message_class("CapacityUnit")
ConsumedCapacity = _message_class("ConsumedCapacity")
Error = _message_class("Error")
StreamSpecification = _message_class("StreamSpecification")
StreamDetails = _message_class("StreamDetails")
ListStreamRequest = _message_class("ListStreamRequest")
Stream = _message_class("Stream")
ListStreamResponse = _message_class("ListStreamResponse")
StreamShard = _message_class("StreamShard")
DescribeStreamRequest = _message_class("DescribeStreamRequest")
DescribeStreamResponse = _message_class("DescribeStreamResponse")
GetShardIteratorRequest = _message_class("GetShardIteratorRequest")
GetShardIteratorResponse = _message_class("GetShardIteratorResponse")
GetStreamRecordRequest = _message_class("GetStreamRecordRequest")
GetStreamRecordResponse = _message_class("GetStreamRecordResponse")

STREAM_ENABLING = 1
STREAM_ACTIVE = 2
PUT_ROW = 1
UPDATE_ROW = 2
DELETE_ROW = 3

ACTION_NAMES = {PUT_ROW: "PUT_ROW", UPDATE_ROW: "UPDATE_ROW", DELETE_ROW: "DELETE_ROW"}

__all__ = [
    "ACTION_NAMES",
    "DELETE_ROW",
    "ENUMS",
    "FILE_DESCRIPTOR",
    "MESSAGES",
    "PUT_ROW",
    "STREAM_ACTIVE",
    "STREAM_ENABLING",
    "UPDATE_ROW",
    "CapacityUnit",
    "ConsumedCapacity",
    "DescribeStreamRequest",
    "DescribeStreamResponse",
    "Error",
    "GetShardIteratorRequest",
    "GetShardIteratorResponse",
    "GetStreamRecordRequest",
    "GetStreamRecordResponse",
    "ListStreamRequest",
    "ListStreamResponse",
    "Stream",
    "StreamDetails",
    "StreamShard",
    "StreamSpecification",
]
