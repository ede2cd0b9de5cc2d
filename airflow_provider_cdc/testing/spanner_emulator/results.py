"""What the server streams back for a query: answers to the simple queries, and change-stream or table
rows batched into ``PartialResultSet`` messages, with injected faults."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.cloud.spanner_v1.types import result_set
from google.protobuf import struct_pb2

from airflow_provider_cdc.core.timestamps import format_timestamp, from_micros

from . import wire
from .clock import Clock
from .database import Database
from .model import FLUSH
from .query import parse_current_timestamp_query, parse_options_query

MAX_MESSAGE_BYTES = 256 * 1024
MAX_MESSAGE_ROWS = 2000


@dataclass
class Fault:
    """Fail a change-stream read with ``code`` after ``after_rows`` rows (``remaining`` reads more)."""

    remaining: int
    code: grpc.StatusCode
    after_rows: int


def simple_query(
    database: Database, clock: Clock, sql: str, params: Any, transaction: Any = None
) -> Iterator[bytes] | None:
    """The answer to ``SELECT 1``, ``SELECT CURRENT_TIMESTAMP()`` (the clock's now) or a read of
    ``INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS`` (with ``transaction`` in its metadata), else ``None``."""
    from google.cloud.spanner_v1 import StructType, Type, TypeCode

    def result(names: list[str], code: Any, rows: list[list[str]]) -> Iterator[bytes]:
        metadata = result_set.ResultSetMetadata(
            row_type=StructType(fields=[StructType.Field(name=name, type_=Type(code=code)) for name in names])
        )
        if transaction is not None:
            metadata.transaction = transaction
        values = [struct_pb2.Value(string_value=v).SerializeToString() for row in rows for v in row]
        yield wire.partial_result_set(values, b"", result_set.ResultSetMetadata.serialize(metadata))

    if sql.strip().rstrip(";").upper() == "SELECT 1":
        return result([""], TypeCode.INT64, [["1"]])
    current = parse_current_timestamp_query(sql)
    if current is not None:
        now = format_timestamp(from_micros(clock.now_us()))
        return result(list(current), TypeCode.TIMESTAMP, [[now]])
    options = parse_options_query(sql, params)
    if options is not None:
        names = [name for _, name in options.columns]
        return result(names, TypeCode.STRING, options.rows(database.change_stream_options()))
    return None


def stream_rows(
    rows: Iterator[Any],
    skip: int,
    context: grpc.ServicerContext,
    fault: Fault | None,
    metadata: bytes | None = None,
    token_suffix: bytes = b"",
) -> Iterator[bytes]:
    """Rows as ``PartialResultSet`` messages (resume token: rows sent so far, then ``token_suffix``),
    after skipping ``skip`` rows already sent; ``fault`` aborts the stream after its ``after_rows`` rows.

    Without ``metadata`` the rows are change-stream rows (one serialized ``ChangeRecord`` value each);
    with it, each row is its values already framed (:func:`.wire.encode_row`).
    """
    framed = metadata is not None
    if metadata is None:
        metadata = wire.change_record_metadata()
    sent = skip
    emitted_here = 0
    batch: list[bytes] = []
    size = 0
    position = 0

    def flush() -> bytes:
        nonlocal batch, size, metadata
        values = b"".join(batch) if framed else b"".join(wire.frame_value(v) for v in batch)
        message = wire.framed_result_set(values, str(sent).encode() + token_suffix, metadata)
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
