"""Values of undecoded result rows (``lazy_decode=True``) in Spanner's JSON value encoding.

A query's result values travel as ``google.protobuf.Value``: INT64, NUMERIC, DATE, TIMESTAMP,
STRING, BYTES (base64), JSON (its text) and UUID as strings, FLOAT32/FLOAT64 as numbers or the
strings ``NaN``/``Infinity``/``-Infinity``, BOOL as booleans, ARRAY as lists, NULL as null: exactly
the encoding staged change rows carry (ARCHITECTURE.md, "Staged change rows"). Taking the values as
they travel skips the client's decoding into Python types and keeps every digit Spanner sent.
:func:`wire_column_chunks` converts a chunk of rows column by column, each column by its type.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from operator import attrgetter
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


# A scalar column's values all travel in one field of ``Value``: read that field of every value at
# once, and look closer only at the values where it holds its default ("", 0.0, False), which are
# also what the field reads for a NULL or for a value of another kind (FLOAT64's "NaN").
_FIELDS: dict[str, str] = {
    **dict.fromkeys(
        (
            "BYTES",
            "DATE",
            "ENUM",
            "INT64",
            "INTERVAL",
            "JSON",
            "NUMERIC",
            "PROTO",
            "STRING",
            "TIMESTAMP",
            "UUID",
        ),
        "string_value",
    ),
    "FLOAT32": "number_value",
    "FLOAT64": "number_value",
    "BOOL": "bool_value",
}
_GETTERS = {name: attrgetter(name) for name in set(_FIELDS.values())}


def wire_column(values: Sequence[Value], code: str | None = None) -> list[Any]:
    """One column's undecoded values in Spanner's JSON encoding; ``code`` is the column's type
    code (``INT64``, ``ARRAY``, ...; ``None``: unknown), which picks a faster path for scalars."""
    field = _FIELDS.get(code) if code is not None else None
    if field is None:
        return [wire_value(value) for value in values]
    result = list(map(_GETTERS[field], values))
    if not all(result):
        which = _which
        for index, item in enumerate(result):
            if not item:  # the field's default: that value, a NULL or a value of another kind
                kind = which(values[index], "kind")
                if kind != field:
                    result[index] = wire_value(values[index])
    return result


def wire_column_chunks(
    rows: Iterable[Sequence[Value]], size: int, codes: Sequence[str | None]
) -> Iterator[list[list[Any]]]:
    """Undecoded result rows in chunks of at most ``size`` rows, each chunk column-wise: one list of
    encoded values per column, in row order; ``codes`` are the columns' type codes (see
    :func:`wire_column`)."""
    rows = iter(rows)
    while chunk := list(islice(rows, size)):
        yield [
            wire_column(column, code) for column, code in zip(zip(*chunk, strict=True), codes, strict=True)
        ]
