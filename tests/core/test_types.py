"""The logical type model: each type's Arrow, Spark and BigQuery types, its JSON value encoding
(round trips), and Spanner's types mapped onto it."""

from __future__ import annotations

import json
import math
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_cdc.changesets.arrow_values import (
    _decode_json_objects_fast,
    _decode_json_objects_python,
    arrow_schema,
    decode_column,
    decode_json_objects,
)
from airflow_provider_cdc.core.columns import ColumnType
from airflow_provider_cdc.core.types import (
    SCALAR_TYPE_CODES,
    SCALAR_TYPES,
    LogicalType,
    LogicalTypeError,
    ValueEncodingError,
    decode_value,
    encode_value,
    parse_logical_type,
)
from airflow_provider_cdc.sources.spanner.types import (
    SPANNER_TYPE_CODES,
    SpannerTypeError,
    parse_spanner_column_types,
    parse_spanner_type,
)

#: code → (Arrow, Spark SQL)
MAPPINGS: dict[str, tuple[pa.DataType, str]] = {
    "BOOL": (pa.bool_(), "BOOLEAN"),
    "INT64": (pa.int64(), "BIGINT"),
    "FLOAT32": (pa.float32(), "FLOAT"),
    "FLOAT64": (pa.float64(), "DOUBLE"),
    "NUMERIC": (pa.decimal128(38, 9), "DECIMAL(38,9)"),
    "BIGNUMERIC": (pa.decimal256(76, 38), "STRING"),
    "STRING": (pa.string(), "STRING"),
    "BYTES": (pa.binary(), "BINARY"),
    "JSON": (pa.string(), "STRING"),
    "DATE": (pa.date32(), "DATE"),
    "TIME": (pa.time64("us"), "STRING"),
    "DATETIME": (pa.timestamp("us"), "TIMESTAMP_NTZ"),
    "TIMESTAMP": (pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
    "UUID": (pa.string(), "STRING"),
}

_MICROS = st.integers(min_value=0, max_value=999_999)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "BOOL": st.booleans(),
    "INT64": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "FLOAT32": st.floats(width=32),
    "FLOAT64": st.floats(),
    "NUMERIC": st.decimals(
        min_value=Decimal("-99999999999999999999999999999.999999999"),
        max_value=Decimal("99999999999999999999999999999.999999999"),
        places=9,
        allow_nan=False,
        allow_infinity=False,
    ),
    "BIGNUMERIC": st.decimals(
        min_value=Decimal("-" + "9" * 38 + "." + "9" * 38),
        max_value=Decimal("9" * 38 + "." + "9" * 38),
        places=38,
        allow_nan=False,
        allow_infinity=False,
    ),
    "STRING": st.text(),
    "BYTES": st.binary(),
    "JSON": st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    ).map(lambda value: json.dumps(value, sort_keys=True)),
    "DATE": st.dates(),
    "TIME": st.times(),
    "DATETIME": st.datetimes(),
    "TIMESTAMP": st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(timezone.utc)
    ),
    "UUID": st.uuids().map(str),
}


def test_the_declared_types_are_the_model() -> None:
    assert SCALAR_TYPE_CODES == set(MAPPINGS) == set(VALUES)


@pytest.mark.parametrize("code", sorted(MAPPINGS))
def test_every_type_maps_to_its_arrow_and_spark_types(code: str) -> None:
    arrow, spark = MAPPINGS[code]
    scalar = parse_logical_type({"code": code})
    assert (scalar.arrow_type(), scalar.spark_type()) == (arrow, spark)
    array = parse_logical_type(f"ARRAY<{code}>")
    assert array == LogicalType("ARRAY", scalar)
    assert array.arrow_type() == pa.list_(arrow)
    assert array.spark_type() == f"ARRAY<{spark}>"


