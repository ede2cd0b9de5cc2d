"""Rows of an ``AppendRowsRequest`` decoded from the writer's own proto descriptor, as BigQuery reads them.

The message class is built from the request's ``ProtoSchema`` (``descriptor_pool`` and
``message_factory``), with every ``string`` field read as ``bytes`` so that the UTF-8 check is
the fake's own. :class:`RowDecoder` maps proto fields to table columns (case-insensitively) and
refuses, for the whole connection, a writer schema BigQuery refuses: a field that is not a column,
a proto type a column cannot take, and for CDC writes (``_CHANGE_TYPE`` in the schema) a table
without a primary key, with more than 16 key columns, or a schema without every key column.

Each row is checked as BigQuery checks it; a failure is a :class:`RowError` naming the field:
invalid UTF-8 in a STRING, JSON or NUMERIC text; JSON that does not parse (``NaN`` and
``Infinity`` included); NUMERIC (precision 38, scale 9) or BIGNUMERIC (precision 76.76, scale 38)
that is not a number or is out of range after rounding to its scale; DATE or TIMESTAMP outside
0001-01-01 .. 9999-12-31; a NULL or missing REQUIRED value; for CDC rows a NULL or missing
primary-key value, ``_CHANGE_TYPE`` other than ``UPSERT``/``DELETE`` and a
``_CHANGE_SEQUENCE_NUMBER`` that :func:`parse_sequence_number` refuses.
"""

from __future__ import annotations

import decimal
import json
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from .sequence import SequenceNumberError, parse_sequence_number
from .state import EPOCH, EPOCH_DATE, FakeTable

CHANGE_TYPE = "_CHANGE_TYPE"
CHANGE_SEQUENCE_NUMBER = "_CHANGE_SEQUENCE_NUMBER"
CHANGE_TYPES = ("UPSERT", "DELETE")
MAX_PRIMARY_KEY_COLUMNS = 16
_F = descriptor_pb2.FieldDescriptorProto
#: The proto field types BigQuery converts to each column type.
COMPATIBLE = {
    "BOOL": {_F.TYPE_BOOL},
    "INT64": {_F.TYPE_INT64, _F.TYPE_INT32, _F.TYPE_SINT64, _F.TYPE_SINT32, _F.TYPE_UINT32},
    "FLOAT64": {_F.TYPE_DOUBLE, _F.TYPE_FLOAT},
    "NUMERIC": {_F.TYPE_STRING, _F.TYPE_BYTES},
    "BIGNUMERIC": {_F.TYPE_STRING, _F.TYPE_BYTES},
    "STRING": {_F.TYPE_STRING},
    "JSON": {_F.TYPE_STRING},
    "BYTES": {_F.TYPE_BYTES},
    "DATE": {_F.TYPE_INT32, _F.TYPE_INT64},
    "TIMESTAMP": {_F.TYPE_INT64},
}
#: NUMERIC and BIGNUMERIC: scale and the exclusive bound of the unscaled integer.
NUMERIC_SCALE = {"NUMERIC": 9, "BIGNUMERIC": 38}
_NUMERIC_LIMIT = {"NUMERIC": (-(10**38) + 1, 10**38 - 1), "BIGNUMERIC": (-(2**255), 2**255 - 1)}
#: DATE and TIMESTAMP ranges: 0001-01-01 .. 9999-12-31 (days, microseconds since the epoch).
DATE_RANGE = (-719_162, 2_932_896)
TIMESTAMP_RANGE = (-62_135_596_800_000_000, 253_402_300_799_999_999)
_WIDE = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP, Emax=10**6, Emin=-(10**6))


class RowError(ValueError):
    """One row BigQuery refuses (the message names the field)."""


class WriterSchemaError(ValueError):
    """A writer schema BigQuery refuses for the connection (``INVALID_ARGUMENT``)."""


@dataclass(frozen=True)
class WriterField:
    """One proto field of the writer schema and the column it writes."""

    field: str
    column: str
    kind: str
    proto_type: int
    repeated: bool
    required: bool


@dataclass(frozen=True)
class DecodedRow:
    row: dict[str, Any]
    change_type: str | None
    sequence: tuple[int, ...] | None


