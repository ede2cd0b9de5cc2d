"""``google.cloud.bigquery.storage.v1.BigQueryWrite`` over loopback gRPC, enforcing BigQuery CDC's rules.

What it enforces (and how a real BigQuery answers): the default stream only
(``projects/*/datasets/*/tables/*/streams/_default``); an existing table; a writer schema whose
fields are all table columns (or the pseudo columns) with matching proto types; for CDC writes a
declared primary key of at most 16 columns, ``_CHANGE_TYPE`` in {UPSERT, DELETE} on every row (a
connection does not mix CDC and plain rows), ``_CHANGE_SEQUENCE_NUMBER`` in BigQuery's format;
requests of at most 10 MB. A request with a bad row fails whole, with ``row_errors``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.cloud.bigquery_storage_v1 import types
from google.protobuf import descriptor_pb2
from google.rpc import code_pb2, status_pb2

from airflow_provider_cdc.bigquery.schema import (
    CHANGE_TYPE_FIELD,
    MAX_PRIMARY_KEY_COLUMNS,
    SEQUENCE_FIELD,
    message_class,
)
from airflow_provider_cdc.domain.sequence_number import ChangeSequenceNumber, InvalidSequenceNumberError

from .state import FakeError, FakeState, FakeTable, python_value

SERVICE = "google.cloud.bigquery.storage.v1.BigQueryWrite"
MAX_REQUEST_BYTES = 10 * 1024 * 1024
_STREAM = re.compile(r"^projects/([^/]+)/datasets/([^/]+)/tables/([^/]+)/streams/([^/]+)$")
_F = descriptor_pb2.FieldDescriptorProto
_COMPATIBLE = {
    "BOOL": {_F.TYPE_BOOL},
    "INT64": {_F.TYPE_INT64, _F.TYPE_INT32, _F.TYPE_SINT64, _F.TYPE_UINT32},
    "FLOAT64": {_F.TYPE_DOUBLE, _F.TYPE_FLOAT},
    "NUMERIC": {_F.TYPE_STRING, _F.TYPE_BYTES},
    "BIGNUMERIC": {_F.TYPE_STRING, _F.TYPE_BYTES},
    "STRING": {_F.TYPE_STRING},
    "JSON": {_F.TYPE_STRING},
    "BYTES": {_F.TYPE_BYTES},
    "DATE": {_F.TYPE_INT32},
    "TIMESTAMP": {_F.TYPE_INT64},
}
_REQUEST = types.AppendRowsRequest.pb()
_RESPONSE = types.AppendRowsResponse.pb()
_ROW_ERROR = types.RowError.pb()
_WRITE_STREAM = types.WriteStream.pb()


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Writer:
    """A connection's current destination: table, decoder and field mapping."""

    def __init__(
        self, table: FakeTable, descriptor: descriptor_pb2.DescriptorProto, fields: list[dict[str, Any]]
    ) -> None:
        self.table = table
        visible = {f["name"].lower(): f for f in fields}
        self.message = message_class(descriptor)
        self.columns: list[tuple[str, str, str, bool]] = []  # field, column, type, repeated
        self.cdc = False
        where = f"{table.project}:{table.dataset}.{table.table}"
        for proto_field in descriptor.field:
            name = proto_field.name
            if name.upper() in (CHANGE_TYPE_FIELD, SEQUENCE_FIELD):
                if proto_field.type != _F.TYPE_STRING:
                    raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"{name} must be a string field")
                self.cdc = self.cdc or name.upper() == CHANGE_TYPE_FIELD
                continue
            column = visible.get(name.lower())
            if column is None:
                raise _Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Input schema has more fields than BigQuery schema, extra fields: '{name}' "
                    f"(table {where})",
                )
            repeated = proto_field.label == _F.LABEL_REPEATED
            if proto_field.type not in _COMPATIBLE[column["type"]] or repeated != (
                column["mode"] == "REPEATED"
            ):
                raise _Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Invalid proto schema: field {name} cannot be written to column {column['name']} "
                    f"of type {column['type']} {column['mode']} (table {where})",
                )
            self.columns.append((name, column["name"], column["type"], repeated))
        self.fields = {name for name, *_ in self.columns}
        if self.cdc:
            key = table.primary_key
            if not key:
                raise _Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Table {where} has no primary key; _CHANGE_TYPE writes need a table with a primary key",
                )
            if len(key) > MAX_PRIMARY_KEY_COLUMNS:
                raise _Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Table {where} has a primary key of {len(key)} columns; CDC supports at most "
                    f"{MAX_PRIMARY_KEY_COLUMNS}",
                )
            written = {column.lower() for _f, column, *_ in self.columns}
            missing = [c for c in key if c.lower() not in written]
            if missing:
                raise _Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Input schema lacks primary key column(s) {missing} of table {where}",
                )