@pytest.mark.parametrize("code", sorted(MAPPINGS))
def test_every_type_round_trips_through_its_json_and_text_forms(code: str) -> None:
    for logical in (LogicalType(code), LogicalType("ARRAY", LogicalType(code))):
        assert parse_logical_type(logical.to_json()) == logical
        assert parse_logical_type(json.dumps(logical.to_json())) == logical
        assert parse_logical_type(str(logical)) == logical
        assert parse_logical_type(str(logical).lower()) == logical


@pytest.mark.parametrize(
    "description", [{"code": "STRUCT"}, {"code": "ARRAY"}, "ARRAY<ARRAY<INT64>>", {"no_code": 1}, "MAP<a,b>"]
)
def test_unsupported_types_are_refused_naming_the_column(description: object) -> None:
    with pytest.raises(LogicalTypeError, match="column 'Payload'"):
        parse_logical_type(description, "Payload")


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, float) and math.isnan(left):
        return isinstance(right, float) and math.isnan(right)
    return type(left) is type(right) and left == right


@pytest.mark.parametrize("code", sorted(VALUES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_value_round_trips_through_the_json_encoding(code: str, data: st.DataObject) -> None:
    value = data.draw(VALUES[code])
    encoded = encode_value(code, value, "c")
    text = json.dumps(encoded, allow_nan=False)  # the encoding is plain JSON
    decoded = decode_value(code, json.loads(text), "c")
    assert _same(decoded, value), (code, value, encoded, decoded)
    assert encode_value(code, decoded, "c") == encoded
    # The decoded value is what the type's Arrow column holds.
    assert _same(pa.array([decoded], LogicalType(code).arrow_type())[0].as_py(), value)
    array = [value, None]
    assert [_same(d, v) for d, v in zip(decode_value(f"ARRAY<{code}>", encode_value(f"ARRAY<{code}>", array)),
                                         array, strict=True)] == [True, True]


@pytest.mark.parametrize(
    ("code", "encoded", "expected", "canonical"),
    [
        ("DATETIME", "2024-02-29T23:59:58.123456", datetime(2024, 2, 29, 23, 59, 58, 123456), None),
        ("DATETIME", "2024-02-29 23:59:58", datetime(2024, 2, 29, 23, 59, 58), "2024-02-29T23:59:58"),
        ("DATETIME", "0001-01-01T00:00:00.1234567", datetime(1, 1, 1, 0, 0, 0, 123456),
         "0001-01-01T00:00:00.123456"),
        ("TIME", "23:59:59.999999", time(23, 59, 59, 999999), None),
        ("TIME", "00:00:00.5", time(0, 0, 0, 500000), "00:00:00.500000"),
        ("TIME", "07:08:09", time(7, 8, 9), None),
        ("BIGNUMERIC", "-1.50", Decimal("-1.50"), None),
        ("BIGNUMERIC", "1E+37", Decimal("1E+37"), "1" + "0" * 37),
        ("BIGNUMERIC", "0." + "0" * 37 + "1" + "000", Decimal("1E-38"), "0." + "0" * 37 + "1"),
        ("BIGNUMERIC", 12, Decimal(12), "12"),
        ("NUMERIC", "2.5", Decimal("2.500000000"), "2.500000000"),
    ],
)
def test_new_types_read_their_documented_encodings(
    code: str, encoded: Any, expected: Any, canonical: Any
) -> None:
    decoded = decode_value(code, encoded, "c")
    assert decoded == expected and type(decoded) is type(expected)
    assert encode_value(code, decoded, "c") == (encoded if canonical is None else canonical)


@pytest.mark.parametrize(
    ("code", "encoded", "message"),
    [
        ("DATETIME", "2024-02-29T23:59:58Z", "without a zone"),
        ("DATETIME", "2024-02-30T00:00:00", "cannot decode"),
        ("DATETIME", 1700000000, "without a zone"),
        ("TIME", "24:00:00", "cannot decode"),
        ("TIME", "10:00", "HH:MM:SS"),
        ("BIGNUMERIC", "1" + "0" * 38, "more than 38 integer digits"),
        ("BIGNUMERIC", "0." + "0" * 38 + "1", "more than 38 fractional digits"),
        ("BIGNUMERIC", "NaN", "must be finite"),
        ("BIGNUMERIC", True, "expected a decimal string"),
    ],
)
def test_new_types_refuse_values_outside_their_domain(code: str, encoded: Any, message: str) -> None:
    with pytest.raises(ValueEncodingError, match=message) as info:
        decode_value(code, encoded, "Amount")
    assert f"column 'Amount' ({code})" in str(info.value)


def test_zoned_values_are_not_datetimes_or_times() -> None:
    with pytest.raises(ValueEncodingError, match="no time zone"):
        encode_value("DATETIME", datetime(2024, 1, 1, tzinfo=timezone.utc), "c")
    with pytest.raises(ValueEncodingError, match="no time zone"):
        encode_value("TIME", time(1, 2, tzinfo=timezone(timedelta(hours=1))), "c")


def test_new_types_decode_into_arrow_tables_and_schemas() -> None:
    columns = [
        ColumnType("Id", {"code": "INT64"}, True, 1),
        ColumnType("At", {"code": "DATETIME"}, False, 2),
        ColumnType("Opens", {"code": "TIME"}, False, 3),
        ColumnType("Amount", {"code": "BIGNUMERIC"}, False, 4),
        ColumnType("Days", {"code": "ARRAY", "array_element_type": {"code": "DATETIME"}}, False, 5),
    ]
    texts = [
        '{"Id":"1","At":"2024-05-06T07:08:09.000001","Opens":"08:30:00","Amount":"123456789012345678901234567890.5",'
        '"Days":["2024-01-01T00:00:00",null]}',
        '{"Id":"2"}',
    ]
    table = decode_json_objects(texts, columns)
    schema = arrow_schema(columns)
    assert table.schema == pa.schema([pa.field(f.name, f.type) for f in schema])
    assert [f.metadata[b"cdc.type"] for f in schema] == [
        b"INT64", b"DATETIME", b"TIME", b"BIGNUMERIC", b"ARRAY<DATETIME>"
    ]
    assert table.to_pylist() == [
        {
            "Id": 1,
            "At": datetime(2024, 5, 6, 7, 8, 9, 1),
            "Opens": time(8, 30),
            "Amount": Decimal("123456789012345678901234567890.5"),
            "Days": [datetime(2024, 1, 1), None],
        },
        {"Id": 2, "At": None, "Opens": None, "Amount": None, "Days": None},
    ]
    assert decode_column("DATE", ["2024-02-29"]).to_pylist() == [date(2024, 2, 29)]


@pytest.mark.parametrize("code", sorted(SPANNER_TYPE_CODES))
def test_every_spanner_type_maps_to_the_logical_type_of_its_code(code: str) -> None:
    assert parse_spanner_type({"code": code}) == LogicalType(code)
    element = {"code": "ARRAY", "arrayElementType": {"code": code}}
    assert parse_spanner_type(element) == LogicalType("ARRAY", LogicalType(code))
    assert parse_spanner_type(f"ARRAY<{code}(MAX)>" if code in ("STRING", "BYTES") else f"ARRAY<{code}>") == (
        LogicalType("ARRAY", LogicalType(code))
    )
    assert code in SCALAR_TYPES


def test_spanner_types_map_postgresql_annotations_by_their_code_and_refuse_the_rest() -> None:
    assert parse_spanner_type({"code": "NUMERIC", "type_annotation": "PG_NUMERIC"}) == LogicalType("NUMERIC")
    assert parse_spanner_type({"code": "JSON", "type_annotation": "PG_JSONB"}) == LogicalType("JSON")
    for code in sorted(SCALAR_TYPE_CODES - SPANNER_TYPE_CODES) + ["PROTO", "ENUM", "INTERVAL", "STRUCT"]:
        with pytest.raises(SpannerTypeError, match=f"column 'c': unsupported Spanner type .*{code}"):
            parse_spanner_type({"code": code}, "c")
    with pytest.raises(SpannerTypeError, match="arrays of arrays are not supported"):
        parse_spanner_type("ARRAY<ARRAY<INT64>>", "c")
    ids = {"code": "ARRAY", "arrayElementType": {"code": "INT64"}}
    columns = parse_spanner_column_types([{"name": "Id", "type": ids, "is_primary_key": True}])
    assert columns == [ColumnType("Id", {"code": "ARRAY", "array_element_type": {"code": "INT64"}}, True, 1)]


NEW_COLUMNS = [
    ColumnType("Id", {"code": "INT64"}, True, 1),
    ColumnType("At", {"code": "DATETIME"}, False, 2),
    ColumnType("Amount", {"code": "BIGNUMERIC"}, False, 3),
    ColumnType("Days", {"code": "ARRAY", "array_element_type": {"code": "DATETIME"}}, False, 4),
    ColumnType("Opens", {"code": "TIME"}, False, 5),
]
_NEW_VALUES = {
    "At": VALUES["DATETIME"],
    "Amount": VALUES["BIGNUMERIC"],
    "Days": st.lists(st.one_of(st.none(), VALUES["DATETIME"]), max_size=3),
}


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.fixed_dictionaries(
            {"Id": st.integers(0, 99)}, optional={n: st.one_of(st.none(), v) for n, v in _NEW_VALUES.items()}
        ),
        min_size=1,
        max_size=10,
    ),
    space=st.booleans(),
)
def test_vectorised_decoding_of_new_types_agrees_with_the_per_value_decoder(
    rows: list[dict], space: bool
) -> None:
    columns = NEW_COLUMNS[:4]
    types = {c.name: c.logical_type for c in columns}
    texts = []
    for row in rows:
        encoded = {name: encode_value(types[name], value, name) for name, value in row.items()}
        if space and isinstance(encoded.get("At"), str):
            encoded["At"] = encoded["At"].replace("T", " ")
        texts.append(json.dumps(encoded))
    schema = pa.schema([pa.field(c.name, c.logical_type.arrow_type()) for c in columns])
    fast = _decode_json_objects_fast(pa.array(texts), columns, schema)  # no fallback needed
    assert fast.equals(_decode_json_objects_python(texts, columns, schema, "values"))
    assert fast.to_pylist() == [{name: row.get(name) for name in types} for row in rows]


