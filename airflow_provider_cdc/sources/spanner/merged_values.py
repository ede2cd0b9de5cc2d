"""Protobuf views of serialized ``google.protobuf.Value`` trees that read many values in one parse.

A query's rows travel as ``Value`` messages (a STRUCT or ARRAY as ``list_value``). Parsing the bytes
of a ``Value`` with another message type of the same wire layout changes what the parser builds:

* a list element declared as a *singular* message merges every element into one message (the
  protobuf rule for a singular message field met several times), so the scalar fields of all the
  elements, declared ``repeated``, come out as one list per kind, in wire order, built in C;
* a field declared ``bytes`` keeps a nested value's serialized form (a cache key, or input to the
  next parse).

The views here read the change-stream TVF's rows that way (:mod:`.record_decoder`): a batch of rows
down to the three record kinds of each ``ChangeRecord`` element (:data:`KindsView`), concatenated
data change record arrays down to their fields (:data:`RecordsView`), concatenated ``mods`` lists down
to their texts (:data:`ModsView`), and a list's element count (:data:`CountView`). Each level also
declares ``Value``'s other kinds (null, number, string, bool, struct), so a value of an unexpected
kind is seen rather than skipped. The parse is upb's, in C; nothing here walks values in Python.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "airflow_provider_cdc.spanner.merged"
_Field = descriptor_pb2.FieldDescriptorProto

#: ``Value``'s fields: null_value 1 (enum, a varint), number_value 2, string_value 3, bool_value 4,
#: struct_value 5, list_value 6; ``ListValue.values`` is 1, ``PartialResultSet.values`` 2.
_SCALARS = (
    (1, "null_value", _Field.TYPE_INT32),
    (2, "number_value", _Field.TYPE_DOUBLE),
    (3, "string_value", _Field.TYPE_STRING),
    (4, "bool_value", _Field.TYPE_BOOL),
    (5, "struct_value", _Field.TYPE_BYTES),
)


def _build() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto(
        name="airflow_provider_cdc/spanner_merged_values.proto", package=_PACKAGE, syntax="proto3"
    )

    def message(name: str, fields: list[tuple[int, str, int, int, str | None]]) -> None:
        proto = file.message_type.add(name=name)
        for number, field_name, label, type_, type_name in fields:
            field = proto.field.add(name=field_name, number=number, label=label, type=type_)
            if type_name is not None:
                field.type_name = f".{_PACKAGE}.{type_name}"

    repeated, optional = _Field.LABEL_REPEATED, _Field.LABEL_OPTIONAL

    def value(name: str, list_type: str | None) -> None:
        """A ``Value`` whose scalars are repeated; its list is ``list_type`` (``None``: its bytes)."""
        fields = [(number, field, repeated, type_, None) for number, field, type_ in _SCALARS]
        if list_type is None:
            fields.append((6, "list_value", repeated, _Field.TYPE_BYTES, None))
        else:
            fields.append((6, "list_value", optional, _Field.TYPE_MESSAGE, list_type))
        message(name, fields)

    def merged_list(name: str, element: str) -> None:
        """A ``ListValue`` whose elements all merge into one ``element``."""
        message(name, [(1, "values", optional, _Field.TYPE_MESSAGE, element)])

    # the leaf: one struct's (or all merged structs') fields, lists kept as bytes
    value("Leaf", None)
    merged_list("LeafList", "Leaf")
    value("Struct", "LeafList")  # a STRUCT value (a list of fields)
    merged_list("StructList", "Struct")
    value("StructArray", "StructList")  # an ARRAY<STRUCT> value

    # rows -> ChangeRecord elements -> the three record kinds' arrays, as bytes
    message("KindList", [(1, "values", repeated, _Field.TYPE_BYTES, None)])
    value("Element", "KindList")
    merged_list("ElementList", "Element")
    value("Row", "ElementList")
    message("Rows", [(2, "values", optional, _Field.TYPE_MESSAGE, "Row")])

    message("Count", [(1, "values", repeated, _Field.TYPE_BYTES, None)])

    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        proto.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{proto.name}"))
        for proto in file.message_type
    }


_TYPES = _build()

#: ``PartialResultSet`` bytes (rows in field 2): every row and ``ChangeRecord`` element merged; an
#: element's three record arrays are ``values.list_value.values.list_value.values`` (bytes, in order).
KindsView: Any = _TYPES["Rows"]
#: Concatenated ``ARRAY<STRUCT>`` values: every struct's fields merged into
#: ``list_value.values.list_value.values`` (a ``Leaf``: one repeated field per kind of value).
RecordsView: Any = _TYPES["StructArray"]
#: Concatenated ``ListValue`` bytes of ``ARRAY<STRUCT>`` values: every struct's fields merged into
#: ``values.list_value.values`` (a ``Leaf``).
ModsView: Any = _TYPES["StructList"]
#: ``ListValue`` bytes: ``values`` holds each element's bytes (``len`` counts them).
CountView: Any = _TYPES["Count"]

#: Serialized ``Value`` of an empty ARRAY and of a NULL.
EMPTY_ARRAY = b"\x32\x00"
NULL = b"\x08\x00"


def unexpected(value: Any) -> bool:
    """Whether a merged ``Value`` level holds anything but its list: a NULL, number, string, bool or
    struct where only lists belong."""
    return bool(
        value.null_value or value.number_value or value.string_value or value.bool_value or value.struct_value
    )


def frame(payload: bytes, number: int) -> bytes:
    """``payload`` as a length-delimited field ``number`` (number < 16)."""
    size = len(payload)
    head = bytearray([number << 3 | 2])
    while size >= 0x80:
        head.append(size & 0x7F | 0x80)
        size >>= 7
    head.append(size)
    return bytes(head) + payload


def change_record_value(kinds: tuple[bytes, bytes, bytes]) -> bytes:
    """Serialized ``ChangeRecord`` value (one element) of a record's three kind arrays."""
    element = frame(b"".join(frame(kind, 1) for kind in kinds), 6)
    return frame(frame(element, 1), 6)
