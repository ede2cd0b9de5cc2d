"""Spanner types as logical types, their Arrow types and decoding of the JSON value encoding."""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_cdc.changesets.arrow_values import (
    _decode_json_objects_fast,
    _decode_json_objects_python,
    arrow_schema,
    arrow_type,
    decode_column,
    decode_json_objects,
    field_is_nullable,
    field_is_primary_key,
    field_type_text,
    key_column_names,
)
from airflow_provider_cdc.core.columns import ColumnType, parse_column_types
from airflow_provider_cdc.core.identifiers import InvalidIdentifierError
from airflow_provider_cdc.core.types import (
    LogicalType,
    LogicalTypeError,
    ValueEncodingError,
    decode_value,
    encode_value,
)
from airflow_provider_cdc.sources.spanner.types import SpannerTypeError, parse_spanner_type

SCALARS = {
    "BOOL": pa.bool_(),
    "INT64": pa.int64(),
    "FLOAT32": pa.float32(),
    "FLOAT64": pa.float64(),
    "NUMERIC": pa.decimal128(38, 9),
    "STRING": pa.string(),
    "JSON": pa.string(),
    "BYTES": pa.binary(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "UUID": pa.string(),
}


@pytest.mark.parametrize(("code", "expected"), sorted(SCALARS.items()))
def test_every_scalar_type_maps_to_its_arrow_type(code: str, expected: pa.DataType) -> None:
    assert arrow_type({"code": code}) == expected
    assert arrow_type(json.dumps({"code": code})) == expected
    assert arrow_type(code.lower()) == expected
    assert arrow_type(parse_spanner_type({"code": code})) == expected


@pytest.mark.parametrize(("code", "expected"), sorted(SCALARS.items()))
def test_every_array_type_maps_to_a_list_of_its_element(code: str, expected: pa.DataType) -> None:
    spanner = {"code": "ARRAY", "array_element_type": {"code": code}}
    assert arrow_type(spanner) == pa.list_(expected)
    assert arrow_type(f"ARRAY<{code}>") == pa.list_(expected)
    assert str(parse_spanner_type(spanner)) == f"ARRAY<{code}>"


def test_ddl_lengths_are_accepted() -> None:
    assert arrow_type(parse_spanner_type("STRING(MAX)")) == pa.string()
    assert arrow_type(parse_spanner_type("ARRAY<BYTES(1024)>")) == pa.list_(pa.binary())
    assert arrow_type("ARRAY<BYTES(1024)>") == pa.list_(pa.binary())


@pytest.mark.parametrize(
    "spanner",
    [
        {"code": "STRUCT"},
        {"code": "PROTO", "proto_type_fqn": "x.Y"},
        {"code": "ENUM"},
        {"code": "INTERVAL"},
        "GEOGRAPHY",
        {"code": "ARRAY", "array_element_type": {"code": "STRUCT"}},
        {"code": "ARRAY"},
        {"no_code": 1},
    ],
)
def test_unknown_types_raise_naming_column_and_type(spanner: object) -> None:
    text = json.dumps(spanner) if isinstance(spanner, dict) else spanner
    with pytest.raises(SpannerTypeError) as info:
        parse_spanner_type(spanner, "Payload")
    assert "'Payload'" in str(info.value)
    assert any(part in str(info.value) for part in (text, str(spanner), "no element type", "no 'code'"))
    with pytest.raises(LogicalTypeError) as logical:
        arrow_type(spanner, "Payload")
    assert "'Payload'" in str(logical.value)
    assert any(part in str(logical.value) for part in (text, str(spanner), "no element type", "no 'code'"))


def test_arrow_schema_orders_by_ordinal_position_and_marks_keys() -> None:
    column_types = [
        {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 3},
        {"name": "TenantId", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
        {"name": "Tags", "type": "ARRAY<STRING>", "is_primary_key": False, "ordinal_position": 4},
        {"name": "OrderId", "type": {"code": "STRING"}, "is_primary_key": True, "ordinal_position": 2},
    ]
    schema = arrow_schema(json.dumps(column_types))
    assert schema.names == ["TenantId", "OrderId", "Name", "Tags"]
    assert [f.metadata[b"cdc.primary_key"] for f in schema] == [b"true", b"true", b"false", b"false"]
    assert schema.field("Tags").type == pa.list_(pa.string())
    assert schema.field("Tags").metadata[b"cdc.type"] == b"ARRAY<STRING>"
    assert all(b"cdc.nullable" not in f.metadata for f in schema)  # not said: not recorded


def test_the_field_metadata_records_nullability_and_readers_take_the_earlier_keys_too() -> None:
    schema = arrow_schema(
        [
            {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1,
             "is_nullable": False},
            {"name": "Note", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2,
             "is_nullable": True},
        ]
    )  # fmt: skip
    assert [(f.metadata[b"cdc.nullable"], f.nullable) for f in schema] == [(b"false", True), (b"true", True)]
    assert [field_is_nullable(f) for f in schema] == [False, True]
    assert key_column_names(schema) == ["Id"]
    earlier = pa.schema(
        [
            pa.field("Id", pa.int64(), True, {b"spanner.type": b"INT64", b"spanner.primary_key": b"true"}),
            pa.field("Tags", pa.list_(pa.string()), True, {b"spanner.type": b"ARRAY<STRING>"}),
            pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC")),
        ]
    )
    assert key_column_names(earlier) == ["Id"]
    assert [field_type_text(f) for f in earlier] == ["INT64", "ARRAY<STRING>", None]
    assert [field_is_primary_key(f) for f in earlier] == [True, False, False]
    assert field_is_nullable(earlier.field("Id")) is None


def test_column_types_reject_bad_names_and_duplicates() -> None:
    with pytest.raises(InvalidIdentifierError, match="column"):
        parse_column_types([{"name": "a; DROP TABLE x", "type": {"code": "INT64"}}])
    with pytest.raises(LogicalTypeError, match="'id' appears twice"):
        parse_column_types([{"name": "Id", "type": "INT64"}, {"name": "id", "type": "STRING"}])
    with pytest.raises(LogicalTypeError, match="needs 'name' and 'type'"):
        parse_column_types([{"name": "Id"}])
    with pytest.raises(LogicalTypeError, match="not valid JSON"):
        parse_column_types("[{")


@pytest.mark.parametrize(
    ("spanner", "encoded", "expected"),
    [
        ("BOOL", True, True),
        ("INT64", "9223372036854775807", 2**63 - 1),
        ("INT64", -42, -42),
        ("FLOAT64", 1.5, 1.5),
        ("FLOAT64", "Infinity", math.inf),
        ("FLOAT64", "-Infinity", -math.inf),
        ("FLOAT32", 0.1, float(pa.scalar(0.1, pa.float32()).as_py())),
        ("NUMERIC", "-12.500000001", Decimal("-12.500000001")),
        ("STRING", "héllo", "héllo"),
        ("JSON", '{"a": [1, 2]}', '{"a": [1, 2]}'),
        ("BYTES", "AAEC/w==", b"\x00\x01\x02\xff"),
        ("DATE", "2024-02-29", date(2024, 2, 29)),
        ("TIMESTAMP", "2024-01-02T03:04:05.123456789Z", datetime(2024, 1, 2, 3, 4, 5, 123456, timezone.utc)),
        ("UUID", "123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-426614174000"),
        ("ARRAY<INT64>", ["1", None, 3], [1, None, 3]),
        ("ARRAY<BYTES>", ["AQ==", None], [b"\x01", None]),
        ("STRING", None, None),
    ],
)
def test_decode_value(spanner: str, encoded: object, expected: object) -> None:
    assert decode_value(spanner, encoded, "c") == expected


def test_decode_nan() -> None:
    assert math.isnan(decode_value("FLOAT64", "NaN"))
    assert math.isnan(decode_column("FLOAT32", ["NaN"])[0].as_py())


@pytest.mark.parametrize(
    ("spanner", "encoded"),
    [
        ("INT64", "12x"),
        ("INT64", True),
        ("INT64", "9223372036854775808"),
        ("BOOL", "true"),
        ("BYTES", "not base64!"),
        ("NUMERIC", "1.0000000001"),
        ("DATE", "2024-13-01"),
        ("TIMESTAMP", "yesterday"),
        ("STRING", 5),
        ("ARRAY<INT64>", "1"),
    ],
)
def test_decode_errors_name_column_and_value(spanner: str, encoded: object) -> None:
    with pytest.raises(ValueEncodingError) as info:
        decode_value(spanner, encoded, "Amount")
    assert "'Amount'" in str(info.value)
    assert repr(encoded) in str(info.value)


COLUMNS = parse_column_types(
    [
        {"name": "b", "type": "BOOL", "ordinal_position": 1},
        {"name": "i", "type": "INT64", "ordinal_position": 2},
        {"name": "f32", "type": "FLOAT32", "ordinal_position": 3},
        {"name": "f64", "type": "FLOAT64", "ordinal_position": 4},
        {"name": "n", "type": "NUMERIC", "ordinal_position": 5},
        {"name": "s", "type": "STRING", "ordinal_position": 6},
        {"name": "j", "type": "JSON", "ordinal_position": 7},
        {"name": "by", "type": "BYTES", "ordinal_position": 8},
        {"name": "d", "type": "DATE", "ordinal_position": 9},
        {"name": "t", "type": "TIMESTAMP", "ordinal_position": 10},
        {"name": "u", "type": "UUID", "ordinal_position": 11},
        {"name": "ai", "type": "ARRAY<INT64>", "ordinal_position": 12},
        {"name": "at", "type": "ARRAY<TIMESTAMP>", "ordinal_position": 13},
        {"name": "af", "type": "ARRAY<FLOAT64>", "ordinal_position": 14},
    ]
)


def test_decode_json_objects_handles_missing_null_and_partial_objects() -> None:
    texts = pa.array(
        [
            json.dumps({"i": "7", "s": "x", "ai": ["1", "2"], "t": "2024-01-01T00:00:00Z"}),
            None,
            "{}",
            json.dumps({"i": 8, "f64": "NaN"}),  # INT64 as a number, NaN as text: slower path, same result
        ]
    )
    table = decode_json_objects(texts, COLUMNS)
    assert table.schema == pa.schema([pa.field(c.name, arrow_type(c.type)) for c in COLUMNS])
    rows = table.to_pylist()
    assert rows[0]["i"] == 7 and rows[0]["s"] == "x" and rows[0]["ai"] == [1, 2]
    assert rows[0]["t"] == datetime(2024, 1, 1, tzinfo=timezone.utc)
    assert all(v is None for v in rows[1].values()) and all(v is None for v in rows[2].values())
    assert rows[3]["i"] == 8 and math.isnan(rows[3]["f64"])


def test_decode_json_objects_rejects_unknown_columns() -> None:
    with pytest.raises(ValueEncodingError, match=r"row 1 names column\(s\) \['Ghost'\]"):
        decode_json_objects(pa.array(['{"i":"1"}', '{"Ghost":1}']), COLUMNS, what="_values_json")


def test_decode_json_objects_accepts_multiline_json() -> None:
    text = json.dumps({"i": "5", "s": "a\nb"}, indent=2)
    assert decode_json_objects(pa.array([text]), COLUMNS).to_pylist()[0]["s"] == "a\nb"


_timestamps = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(timezone.utc)
)
_VALUES = {
    "b": st.booleans(),
    "i": st.integers(-(2**63), 2**63 - 1),
    "f32": st.floats(width=32, allow_nan=False),
    "f64": st.floats(allow_nan=False),
    "n": st.decimals(
        min_value=Decimal("-99999999999999999999999999999"),
        max_value=Decimal("99999999999999999999999999999"),
        places=9,
        allow_nan=False,
        allow_infinity=False,
    ),
    "s": st.text(max_size=8),
    "j": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2).map(json.dumps),
    "by": st.binary(max_size=8),
    "d": st.dates(),
    "t": _timestamps,
    "u": st.uuids().map(str),
    "ai": st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=3),
    "at": st.lists(_timestamps, max_size=2),
    "af": st.lists(st.floats(allow_nan=False), max_size=3),
}
_by_name = {c.name: c for c in COLUMNS}
_rows = st.lists(
    st.fixed_dictionaries({}, optional={name: st.one_of(st.none(), s) for name, s in _VALUES.items()}),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_rows, int_as_number=st.booleans())