def message_class(descriptor: descriptor_pb2.DescriptorProto) -> type:
    """A message class for the writer's descriptor, with ``string`` fields read as ``bytes``
    (the same wire format) so that invalid UTF-8 reaches the fake's own check."""
    readable = descriptor_pb2.DescriptorProto()
    readable.CopyFrom(descriptor)
    for proto_field in readable.field:
        if proto_field.type == _F.TYPE_STRING:
            proto_field.type = _F.TYPE_BYTES
    pool = descriptor_pool.DescriptorPool()
    file = descriptor_pb2.FileDescriptorProto(name=f"{readable.name or 'row'}.proto", syntax="proto2")
    file.message_type.add().CopyFrom(readable)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(readable.name))


class RowDecoder:
    """Decodes the rows a writer schema serializes into one table (with ``fields`` visible)."""

    def __init__(
        self, table: FakeTable, descriptor: descriptor_pb2.DescriptorProto, fields: list[dict[str, Any]]
    ) -> None:
        self.table = table
        self.where = f"{table.project}:{table.dataset}.{table.table}"
        try:
            self.message = message_class(descriptor)
        except Exception as exc:  # any descriptor the pool refuses
            raise WriterSchemaError(f"Invalid proto schema for table {self.where}: {exc}") from None
        visible = {f["name"].lower(): f for f in fields}
        self.fields: list[WriterField] = []
        self.pseudo: dict[str, str] = {}  # pseudo column -> proto field
        for proto_field in descriptor.field:
            name = proto_field.name
            if name.upper() in (CHANGE_TYPE, CHANGE_SEQUENCE_NUMBER):
                if proto_field.type != _F.TYPE_STRING or proto_field.label == _F.LABEL_REPEATED:
                    raise WriterSchemaError(f"{name} must be a singular string field (table {self.where})")
                self.pseudo[name.upper()] = name
                continue
            column = visible.get(name.lower())
            if column is None:
                raise WriterSchemaError(
                    f"Input schema has more fields than BigQuery schema, extra fields: '{name}' "
                    f"(table {self.where})"
                )
            repeated = proto_field.label == _F.LABEL_REPEATED
            if proto_field.type not in COMPATIBLE[column["type"]] or repeated != (
                column["mode"] == "REPEATED"
            ):
                raise WriterSchemaError(
                    f"Invalid proto schema: field {name} cannot be written to column {column['name']} "
                    f"of type {column['type']} {column['mode']} (table {self.where})"
                )
            self.fields.append(
                WriterField(
                    name,
                    column["name"],
                    column["type"],
                    proto_field.type,
                    repeated,
                    column["mode"] == "REQUIRED",
                )
            )
        self.cdc = CHANGE_TYPE in self.pseudo
        self.key = [table.column(c)["name"] for c in table.primary_key]  # type: ignore[index]
        if self.cdc:
            if not self.key:
                raise WriterSchemaError(
                    f"Table {self.where} has no primary key; _CHANGE_TYPE writes need a table with a "
                    "primary key"
                )
            if len(self.key) > MAX_PRIMARY_KEY_COLUMNS:
                raise WriterSchemaError(
                    f"Table {self.where} has a primary key of {len(self.key)} columns; CDC supports at most "
                    f"{MAX_PRIMARY_KEY_COLUMNS}"
                )
            written = {f.column.lower() for f in self.fields}
            missing = [c for c in self.key if c.lower() not in written]
            if missing:
                raise WriterSchemaError(
                    f"Input schema lacks primary key column(s) {missing} of table {self.where}"
                )
        self.required = [f["name"] for f in fields if f["mode"] == "REQUIRED"]

    def decode(self, data: bytes) -> DecodedRow:
        try:
            message = self.message.FromString(data)
        except DecodeError as exc:
            raise RowError(f"Could not parse the serialized row for table {self.where}: {exc}") from None
        row: dict[str, Any] = {
            c["name"]: ([] if c["mode"] == "REPEATED" else None) for c in self.table.fields
        }
        for writer_field in self.fields:
            if writer_field.repeated:
                row[writer_field.column] = [
                    column_value(writer_field, v) for v in getattr(message, writer_field.field)
                ]
            elif message.HasField(writer_field.field):
                row[writer_field.column] = column_value(writer_field, getattr(message, writer_field.field))
        change_type = self._pseudo_text(message, CHANGE_TYPE)
        if not self.cdc:
            self._check_required(row)
            return DecodedRow(row, None, None)
        if change_type not in CHANGE_TYPES:
            raise RowError(
                f"Field {CHANGE_TYPE}: The given value is not a valid CHANGE_TYPE: {change_type!r}; "
                "expected UPSERT or DELETE"
            )
        for column in self.key:
            if row.get(column) is None:
                raise RowError(
                    f"Field {column}: the primary key value is missing or NULL; a CDC row needs every key"
                )
        if change_type == "UPSERT":
            self._check_required(row)
        text = self._pseudo_text(message, CHANGE_SEQUENCE_NUMBER)
        sequence = None
        if text is not None:
            try:
                sequence = parse_sequence_number(text)
            except SequenceNumberError as exc:
                raise RowError(
                    f"Field {CHANGE_SEQUENCE_NUMBER}: Invalid _CHANGE_SEQUENCE_NUMBER: {exc}"
                ) from None
        return DecodedRow(row, change_type, sequence)

    def _pseudo_text(self, message: Any, pseudo: str) -> str | None:
        name = self.pseudo.get(pseudo)
        if name is None or not message.HasField(name):
            return None
        raw = getattr(message, name)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise RowError(f"Field {pseudo}: invalid UTF-8") from None

    def _check_required(self, row: dict[str, Any]) -> None:
        for column in self.required:
            if row.get(column) is None:
                raise RowError(f"Field {column}: a REQUIRED field has no value")


