"""The Tablestore proto2 messages, built at runtime from their field lists (no protoc).

Field names and numbers follow the service's ``ots_internal_api.proto`` (API version 2015-12-31),
newer fields included: the stream calls (``ListStream``, ``DescribeStream``, ``GetShardIterator``,
``GetStreamRecord``), ``Error``, and the table and row calls (``CreateTable``, ``DescribeTable``,
``DeleteTable``, ``ListTable``, ``PutRow``, ``UpdateRow``, ``DeleteRow``, ``GetRow``, ``BatchGetRow``,
``BatchWriteRow``, ``GetRange``). Package names do not appear on the wire; ours is ``tablestore.stream``.
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
    "PrimaryKeyType": (("INTEGER", 1), ("STRING", 2), ("BINARY", 3), ("PK_BOOLEAN", 5)),
    "PrimaryKeyOption": (("AUTO_INCREMENT", 1),),
    "DefinedColumnType": (
        ("DCT_INTEGER", 1),
        ("DCT_DOUBLE", 2),
        ("DCT_BOOLEAN", 3),
        ("DCT_STRING", 4),
        ("DCT_BLOB", 7),
    ),
    "IndexUpdateMode": (("IUM_ASYNC_INDEX", 0), ("IUM_SYNC_INDEX", 1)),
    "IndexType": (("IT_GLOBAL_INDEX", 0), ("IT_LOCAL_INDEX", 1)),
    "SSEKeyType": (("SSE_KMS_SERVICE", 1), ("SSE_BYOK", 2)),
    "RowExistenceExpectation": (("IGNORE", 0), ("EXPECT_EXIST", 1), ("EXPECT_NOT_EXIST", 2)),
    "ReturnType": (("RT_NONE", 0), ("RT_PK", 1), ("RT_AFTER_MODIFY", 2)),
    "OperationType": (("PUT", 1), ("UPDATE", 2), ("DELETE", 3)),
    "Direction": (("FORWARD", 0), ("BACKWARD", 1)),
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
    # --- tables -------------------------------------------------------------------------------------
    "PrimaryKeySchema": (
        ("required", "string", "name", 1),
        ("required", "PrimaryKeyType", "type", 2),
        ("optional", "PrimaryKeyOption", "option", 3),
    ),
    "DefinedColumnSchema": (("required", "string", "name", 1), ("required", "DefinedColumnType", "type", 2)),
    "TableOptions": (
        ("optional", "int32", "time_to_live", 1),
        ("optional", "int32", "max_versions", 2),
        ("optional", "int64", "deviation_cell_version_in_sec", 5),
        ("optional", "bool", "allow_update", 6),
    ),
    "IndexMeta": (
        ("required", "string", "name", 1),
        ("repeated", "string", "primary_key", 2),
        ("repeated", "string", "defined_column", 3),
        ("required", "IndexUpdateMode", "index_update_mode", 4),
        ("required", "IndexType", "index_type", 5),
    ),
    "TableMeta": (
        ("required", "string", "table_name", 1),
        ("repeated", "PrimaryKeySchema", "primary_key", 2),
        ("repeated", "DefinedColumnSchema", "defined_column", 3),
    ),
    "Condition": (
        ("required", "RowExistenceExpectation", "row_existence", 1),
        ("optional", "bytes", "column_condition", 2),
    ),
    "ReservedThroughputDetails": (
        ("required", "CapacityUnit", "capacity_unit", 1),
        ("required", "int64", "last_increase_time", 2),
        ("optional", "int64", "last_decrease_time", 3),
    ),
    "ReservedThroughput": (("required", "CapacityUnit", "capacity_unit", 1),),
    "SSESpecification": (
        ("required", "bool", "enable", 1),
        ("optional", "SSEKeyType", "key_type", 2),
        ("optional", "bytes", "key_id", 3),
        ("optional", "bytes", "role_arn", 4),
    ),
    "SSEDetails": (
        ("required", "bool", "enable", 1),
        ("optional", "SSEKeyType", "key_type", 2),
        ("optional", "bytes", "key_id", 3),
        ("optional", "bytes", "role_arn", 4),
    ),
    "PartitionRange": (("required", "bytes", "begin", 1), ("required", "bytes", "end", 2)),
    "CreateTableRequest": (
        ("required", "TableMeta", "table_meta", 1),
        ("required", "ReservedThroughput", "reserved_throughput", 2),
        ("optional", "TableOptions", "table_options", 3),
        ("repeated", "PartitionRange", "partitions", 4),
        ("optional", "StreamSpecification", "stream_spec", 5),
        ("optional", "SSESpecification", "sse_spec", 6),
        ("repeated", "IndexMeta", "index_metas", 7),
    ),
    "CreateTableResponse": (),
    "DescribeTableRequest": (("required", "string", "table_name", 1),),
    "DescribeTableResponse": (
        ("required", "TableMeta", "table_meta", 1),
        ("required", "ReservedThroughputDetails", "reserved_throughput_details", 2),
        ("required", "TableOptions", "table_options", 3),
        ("optional", "StreamDetails", "stream_details", 5),
        ("repeated", "bytes", "shard_splits", 6),
        ("optional", "SSEDetails", "sse_details", 7),
        ("repeated", "IndexMeta", "index_metas", 8),
    ),
    "ListTableRequest": (),
    "ListTableResponse": (("repeated", "string", "table_names", 1),),
    "DeleteTableRequest": (("required", "string", "table_name", 1),),
    "DeleteTableResponse": (),
    # --- rows (``row``, ``row_change``, ``primary_key`` and the range keys are PlainBuffer) ----------
    "TimeRange": (
        ("optional", "int64", "start_time", 1),
        ("optional", "int64", "end_time", 2),
        ("optional", "int64", "specific_time", 3),
    ),
    "ReturnContent": (
        ("optional", "ReturnType", "return_type", 1),
        ("repeated", "string", "return_column_names", 2),
    ),
    "GetRowRequest": (
        ("required", "string", "table_name", 1),
        ("required", "bytes", "primary_key", 2),
        ("repeated", "string", "columns_to_get", 3),
        ("optional", "TimeRange", "time_range", 4),
        ("optional", "int32", "max_versions", 5),
        ("optional", "bytes", "filter", 7),
        ("optional", "string", "start_column", 8),
        ("optional", "string", "end_column", 9),
        ("optional", "bytes", "token", 10),
        ("optional", "string", "transaction_id", 11),
    ),
    "GetRowResponse": (
        ("required", "ConsumedCapacity", "consumed", 1),
        ("required", "bytes", "row", 2),
        ("optional", "bytes", "next_token", 3),
    ),
    "UpdateRowRequest": (
        ("required", "string", "table_name", 1),
        ("required", "bytes", "row_change", 2),
        ("required", "Condition", "condition", 3),
        ("optional", "ReturnContent", "return_content", 4),
        ("optional", "string", "transaction_id", 5),
    ),
    "UpdateRowResponse": (("required", "ConsumedCapacity", "consumed", 1), ("optional", "bytes", "row", 2)),
    "PutRowRequest": (
        ("required", "string", "table_name", 1),
        ("required", "bytes", "row", 2),
        ("required", "Condition", "condition", 3),
        ("optional", "ReturnContent", "return_content", 4),
        ("optional", "string", "transaction_id", 5),
    ),
    "PutRowResponse": (("required", "ConsumedCapacity", "consumed", 1), ("optional", "bytes", "row", 2)),
    "DeleteRowRequest": (
        ("required", "string", "table_name", 1),
        ("required", "bytes", "primary_key", 2),
        ("required", "Condition", "condition", 3),
        ("optional", "ReturnContent", "return_content", 4),
        ("optional", "string", "transaction_id", 5),
    ),
    "DeleteRowResponse": (("required", "ConsumedCapacity", "consumed", 1), ("optional", "bytes", "row", 2)),
    "TableInBatchGetRowRequest": (
        ("required", "string", "table_name", 1),
        ("repeated", "bytes", "primary_key", 2),
        ("repeated", "bytes", "token", 3),
        ("repeated", "string", "columns_to_get", 4),
        ("optional", "TimeRange", "time_range", 5),
        ("optional", "int32", "max_versions", 6),
        ("optional", "bytes", "filter", 8),
        ("optional", "string", "start_column", 9),
        ("optional", "string", "end_column", 10),
    ),
    "BatchGetRowRequest": (("repeated", "TableInBatchGetRowRequest", "tables", 1),),
    "RowInBatchGetRowResponse": (
        ("required", "bool", "is_ok", 1),
        ("optional", "Error", "error", 2),
        ("optional", "ConsumedCapacity", "consumed", 3),
        ("optional", "bytes", "row", 4),
        ("optional", "bytes", "next_token", 5),
    ),
    "TableInBatchGetRowResponse": (
        ("required", "string", "table_name", 1),
        ("repeated", "RowInBatchGetRowResponse", "rows", 2),
    ),
    "BatchGetRowResponse": (("repeated", "TableInBatchGetRowResponse", "tables", 1),),
    "RowInBatchWriteRowRequest": (
        ("required", "OperationType", "type", 1),
        ("required", "bytes", "row_change", 2),
        ("required", "Condition", "condition", 3),
        ("optional", "ReturnContent", "return_content", 4),
    ),
    "TableInBatchWriteRowRequest": (
        ("required", "string", "table_name", 1),
        ("repeated", "RowInBatchWriteRowRequest", "rows", 2),
    ),
    "BatchWriteRowRequest": (
        ("repeated", "TableInBatchWriteRowRequest", "tables", 1),
        ("optional", "string", "transaction_id", 2),
    ),
    "RowInBatchWriteRowResponse": (
        ("required", "bool", "is_ok", 1),
        ("optional", "Error", "error", 2),
        ("optional", "ConsumedCapacity", "consumed", 3),
        ("optional", "bytes", "row", 4),
    ),
    "TableInBatchWriteRowResponse": (
        ("required", "string", "table_name", 1),
        ("repeated", "RowInBatchWriteRowResponse", "rows", 2),
    ),
    "BatchWriteRowResponse": (("repeated", "TableInBatchWriteRowResponse", "tables", 1),),
    "GetRangeRequest": (
        ("required", "string", "table_name", 1),
        ("required", "Direction", "direction", 2),
        ("repeated", "string", "columns_to_get", 3),
        ("optional", "TimeRange", "time_range", 4),
        ("optional", "int32", "max_versions", 5),
        ("optional", "int32", "limit", 6),
        ("required", "bytes", "inclusive_start_primary_key", 7),
        ("required", "bytes", "exclusive_end_primary_key", 8),
        ("optional", "bytes", "filter", 10),
        ("optional", "string", "start_column", 11),
        ("optional", "string", "end_column", 12),
        ("optional", "bytes", "token", 13),
        ("optional", "string", "transaction_id", 14),
    ),
    "GetRangeResponse": (
        ("required", "ConsumedCapacity", "consumed", 1),
        ("required", "bytes", "rows", 2),
        ("optional", "bytes", "next_start_primary_key", 3),
        ("optional", "bytes", "next_token", 4),
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
PrimaryKeySchema = _message_class("PrimaryKeySchema")
DefinedColumnSchema = _message_class("DefinedColumnSchema")
TableOptions = _message_class("TableOptions")
IndexMeta = _message_class("IndexMeta")
TableMeta = _message_class("TableMeta")
Condition = _message_class("Condition")
ReservedThroughputDetails = _message_class("ReservedThroughputDetails")
ReservedThroughput = _message_class("ReservedThroughput")
SSESpecification = _message_class("SSESpecification")
SSEDetails = _message_class("SSEDetails")
PartitionRange = _message_class("PartitionRange")
CreateTableRequest = _message_class("CreateTableRequest")
CreateTableResponse = _message_class("CreateTableResponse")
DescribeTableRequest = _message_class("DescribeTableRequest")
DescribeTableResponse = _message_class("DescribeTableResponse")
ListTableRequest = _message_class("ListTableRequest")
ListTableResponse = _message_class("ListTableResponse")
DeleteTableRequest = _message_class("DeleteTableRequest")
DeleteTableResponse = _message_class("DeleteTableResponse")
TimeRange = _message_class("TimeRange")
ReturnContent = _message_class("ReturnContent")
GetRowRequest = _message_class("GetRowRequest")
GetRowResponse = _message_class("GetRowResponse")
UpdateRowRequest = _message_class("UpdateRowRequest")
UpdateRowResponse = _message_class("UpdateRowResponse")
PutRowRequest = _message_class("PutRowRequest")
PutRowResponse = _message_class("PutRowResponse")
DeleteRowRequest = _message_class("DeleteRowRequest")
DeleteRowResponse = _message_class("DeleteRowResponse")
TableInBatchGetRowRequest = _message_class("TableInBatchGetRowRequest")
BatchGetRowRequest = _message_class("BatchGetRowRequest")
RowInBatchGetRowResponse = _message_class("RowInBatchGetRowResponse")
TableInBatchGetRowResponse = _message_class("TableInBatchGetRowResponse")
BatchGetRowResponse = _message_class("BatchGetRowResponse")
RowInBatchWriteRowRequest = _message_class("RowInBatchWriteRowRequest")
TableInBatchWriteRowRequest = _message_class("TableInBatchWriteRowRequest")
BatchWriteRowRequest = _message_class("BatchWriteRowRequest")
RowInBatchWriteRowResponse = _message_class("RowInBatchWriteRowResponse")
TableInBatchWriteRowResponse = _message_class("TableInBatchWriteRowResponse")
BatchWriteRowResponse = _message_class("BatchWriteRowResponse")
GetRangeRequest = _message_class("GetRangeRequest")
GetRangeResponse = _message_class("GetRangeResponse")

STREAM_ENABLING = 1
STREAM_ACTIVE = 2
PUT_ROW = 1
UPDATE_ROW = 2
DELETE_ROW = 3
# PrimaryKeyType
INTEGER = 1
STRING = 2
BINARY = 3
PK_BOOLEAN = 5
# RowExistenceExpectation
IGNORE = 0
EXPECT_EXIST = 1
EXPECT_NOT_EXIST = 2
# ReturnType
RT_NONE = 0
RT_PK = 1
RT_AFTER_MODIFY = 2
# OperationType (BatchWriteRow)
PUT = 1
UPDATE = 2
DELETE = 3
# Direction (GetRange)
FORWARD = 0
BACKWARD = 1

ACTION_NAMES = {PUT_ROW: "PUT_ROW", UPDATE_ROW: "UPDATE_ROW", DELETE_ROW: "DELETE_ROW"}

__all__ = [
    "ACTION_NAMES",
    "BACKWARD",
    "BINARY",
    "DELETE",
    "DELETE_ROW",
    "ENUMS",
    "EXPECT_EXIST",
    "EXPECT_NOT_EXIST",
    "FILE_DESCRIPTOR",
    "FORWARD",
    "IGNORE",
    "INTEGER",
    "MESSAGES",
    "PK_BOOLEAN",
    "PUT",
    "PUT_ROW",
    "RT_AFTER_MODIFY",
    "RT_NONE",
    "RT_PK",
    "STREAM_ACTIVE",
    "STREAM_ENABLING",
    "STRING",
    "UPDATE",
    "UPDATE_ROW",
    "BatchGetRowRequest",
    "BatchGetRowResponse",
    "BatchWriteRowRequest",
    "BatchWriteRowResponse",
    "CapacityUnit",
    "Condition",
    "ConsumedCapacity",
    "CreateTableRequest",
    "CreateTableResponse",
    "DefinedColumnSchema",
    "DeleteRowRequest",
    "DeleteRowResponse",
    "DeleteTableRequest",
    "DeleteTableResponse",
    "DescribeStreamRequest",
    "DescribeStreamResponse",
    "DescribeTableRequest",
    "DescribeTableResponse",
    "Error",
    "GetRangeRequest",
    "GetRangeResponse",
    "GetRowRequest",
    "GetRowResponse",
    "GetShardIteratorRequest",
    "GetShardIteratorResponse",
    "GetStreamRecordRequest",
    "GetStreamRecordResponse",
    "IndexMeta",
    "ListStreamRequest",
    "ListStreamResponse",
    "ListTableRequest",
    "ListTableResponse",
    "PartitionRange",
    "PrimaryKeySchema",
    "PutRowRequest",
    "PutRowResponse",
    "ReservedThroughput",
    "ReservedThroughputDetails",
    "ReturnContent",
    "RowInBatchGetRowResponse",
    "RowInBatchWriteRowRequest",
    "RowInBatchWriteRowResponse",
    "SSEDetails",
    "SSESpecification",
    "Stream",
    "StreamDetails",
    "StreamShard",
    "StreamSpecification",
    "TableInBatchGetRowRequest",
    "TableInBatchGetRowResponse",
    "TableInBatchWriteRowRequest",
    "TableInBatchWriteRowResponse",
    "TableMeta",
    "TableOptions",
    "TimeRange",
    "UpdateRowRequest",
    "UpdateRowResponse",
]
