"""Datastream Avro and JSONL files as staged change rows."""

from __future__ import annotations

import gzip
import io
import json
from datetime import datetime, timezone
from decimal import Decimal

import fastavro
import pytest

from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.core.sequence_number import sortable_sequence_number
from airflow_provider_cdc.sources.datastream.events import DatastreamEventError
from airflow_provider_cdc.sources.datastream.files import read_file_changes
from airflow_provider_cdc.sources.datastream.names import (
    DatastreamFileNameError,
    is_data_file,
    minute_folder,
    parse_file_name,
)
from airflow_provider_cdc.sources.datastream.settings import DatastreamSettings

UTC = timezone.utc
T0 = datetime(2024, 5, 9, 6, 56, 53, tzinfo=UTC)
HASH = "ec8b627ac23dd5ca51705f57b0f7096f8a2c186f"


def varchar(length: int) -> dict:
    return {"type": "string", "logicalType": "varchar", "length": length}


def nullable(t: object) -> list:
    return ["null", t]


def schema(name: str, metadata_fields: list, payload_fields: list) -> dict:
    return {
        "type": "record",
        "name": name,
        "fields": [
            {"name": "uuid", "type": "string"},
            {"name": "read_timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "source_timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "object", "type": "string"},
            {"name": "read_method", "type": "string"},
            {"name": "stream_name", "type": "string"},
            {"name": "schema_key", "type": "string"},
            {"name": "sort_keys", "type": {"type": "array", "items": ["string", "long"]}},
            {
                "name": "source_metadata",
                "type": {"type": "record", "name": "source_metadata", "fields": metadata_fields},
            },
            {
                "name": "payload",
                "type": {
                    "type": "record",
                    "name": "payload",
                    "fields": [{"name": n, "type": nullable(t), "default": None} for n, t in payload_fields],
                },
            },
        ],
    }


MYSQL_METADATA = [
    {"name": "table", "type": "string"},
    {"name": "database", "type": "string"},
    {"name": "primary_keys", "type": {"type": "array", "items": "string"}},
    {"name": "log_file", "type": nullable("string")},
    {"name": "log_position", "type": nullable("long")},
    {"name": "change_type", "type": nullable("string")},
    {"name": "is_deleted", "type": nullable("boolean")},
]
CUSTOMERS = [
    ("id", "long"),
    ("name", varchar(40)),
    ("balance", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}),
    ("updated_at", {"type": "long", "logicalType": "timestamp-micros"}),
    ("attributes", {"type": "string", "logicalType": "json"}),
]


def mysql_event(
    n: int,
    change_type: str,
    payload: dict,
    *,
    log_file: str = "mysql-bin.000014",
    position: int = 100,
    ts: datetime = T0,
    method: str = "mysql-cdc-binlog",
) -> dict:
    return {
        "uuid": f"uuid-{n}",
        "read_timestamp": ts,
        "source_timestamp": ts,
        "object": "shop_customers",
        "read_method": method,
        "stream_name": "projects/p/locations/l/streams/s",
        "schema_key": "k" * 40,
        "sort_keys": [int(ts.timestamp() * 1000), log_file, position],
        "source_metadata": {
            "table": "customers",
            "database": "shop",
            "primary_keys": ["id"],
            "log_file": log_file,
            "log_position": position,
            "change_type": change_type,
            "is_deleted": change_type == "DELETE",
        },
        "payload": payload,
    }


def avro_bytes(avro_schema: dict, records: list, codec: str = "null") -> bytes:
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(avro_schema), records, codec=codec)
    return buffer.getvalue()


def staged(data: bytes, path: str, settings: DatastreamSettings | None = None) -> list[dict]:
    batches = list(
        read_file_changes(io.BytesIO(data), parse_file_name(path), "unit-1", settings or DatastreamSettings())
    )
    return [dict(zip(STAGED_CHANGE_COLUMNS, row, strict=True)) for batch in batches for row in batch]


