"""Wire encoding of change-stream rows: the ``ChangeRecord`` column type and its values."""

from __future__ import annotations

import json
from typing import Any

from google.cloud.spanner_v1 import StructType, Type, TypeCode
from google.cloud.spanner_v1.types import result_set
from google.protobuf import struct_pb2


def _t(code: TypeCode) -> Type:
    return Type(code=code)


def _array(element: Type) -> Type:
    return Type(code=TypeCode.ARRAY, array_element_type=element)


def _struct(*fields: tuple[str, Type]) -> Type:
    return Type(
        code=TypeCode.STRUCT,
        struct_type=StructType(fields=[StructType.Field(name=n, type_=t) for n, t in fields]),
    )


STRING, BOOL, INT64, TIMESTAMP, JSON = (
    _t(TypeCode.STRING),
    _t(TypeCode.BOOL),
    _t(TypeCode.INT64),
    _t(TypeCode.TIMESTAMP),
    _t(TypeCode.JSON),
)

DATA_CHANGE_RECORD = _struct(
    ("commit_timestamp", TIMESTAMP),
    ("record_sequence", STRING),
    ("server_transaction_id", STRING),
    ("is_last_record_in_transaction_in_partition", BOOL),
    ("table_name", STRING),
    (
        "column_types",
        _array(
            _struct(
                ("name", STRING),
                ("type", JSON),
                ("is_primary_key", BOOL),
                ("ordinal_position", INT64),
            )
        ),
    ),
    ("mods", _array(_struct(("keys", JSON), ("new_values", JSON), ("old_values", JSON)))),
    ("mod_type", STRING),
    ("value_capture_type", STRING),
    ("number_of_records_in_transaction", INT64),
    ("number_of_partitions_in_transaction", INT64),
    ("transaction_tag", STRING),
    ("is_system_transaction", BOOL),
)
HEARTBEAT_RECORD = _struct(("timestamp", TIMESTAMP))
CHILD_PARTITIONS_RECORD = _struct(
    ("start_timestamp", TIMESTAMP),
    ("record_sequence", STRING),
    ("child_partitions", _array(_struct(("token", STRING), ("parent_partition_tokens", _array(STRING))))),
)
CHANGE_RECORD = _array(
    _struct(
        ("data_change_record", _array(DATA_CHANGE_RECORD)),
        ("heartbeat_record", _array(HEARTBEAT_RECORD)),
        ("child_partitions_record", _array(CHILD_PARTITIONS_RECORD)),
    )
)


def change_record_metadata() -> bytes:
    """Serialized ``ResultSetMetadata`` of ``SELECT ChangeRecord FROM READ_<stream>(...)``."""
    metadata = result_set.ResultSetMetadata(
        row_type=StructType(fields=[StructType.Field(name="ChangeRecord", type_=CHANGE_RECORD)])
    )
    return result_set.ResultSetMetadata.serialize(metadata)


def _s(text: str) -> struct_pb2.Value:
    return struct_pb2.Value(string_value=text)


def _b(flag: bool) -> struct_pb2.Value:
    return struct_pb2.Value(bool_value=flag)


def _l(values: list[struct_pb2.Value]) -> struct_pb2.Value:
    return struct_pb2.Value(list_value=struct_pb2.ListValue(values=values))


_NULL = struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _row(data: list | None = None, heartbeat: list | None = None, children: list | None = None) -> bytes:
    struct = _l([_l(data or []), _l(heartbeat or []), _l(children or [])])
    return _l([struct]).SerializeToString()


def data_change_row(
    *,
    commit_ts: str,
    record_sequence: str,
    transaction_id: str,
    is_last: bool,
    table: str,
    column_types: list[dict],
    mods: list[tuple[dict, dict, dict]],
    mod_type: str,
    value_capture_type: str,
    records_in_transaction: int,
    partitions_in_transaction: int,
) -> bytes:
    """Serialized ``Value`` of one row carrying a data change record."""
    record = _l(
        [
            _s(commit_ts),
            _s(record_sequence),
            _s(transaction_id),
            _b(is_last),
            _s(table),
            _l(
                [
                    _l(
                        [
                            _s(c["name"]),
                            _s(_dumps(c["type"])),
                            _b(c["is_primary_key"]),
                            _s(str(c["ordinal_position"])),
                        ]
                    )
                    for c in column_types
                ]
            ),
            _l([_l([_s(_dumps(k)), _s(_dumps(n)), _s(_dumps(o))]) for k, n, o in mods]),
            _s(mod_type),
            _s(value_capture_type),
            _s(str(records_in_transaction)),
            _s(str(partitions_in_transaction)),
            _s(""),
            _b(False),
        ]
    )
    return _row(data=[record])


def heartbeat_row(timestamp: str) -> bytes:
    return _row(heartbeat=[_l([_s(timestamp)])])


def child_partitions_row(
    start_ts: str, record_sequence: str, children: list[tuple[str, list[str | None]]]
) -> bytes:
    entries = [
        _l([_s(token), _l([_NULL if p is None else _s(p) for p in parents])]) for token, parents in children
    ]
    return _row(children=[_l([_s(start_ts), _s(record_sequence), _l(entries)])])


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def partial_result_set(values: list[bytes], resume_token: bytes, metadata: bytes | None = None) -> bytes:
    """Serialized ``PartialResultSet`` (field 1 metadata, 2 values, 4 resume_token) built from parts."""
    parts = []
    if metadata is not None:
        parts.append(b"\x0a" + _varint(len(metadata)) + metadata)
    for value in values:
        parts.append(b"\x12" + _varint(len(value)) + value)
    if resume_token:
        parts.append(b"\x22" + _varint(len(resume_token)) + resume_token)
    return b"".join(parts)
