"""The emulator's calls: each takes its parsed request message, runs it on the model, builds the answer.

Table calls (``CreateTable``, ``DescribeTable``, ``DeleteTable``, ``ListTable``), row calls (``PutRow``,
``UpdateRow``, ``DeleteRow``, ``BatchWriteRow``, ``GetRow``, ``BatchGetRow``, ``GetRange``) and the
stream calls (``ListStream``, ``DescribeStream``, ``GetShardIterator``, ``GetStreamRecord``). What the
emulator does not model (column filters and conditions, local transactions, secondary indexes,
encryption, auto-increment keys, more than one version per column, time to live, stream pre-images)
is refused with ``OTSParameterInvalid`` naming it, never ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow_provider_cdc.sources.tablestore.protocol import messages
from airflow_provider_cdc.sources.tablestore.protocol.plainbuffer import (
    Cell,
    PlainBufferError,
    PlainBufferRow,
    decode_row,
    encode_row,
    encode_rows,
)

from .model import (
    MAX_BATCH_WRITE_ROWS,
    OtsError,
    ReadRow,
    StreamModel,
    TableOptions,
    WriteResult,
    capacity_units,
    parameter_invalid,
    row_size,
)

_KEY_TYPES = {"INTEGER": messages.INTEGER, "STRING": messages.STRING, "BINARY": messages.BINARY}
_KEY_TYPE_NAMES = {number: name for name, number in _KEY_TYPES.items()}
_OPERATIONS = {messages.PUT: "PUT", messages.UPDATE: "UPDATE", messages.DELETE: "DELETE"}
_NOT_MODELLED = "is not supported by the Table Store emulator"


def _optional(message: Any, name: str, default: Any = None) -> Any:
    return getattr(message, name) if message.HasField(name) else default


def _row(data: bytes, what: str, *, bounds: bool = False) -> PlainBufferRow:
    try:
        return decode_row(data, bounds=bounds)
    except PlainBufferError as error:
        raise parameter_invalid(f"{what} is not a valid PlainBuffer row: {error}") from None


def _refuse_unmodelled(request: Any, *fields: str) -> None:
    for name in fields:
        if request.HasField(name) and getattr(request, name):
            raise parameter_invalid(f"{name} {_NOT_MODELLED}.")


def _condition(condition: Any) -> int:
    if condition.HasField("column_condition") and condition.column_condition:
        raise parameter_invalid(f"A column condition {_NOT_MODELLED}.")
    return condition.row_existence


def _consumed(consumed: Any, *, read: int = 0, write: int = 0) -> None:
    consumed.capacity_unit.read = read
    consumed.capacity_unit.write = write


def _returned(result: WriteResult, request: Any) -> bytes | None:
    """The ``row`` a write answers with, as its ``return_content`` asks."""
    if not request.HasField("return_content"):
        return None
    content = request.return_content
    if content.return_type == messages.RT_PK:
        return encode_row(PlainBufferRow(result.key))
    if content.return_type == messages.RT_AFTER_MODIFY:
        columns = result.columns or {}
        cells = tuple(
            Cell(name, columns[name][0], "PUT", columns[name][1])
            for name in content.return_column_names
            if name in columns
        )
        return encode_row(PlainBufferRow(result.key, cells))
    return None


def _time_range(request: Any) -> tuple[int, int] | None:
    """``[start, end)`` in ms of the versions a read wants (``None``: any); needs it or ``max_versions``."""
    max_versions = _optional(request, "max_versions")
    if max_versions is not None and max_versions <= 0:
        raise parameter_invalid("MaxVersions must be greater than 0.")
    if not request.HasField("time_range"):
        if max_versions is None:
            raise parameter_invalid("Neither MaxVersions nor TimeRange is set.")
        return None
    time_range = request.time_range
    if time_range.HasField("specific_time"):
        return time_range.specific_time, time_range.specific_time + 1
    start, end = _optional(time_range, "start_time", 0), _optional(time_range, "end_time", 2**63 - 1)
    if start >= end:
        raise parameter_invalid("The start time of the time range must be less than its end time.")
    return start, end


def _column_range(request: Any) -> tuple[str | None, str | None]:
    return _optional(request, "start_column"), _optional(request, "end_column")


def _read_row(found: ReadRow) -> bytes:
    return encode_row(PlainBufferRow(found.key, found.cells))


def _read_units(rows: Sequence[ReadRow]) -> int:
    return capacity_units(sum(row_size(row.key, row.cells) for row in rows))


# --- tables -----------------------------------------------------------------------------------------


def create_table(model: StreamModel, request: Any) -> Any:
    if request.index_metas:
        raise parameter_invalid(f"A secondary index {_NOT_MODELLED}.")
    if request.HasField("sse_spec") and request.sse_spec.enable:
        raise parameter_invalid(f"Server-side encryption {_NOT_MODELLED}.")
    meta = request.table_meta
    key = []
    for column in meta.primary_key:
        if column.HasField("option"):
            raise parameter_invalid(f"The auto-increment primary key column '{column.name}' {_NOT_MODELLED}.")
        if column.type not in _KEY_TYPE_NAMES:
            kind = messages.PrimaryKeySchema.DESCRIPTOR.fields_by_name["type"].enum_type
            raise parameter_invalid(
                f"The primary key type {kind.values_by_number[column.type].name} of column '{column.name}' "
                f"{_NOT_MODELLED}."
            )
        key.append((column.name, _KEY_TYPE_NAMES[column.type]))
    units = request.reserved_throughput.capacity_unit
    if not (units.HasField("read") and units.HasField("write")):
        raise parameter_invalid("Both read and write capacity unit are required to create table.")
    options = request.table_options
    time_to_live = _optional(options, "time_to_live", -1)
    if time_to_live != -1:
        raise parameter_invalid(f"A time to live other than -1 {_NOT_MODELLED}.")
    if _optional(options, "max_versions", 1) != 1:
        raise parameter_invalid(f"More than one version per column (max_versions) {_NOT_MODELLED}.")
    hours = None
    if request.HasField("stream_spec") and request.stream_spec.enable_stream:
        if request.stream_spec.columns_to_get:
            raise parameter_invalid(f"A stream with origin columns (columns_to_get) {_NOT_MODELLED}.")
        if not request.stream_spec.HasField("expiration_time"):
            raise parameter_invalid("The expiration time of the stream is required when it is enabled.")
        hours = request.stream_spec.expiration_time
    model.define_table(
        meta.table_name,
        key,
        stream_hours=hours,
        defined_columns=[(column.name, column.type) for column in meta.defined_column],
        reserved=(units.read, units.write),
        options=TableOptions(
            time_to_live,
            1,
            _optional(options, "deviation_cell_version_in_sec", 86400),
            _optional(options, "allow_update", True),
        ),
    )
    return messages.CreateTableResponse()


def describe_table(model: StreamModel, request: Any) -> Any:
    table = model.describe_table(request.table_name)
    response = messages.DescribeTableResponse()
    response.table_meta.table_name = table.name
    for name, type_ in table.primary_key:
        response.table_meta.primary_key.add(name=name, type=_KEY_TYPES[type_])
    for name, type_number in table.defined_columns:
        response.table_meta.defined_column.add(name=name, type=type_number)
    details = response.reserved_throughput_details
    details.capacity_unit.read, details.capacity_unit.write = table.reserved
    details.last_increase_time = table.creation_us // 1_000_000
    response.table_options.time_to_live = table.options.time_to_live
    response.table_options.max_versions = table.options.max_versions
    response.table_options.deviation_cell_version_in_sec = table.options.deviation_seconds
    response.table_options.allow_update = table.options.allow_update
    response.stream_details.enable_stream = table.stream_id is not None
    if table.stream_id is not None:
        response.stream_details.stream_id = table.stream_id
        response.stream_details.expiration_time = table.expiration_hours
        response.stream_details.last_enable_time = table.creation_us
    return response


def delete_table(model: StreamModel, request: Any) -> Any:
    model.delete_table(request.table_name)
    return messages.DeleteTableResponse()


def list_table(model: StreamModel, request: Any) -> Any:
    return messages.ListTableResponse(table_names=model.list_tables())


# --- rows -------------------------------------------------------------------------------------------


def put_row(model: StreamModel, request: Any) -> Any:
    _refuse_unmodelled(request, "transaction_id")
    row = _row(request.row, "row")
    result = model.write(request.table_name, "PUT", row, condition=_condition(request.condition))
    response = messages.PutRowResponse()
    _consumed(response.consumed, write=capacity_units(result.size))
    returned = _returned(result, request)
    if returned is not None:
        response.row = returned
    return response


def update_row(model: StreamModel, request: Any) -> Any:
    _refuse_unmodelled(request, "transaction_id")
    row = _row(request.row_change, "row_change")
    result = model.write(request.table_name, "UPDATE", row, condition=_condition(request.condition))
    response = messages.UpdateRowResponse()
    _consumed(response.consumed, write=capacity_units(result.size))
    returned = _returned(result, request)
    if returned is not None:
        response.row = returned
    return response


def delete_row(model: StreamModel, request: Any) -> Any:
    _refuse_unmodelled(request, "transaction_id")
    key = _row(request.primary_key, "primary_key")
    row = PlainBufferRow(key.primary_key, key.cells, True)
    result = model.write(request.table_name, "DELETE", row, condition=_condition(request.condition))
    response = messages.DeleteRowResponse()
    _consumed(response.consumed, write=capacity_units(result.size))
    returned = _returned(result, request)
    if returned is not None:
        response.row = returned
    return response


def batch_write_row(model: StreamModel, request: Any) -> Any:
    """Each row is written on its own, in order: a row's failure is its own ``is_ok = false``; a
    malformed request (no rows, a bad condition or cell, too many rows) fails before anything is written."""
    _refuse_unmodelled(request, "transaction_id")
    if not request.tables:
        raise parameter_invalid("No row is specified in BatchWriteRow.")
    count = sum(len(table.rows) for table in request.tables)
    if count > MAX_BATCH_WRITE_ROWS:
        raise parameter_invalid(f"Rows count exceeds the upper limit: {MAX_BATCH_WRITE_ROWS}.")
    plan: list[tuple[str, list[tuple[str, PlainBufferRow, int, str, Any]]]] = []
    for table in request.tables:
        if not table.rows:
            raise parameter_invalid(f"No operation is specified for table: '{table.table_name}'.")
        items = []
        for index, item in enumerate(table.rows):
            operation = _OPERATIONS.get(item.type)
            if operation is None:
                raise parameter_invalid(f"Invalid operation type {item.type} of row #{index}.")
            row = _row(item.row_change, f"row_change of row #{index} in table '{table.table_name}'")
            if operation == "DELETE":
                row = PlainBufferRow(row.primary_key, row.cells, True)
            where = f" #{index} in table: '{table.table_name}'"
            condition = _condition(item.condition)
            try:
                model.check_write(table.table_name, operation, row, condition=condition, where=where)
            except OtsError as error:
                if error.code == "OTSParameterInvalid":
                    raise
            items.append((operation, row, condition, where, item))
        plan.append((table.table_name, items))
    response = messages.BatchWriteRowResponse()
    for table_name, items in plan:
        answers = response.tables.add(table_name=table_name)
        for operation, row, condition, where, item in items:
            answer = answers.rows.add(is_ok=True)
            try:
                result = model.write(table_name, operation, row, condition=condition, where=where)
            except OtsError as error:
                answer.is_ok = False
                answer.error.code = error.code
                answer.error.message = error.message
                continue
            _consumed(answer.consumed, write=capacity_units(result.size))
            returned = _returned(result, item)
            if returned is not None:
                answer.row = returned
    return response


def get_row(model: StreamModel, request: Any) -> Any:
    _refuse_unmodelled(request, "filter", "token", "transaction_id")
    key = _row(request.primary_key, "primary_key")
    found = model.get_row(
        request.table_name,
        key.primary_key,
        columns=list(request.columns_to_get),
        time_range=_time_range(request),
        column_range=_column_range(request),
    )
    response = messages.GetRowResponse(row=_read_row(found) if found is not None else b"")
    _consumed(response.consumed, read=_read_units([found] if found is not None else []))
    return response


def batch_get_row(model: StreamModel, request: Any) -> Any:
    if not request.tables:
        raise parameter_invalid("No row specified in the request of BatchGetRow.")
    response = messages.BatchGetRowResponse()
    for table in request.tables:
        _refuse_unmodelled(table, "filter")
        if table.token:
            raise parameter_invalid(f"token {_NOT_MODELLED}.")
        time_range, column_range = _time_range(table), _column_range(table)
        keys = [_row(data, f"primary_key #{index}") for index, data in enumerate(table.primary_key)]
        answers = response.tables.add(table_name=table.table_name)
        for key in keys:
            answer = answers.rows.add(is_ok=True)
            try:
                found = model.get_row(
                    table.table_name,
                    key.primary_key,
                    columns=list(table.columns_to_get),
                    time_range=time_range,
                    column_range=column_range,
                )
            except OtsError as error:
                answer.is_ok = False
                answer.error.code = error.code
                answer.error.message = error.message
                continue
            _consumed(answer.consumed, read=_read_units([found] if found is not None else []))
            answer.row = _read_row(found) if found is not None else b""
    return response


def get_range(model: StreamModel, request: Any) -> Any:
    _refuse_unmodelled(request, "filter", "token", "transaction_id")
    if request.direction not in (messages.FORWARD, messages.BACKWARD):
        raise parameter_invalid(f"Invalid direction {request.direction}.")
    start = _row(request.inclusive_start_primary_key, "inclusive_start_primary_key", bounds=True)
    end = _row(request.exclusive_end_primary_key, "exclusive_end_primary_key", bounds=True)
    rows, following = model.get_range(
        request.table_name,
        start.primary_key,
        end.primary_key,
        forward=request.direction == messages.FORWARD,
        limit=_optional(request, "limit"),
        columns=list(request.columns_to_get),
        time_range=_time_range(request),
        column_range=_column_range(request),
    )
    response = messages.GetRangeResponse(
        rows=encode_rows([PlainBufferRow(row.key, row.cells) for row in rows])
    )
    if following is not None:
        response.next_start_primary_key = encode_row(PlainBufferRow(following))
    _consumed(response.consumed, read=_read_units(rows))
    return response


# --- the stream -------------------------------------------------------------------------------------


def list_stream(model: StreamModel, request: Any) -> Any:
    response = messages.ListStreamResponse()
    for table in model.list_streams(_optional(request, "table_name")):
        response.streams.add(
            stream_id=table.stream_id, table_name=table.name, creation_time=table.creation_us
        )
    return response


def describe_stream(model: StreamModel, request: Any) -> Any:
    table, shards, next_id = model.describe(
        request.stream_id, _optional(request, "inclusive_start_shard_id"), _optional(request, "shard_limit")
    )
    response = messages.DescribeStreamResponse(
        stream_id=table.stream_id,
        expiration_time=table.expiration_hours,
        table_name=table.name,
        creation_time=table.creation_us,
        stream_status=messages.STREAM_ACTIVE,
    )
    for shard in shards:
        entry = response.shards.add(shard_id=shard.shard_id)
        if shard.parent_id is not None:
            entry.parent_id = shard.parent_id
        if shard.parent_sibling_id is not None:
            entry.parent_sibling_id = shard.parent_sibling_id
    if next_id is not None:
        response.next_shard_id = next_id
    return response


def get_shard_iterator(model: StreamModel, request: Any) -> Any:
    iterator = model.shard_iterator(request.stream_id, request.shard_id, _optional(request, "timestamp"))
    return messages.GetShardIteratorResponse(shard_iterator=iterator)


def get_stream_record(model: StreamModel, request: Any) -> Any:
    records, next_iterator, more = model.read(request.shard_iterator, _optional(request, "limit"))
    response = messages.GetStreamRecordResponse(may_more_record=more)
    for record in records:
        response.stream_records.add(action_type=record.action, record=record.record)
    if next_iterator is not None:
        response.next_shard_iterator = next_iterator
    response.consumed.capacity_unit.read = max(1, len(records))
    response.consumed.capacity_unit.write = 0
    return response


#: Every call the emulator serves: its name (the request path) → its handler.
CALLS: dict[str, Callable[[StreamModel, Any], Any]] = {
    "CreateTable": create_table,
    "DescribeTable": describe_table,
    "DeleteTable": delete_table,
    "ListTable": list_table,
    "PutRow": put_row,
    "UpdateRow": update_row,
    "DeleteRow": delete_row,
    "BatchWriteRow": batch_write_row,
    "GetRow": get_row,
    "BatchGetRow": batch_get_row,
    "GetRange": get_range,
    "ListStream": list_stream,
    "DescribeStream": describe_stream,
    "GetShardIterator": get_shard_iterator,
    "GetStreamRecord": get_stream_record,
}