def path(method: str, ext: str = "avro", obj: str = "shop_customers") -> str:
    return f"root/{obj}/2024/05/09/06/56/{HASH}_{method}_1296257282_6_0.{ext}"


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_mysql_avro_file(codec: str) -> None:
    row = {"id": 7, "name": "Ann", "balance": Decimal("12.50"), "updated_at": T0, "attributes": '{"tier": 1}'}
    records = [
        mysql_event(1, "INSERT", row, position=100),
        mysql_event(2, "UPDATE-INSERT", {**row, "name": None}, position=200),
        mysql_event(3, "DELETE", row, position=300),
    ]
    rows = staged(
        avro_bytes(schema("shop_customers", MYSQL_METADATA, CUSTOMERS), records, codec),
        path("mysql-cdc-binlog"),
    )
    assert [r["operation"] for r in rows] == ["INSERT", "INSERT", "DELETE"]
    first = rows[0]
    assert first["unit"] == "unit-1" and first["table_name"] == "shop_customers"
    assert first["commit_timestamp"] == T0
    assert first["keys_json"] == '{"id":"7"}'
    assert json.loads(first["after_json"]) == {
        "attributes": '{"tier": 1}',
        "balance": "12.50",
        "name": "Ann",
        "updated_at": "2024-05-09T06:56:53.000000Z",
    }
    assert json.loads(rows[1]["after_json"])["name"] is None
    assert rows[2]["after_json"] == "{}"
    assert (first["transaction_id"], first["transaction_record"], first["transaction_record_count"]) == (
        None,
    ) * 3
    assert first["before_json"] is None
    assert json.loads(first["column_types_json"]) == [
        {"name": "id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
        {"name": "name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
        {"name": "balance", "type": {"code": "NUMERIC"}, "is_primary_key": False, "ordinal_position": 3},
        {"name": "updated_at", "type": {"code": "TIMESTAMP"}, "is_primary_key": False, "ordinal_position": 4},
        {"name": "attributes", "type": {"code": "JSON"}, "is_primary_key": False, "ordinal_position": 5},
    ]
    assert first["change_sequence_number"] == sortable_sequence_number("1/E/64/1")
    assert rows[2]["change_sequence_number"] == sortable_sequence_number("1/E/12C/0")
    metadata = json.loads(first["source_metadata_json"])
    assert metadata["uuid"] == "uuid-1" and metadata["log_file"] == "mysql-bin.000014"
    assert metadata["log_position"] == 100 and metadata["read_method"] == "mysql-cdc-binlog"
    assert metadata["file"] == path("mysql-cdc-binlog").rsplit("/", 1)[1]
    assert metadata["read_timestamp"] == "2024-05-09T06:56:53.000000Z"


def test_an_avro_file_of_an_object_named_with_a_dash_lands_in_its_table_with_an_underscore() -> None:
    # Google's samples name objects "<schema>_<table>" with a dash in the schema (ea-main_users); the
    # file's record is named after the object.
    row = {"id": 3, "name": "Eve", "balance": Decimal("1.00"), "updated_at": T0, "attributes": "{}"}
    records = [{**mysql_event(1, "INSERT", row), "object": "ea-main_users"}]
    data = avro_bytes(schema("ea-main_users", MYSQL_METADATA, CUSTOMERS), records)
    file = path("mysql-cdc-binlog", obj="ea-main_users")
    rows = staged(data, file)
    assert [(r["table_name"], r["keys_json"]) for r in rows] == [("ea_main_users", '{"id":"3"}')]
    mapped = DatastreamSettings(table_names={"ea-main_users": "users"})
    assert [r["table_name"] for r in staged(data, file, mapped)] == ["users"]


def test_mysql_backfill_sorts_below_log_events() -> None:
    row = {"id": 7, "name": "Ann", "balance": None, "updated_at": None, "attributes": None}
    backfill = mysql_event(1, None, row, log_file="", position=0, method="mysql-backfill-fulldump")
    rows = staged(
        avro_bytes(schema("shop_customers", MYSQL_METADATA, CUSTOMERS), [backfill]),
        path("mysql-backfill-fulldump"),
    )
    assert rows[0]["operation"] == "INSERT"
    assert rows[0]["change_sequence_number"].startswith("0000000000000000/")


ORACLE_METADATA = [
    {"name": n, "type": nullable(t)}
    for n, t in [
        ("schema", "string"),
        ("table", "string"),
        ("database", "string"),
        ("row_id", "string"),
        ("scn", "long"),
        ("is_deleted", "boolean"),
        ("change_type", "string"),
        ("ssn", "long"),
        ("rs_id", "string"),
        ("tx_id", "string"),
        ("log_file", "string"),
        ("primary_keys", {"type": "array", "items": "string"}),
    ]
]


def test_oracle_key_change_pair_keeps_the_upsert_at_equal_position() -> None:
    fields = [
        ("EMPLOYEE_ID", {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 0}),
        ("FIRST_NAME", varchar(20)),
    ]
    common = {
        "schema": "HR",
        "table": "EMPLOYEES",
        "database": "XE",
        "row_id": "AAAR",
        "scn": 7044811,
        "ssn": 0,
        "rs_id": " 0x0000d4.000091be.0010 ",
        "tx_id": "9.20.1080",
        "log_file": "",
        "primary_keys": ["EMPLOYEE_ID"],
    }

    def oracle(n: int, change_type: str, key: int) -> dict:
        return {
            "uuid": f"o-{n}",
            "read_timestamp": T0,
            "source_timestamp": T0,
            "object": "HR_EMPLOYEES",
            "read_method": "oracle-cdc-logminer",
            "stream_name": "s",
            "schema_key": "k",
            "sort_keys": [],
            "source_metadata": {**common, "change_type": change_type, "is_deleted": False},
            "payload": {"EMPLOYEE_ID": Decimal(key), "FIRST_NAME": "Lex"},
        }

    data = avro_bytes(
        schema("HR_EMPLOYEES", ORACLE_METADATA, fields),
        [oracle(1, "UPDATE-DELETE", 2), oracle(2, "UPDATE-INSERT", 2)],
    )
    delete, upsert = staged(data, path("oracle-cdc-logminer", obj="HR_EMPLOYEES"))
    assert (delete["operation"], upsert["operation"]) == ("DELETE", "INSERT")
    assert delete["keys_json"] == upsert["keys_json"] == '{"EMPLOYEE_ID":"2"}'
    assert delete["change_sequence_number"] < upsert["change_sequence_number"]
    assert upsert["transaction_id"] == "9.20.1080"
    metadata = json.loads(upsert["source_metadata_json"])
    assert (metadata["scn"], metadata["rs_id"], metadata["ssn"]) == (7044811, " 0x0000d4.000091be.0010 ", 0)


def test_postgresql_array_record_json_and_decimal() -> None:
    array_record = {
        "type": "record",
        "name": "multidimensionalArray_int",
        "fields": [
            {
                "name": "nestedArray",
                "type": nullable({"type": "array", "items": "multidimensionalArray_int"}),
                "default": None,
            },
            {"name": "elementValue", "type": nullable("long"), "default": None},
        ],
    }
    fields = [
        ("id", "long"),
        ("tags", {"type": "array", "items": array_record}),
        ("doc", {"type": "string", "logicalType": "json"}),
        ("big", {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 12}),
    ]
    metadata_fields = [
        {"name": n, "type": nullable(t)}
        for n, t in [
            ("schema", "string"),
            ("table", "string"),
            ("is_deleted", "boolean"),
            ("change_type", "string"),
            ("tx_id", "long"),
            ("lsn", "string"),
            ("primary_keys", {"type": "array", "items": "string"}),
        ]
    ]
    record = {
        "uuid": "p-1",
        "read_timestamp": T0,
        "source_timestamp": T0,
        "object": "public_source_table",
        "read_method": "postgresql-cdc",
        "stream_name": "s",
        "schema_key": "k",
        "sort_keys": [1, "16/CB002DB0"],
        "source_metadata": {
            "schema": "public",
            "table": "source_table",
            "is_deleted": False,
            "change_type": "INSERT",
            "tx_id": 1234,
            "lsn": "16/CB002DB0",
            "primary_keys": ["id"],
        },
        "payload": {
            "id": 1,
            "tags": [{"nestedArray": None, "elementValue": 3}, {"nestedArray": None, "elementValue": None}],
            "doc": '{"a": [1]}',
            "big": Decimal("1.500000000000"),
        },
    }
    data = avro_bytes(schema("public_source_table", metadata_fields, fields), [record])
    (row,) = staged(data, path("postgresql-cdc", obj="public_source_table"))
    assert json.loads(row["after_json"]) == {
        "big": "1.500000000000",
        "doc": '{"a": [1]}',
        "tags": ["3", None],
    }
    types = {c["name"]: c["type"] for c in json.loads(row["column_types_json"])}
    assert types["tags"] == {"code": "ARRAY", "array_element_type": {"code": "INT64"}}
    assert types["big"] == {"code": "BIGNUMERIC"}
    ms = int(T0.timestamp() * 1000)
    assert row["change_sequence_number"] == sortable_sequence_number(
        f"1/{ms:X}/{0x16 << 32 | 0xCB002DB0:X}/1"
    )
    assert row["transaction_id"] == "1234"


def test_schema_change_between_two_files_of_one_object() -> None:
    row = {"id": 1, "name": "Ann", "balance": None, "updated_at": None, "attributes": None}
    first = staged(
        avro_bytes(schema("shop_customers", MYSQL_METADATA, CUSTOMERS), [mysql_event(1, "INSERT", row)]),
        path("mysql-cdc-binlog"),
    )
    wider = CUSTOMERS + [("tier", varchar(10))]
    second = staged(
        avro_bytes(
            schema("shop_customers", MYSQL_METADATA, wider),
            [mysql_event(2, "UPDATE-INSERT", {**row, "tier": "gold"}, position=500)],
        ),
        path("mysql-cdc-binlog"),
    )
    assert "tier" not in json.loads(first[0]["after_json"])
    assert json.loads(second[0]["after_json"])["tier"] == "gold"
    assert [c["name"] for c in json.loads(second[0]["column_types_json"])][-1] == "tier"


def jsonl_event(n: int, ts: object, payload: dict, change_type: str = "INSERT") -> dict:
    return {
        "uuid": f"j-{n}",
        "read_timestamp": ts,
        "source_timestamp": ts,
        "object": "shop_customers",
        "read_method": "postgresql-cdc",
        "stream_name": "s",
        "schema_key": "k",
        "source_metadata": {
            "change_type": change_type,
            "is_deleted": change_type == "DELETE",
            "lsn": f"0/{n:X}",
            "primary_keys": ["id"],
        },
        "payload": payload,
    }


@pytest.mark.parametrize("compressed", [False, True])
def test_jsonl_files_with_timestamps_as_epoch_ms_and_text(compressed: bool) -> None:
    ms = int(T0.timestamp() * 1000)
    events = [
        jsonl_event(
            1, ms, {"id": 1, "price": 2.5, "at": "2024-05-09 06:56:53", "note": None, "doc": {"b": 1}}
        ),
        jsonl_event(
            2,
            "2024-05-09T06:56:53.000Z",
            {"id": 2, "price": 3, "at": "2024-05-09T06:56:53Z", "note": None, "doc": None},
        ),
        jsonl_event(
            3,
            "2024-05-09T06:56:53",
            {"id": 2, "price": None, "at": None, "note": None, "doc": None},
            "DELETE",
        ),
    ]
    data = "".join(json.dumps(e) + "\n" for e in events).encode()
    if compressed:
        data = gzip.compress(data)
    settings = DatastreamSettings(column_types={"shop_customers": {"at": "TIMESTAMP"}})
    rows = staged(data, path("postgresql-cdc", "jsonl.gz" if compressed else "jsonl"), settings)
    assert [r["commit_timestamp"] for r in rows] == [T0] * 3
    assert json.loads(rows[0]["after_json"]) == {
        "at": "2024-05-09T06:56:53.000000Z",
        "doc": '{"b":1}',
        "note": None,
        "price": 2.5,
    }
    assert json.loads(rows[1]["after_json"])["price"] == 3.0
    assert rows[2]["operation"] == "DELETE" and rows[2]["keys_json"] == '{"id":"2"}'
    types = {c["name"]: c["type"]["code"] for c in json.loads(rows[0]["column_types_json"])}
    assert types == {"id": "INT64", "price": "FLOAT64", "at": "TIMESTAMP", "note": "STRING", "doc": "JSON"}
    assert (
        rows[0]["change_sequence_number"]
        < rows[1]["change_sequence_number"]
        < rows[2]["change_sequence_number"]
    )


def test_jsonl_value_of_another_kind_is_refused_naming_file_and_column() -> None:
    events = [jsonl_event(1, 0, {"id": 1, "n": 1}), jsonl_event(2, 0, {"id": 2, "n": "x"})]
    data = "".join(json.dumps(e) + "\n" for e in events).encode()
    with pytest.raises(DatastreamEventError, match=r"column 'n' holds values of different kinds"):
        staged(data, path("postgresql-cdc", "jsonl"))


def test_event_errors_name_file_uuid_and_field() -> None:
    bad = jsonl_event(1, 0, {"id": 1})
    bad["source_metadata"]["lsn"] = "nope"
    with pytest.raises(DatastreamEventError, match=r"file '.*\.jsonl'.*event 'j-1'.*source_metadata\.lsn"):
        staged((json.dumps(bad) + "\n").encode(), path("postgresql-cdc", "jsonl"))


def test_file_names() -> None:
    file = parse_file_name(path("mysql-backfill-fulldump", "jsonl.gz"))
    assert (file.object_name, file.read_method, file.format, file.compressed, file.is_backfill) == (
        "shop_customers",
        "mysql-backfill-fulldump",
        "jsonl",
        True,
        True,
    )
    assert file.minute == datetime(2024, 5, 9, 6, 56, tzinfo=UTC)
    assert parse_file_name(f"HR/2021/03/22/07/53/{HASH}_oracle_dump.avro").read_method == "oracle_dump"
    assert parse_file_name(
        f"t/2024/01/01/00/00/{HASH}_postgresql-backfill_-96622484_0_771.avro"
    ).read_method == ("postgresql-backfill")
    assert not is_data_file("root/shop_customers/2024/05/09/06/56/")
    assert not is_data_file("root/shop_customers/2024/05/09/06/56/notes.txt")
    with pytest.raises(DatastreamFileNameError, match="not-a-datastream.csv"):
        parse_file_name("root/t/2024/05/09/06/56/not-a-datastream.csv")
    with pytest.raises(DatastreamFileNameError, match="2024/13/09/06/56"):
        parse_file_name(f"t/2024/13/09/06/56/{HASH}_mysql-cdc-binlog.avro")
    assert (
        minute_folder("shop_customers", datetime(2024, 5, 9, 6, 56, 30, tzinfo=UTC))
        == "shop_customers/2024/05/09/06/56/"
    )
