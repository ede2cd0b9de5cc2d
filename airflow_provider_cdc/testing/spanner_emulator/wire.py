"""Wire encoding: change-stream rows (the ``ChangeRecord`` column type and its values), table rows
(stored cells as protobuf ``Value`` bytes) and ``PartialResultSet`` messages built from parts."""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
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
    return framed_result_set(b"".join(frame_value(v) for v in values), resume_token, metadata)


def frame_value(value: bytes) -> bytes:
    """One serialized ``Value`` as an entry of ``PartialResultSet.values`` (field 2)."""
    return b"\x12" + _varint(len(value)) + value


def framed_result_set(values: bytes, resume_token: bytes, metadata: bytes | None = None) -> bytes:
    """Serialized ``PartialResultSet`` from already framed values (see :func:`frame_value`)."""
    head = b"" if metadata is None else b"\x0a" + _varint(len(metadata)) + metadata
    tail = b"\x22" + _varint(len(resume_token)) + resume_token if resume_token else b""
    return head + values + tail


# ----- table rows: stored cells (Spanner's JSON encoding) as protobuf ``Value`` bytes ----------------
_NULL_BYTES = b"\x08\x00"
_TRUE_BYTES, _FALSE_BYTES = b"\x20\x01", b"\x20\x00"


def encode_cell(cell: Any) -> bytes:
    """A stored cell as a serialized ``google.protobuf.Value``: strings for INT64, NUMERIC, STRING, BYTES,
    DATE, TIMESTAMP, JSON and non-finite floats, numbers for finite floats, lists for arrays."""
    if cell is None:
        return _NULL_BYTES
    if cell is True:
        return _TRUE_BYTES
    if cell is False:
        return _FALSE_BYTES
    if isinstance(cell, str):
        data = cell.encode()
        return b"\x1a" + _varint(len(data)) + data
    if isinstance(cell, float):
        return b"\x11" + struct.pack("<d", cell)
    if isinstance(cell, int):
        return encode_cell(str(cell))
    if isinstance(cell, list):
        inner = b"".join(b"\x0a" + _varint(len(e)) + e for e in map(encode_cell, cell))
        return b"\x32" + _varint(len(inner)) + inner
    raise TypeError(f"cannot encode a cell of type {type(cell).__name__}")


def encode_row(cells: Sequence[Any]) -> bytes:
    """A row's cells as framed ``PartialResultSet.values`` entries."""
    return b"".join(frame_value(encode_cell(cell)) for cell in cells)


def api_type(spanner_type: Any) -> Type:
    """The API ``Type`` of a column type (:class:`~.values.SpannerType`)."""
    if spanner_type.code == "ARRAY":
        return _array(api_type(spanner_type.element))
    return Type(code=TypeCode[spanner_type.code])


def result_metadata(fields: Sequence[tuple[str, Any]], transaction: Any = None) -> bytes:
    """Serialized ``ResultSetMetadata`` for ``(name, SpannerType)`` fields and, when a transaction
    began or a read timestamp is returned, that ``Transaction``."""
    metadata = result_set.ResultSetMetadata(
        row_type=StructType(fields=[StructType.Field(name=n, type_=api_type(t)) for n, t in fields])
    )
    if transaction is not None:
        metadata.transaction = transaction
    return result_set.ResultSetMetadata.serialize(metadata)
