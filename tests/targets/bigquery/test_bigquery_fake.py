"""The BigQuery fake refuses what BigQuery refuses, answered as BigQuery answers it.

Everything is sent through the real clients (``google.cloud.bigquery.Client`` over REST and
``BigQueryWriteClient`` over gRPC), with table definitions and proto rows built here, so the
fake's own decoding is what is checked.
"""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import grpc
import pytest
from google.api_core import exceptions as api_exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery
from google.cloud.bigquery.table import PrimaryKey, TableConstraints
from google.cloud.bigquery_storage_v1 import BigQueryWriteClient, types
from google.cloud.bigquery_storage_v1.services.big_query_write.transports import BigQueryWriteGrpcTransport
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.rpc import code_pb2

from airflow_provider_cdc.testing.bigquery_fake import DELETE_RETENTION, FakeBigQuery
from airflow_provider_cdc.testing.bigquery_fake.sequence import SequenceNumberError, parse_sequence_number

PROJECT = "demo-project"
DATASET = "cdc"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
_F = descriptor_pb2.FieldDescriptorProto
_REQUEST = types.AppendRowsRequest.pb()
FIELDS_ERROR = types.RowError.RowErrorCode.FIELDS_ERROR.value


@pytest.fixture
def fake():
    with FakeBigQuery() as server:
        server.create_dataset(PROJECT, DATASET)
        yield server


def _bq(fake: FakeBigQuery) -> bigquery.Client:
    return bigquery.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": fake.rest_endpoint},
    )


def _write(fake: FakeBigQuery) -> BigQueryWriteClient:
    return BigQueryWriteClient(
        transport=BigQueryWriteGrpcTransport(channel=grpc.insecure_channel(fake.write_endpoint))
    )


def _table(
    fake: FakeBigQuery,
    name: str,
    columns: dict[str, str],
    key: list[str] | None = None,
    clustering: list[str] | None = None,
    repeated: tuple[str, ...] = (),
) -> bigquery.Table:
    table = bigquery.Table(
        f"{PROJECT}.{DATASET}.{name}",
        schema=[
            bigquery.SchemaField(c, t, mode="REPEATED" if c in repeated else "NULLABLE")
            for c, t in columns.items()
        ],
    )
    if key is not None:
        table.table_constraints = TableConstraints(primary_key=PrimaryKey(columns=key), foreign_keys=None)
    if clustering is not None:
        table.clustering_fields = clustering
    return _bq(fake).create_table(table)


def _refused(call: Any, status: type[api_exceptions.GoogleAPICallError], reason: str, match: str) -> None:
    with pytest.raises(status, match=match) as caught:
        call()
    assert caught.value.errors and caught.value.errors[0]["reason"] == reason


# ------------------------------------------------------------------------------------- rows on the wire
def _descriptor(fields: dict[str, int], cdc: bool = True) -> descriptor_pb2.DescriptorProto:
    descriptor = descriptor_pb2.DescriptorProto(name="Row")
    names = [*fields, *(("_CHANGE_TYPE", "_CHANGE_SEQUENCE_NUMBER") if cdc else ())]
    for number, name in enumerate(names, start=1):
        descriptor.field.add(
            name=name, number=number, type=fields.get(name, _F.TYPE_STRING), label=_F.LABEL_OPTIONAL
        )
    return descriptor


def _encode(descriptor: descriptor_pb2.DescriptorProto, **values: Any) -> bytes:
    """One row on the wire; text is sent as raw bytes (``str`` as UTF-8) so invalid UTF-8 can be sent."""
    raw = descriptor_pb2.DescriptorProto()
    raw.CopyFrom(descriptor)
    for proto_field in raw.field:
        if proto_field.type == _F.TYPE_STRING:
            proto_field.type = _F.TYPE_BYTES
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto(name="row.proto", syntax="proto2", message_type=[raw]))
    message = message_factory.GetMessageClass(pool.FindMessageTypeByName("Row"))()
    for name, value in values.items():
        if value is not None:
            setattr(message, name, value.encode() if isinstance(value, str) else value)
    return message.SerializeToString()


def _stream(table: str) -> str:
    return f"projects/{PROJECT}/datasets/{DATASET}/tables/{table}/streams/_default"


