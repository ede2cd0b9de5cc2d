"""What the server streams back for a query: answers to the simple queries and change-stream rows batched
into ``PartialResultSet`` messages, with injected faults."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.cloud.spanner_v1.types import result_set
from google.protobuf import struct_pb2

from airflow_provider_cdc.domain.timestamps import format_timestamp, from_micros

from . import wire
from .clock import Clock
from .database import Database
from .model import FLUSH, EmulatorError
from .query import parse_current_timestamp_query, parse_options_query

MAX_MESSAGE_BYTES = 256 * 1024
MAX_MESSAGE_ROWS = 2000


@dataclass
class Fault:
    """Fail a change-stream read with ``code`` after ``after_rows`` rows (``remaining`` reads more)."""

    remaining: int
    code: grpc.StatusCode
    after_rows: int


def simple_query(database: Database, clock: Clock, sql: str, params: Any) -> Iterator[bytes]:
    """``SELECT 1``, ``SELECT CURRENT_TIMESTAMP()`` (the clock's now) and reads of
    ``INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS``; anything else is refused."""
    from google.cloud.spanner_v1 import StructType, Type, TypeCode

    def result(names: list[str], code: Any, rows: list[list[str]]) -> bytes:
        metadata = result_set.ResultSetMetadata(
            row_type=StructType(fields=[StructType.Field(name=name, type_=Type(code=code)) for name in names])
        )
        values = [struct_pb2.Value(string_value=v).SerializeToString() for row in rows for v in row]
        return wire.partial_result_set(values, b"", result_set.ResultSetMetadata.serialize(metadata))

    if sql.strip().rstrip(";").upper() == "SELECT 1":
        yield result([""], TypeCode.INT64, [["1"]])
        return
    current = parse_current_timestamp_query(sql)
    if current is not None:
        now = format_timestamp(from_micros(clock.now_us()))
        yield result(list(current), TypeCode.TIMESTAMP, [[now]])
        return
    options = parse_options_query(sql, params)
    if options is not None:
        names = [name for _, name in options.columns]
        yield result(names, TypeCode.STRING, options.rows(database.change_stream_options()))
        return
    raise EmulatorError(
        grpc.StatusCode.INVALID_ARGUMENT,
        "the emulator serves change-stream queries on READ_<stream>(...), SELECT 1, CURRENT_TIMESTAMP() "
        f"and reads of INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS; unsupported: {sql[:120]!r}",
    )


def stream_rows(
    rows: Iterator[Any], skip: int, context: grpc.ServicerContext, fault: Fault | None
) -> Iterator[bytes]:
    """Change-stream rows as ``PartialResultSet`` messages (resume token: rows sent so far), after
    skipping ``skip`` rows already sent; ``fault`` aborts the stream after its ``after_rows`` rows."""
    metadata: bytes | None = wire.change_record_metadata()
    sent = skip
    emitted_here = 0
    batch: list[bytes] = []
    size = 0
    position = 0

    def flush() -> bytes:
        nonlocal batch, size, metadata
        message = wire.partial_result_set(batch, str(sent).encode(), metadata)
        metadata, batch, size = None, [], 0
        return message

    for row in rows:
        if row is FLUSH:
            if batch or metadata is not None:
                yield flush()
            continue
        position += 1
        if position <= skip:
            continue
        if fault is not None and emitted_here >= fault.after_rows:
            if batch or metadata is not None:
                yield flush()
            context.abort(fault.code, "injected fault: the change-stream query was interrupted")
        batch.append(row)
        size += len(row)
        sent += 1
        emitted_here += 1
        if (
            size >= MAX_MESSAGE_BYTES
            or len(batch) >= MAX_MESSAGE_ROWS
            or (fault is not None and emitted_here >= fault.after_rows)
        ):
            yield flush()
    if fault is not None and emitted_here >= fault.after_rows:
        if batch or metadata is not None:
            yield flush()
        context.abort(fault.code, "injected fault: the change-stream query was interrupted")
    if batch or metadata is not None:
        yield flush()
