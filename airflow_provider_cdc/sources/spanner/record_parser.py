"""The parser of change-stream records: query rows and JSON records to typed records.

:func:`parse_change_record_row` turns a row of ``SELECT ChangeRecord FROM READ_<stream>(...)``, as
``google-cloud-spanner`` decodes it (STRUCTs as positional lists, JSON as ``JsonObject``, TIMESTAMP as
``DatetimeWithNanoseconds``), into :class:`~.records.DataChangeRecord`, :class:`~.records.HeartbeatRecord`
or :class:`~.records.ChildPartitionsRecord` values. :func:`parse_record_dict` reads the documented JSON
form of one record and :func:`parse_change_record_json` a whole JSON change record. All validate every
field and raise :class:`~.records.MalformedRecordError` naming the record kind and the field path that
is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any

from airflow_provider_cdc.core.columns import ColumnType
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.sources.spanner.records import (
    CHILD_PARTITIONS_RECORD,
    DATA_CHANGE_RECORD,
    HEARTBEAT_RECORD,
    RECORD_KINDS,
    ChangeStreamRecord,
    ChildPartition,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
    MalformedRecordError,
    Mod,
    ModType,
    ValueCaptureType,
)

# STRUCT field order as the change-stream TVF returns it.
_CHANGE_RECORD_FIELDS = RECORD_KINDS
_DATA_CHANGE_FIELDS = (
    "commit_timestamp",
    "record_sequence",
    "server_transaction_id",
    "is_last_record_in_transaction_in_partition",
    "table_name",
    "column_types",
    "mods",
    "mod_type",
    "value_capture_type",
    "number_of_records_in_transaction",
    "number_of_partitions_in_transaction",
    "transaction_tag",
    "is_system_transaction",
)
_DATA_CHANGE_REQUIRED = 11  # servers before transaction tags send the first eleven fields only
_COLUMN_TYPE_FIELDS = ("name", "type", "is_primary_key", "ordinal_position")
_MOD_FIELDS = ("keys", "new_values", "old_values")
_HEARTBEAT_FIELDS = ("timestamp",)
_CHILD_PARTITIONS_FIELDS = ("start_timestamp", "record_sequence", "child_partitions")
_CHILD_PARTITION_FIELDS = ("token", "parent_partition_tokens")

_DECIMAL = re.compile(r"[0-9]+")
_MAX_SEQUENCE = (1 << 64) - 1
_PROTO_RECORD = (
    "got a protobuf ChangeStreamRecord (change streams created with partition_mode='MUTABLE_KEY_RANGE'); "
    "only STRUCT change records are read"
)


# ---------------------------------------------------------------------------------------------
# Parsing entry points
# ---------------------------------------------------------------------------------------------


def parse_change_record_row(row: Any) -> list[ChangeStreamRecord]:
    """Records of one row of ``SELECT ChangeRecord FROM READ_<stream>(...)``.

    ``row`` is ``[change_record]`` as ``google-cloud-spanner`` yields it (a mapping with a
    ``ChangeRecord`` key is accepted too); ``change_record`` is the list of ChangeRecord STRUCTs,
    each a positional list in field order or a mapping of field name to value.
    """
    if isinstance(row, Mapping):
        if "ChangeRecord" not in row:
            raise MalformedRecordError("row", f"expected a ChangeRecord column, got columns {sorted(row)}")
        change_record = row["ChangeRecord"]
    elif _is_sequence(row):
        if len(row) != 1:
            raise MalformedRecordError("row", f"expected one column (ChangeRecord), got {len(row)}")
        change_record = row[0]
    else:
        raise MalformedRecordError("row", f"expected a row with one ChangeRecord column, got {_kind(row)}")

    if isinstance(change_record, (bytes, bytearray)) or hasattr(change_record, "SerializeToString"):
        raise MalformedRecordError("ChangeRecord", _PROTO_RECORD)
    if not _is_sequence(change_record):
        raise MalformedRecordError(
            "ChangeRecord", f"expected an ARRAY of ChangeRecord STRUCTs, got {_kind(change_record)}"
        )
    return [_parse_change_record(element, f"ChangeRecord[{i}]") for i, element in enumerate(change_record)]


def parse_record_dict(kind: str, value: Mapping[str, Any] | str) -> ChangeStreamRecord:
    """One record from its JSON form: ``kind`` names the record type, ``value`` its fields.

    Timestamps may be RFC 3339 text, ``record_sequence`` text or a number, JSON fields objects or
    JSON text. Keys other than the documented fields (e.g. ``record_type``) are ignored.
    """
    builder = _BUILDERS.get(kind)
    if builder is None:
        raise MalformedRecordError("record", f"unknown record kind {kind!r}; expected one of {RECORD_KINDS}")
    if isinstance(value, str):
        value = _json_text(value, kind)
    return builder(value, kind)


def parse_change_record_json(value: Any) -> ChangeStreamRecord:
    """One record from a JSON change record ``{"<kind>": {...fields...}}``.

    This is the shape PostgreSQL-dialect databases return from ``spanner.read_json_<stream>``
    (a JSONB column, decoded by the client as ``JsonObject``) and the shape of JSON logs of records.
    """
    if isinstance(value, str):
        value = _json_text(value, "ChangeRecord")
    value = _plain_json(value)
    if not isinstance(value, dict):
        raise MalformedRecordError("ChangeRecord", f"expected a JSON object, got {_kind(value)}")
    present = [kind for kind in RECORD_KINDS if value.get(kind) not in (None, [], {})]
    if len(present) != 1:
        raise MalformedRecordError(
            "ChangeRecord",
            f"expected exactly one of {', '.join(RECORD_KINDS)} to hold a record, "
            f"found {', '.join(present) or 'none'} (keys {sorted(value)})",
        )
    kind = present[0]
    record = value[kind]
    if isinstance(record, list):  # the STRUCT form's one-element array, written as JSON
        if len(record) != 1:
            raise MalformedRecordError(kind, f"expected one record, got {len(record)}")
        record = record[0]
    return _BUILDERS[kind](record, kind)


# ---------------------------------------------------------------------------------------------
# Record builders (shared by the positional and the dict form)
# ---------------------------------------------------------------------------------------------


def _parse_change_record(element: Any, path: str) -> ChangeStreamRecord:
    if isinstance(element, (bytes, bytearray)):
        raise MalformedRecordError(path, _PROTO_RECORD)
    fields = _struct(element, _CHANGE_RECORD_FIELDS, path, required=len(_CHANGE_RECORD_FIELDS))
    present: list[tuple[str, Any]] = []
    for kind in RECORD_KINDS:
        items = _array(fields.get(kind), f"{path}.{kind}")
        if len(items) > 1:
            raise MalformedRecordError(f"{path}.{kind}", f"expected at most one record, got {len(items)}")
        if items:
            present.append((kind, items[0]))
    if len(present) != 1:
        found = ", ".join(kind for kind, _ in present) or "none"
        raise MalformedRecordError(
            path, f"expected exactly one of {', '.join(RECORD_KINDS)} to hold a record, found {found}"
        )
    kind, value = present[0]
    return _BUILDERS[kind](value, kind)


def _data_change_record(value: Any, path: str) -> DataChangeRecord:
    fields = _struct(value, _DATA_CHANGE_FIELDS, path, required=_DATA_CHANGE_REQUIRED)
    column_types = tuple(
        _column_type(item, f"{path}.column_types[{i}]")
        for i, item in enumerate(_array(fields["column_types"], f"{path}.column_types", null_ok=False))
    )
    if not column_types:
        raise MalformedRecordError(f"{path}.column_types", "expected at least one column")
    mods = tuple(
        _mod(item, f"{path}.mods[{i}]")
        for i, item in enumerate(_array(fields["mods"], f"{path}.mods", null_ok=False))
    )
    if not mods:
        raise MalformedRecordError(f"{path}.mods", "expected at least one mod")
    transaction_tag = fields.get("transaction_tag")
    is_system_transaction = fields.get("is_system_transaction")
    return DataChangeRecord(
        commit_timestamp=_timestamp(fields["commit_timestamp"], f"{path}.commit_timestamp"),
        record_sequence=_sequence(fields["record_sequence"], f"{path}.record_sequence"),
        server_transaction_id=_text(fields["server_transaction_id"], f"{path}.server_transaction_id"),
        is_last_record_in_transaction_in_partition=_bool(
            fields["is_last_record_in_transaction_in_partition"],
            f"{path}.is_last_record_in_transaction_in_partition",
        ),
        table_name=_text(fields["table_name"], f"{path}.table_name"),
        column_types=column_types,
        mods=mods,
        mod_type=_enum(ModType, fields["mod_type"], f"{path}.mod_type"),
        value_capture_type=_enum(
            ValueCaptureType, fields["value_capture_type"], f"{path}.value_capture_type"
        ).value,
        number_of_records_in_transaction=_positive(
            fields["number_of_records_in_transaction"], f"{path}.number_of_records_in_transaction"
        ),
        number_of_partitions_in_transaction=_positive(
            fields["number_of_partitions_in_transaction"], f"{path}.number_of_partitions_in_transaction"
        ),
        transaction_tag=""
        if transaction_tag is None
        else _text(transaction_tag, f"{path}.transaction_tag", empty_ok=True),
        is_system_transaction=False
        if is_system_transaction is None
        else _bool(is_system_transaction, f"{path}.is_system_transaction"),
    )


def _column_type(value: Any, path: str) -> ColumnType:
    fields = _struct(value, _COLUMN_TYPE_FIELDS, path, required=len(_COLUMN_TYPE_FIELDS))
    type_ = _json_object(fields["type"], f"{path}.type", null_ok=False)
    if not isinstance(type_.get("code"), str) or not type_["code"]:
        raise MalformedRecordError(f"{path}.type", f"expected a type object with a 'code', got {type_!r}")
    return ColumnType(
        name=_text(fields["name"], f"{path}.name"),
        type=type_,
        is_primary_key=_bool(fields["is_primary_key"], f"{path}.is_primary_key"),
        ordinal_position=_positive(fields["ordinal_position"], f"{path}.ordinal_position"),
    )


def _mod(value: Any, path: str) -> Mod:
    fields = _struct(value, _MOD_FIELDS, path, required=len(_MOD_FIELDS))
    keys = _json_object(fields["keys"], f"{path}.keys", null_ok=False)
    if not keys:
        raise MalformedRecordError(f"{path}.keys", "expected a non-empty JSON object of primary-key values")
    return Mod(
        keys=keys,
        new_values=_json_object(fields["new_values"], f"{path}.new_values", null_ok=True),
        old_values=_json_object(fields["old_values"], f"{path}.old_values", null_ok=True),
    )


def _heartbeat_record(value: Any, path: str) -> HeartbeatRecord:
    fields = _struct(value, _HEARTBEAT_FIELDS, path, required=1)
    return HeartbeatRecord(timestamp=_timestamp(fields["timestamp"], f"{path}.timestamp"))


def _child_partitions_record(value: Any, path: str) -> ChildPartitionsRecord:
    fields = _struct(value, _CHILD_PARTITIONS_FIELDS, path, required=len(_CHILD_PARTITIONS_FIELDS))
    children = tuple(
        _child_partition(item, f"{path}.child_partitions[{i}]")
        for i, item in enumerate(
            _array(fields["child_partitions"], f"{path}.child_partitions", null_ok=False)
        )
    )
    if not children:
        raise MalformedRecordError(f"{path}.child_partitions", "expected at least one child partition")
    return ChildPartitionsRecord(
        start_timestamp=_timestamp(fields["start_timestamp"], f"{path}.start_timestamp"),
        record_sequence=_sequence(fields["record_sequence"], f"{path}.record_sequence"),
        child_partitions=children,
    )


def _child_partition(value: Any, path: str) -> ChildPartition:
    fields = _struct(value, _CHILD_PARTITION_FIELDS, path, required=len(_CHILD_PARTITION_FIELDS))
    parents_path = f"{path}.parent_partition_tokens"
    parents = tuple(
        _text(token, f"{parents_path}[{i}]")
        for i, token in enumerate(_array(fields["parent_partition_tokens"], parents_path))
        if token is not None  # the initial query's children have NULL parents
    )
    return ChildPartition(token=_text(fields["token"], f"{path}.token"), parent_partition_tokens=parents)


_BUILDERS: dict[str, Callable[[Any, str], ChangeStreamRecord]] = {
    DATA_CHANGE_RECORD: _data_change_record,
    HEARTBEAT_RECORD: _heartbeat_record,
    CHILD_PARTITIONS_RECORD: _child_partitions_record,
}


# ---------------------------------------------------------------------------------------------
# Field readers
# ---------------------------------------------------------------------------------------------


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _kind(value: Any) -> str:
    """Short description of a value's type for error messages."""
    if value is None:
        return "NULL"
    return type(value).__name__