def _request(table: str | None, descriptor: descriptor_pb2.DescriptorProto | None, rows: list[bytes]) -> Any:
    request = _REQUEST()
    if table is not None:
        request.write_stream = _stream(table)
    if descriptor is not None:
        request.proto_rows.writer_schema.proto_descriptor.CopyFrom(descriptor)
    request.proto_rows.rows.serialized_rows.extend(rows)
    return request


def _send(fake: FakeBigQuery, *requests: Any) -> list[Any]:
    return list(_write(fake).append_rows(requests=iter(requests), retry=None))


def _rows(fake: FakeBigQuery, table: str) -> list[dict[str, Any]]:
    return sorted(fake.rows(PROJECT, DATASET, table), key=lambda r: repr(sorted(r.items())))


KV = {"K": _F.TYPE_INT64, "V": _F.TYPE_INT64}


# ------------------------------------------------------------------------------------- own decoding
def test_the_fake_imports_nothing_of_the_product() -> None:
    """The fake decodes rows and sequence numbers itself: importing it loads no module of the
    package outside ``testing.bigquery_fake``."""
    script = (
        "import sys, airflow_provider_cdc.testing as t; before = set(sys.modules);"
        "import airflow_provider_cdc.testing.bigquery_fake as f;"
        "from airflow_provider_cdc.testing.bigquery_fake import rows, sequence, state;"
        "from airflow_provider_cdc.testing.bigquery_fake import write_server, rest_server;"
        "f.FakeBigQuery().start().stop();"
        "loaded = set(sys.modules) - before;"
        "print('\\n'.join(sorted(m for m in loaded if m.startswith('airflow_provider_cdc'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    modules = loaded.stdout.split()
    assert modules and all(m.startswith("airflow_provider_cdc.testing.bigquery_fake") for m in modules), (
        modules
    )


@pytest.mark.parametrize(
    ("smaller", "greater"),
    [
        ("77", "7B"),
        ("FFF/B", "FFF/ABC"),
        ("BA/FFFFFFFF", "ABC"),
        ("ABC", "FFF/ABC"),
        ("abc", "ABD"),
        ("1", "1/0"),
    ],
)
def test_sequence_numbers_compare_section_by_section_as_unsigned_integers(smaller: str, greater: str) -> None:
    assert parse_sequence_number(smaller) < parse_sequence_number(greater)


def test_the_largest_sequence_number_is_accepted() -> None:
    assert parse_sequence_number("/".join(["FFFFFFFFFFFFFFFF"] * 4)) == ((1 << 64) - 1,) * 4


@pytest.mark.parametrize("text", ["", "1/2/3/4/5", "12345678901234567", "G", "1//2", "/1", "-1", " 1", "0x1"])
def test_malformed_sequence_numbers_are_refused(text: str) -> None:
    with pytest.raises(SequenceNumberError):
        parse_sequence_number(text)


# ------------------------------------------------------------------------------------- delete retention
def test_a_delete_is_kept_for_the_retention_and_forgotten_after_it(fake: FakeBigQuery) -> None:
    _table(fake, "T", {"K": "INT64", "V": "INT64"}, key=["K"])
    descriptor = _descriptor(KV)
    upsert = _encode(descriptor, K=1, V=1, _CHANGE_TYPE="UPSERT", _CHANGE_SEQUENCE_NUMBER="5")
    delete = _encode(descriptor, K=1, _CHANGE_TYPE="DELETE", _CHANGE_SEQUENCE_NUMBER="A")
    _send(fake, _request("T", descriptor, [upsert, delete]))
    assert _rows(fake, "T") == []
    fake.advance_clock(DELETE_RETENTION - timedelta(minutes=1))
    _send(fake, _request("T", descriptor, [upsert]))  # the older UPSERT, re-sent within the retention
    assert _rows(fake, "T") == []
    fake.advance_clock(timedelta(days=3))
    _send(fake, _request("T", descriptor, [upsert]))  # the DELETE is forgotten: the row is back
    assert _rows(fake, "T") == [{"K": 1, "V": 1}]


def test_the_retention_runs_from_the_delete_on_an_injected_clock() -> None:
    now = [T0]
    with FakeBigQuery(clock=lambda: now[0]) as fake:
        fake.create_dataset(PROJECT, DATASET)
        _table(fake, "T", {"K": "INT64", "V": "INT64"}, key=["K"])
        descriptor = _descriptor(KV)
        delete = _encode(descriptor, K=1, _CHANGE_TYPE="DELETE", _CHANGE_SEQUENCE_NUMBER="A")
        old = _encode(descriptor, K=1, V=1, _CHANGE_TYPE="UPSERT", _CHANGE_SEQUENCE_NUMBER="5")
        _send(fake, _request("T", descriptor, [delete]))
        assert fake.table(PROJECT, DATASET, "T").apply_watermark_us == (
            T0 - datetime(1970, 1, 1, tzinfo=timezone.utc)
        ) // timedelta(microseconds=1)
        now[0] = T0 + DELETE_RETENTION
        _send(fake, _request("T", descriptor, [old]))
        assert _rows(fake, "T") == []  # exactly the retention: still kept
        fake.advance_clock(timedelta(seconds=1))
        assert fake.now() == T0 + DELETE_RETENTION + timedelta(seconds=1)
        _send(fake, _request("T", descriptor, [old]))
        assert _rows(fake, "T") == [{"K": 1, "V": 1}]


def test_the_clock_moves_only_forward(fake: FakeBigQuery) -> None:
    before = fake.now()
    assert fake.advance_clock(timedelta(days=3)) == fake.now() >= before + timedelta(days=3)
    assert fake.now() == fake.now()  # advanced: the clock stands still until advanced again
    with pytest.raises(ValueError, match="only moves forward"):
        fake.advance_clock(timedelta(seconds=-1))


# ------------------------------------------------------------------------------------- REST refusals
@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("bad name", "letters, numbers, and underscores"),
        ("1st", "start with a letter or underscore"),
        ("Preis€", "letters, numbers, and underscores"),
        ("C" * 301, "at most 300"),
        ("_PARTITIONTIME", "prefix _PARTITION"),
        ("_partitiondate", "prefix _PARTITION"),
        ("_TABLE_SUFFIX", "prefix _TABLE_"),
        ("_FILE_NAME", "prefix _FILE_"),
        ("_ROW_TIMESTAMP", "prefix _ROW_TIMESTAMP"),
        ("__ROOT__", "prefix __ROOT__"),
        ("_COLIDENTIFIER_1", "prefix _COLIDENTIFIER"),
        ("_CHANGE_TYPE", "prefix _CHANGE_TYPE"),
        ("_CHANGE_SEQUENCE_NUMBER", "prefix _CHANGE_SEQUENCE_NUMBER"),
    ],
)
def test_invalid_and_reserved_column_names_are_refused(fake: FakeBigQuery, name: str, match: str) -> None:
    _refused(
        lambda: _table(fake, "T", {"K": "INT64", name: "STRING"}), api_exceptions.BadRequest, "invalid", match
    )
    assert (PROJECT, DATASET, "T") not in fake.state.tables