def test_vectorised_and_per_value_decoding_agree(rows: list[dict], int_as_number: bool) -> None:
    texts = []
    for row in rows:
        encoded = {name: encode_value(_by_name[name].type, value, name) for name, value in row.items()}
        if int_as_number and encoded.get("i") is not None:
            encoded["i"] = int(encoded["i"])
        texts.append(json.dumps(encoded))
    fast = decode_json_objects(pa.array(texts), COLUMNS)
    schema = pa.schema([pa.field(c.name, arrow_type(c.type)) for c in COLUMNS])
    slow = _decode_json_objects_python(texts, COLUMNS, schema, "values")
    assert fast.equals(slow)
    for decoded, row in zip(fast.to_pylist(), rows, strict=True):
        for name, value in row.items():
            if name == "f32" and value is not None:
                assert decoded[name] == pytest.approx(value, rel=1e-6) or decoded[name] == value
            elif name == "t" and value is not None:
                assert decoded[name] == value.replace(microsecond=value.microsecond)
            else:
                assert decoded[name] == value


def test_vectorised_decoding_of_a_batch_read_in_several_blocks() -> None:
    """A batch larger than a JSON-reader block, with micro- and nanosecond timestamps, one long
    object and arrays of timestamps, decodes on the fast path exactly as value by value."""
    texts = []
    for row in range(6_000):
        stamp = f"2024-02-{row % 28 + 1:02d}T10:11:12.{row:06d}" + ("789Z" if row % 3 == 0 else "Z")
        texts.append(json.dumps({
            "i": str(row - 3_000), "s": f"name {row}", "t": stamp, "at": [stamp, "2024-01-01T00:00:00Z"],
            "f64": row / 7, "b": row % 2 == 0,
        }))
    texts[4_321] = json.dumps({"s": "x" * 200_000, "t": "2024-01-01T00:00:00.000000001Z"})
    array = pa.array(texts)
    assert sum(len(text) for text in texts) > 4 * (64 << 10)
    schema = pa.schema([pa.field(c.name, arrow_type(c.type)) for c in COLUMNS])
    fast = _decode_json_objects_fast(array, COLUMNS, schema)
    assert fast.equals(_decode_json_objects_python(texts, COLUMNS, schema, "values"))
    assert fast.column("t")[0].as_py() == datetime(2024, 2, 1, 10, 11, 12, 0, timezone.utc)
    assert fast.column("t")[3].as_py() == datetime(2024, 2, 4, 10, 11, 12, 3, timezone.utc)
    assert fast.column("s")[4_321].as_py() == "x" * 200_000


def test_spanner_type_and_column_type_round_trip() -> None:
    column = ColumnType("Tags", LogicalType("ARRAY", LogicalType("STRING")), False, 3)
    assert parse_column_types([column.to_json_dict()]) == [column]