def column_value(writer_field: WriterField, raw: Any) -> Any:
    """A proto value as the column holds it (what a query returns), or a :class:`RowError`."""
    column, kind = writer_field.column, writer_field.kind
    if writer_field.proto_type == _F.TYPE_STRING:
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RowError(f"Field {column}: invalid UTF-8 in a {kind} value ({exc.reason})") from None
    if kind == "JSON":
        try:
            json.loads(raw, parse_constant=_no_constant)
        except ValueError as exc:
            raise RowError(f"Field {column}: invalid JSON value {raw[:40]!r}: {exc}") from None
        return raw
    if kind in NUMERIC_SCALE:
        return _numeric(column, kind, raw)
    if kind == "DATE":
        if not DATE_RANGE[0] <= raw <= DATE_RANGE[1]:
            raise RowError(
                f"Field {column}: DATE value {raw} (days since 1970-01-01) is out of range "
                "0001-01-01..9999-12-31"
            )
        return EPOCH_DATE + timedelta(days=raw)
    if kind == "TIMESTAMP":
        if not TIMESTAMP_RANGE[0] <= raw <= TIMESTAMP_RANGE[1]:
            raise RowError(
                f"Field {column}: TIMESTAMP value {raw} (microseconds since the epoch) is out of range "
                "0001-01-01 00:00:00..9999-12-31 23:59:59.999999 UTC"
            )
        return EPOCH + timedelta(microseconds=raw)
    return raw


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _numeric(column: str, kind: str, raw: str | bytes) -> Decimal:
    scale = NUMERIC_SCALE[kind]
    low, high = _NUMERIC_LIMIT[kind]
    if isinstance(raw, bytes):  # little-endian two's complement of the value times 10**scale
        unscaled = int.from_bytes(raw, "little", signed=True)
        value = Decimal(unscaled).scaleb(-scale, _WIDE)
    else:
        try:
            value = Decimal(raw.strip())
        except decimal.InvalidOperation:
            raise RowError(f"Field {column}: Invalid {kind} value: {raw[:40]!r} is not a number") from None
        if not value.is_finite():
            raise RowError(f"Field {column}: Invalid {kind} value: {raw!r} is not a finite number")
        if value and value.adjusted() > 80:
            raise RowError(f"Field {column}: {kind} value {raw!r} is out of range")
        unscaled = int(
            value.scaleb(scale, _WIDE).to_integral_value(rounding=decimal.ROUND_HALF_UP, context=_WIDE)
        )
        if value.as_tuple().exponent < -scale:  # type: ignore[operator]
            value = Decimal(unscaled).scaleb(-scale, _WIDE)
    if not low <= unscaled <= high:
        raise RowError(
            f"Field {column}: {kind} value {raw!r} is out of range (precision and scale of {kind})"
        )
    return value