def test_column_names_as_bigquery_allows_them_are_accepted(fake: FakeBigQuery) -> None:
    columns = {"K": "INT64", "_private": "STRING", "c" * 300: "STRING", "Partition": "STRING", "x_1": "INT64"}
    assert [f.name for f in _table(fake, "T", columns).schema] == list(columns)


def test_duplicate_column_names_are_refused_regardless_of_case(fake: FakeBigQuery) -> None:
    table = bigquery.Table(
        f"{PROJECT}.{DATASET}.T",
        schema=[bigquery.SchemaField("Id", "INT64"), bigquery.SchemaField("ID", "STRING")],
    )
    _refused(
        lambda: _bq(fake).create_table(table), api_exceptions.BadRequest, "invalid", "Duplicate column names"
    )


def test_a_patch_adding_a_reserved_or_duplicate_column_is_refused(fake: FakeBigQuery) -> None:
    found = _table(fake, "T", {"K": "INT64"}, key=["K"])
    for added, match in (
        (bigquery.SchemaField("_PARTITIONTIME", "TIMESTAMP"), "prefix"),
        (bigquery.SchemaField("k", "INT64"), "Duplicate"),
    ):
        found.schema = [bigquery.SchemaField("K", "INT64"), added]
        _refused(
            lambda: _bq(fake).update_table(found, ["schema"]), api_exceptions.BadRequest, "invalid", match
        )
    assert [f["name"] for f in fake.table(PROJECT, DATASET, "T").fields] == ["K"]