class BigQueryWriteServicer:
    """The servicer; ``state`` is shared with the REST side."""

    def __init__(
        self, state: FakeState, max_request_bytes: int = MAX_REQUEST_BYTES, schema_delay_seconds: float = 0.0
    ) -> None:
        self.state = state
        self.max_request_bytes = max_request_bytes
        #: a new table, or new columns, reach the Storage Write API only this long after the change
        self.schema_delay_seconds = schema_delay_seconds
        self._faults: list[tuple[int, grpc.StatusCode]] = []  # (requests to let through, code)
        self._fault_lock = threading.Lock()
        self.connections = 0

    # ------------------------------------------------------------------ fault injection
    def fail_appends(
        self, times: int = 1, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE, after_requests: int = 0
    ) -> None:
        """Break the next ``times`` connections after ``after_requests`` requests with ``code``;
        the failing request is not applied."""
        with self._fault_lock:
            self._faults.extend([(after_requests, code)] * times)

    def _take_fault(self) -> tuple[int, grpc.StatusCode] | None:
        with self._fault_lock:
            return self._faults.pop(0) if self._faults else None

    # ------------------------------------------------------------------ handlers
    def handlers(self) -> grpc.GenericRpcHandler:
        def unary(fn: Callable[..., Any], request: Any, response: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=request.FromString, response_serializer=response.SerializeToString
            )

        methods = {
            "AppendRows": grpc.stream_stream_rpc_method_handler(
                self.append_rows,
                request_deserializer=lambda data: (len(data), _REQUEST.FromString(data)),
                response_serializer=_RESPONSE.SerializeToString,
            ),
            "GetWriteStream": unary(self.get_write_stream, types.GetWriteStreamRequest.pb(), _WRITE_STREAM),
            "CreateWriteStream": unary(
                self.create_write_stream, types.CreateWriteStreamRequest.pb(), _WRITE_STREAM
            ),
            "FinalizeWriteStream": unary(
                self.finalize_write_stream,
                types.FinalizeWriteStreamRequest.pb(),
                types.FinalizeWriteStreamResponse.pb(),
            ),
        }
        return grpc.method_handlers_generic_handler(SERVICE, methods)

    def _writer(self, name: str, descriptor: descriptor_pb2.DescriptorProto) -> _Writer:
        table = self._stream_table(name)
        fields = table.fields
        if time.monotonic() - table.schema_changed_s < self.schema_delay_seconds:
            if table.previous_fields is None:
                raise _Abort(grpc.StatusCode.NOT_FOUND, f"Not found: Table {name} (created moments ago)")
            fields = table.previous_fields
        return _Writer(table, descriptor, fields)

    def _stream_table(self, name: str) -> FakeTable:
        match = _STREAM.match(name or "")
        if not match:
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid stream name {name!r}")
        project, dataset, table, stream = match.groups()
        if stream != "_default":
            raise _Abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Stream {name} is not the default stream; BigQuery CDC (_CHANGE_TYPE) writes go through "
                "the _default stream only",
            )
        try:
            return self.state.table(project, dataset, table)
        except FakeError as exc:
            raise _Abort(grpc.StatusCode.NOT_FOUND, exc.message) from None

    def get_write_stream(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            table = self._stream_table(request.name)
        except _Abort as exc:
            context.abort(exc.code, exc.message)
        stream = _WRITE_STREAM(name=request.name, type=types.WriteStream.Type.COMMITTED)
        for column in table.fields:
            stream.table_schema.fields.add(
                name=column["name"],
                type=types.TableFieldSchema.Type[column["type"]].value,
                mode=types.TableFieldSchema.Mode[column["mode"]].value,
            )
        return stream

    def create_write_stream(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            "this server supports the _default stream only (as BigQuery CDC requires)",
        )

    def finalize_write_stream(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the _default stream cannot be finalized")

    def append_rows(
        self, requests: Iterator[tuple[int, Any]], context: grpc.ServicerContext
    ) -> Iterator[Any]:
        self.connections += 1
        fault = self._take_fault()
        writer: _Writer | None = None
        stream_name = ""
        mode: bool | None = None  # whether the connection writes CDC rows
        try:
            for index, (size, request) in enumerate(requests):
                if fault is not None and index >= fault[0]:
                    raise _Abort(fault[1], "injected failure: the service is unavailable, retry")
                if size > self.max_request_bytes:
                    raise _Abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"AppendRows request too large: {size} bytes, limit {self.max_request_bytes}",
                    )
                if request.write_stream and request.write_stream != stream_name:
                    stream_name = request.write_stream
                    writer = None
                if not stream_name:
                    raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, "the first request must set write_stream")
                if request.proto_rows.HasField("writer_schema"):
                    writer = self._writer(stream_name, request.proto_rows.writer_schema.proto_descriptor)
                if writer is None:
                    raise _Abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "the first request for a stream must carry the writer schema",
                    )
                if mode is not None and mode != writer.cdc:
                    raise _Abort(
                        grpc.StatusCode.INVALID_ARGUMENT, "The given value is not a valid CHANGE_TYPE"
                    )
                mode = writer.cdc
                yield self._append(writer, request, stream_name)
        except _Abort as exc:
            context.abort(exc.code, exc.message)

    def _append(self, writer: _Writer, request: Any, stream_name: str) -> Any:
        decoded: list[tuple[dict[str, Any], str | None, tuple[int, ...] | None]] = []
        errors = []
        for index, data in enumerate(request.proto_rows.rows.serialized_rows):
            try:
                decoded.append(self._decode(writer, data))
            except ValueError as exc:
                errors.append(
                    _ROW_ERROR(
                        index=index, code=types.RowError.RowErrorCode.FIELDS_ERROR.value, message=str(exc)
                    )
                )
        if errors:
            response = _RESPONSE(write_stream=stream_name)
            response.error.CopyFrom(
                status_pb2.Status(
                    code=code_pb2.INVALID_ARGUMENT,
                    message="Errors found while processing rows. Please refer to the row_errors field for "
                    "details. The list may not be complete because of the size limitations. "
                    f"Entity: {stream_name}",
                )
            )
            response.row_errors.extend(errors)
            return response
        table = writer.table
        with self.state.lock:
            for row, change_type, sequence in decoded:
                if change_type is None:
                    table.plain_rows.append(row)
                    continue
                key = tuple(_key_value(row.get(c)) for c in _key_columns(table))
                current = table.state.get(key)
                if (
                    current is not None
                    and sequence is not None
                    and current[0] is not None
                    and (sequence < current[0])
                ):
                    continue  # an older modification: the newer one stays
                table.state[key] = (sequence, row if change_type == "UPSERT" else None)
            table.appended_rows += len(decoded)
            table.append_requests += 1
            table.apply_watermark_us = int(time.time() * 1_000_000)
        response = _RESPONSE(write_stream=stream_name)
        response.append_result.SetInParent()
        return response

    @staticmethod
    def _decode(writer: _Writer, data: bytes) -> tuple[dict[str, Any], str | None, tuple[int, ...] | None]:
        message = writer.message.FromString(data)
        row: dict[str, Any] = {
            c["name"]: ([] if c["mode"] == "REPEATED" else None) for c in writer.table.fields
        }
        for field_name, column, kind, repeated in writer.columns:
            if repeated:
                row[column] = [python_value(kind, v) for v in getattr(message, field_name)]
            elif message.HasField(field_name):
                row[column] = python_value(kind, getattr(message, field_name))
        if not writer.cdc:
            return row, None, None
        change_type = getattr(message, CHANGE_TYPE_FIELD) if message.HasField(CHANGE_TYPE_FIELD) else ""
        if change_type not in ("UPSERT", "DELETE"):
            raise ValueError(f"The given value is not a valid CHANGE_TYPE: {change_type!r}")
        sequence = None
        if SEQUENCE_FIELD in message.DESCRIPTOR.fields_by_name and message.HasField(SEQUENCE_FIELD):
            try:
                sequence = ChangeSequenceNumber.parse(getattr(message, SEQUENCE_FIELD)).sections
            except InvalidSequenceNumberError as exc:
                raise ValueError(f"Invalid _CHANGE_SEQUENCE_NUMBER: {exc}") from None
        return row, change_type, sequence


def _key_columns(table: FakeTable) -> list[str]:
    return [table.column(c)["name"] for c in table.primary_key]  # type: ignore[index]


def _key_value(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
