"""Staged rows held column-wise as Python values, as an Arrow record batch of the staged schema.

``pa.array`` and ``RecordBatch.from_pydict`` look for pandas objects among their input, which
imports pandas (tens of MB) into a process that never uses it. Staged columns have four simple
types, built here from their buffers instead, with the same checks: a value of the wrong type
raises ``TypeError``, an out-of-range integer ``OverflowError``, a missing value ``ValueError``
(``None`` is a NULL in the columns the contract declares nullable).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from datetime import datetime
from itertools import accumulate
from typing import Any

import pyarrow as pa

from airflow_provider_cdc.core.contract.staged_rows import staged_change_schema
from airflow_provider_cdc.core.timestamps import to_micros

STAGED_CHANGE_SCHEMA = staged_change_schema()


_ARRAY_CODES = {pa.int32(): "i", pa.int64(): "q"}
assert array("i").itemsize == 4 and array("q").itemsize == 8


def memory_pool() -> pa.MemoryPool:
    """The allocator for staging buffers: the system's, which returns a written batch's memory,
    where Arrow's default (mimalloc or jemalloc) keeps freed pages for reuse (tens of MB of RSS)."""
    return pa.system_memory_pool()


def record_batch(columns: Mapping[str, list[Any]]) -> pa.RecordBatch:
    """Staged rows held column-wise as Python values, as a record batch of ``STAGED_CHANGE_SCHEMA``."""
    arrays = [_array(columns[field.name], field) for field in STAGED_CHANGE_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=STAGED_CHANGE_SCHEMA)


def _array(values: list[Any], field: pa.Field) -> pa.Array:
    type_, count = field.type, len(values)
    if field.nullable and None in values:  # a column a source may leave NULL
        return _with_nulls(values, field)
    if type_ == pa.string() and count and type(values[0]) is str and values.count(values[0]) == count:
        # One value in every row (a table read's source, table and column types): its bytes repeated.
        data = values[0].encode("utf-8")
        offsets = array("i", range(0, (count + 1) * len(data), len(data)) if data else bytes(4 * (count + 1)))
        return pa.Array.from_buffers(type_, count, [None, pa.py_buffer(offsets), pa.py_buffer(data * count)])
    if type_ == pa.string():
        strings = _ascii_strings(values)
        if strings is not None:
            return strings
        builder = pa.lib.StringBuilder(memory_pool())
        builder.append_values(values)
        result = builder.finish()
        if result.null_count:
            raise ValueError(f"staged change column {field.name!r} must not be null")
        return result
    if type_ == pa.bool_():
        if set(map(type, values)) - {bool}:
            raise TypeError(f"staged change column {field.name!r} expects bool values")
        if values.count(True) == count:  # every row true (a table read's rows): all bits set
            bits = bytearray(b"\xff" * ((count + 7) // 8))
        else:
            bits = bytearray((count + 7) // 8)
            for index, value in enumerate(values):
                if value:
                    bits[index >> 3] |= 1 << (index & 7)
        return pa.Array.from_buffers(type_, count, [None, pa.py_buffer(bits)])
    if pa.types.is_timestamp(type_) and count and isinstance(values[0], datetime):
        if values.count(values[0]) == count:  # one commit timestamp (a snapshot's rows)
            buffer = array("q", [to_micros(values[0])]) * count
            return pa.Array.from_buffers(type_, count, [None, pa.py_buffer(buffer)])
    if pa.types.is_timestamp(type_):
        micros: dict[datetime, int] = {}
        for value in dict.fromkeys(values):
            if not isinstance(value, datetime):
                raise TypeError(f"staged change column {field.name!r} expects datetime, got {value!r}")
            micros[value] = to_micros(value)
        buffer = array("q", map(micros.__getitem__, values))
    else:
        buffer = array(_ARRAY_CODES[type_], values)
    return pa.Array.from_buffers(type_, count, [None, pa.py_buffer(buffer)])


def text_batch(
    unit: str,
    commit_micros: list[int],
    table: str,
    operations: list[str],
    keys: list[str],
    afters: list[str],
    column_types: list[str],
    source_metadata: list[str],
    sequence_numbers: list[str],
) -> pa.RecordBatch:
    """Staged rows of one unit and table without transactions or before images (a table read's
    shard), commit times given in microseconds, as a record batch of ``STAGED_CHANGE_SCHEMA``."""
    count = len(commit_micros)
    given = {
        "unit": [unit] * count,
        "table_name": [table] * count,
        "operation": operations,
        "keys_json": keys,
        "after_json": afters,
        "column_types_json": column_types,
        "source_metadata_json": source_metadata,
        "change_sequence_number": sequence_numbers,
    }
    arrays = []
    for field in STAGED_CHANGE_SCHEMA:
        if field.name == "commit_timestamp":
            buffer = pa.py_buffer(array("q", commit_micros))
            arrays.append(pa.Array.from_buffers(field.type, count, [None, buffer]))
        elif field.name in given:
            values = given[field.name]
            if len(values) != count:
                raise ValueError("staged change columns differ in length")
            arrays.append(_array(values, field))
        else:
            arrays.append(pa.nulls(count, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=STAGED_CHANGE_SCHEMA)


_PLACEHOLDERS = {pa.string(): "", pa.int32(): 0, pa.int64(): 0, pa.bool_(): False}


def _with_nulls(values: list[Any], field: pa.Field) -> pa.Array:
    """A nullable column holding NULLs: the values with placeholders for the NULLs, and a validity
    bitmap marking where the values are."""
    placeholder = _PLACEHOLDERS[field.type]
    bits = bytearray((len(values) + 7) // 8)
    filled = []
    for index, value in enumerate(values):
        if value is None:
            filled.append(placeholder)
        else:
            bits[index >> 3] |= 1 << (index & 7)
            filled.append(value)
    dense = _array(filled, pa.field(field.name, field.type, nullable=False))
    return pa.Array.from_buffers(field.type, len(values), [pa.py_buffer(bits), *dense.buffers()[1:]])


def _ascii_strings(values: list[Any]) -> pa.Array | None:
    """ASCII strings (the staged JSON texts) as a string array made of their joined bytes and
    offsets; ``None`` for other values (the builder then takes them, or refuses them)."""
    try:
        text = "".join(values)
    except TypeError:  # a value that is not a string
        return None
    if not text.isascii():
        return None  # a character's length is then not its length in bytes
    try:
        offsets = array("i", accumulate(map(len, values), initial=0))
    except OverflowError:  # 2 GiB or more: left to the builder
        return None
    data = text.encode("ascii")
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