def test_a_patch_with_a_stale_etag_fails_its_precondition(fake: FakeBigQuery) -> None:
    _table(fake, "T", {"K": "INT64"}, key=["K"])
    bq = _bq(fake)
    first, second = bq.get_table(f"{PROJECT}.{DATASET}.T"), bq.get_table(f"{PROJECT}.{DATASET}.T")
    assert first.etag and first.etag == second.etag
    first.schema = [*first.schema, bigquery.SchemaField("A", "STRING")]
    updated = bq.update_table(first, ["schema"])
    assert updated.etag != second.etag
    second.schema = [*second.schema, bigquery.SchemaField("B", "STRING")]
    _refused(
        lambda: bq.update_table(second, ["schema"]),
        api_exceptions.PreconditionFailed,
        "conditionNotMet",
        "etag",
    )
    assert [f["name"] for f in fake.table(PROJECT, DATASET, "T").fields] == ["K", "A"]
    updated.schema = [*updated.schema, bigquery.SchemaField("B", "STRING")]
    assert [f.name for f in bq.update_table(updated, ["schema"]).schema] == ["K", "A", "B"]  # a fresh etag


@pytest.mark.parametrize(
    ("clustering", "match"),
    [
        (["K", "K"], "more than once"),
        (["K", "k"], "more than once"),
        (["K", "S", "D", "N", "B"], "too many clustering fields"),
        (["Missing"], "not in the schema"),
        (["F"], "FLOAT64"),
        (["J"], "JSON"),
        (["Y"], "BYTES"),
        (["A"], "REPEATED"),
    ],
)
def test_clustering_bigquery_refuses_is_refused(
    fake: FakeBigQuery, clustering: list[str], match: str
) -> None:
    columns = {
        "K": "INT64",
        "S": "STRING",
        "D": "DATE",
        "N": "NUMERIC",
        "B": "BOOL",
        "F": "FLOAT64",
        "J": "JSON",
        "Y": "BYTES",
        "A": "STRING",
    }
    _refused(
        lambda: _table(fake, "T", columns, clustering=clustering, repeated=("A",)),
        api_exceptions.BadRequest,
        "invalid",
        match,
    )


@pytest.mark.parametrize(
    ("key", "match"),
    [
        (["Y"], "BYTES cannot be in a primary key"),
        (["F"], "FLOAT64 cannot be in a primary key"),
        (["J"], "JSON cannot be in a primary key"),
        (["A"], "ARRAY<STRING> cannot be in a primary key"),
        (["K", "Y"], "BYTES cannot be in a primary key"),
        (["Missing"], "not in the schema"),
        (["K", "k"], "repeated"),
    ],
)
def test_primary_keys_bigquery_refuses_are_refused(fake: FakeBigQuery, key: list[str], match: str) -> None:
    columns = {"K": "INT64", "Y": "BYTES", "F": "FLOAT64", "J": "JSON", "A": "STRING"}
    _refused(
        lambda: _table(fake, "T", columns, key=key, repeated=("A",)),
        api_exceptions.BadRequest,
        "invalid",
        match,
    )


def test_primary_keys_of_every_allowed_type_are_accepted(fake: FakeBigQuery) -> None:
    columns = {
        "I": "INT64",
        "S": "STRING",
        "B": "BOOL",
        "D": "DATE",
        "T": "TIMESTAMP",
        "N": "NUMERIC",
        "G": "BIGNUMERIC",
    }
    created = _table(fake, "T", columns, key=list(columns))
    assert created.table_constraints.primary_key.columns == list(columns)


# ------------------------------------------------------------------------------------- Storage Write refusals
def test_an_offset_on_the_default_stream_is_refused(fake: FakeBigQuery) -> None:
    _table(fake, "T", {"K": "INT64", "V": "INT64"}, key=["K"])
    descriptor = _descriptor(KV)
    request = _request("T", descriptor, [_encode(descriptor, K=1, V=1, _CHANGE_TYPE="UPSERT")])
    request.offset.value = 0
    with pytest.raises(
        api_exceptions.InvalidArgument, match="offset 0 is not allowed on the _default stream"
    ):
        _send(fake, request)
    assert _rows(fake, "T") == []


