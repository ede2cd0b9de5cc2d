"""Undecoded result values in Spanner's JSON encoding: the column-wise path against the per-value one."""

from __future__ import annotations

import pytest
from google.protobuf.struct_pb2 import ListValue, Struct, Value

from airflow_provider_cdc.sources.spanner.wire_values import (
    wire_column,
    wire_column_chunks,
    wire_rows,
    wire_value,
)


def _value(item: object) -> Value:
    if item is None:
        return Value(null_value=0)
    if isinstance(item, bool):
        return Value(bool_value=item)
    if isinstance(item, float):
        return Value(number_value=item)
    if isinstance(item, str):
        return Value(string_value=item)
    assert isinstance(item, list)
    return Value(list_value=ListValue(values=[_value(v) for v in item]))


COLUMNS = {
    "INT64": ["1", None, "", "-9223372036854775808"],
    "STRING": ["a", "", None, "é\x00,", ""],
    "NUMERIC": ["0.01", None, "-1e-9"],
    "DATE": ["2020-01-02", None],
    "TIMESTAMP": ["2026-01-01T00:00:00Z", None],
    "BYTES": ["AAE=", "", None],
    "JSON": ['{"a":1}', None, "null"],
    "FLOAT64": [1.5, 0.0, -0.0, None, "NaN", "Infinity", "-Infinity", 1e308],
    "FLOAT32": [0.25, None, 0.0, "NaN"],
    "BOOL": [True, False, None, False],
    "ARRAY": [["a", None], [], None, [1.0, "NaN"], [[]]],
    None: ["x", 1.0, True, None, ["y"]],
}


@pytest.mark.parametrize("code", list(COLUMNS), ids=[str(c) for c in COLUMNS])
def test_a_column_converts_as_each_value_does(code: str | None) -> None:
    values = [_value(v) for v in COLUMNS[code]]
    assert wire_column(values, code) == [wire_value(v) for v in values] == COLUMNS[code]
    assert [v.__class__ for v in wire_column(values, code)] == [v.__class__ for v in COLUMNS[code]]


def test_a_value_of_another_kind_than_its_column_type_is_kept_as_it_travelled() -> None:
    values = [_value(v) for v in (1.0, "x", True, None, ["a"], "")]
    for code in ("STRING", "FLOAT64", "BOOL"):
        assert wire_column(values, code) == [1.0, "x", True, None, ["a"], ""]
    with pytest.raises(ValueError, match="STRUCT"):
        wire_column([Value(struct_value=Struct())], "STRING")


def test_chunks_are_column_wise_rows_in_order() -> None:
    codes = ["INT64", "STRING", "FLOAT64", "BOOL", "ARRAY"]
    rows = [
        [
            _value(v)
            for v in (str(i), f"n{i}" if i % 3 else None, i / 2, i % 2 == 0, [str(i)] if i % 4 else None)
        ]
        for i in range(7)
    ]
    chunks = list(wire_column_chunks(iter(rows), 3, codes))
    assert [len(chunk[0]) for chunk in chunks] == [3, 3, 1]
    assert all(len(chunk) == len(codes) for chunk in chunks)
    as_rows = [list(row) for chunk in chunks for row in zip(*chunk, strict=True)]
    assert as_rows == list(wire_rows(rows, [4]))
    assert list(wire_column_chunks([], 3, codes)) == []
    with pytest.raises(ValueError):
        list(wire_column_chunks(rows, 3, codes[:-1]))