def test_vectorised_decoding_leaves_what_it_cannot_read_to_the_per_value_decoder() -> None:
    texts = [
        '{"Id":"1","At":"2024-01-01T00:00:00.1234567","Amount":"1E+5","Opens":"10:00:00.5"}',
        '{"Id":"2","At":"2024-01-01t00:00:00","Amount":"0.' + "0" * 39 + '"}',
    ]
    table = decode_json_objects(texts, NEW_COLUMNS)
    assert table.to_pylist() == [
        {"Id": 1, "At": datetime(2024, 1, 1, 0, 0, 0, 123456), "Amount": Decimal(100000), "Days": None,
         "Opens": time(10, 0, 0, 500000)},
        {"Id": 2, "At": datetime(2024, 1, 1), "Amount": Decimal(0), "Days": None, "Opens": None},
    ]
    for bad, message in (
        ('{"Id":"3","Amount":"1' + "0" * 38 + '"}', "more than 38 integer digits"),
        ('{"Id":"3","Amount":"0.' + "0" * 38 + '1"}', "more than 38 fractional digits"),
        ('{"Id":"3","At":"2024-02-30T00:00:00"}', "column 'At' \\(DATETIME\\): cannot decode"),
        ('{"Id":"3","At":"2024-02-01T00:00:00+01:00"}', "without a zone"),
    ):
        with pytest.raises(ValueEncodingError, match=message):
            decode_json_objects([texts[0], bad], NEW_COLUMNS)