def test_a_writer_schema_change_must_name_the_stream(fake: FakeBigQuery) -> None:
    _table(fake, "T", {"K": "INT64", "V": "INT64", "W": "STRING"}, key=["K"])
    first, wider = _descriptor(KV), _descriptor({**KV, "W": _F.TYPE_STRING})
    row = _encode(first, K=1, V=1, _CHANGE_TYPE="UPSERT", _CHANGE_SEQUENCE_NUMBER="1")
    wide_row = _encode(wider, K=2, V=2, W="w", _CHANGE_TYPE="UPSERT", _CHANGE_SEQUENCE_NUMBER="1")
    with pytest.raises(
        api_exceptions.InvalidArgument, match="writer schema changed on a request without write_stream"
    ):
        _send(fake, _request("T", first, [row]), _request(None, wider, [wide_row]))
    assert _rows(fake, "T") == [{"K": 1, "V": 1, "W": None}]  # the first request was applied
    # The same schema again without the stream name, or a new one naming the stream, is fine.
    responses = _send(
        fake, _request("T", first, [row]), _request(None, first, [row]), _request("T", wider, [wide_row])
    )
    assert [r.error.code for r in responses] == [0, 0, 0]
    assert _rows(fake, "T") == [{"K": 1, "V": 1, "W": None}, {"K": 2, "V": 2, "W": "w"}]


COLUMNS = {
    "K": ("INT64", _F.TYPE_INT64),
    "J": ("JSON", _F.TYPE_STRING),
    "N": ("NUMERIC", _F.TYPE_STRING),
    "G": ("BIGNUMERIC", _F.TYPE_STRING),
    "D": ("DATE", _F.TYPE_INT32),
    "T": ("TIMESTAMP", _F.TYPE_INT64),
    "S": ("STRING", _F.TYPE_STRING),
}
_MICROS_9999 = (
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)
    - datetime(1970, 1, 1, tzinfo=timezone.utc)
) // timedelta(microseconds=1)
_MICROS_0001 = (
    datetime(1, 1, 1, tzinfo=timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)
) // timedelta(microseconds=1)
_DAYS_0001 = (date(1, 1, 1) - date(1970, 1, 1)).days
_DAYS_9999 = (date(9999, 12, 31) - date(1970, 1, 1)).days


@pytest.mark.parametrize(
    ("values", "field", "match"),
    [
        ({"J": '{"a": 1'}, "J", "invalid JSON"),
        ({"J": "NaN"}, "J", "invalid JSON"),
        ({"N": "1e30"}, "N", "out of range"),
        ({"N": "-100000000000000000000000000000"}, "N", "out of range"),
        ({"N": "abc"}, "N", "not a number"),
        ({"N": "Infinity"}, "N", "not a finite number"),
        ({"N": ""}, "N", "not a number"),
        ({"G": "1e39"}, "G", "out of range"),
        ({"G": "1e99999999"}, "G", "out of range"),
        ({"D": _DAYS_0001 - 1}, "D", "DATE value .* out of range"),
        ({"D": _DAYS_9999 + 1}, "D", "DATE value .* out of range"),
        ({"T": _MICROS_0001 - 1}, "T", "TIMESTAMP value .* out of range"),
        ({"T": _MICROS_9999 + 1}, "T", "TIMESTAMP value .* out of range"),
        ({"S": b"caf\xe9"}, "S", "invalid UTF-8"),
        ({"J": b'{"a": "\xff"}'}, "J", "invalid UTF-8"),
        ({"K": None}, "K", "primary key value is missing or NULL"),
        ({"_CHANGE_TYPE": "INSERT"}, "_CHANGE_TYPE", "not a valid CHANGE_TYPE"),
        ({"_CHANGE_TYPE": None}, "_CHANGE_TYPE", "not a valid CHANGE_TYPE"),
        ({"_CHANGE_SEQUENCE_NUMBER": "G"}, "_CHANGE_SEQUENCE_NUMBER", "non-hex"),
        ({"_CHANGE_SEQUENCE_NUMBER": "1/2/3/4/5"}, "_CHANGE_SEQUENCE_NUMBER", "at most 4"),
        ({"_CHANGE_SEQUENCE_NUMBER": "1" * 17}, "_CHANGE_SEQUENCE_NUMBER", "at most 16"),
        ({"_CHANGE_SEQUENCE_NUMBER": ""}, "_CHANGE_SEQUENCE_NUMBER", "empty section"),
    ],
)
def test_bad_values_are_row_errors_and_the_request_applies_nothing(
    fake: FakeBigQuery, values: dict[str, Any], field: str, match: str
) -> None:
    _table(fake, "T", {c: t for c, (t, _p) in COLUMNS.items()}, key=["K"])
    descriptor = _descriptor({c: p for c, (_t, p) in COLUMNS.items()})
    good = _encode(descriptor, K=1, _CHANGE_TYPE="UPSERT", _CHANGE_SEQUENCE_NUMBER="1")
    bad = _encode(descriptor, **{"K": 2, "_CHANGE_TYPE": "UPSERT", "_CHANGE_SEQUENCE_NUMBER": "1", **values})
    later = _encode(descriptor, K=3, _CHANGE_TYPE="UPSERT", _CHANGE_SEQUENCE_NUMBER="1")
    # One connection: the refused request, then a good one (the connection is not broken).
    refused, accepted = _send(fake, _request("T", descriptor, [good, bad]), _request(None, None, [later]))
    assert refused.error.code == code_pb2.INVALID_ARGUMENT and "row_errors" in refused.error.message
    assert [(e.index, e.code) for e in refused.row_errors] == [(1, FIELDS_ERROR)]
    assert refused.row_errors[0].message.startswith(f"Field {field}:")
    assert re.search(match, refused.row_errors[0].message), refused.row_errors[0].message
    assert accepted.error.code == 0 and "append_result" in accepted
    assert [r["K"] for r in _rows(fake, "T")] == [3]  # nothing of the refused request was applied