def _struct(value: Any, names: Sequence[str], path: str, required: int) -> dict[str, Any]:
    """Fields of a STRUCT given positionally (client form) or as a mapping (dict form)."""
    if isinstance(value, Mapping):
        missing = [name for name in names[:required] if name not in value]
        if missing:
            raise MalformedRecordError(f"{path}.{missing[0]}", "missing")
        return {name: value[name] for name in names if name in value}
    if _is_sequence(value):
        if len(value) < required:
            raise MalformedRecordError(
                path,
                f"expected a STRUCT of {required} fields ({', '.join(names[:required])}), "
                f"got {len(value)} values",
            )
        return dict(zip(names, value, strict=False))  # later fields a newer server adds are ignored
    raise MalformedRecordError(path, f"expected a STRUCT, got {_kind(value)}")


def _array(value: Any, path: str, null_ok: bool = True) -> list[Any]:
    if value is None:
        if null_ok:
            return []
        raise MalformedRecordError(path, "expected an ARRAY, got NULL")
    if not _is_sequence(value):
        raise MalformedRecordError(path, f"expected an ARRAY, got {_kind(value)}")
    return list(value)


def _text(value: Any, path: str, empty_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise MalformedRecordError(path, f"expected a STRING, got {_kind(value)}")
    if not value and not empty_ok:
        raise MalformedRecordError(path, "expected a non-empty STRING")
    return value


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise MalformedRecordError(path, f"expected a BOOL, got {_kind(value)}")
    return value


def _positive(value: Any, path: str) -> int:
    """An INT64 that must be at least 1 (given as a number, or as decimal text in JSON)."""
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedRecordError(path, f"expected an INT64, got {_kind(value)}")
    if value < 1:
        raise MalformedRecordError(path, f"expected a value of at least 1, got {value}")
    return value


def _sequence(value: Any, path: str) -> str:
    """A record sequence: decimal digits, kept as text (leading zeros included)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_SEQUENCE:
        return str(value)
    if isinstance(value, str) and _DECIMAL.fullmatch(value) and int(value) <= _MAX_SEQUENCE:
        return value
    shown = repr(value) if isinstance(value, (str, int)) else _kind(value)
    raise MalformedRecordError(path, f"expected a decimal sequence number below 2**64, got {shown}")


def _timestamp(value: Any, path: str) -> datetime:
    if isinstance(value, datetime):
        return coerce_timestamp(value)
    if isinstance(value, str):
        try:
            return coerce_timestamp(value)
        except ValueError as exc:
            raise MalformedRecordError(path, str(exc)) from None
    raise MalformedRecordError(path, f"expected a TIMESTAMP, got {_kind(value)}")


def _enum(enum: type[Enum], value: Any, path: str) -> Any:
    allowed = ", ".join(member.value for member in enum)
    if not isinstance(value, str):
        raise MalformedRecordError(path, f"expected one of {allowed}, got {_kind(value)}")
    try:
        return enum(value)
    except ValueError:
        raise MalformedRecordError(path, f"expected one of {allowed}, got {value!r}") from None


def _json_text(text: str, path: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise MalformedRecordError(path, f"not valid JSON text ({exc})") from None


def _plain_json(value: Any) -> Any:
    """Plain Python value of a decoded JSON value (unwraps the client's ``JsonObject``)."""
    if isinstance(value, dict):
        if getattr(value, "_is_null", False):
            return None
        if getattr(value, "_is_array", False):
            return [_plain_json(item) for item in value._array_value]
        if getattr(value, "_is_scalar_value", False):
            return _plain_json(value._simple_value)
        return {key: _plain_json(item) for key, item in dict.items(value)}
    if isinstance(value, (list, tuple)):
        return [_plain_json(item) for item in value]
    return value


def _json_object(value: Any, path: str, null_ok: bool) -> dict[str, Any]:
    """A JSON column that must hold an object; NULL (SQL or JSON) becomes ``{}`` where allowed."""
    if isinstance(value, str):
        value = _json_text(value, path)
    value = _plain_json(value)
    if value is None:
        if null_ok:
            return {}
        raise MalformedRecordError(path, "expected a JSON object, got NULL")
    if not isinstance(value, dict):
        raise MalformedRecordError(path, f"expected a JSON object, got {_kind(value)}")
    return value
