"""``google.cloud.bigquery.storage.v1.BigQueryWrite`` over loopback gRPC, enforcing BigQuery CDC's rules.

What it enforces, answered as BigQuery answers it:

- the connection (gRPC ``INVALID_ARGUMENT`` unless said otherwise): the default stream only
  (``projects/*/datasets/*/tables/*/streams/_default``; the table must exist, else
  ``NOT_FOUND``); ``write_stream`` on the first request; no ``offset`` (the default stream takes
  none); the writer schema on the first request for a stream, and ``write_stream`` on every
  request that changes the writer schema; requests of at most 10 MB; a writer schema that
  :class:`~.rows.RowDecoder` accepts; no mixing of CDC and plain rows on one connection;
- each row (:mod:`.rows`): a bad value, key, ``_CHANGE_TYPE`` or ``_CHANGE_SEQUENCE_NUMBER`` is a
  row error. A request with any row error applies none of its rows and is answered with
  ``error`` (``INVALID_ARGUMENT``) and ``row_errors`` (index, ``FIELDS_ERROR``, the message naming
  the field); the connection stays open.

Rows are applied at once under BigQuery CDC's rules (:mod:`.state`), on the fake's clock.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import grpc
from google.cloud.bigquery_storage_v1 import types
from google.protobuf import descriptor_pb2
from google.rpc import code_pb2, status_pb2

from .rows import DecodedRow, RowDecoder, RowError, WriterSchemaError
from .state import EPOCH, FakeError, FakeState, FakeTable, Modification

SERVICE = "google.cloud.bigquery.storage.v1.BigQueryWrite"
MAX_REQUEST_BYTES = 10 * 1024 * 1024
_STREAM = re.compile(r"^projects/([^/]+)/datasets/([^/]+)/tables/([^/]+)/streams/([^/]+)$")
_REQUEST = types.AppendRowsRequest.pb()
_RESPONSE = types.AppendRowsResponse.pb()
_ROW_ERROR = types.RowError.pb()
_WRITE_STREAM = types.WriteStream.pb()


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


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

    def _writer(self, name: str, descriptor: descriptor_pb2.DescriptorProto) -> RowDecoder:
        table = self._stream_table(name)
        fields = table.fields
        if time.monotonic() - table.schema_changed_s < self.schema_delay_seconds:
            if table.previous_fields is None:
                raise _Abort(grpc.StatusCode.NOT_FOUND, f"Not found: Table {name} (created moments ago)")
            fields = table.previous_fields
        try:
            return RowDecoder(table, descriptor, fields)
        except WriterSchemaError as exc:
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None

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
        writer: RowDecoder | None = None
        schema: bytes | None = None  # the connection's current writer schema, serialized
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
                named = bool(request.write_stream)
                if named and request.write_stream != stream_name:
                    stream_name = request.write_stream
                    writer = schema = None
                if not stream_name:
                    raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, "the first request must set write_stream")
                if request.HasField("offset"):
                    raise _Abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"offset {request.offset.value} is not allowed on the _default stream "
                        f"({stream_name}); the default stream appends at its end and takes no offset",
                    )
                if request.proto_rows.HasField("writer_schema"):
                    descriptor = request.proto_rows.writer_schema.proto_descriptor
                    serialized = descriptor.SerializeToString(deterministic=True)
                    if serialized != schema:
                        if schema is not None and not named:
                            raise _Abort(
                                grpc.StatusCode.INVALID_ARGUMENT,
                                "the writer schema changed on a request without write_stream: a request "
                                "that changes the input schema of a default stream must name the stream "
                                f"({stream_name})",
                            )
                        writer, schema = self._writer(stream_name, descriptor), serialized
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

    def _append(self, writer: RowDecoder, request: Any, stream_name: str) -> Any:
        decoded: list[DecodedRow] = []
        errors = []
        for index, data in enumerate(request.proto_rows.rows.serialized_rows):
            try:
                decoded.append(writer.decode(data))
            except RowError as exc:
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
            now = self.state.now()
            for decoded_row in decoded:
                row, change_type, sequence = decoded_row.row, decoded_row.change_type, decoded_row.sequence
                if change_type is None:
                    table.plain_rows.append(row)
                    continue
                key = tuple(_key_value(row.get(c)) for c in writer.key)
                current = table.current(key, now)
                if (
                    current is not None
                    and sequence is not None
                    and current.sequence is not None
                    and sequence < current.sequence
                ):
                    continue  # an older modification: the newer one stays
                table.state[key] = Modification(sequence, row if change_type == "UPSERT" else None, now)
            table.appended_rows += len(decoded)
            table.append_requests += 1
            table.apply_watermark_us = (now - EPOCH) // _MICROSECOND
        response = _RESPONSE(write_stream=stream_name)
        response.append_result.SetInParent()
        return response


_MICROSECOND = timedelta(microseconds=1)


def _key_value(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