def test_values_at_the_edges_of_bigquery_ranges_are_accepted(fake: FakeBigQuery) -> None:
    _table(fake, "T", {c: t for c, (t, _p) in COLUMNS.items()}, key=["K"])
    descriptor = _descriptor({c: p for c, (_t, p) in COLUMNS.items()})
    low = {"N": "-99999999999999999999999999999.999999999", "D": _DAYS_0001, "T": _MICROS_0001}
    high = {"N": "99999999999999999999999999999.999999999", "D": _DAYS_9999, "T": _MICROS_9999}
    big = "578960446186580977117854925043439539266.34992332820282019728792003956564819967"
    rows = [
        _encode(descriptor, K=1, J='{"a": [1, null]}', S="café", G=big, _CHANGE_TYPE="UPSERT", **low),
        _encode(
            descriptor,
            K=2,
            N="1.0000000004",
            G="-" + big[:-1] + "8",
            _CHANGE_TYPE="UPSERT",
            **{k: v for k, v in high.items() if k != "N"},
        ),
        _encode(descriptor, K=3, _CHANGE_TYPE="UPSERT", **high),
    ]
    (response,) = _send(fake, _request("T", descriptor, rows))
    assert response.error.code == 0 and not response.row_errors
    by_key = {r["K"]: r for r in fake.rows(PROJECT, DATASET, "T")}
    assert by_key[1]["D"] == date(1, 1, 1) and by_key[1]["T"] == datetime(1, 1, 1, tzinfo=timezone.utc)
    assert by_key[1]["S"] == "café" and by_key[1]["G"] == Decimal(big)
    assert by_key[2]["N"] == Decimal("1.000000000")  # rounded to NUMERIC's nine digits
    assert by_key[3]["D"] == date(9999, 12, 31) and by_key[3]["N"] == Decimal(high["N"])


def test_a_delete_needs_its_key_and_nothing_else(fake: FakeBigQuery) -> None:
    _table(fake, "T", {"K": "INT64", "V": "INT64"}, key=["K"])
    descriptor = _descriptor(KV)
    _send(
        fake,
        _request(
            "T",
            descriptor,
            [_encode(descriptor, K=1, V=1, _CHANGE_TYPE="UPSERT", _CHANGE_SEQUENCE_NUMBER="1")],
        ),
    )
    (response,) = _send(
        fake,
        _request("T", descriptor, [_encode(descriptor, _CHANGE_TYPE="DELETE", _CHANGE_SEQUENCE_NUMBER="2")]),
    )
    assert [(e.index, e.message.split(":")[0]) for e in response.row_errors] == [(0, "Field K")]
    (response,) = _send(
        fake,
        _request(
            "T", descriptor, [_encode(descriptor, K=1, _CHANGE_TYPE="DELETE", _CHANGE_SEQUENCE_NUMBER="2")]
        ),
    )
    assert response.error.code == 0 and _rows(fake, "T") == []
