"""Values of undecoded result rows (``lazy_decode=True``) in Spanner's JSON value encoding.

A query's result values travel as ``google.protobuf.Value``: INT64, NUMERIC, DATE, TIMESTAMP,
STRING, BYTES (base64), JSON (its text) and UUID as strings, FLOAT32/FLOAT64 as numbers or the
strings ``NaN``/``Infinity``/``-Infinity``, BOOL as booleans, ARRAY as lists, NULL as null: exactly
the encoding staged change rows carry (ARCHITECTURE.md, "Staged change rows"). Taking the values as
they travel skips the client's decoding into Python types and keeps every digit Spanner sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from google.protobuf.struct_pb2 import ListValue, Value

_which = Value.WhichOneof


def wire_value(value: Value) -> Any:
    """One value in Spanner's JSON encoding (``None`` for NULL)."""
    kind = _which(value, "kind")
    if kind == "list_value":
        return [wire_value(item) for item in value.list_value.values]
    if kind == "null_value" or kind is None:
        return None
    if kind == "struct_value":
        raise ValueError("a STRUCT value in a table row")  # not a column type
    return getattr(value, kind)


def wire_rows(rows: Iterable[Sequence[Value]], array_positions: Sequence[int] = ()) -> Iterator[list[Any]]:
    """Undecoded result rows as lists of encoded values; ``array_positions`` are the row's ARRAY
    columns (their values are converted element by element)."""
    which = _which
    for row in rows:
        values = [None if (kind := which(v, "kind")) == "null_value" else getattr(v, kind) for v in row]
        for at in array_positions:
            if isinstance(values[at], ListValue):
                values[at] = wire_value(row[at])
        yield values


def wire_chunks(
    rows: Iterable[Sequence[Value]], size: int, array_positions: Sequence[int] = ()
) -> Iterator[list[list[Any]]]:
    """:func:`wire_rows` in lists of at most ``size`` rows (one pass: the read's hot loop)."""
    which = _which
    chunk: list[list[Any]] = []
    append = chunk.append
    for row in rows:
        values = [None if (kind := which(v, "kind")) == "null_value" else getattr(v, kind) for v in row]
        for at in array_positions:
            if isinstance(values[at], ListValue):
                values[at] = wire_value(row[at])
        append(values)
        if len(chunk) >= size:
            yield chunk
            chunk = []
            append = chunk.append
    if chunk:
        yield chunk
