"""A Datastream event's change kind, timestamps, key and table, and the stream's settings."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_provider_cdc.sources.datastream.events import DatastreamEventError, parse_event
from airflow_provider_cdc.sources.datastream.settings import DatastreamSettings, DatastreamSettingsError

UTC = timezone.utc


def event(**changes: object) -> dict:
    base = {
        "uuid": "d7989206-380f-0e81-8056-240501101100",
        "read_timestamp": "2019-11-07T07:37:16.808Z",
        "source_timestamp": "2019-11-07T02:15:39",
        "object": "SAMPLE.TBL",
        "read_method": "oracle-cdc-logminer",
        "stream_name": "projects/myProj/locations/myLoc/streams/Oracle-to-Source",
        "schema_key": "a" * 40,
        "source_metadata": {
            "scn": 1,
            "rs_id": "0x1.2.3",
            "ssn": 0,
            "change_type": "INSERT",
            "is_deleted": False,
            "primary_keys": ["THIS_IS_MY_PK"],
        },
        "payload": {"THIS_IS_MY_PK": "1231535353", "FIELD1": "foo", "FIELD2": "TLV"},
    }
    metadata = changes.pop("metadata", None)
    if metadata is not None:
        base["source_metadata"] = {**base["source_metadata"], **metadata}  # type: ignore[dict-item]
    base.update(changes)
    return base


@pytest.mark.parametrize(
    ("change_type", "is_deleted", "kind"),
    [
        ("INSERT", False, "upsert"),
        ("UPDATE", False, "upsert"),
        ("UPDATE-INSERT", False, "upsert"),
        ("UPDATE-DELETE", False, "delete"),  # the old key of a key change: is_deleted stays false
        ("DELETE", True, "delete"),
        (None, True, "delete"),
        (None, None, "upsert"),
    ],
)
def test_change_kinds(change_type: str | None, is_deleted: bool | None, kind: str) -> None:
    parsed = parse_event(event(metadata={"change_type": change_type, "is_deleted": is_deleted}))
    assert parsed.kind == kind
    assert parsed.is_delete is (kind == "delete")


def test_unknown_change_type_is_refused_naming_the_event() -> None:
    with pytest.raises(DatastreamEventError, match=r"event 'd798.*change_type is 'MERGE'"):
        parse_event(event(metadata={"change_type": "MERGE"}), file_name="f.avro")


@pytest.mark.parametrize(
    "value",
    [
        1573092939000,
        datetime(2019, 11, 7, 2, 15, 39, tzinfo=UTC),
        "2019-11-07T02:15:39",
        "2019-11-07 02:15:39",
        "2019-11-07T02:15:39.000Z",
        "2019-11-07T03:15:39+01:00",
    ],
)
def test_timestamps_in_every_form(value: object) -> None:
    assert parse_event(event(source_timestamp=value)).source_timestamp == datetime(
        2019, 11, 7, 2, 15, 39, tzinfo=UTC
    )


def test_malformed_timestamp_names_the_field() -> None:
    with pytest.raises(DatastreamEventError, match="source_timestamp is 'yesterday'"):
        parse_event(event(source_timestamp="yesterday"))


def test_primary_key_from_the_event_replication_index_or_settings() -> None:
    assert parse_event(event()).primary_key == ("THIS_IS_MY_PK",)
    sqlserver = event(metadata={"primary_keys": None, "replication_index": ["FIELD2"]})
    assert parse_event(sqlserver).keys == {"FIELD2": "TLV"}
    settings = DatastreamSettings(primary_keys={"SAMPLE_TBL": ["FIELD1", "FIELD2"]})
    assert parse_event(event(metadata={"primary_keys": []}), settings).primary_key == ("FIELD1", "FIELD2")
    with pytest.raises(DatastreamEventError, match="table 'SAMPLE_TBL' has no primary key"):
        parse_event(event(metadata={"primary_keys": []}))


def test_missing_optional_fields_are_tolerated() -> None:
    legacy = event(source_metadata={"scn": 7, "primary_keys": ["THIS_IS_MY_PK"]}, read_method="oracle_dump")
    del legacy["stream_name"], legacy["read_timestamp"]
    parsed = parse_event(legacy)
    assert (parsed.kind, parsed.sort_keys, parsed.read_timestamp, parsed.change_type) == (
        "upsert",
        (),
        None,
        None,
    )


def test_delete_without_payload_needs_its_key_elsewhere() -> None:
    delete = event(payload=None, metadata={"change_type": "DELETE", "is_deleted": True})
    with pytest.raises(
        DatastreamEventError, match=r"key column\(s\) \['THIS_IS_MY_PK'\] not in the source_metadata"
    ):
        parse_event(delete)
    delete["source_metadata"]["THIS_IS_MY_PK"] = "1"
    assert parse_event(delete).keys == {"THIS_IS_MY_PK": "1"}
    with pytest.raises(DatastreamEventError, match="an upsert without a payload"):
        parse_event(event(payload=None))


def test_table_names() -> None:
    assert parse_event(event()).table_name == "SAMPLE_TBL"
    renamed = DatastreamSettings(table_names={"SAMPLE.TBL": "sample"})
    assert parse_event(event(), renamed).table_name == "sample"
    with pytest.raises(DatastreamEventError, match="map it to one in table_names"):
        parse_event(event(object="1-bad name"))


@pytest.mark.parametrize(
    ("object_name", "table"),
    [
        ("ea-main_users", "ea_main_users"),  # schema "ea-main", table "users", as in Google's samples
        ("billing-eu.invoice lines", "billing_eu_invoice_lines"),
        ("Kasse$2024-Q1", "Kasse_2024_Q1"),
        ("café-menu", "caf__menu"),  # one "_" per character, letters outside ASCII included
    ],
)
def test_an_object_name_maps_to_a_table_with_every_other_character_replaced(
    object_name: str, table: str
) -> None:
    assert parse_event(event(object=object_name)).table_name == table
    explicit = DatastreamSettings(table_names={object_name: "chosen"})
    assert parse_event(event(object=object_name), explicit).table_name == "chosen"


@pytest.mark.parametrize("object_name", ["2024-orders", "_staging-users", "x" * 129])
def test_an_object_name_that_maps_to_no_valid_table_must_be_mapped(object_name: str) -> None:
    with pytest.raises(DatastreamEventError, match=r"no valid table name .*map it to one in table_names"):
        parse_event(event(object=object_name))
    mapped = DatastreamSettings(table_names={object_name: "orders"})
    assert parse_event(event(object=object_name), mapped).table_name == "orders"


def test_two_objects_mapping_to_one_table_are_refused_naming_both() -> None:
    objects = ["ea-main_users", "ea-main_orders", "ea.main_users"]
    with pytest.raises(DatastreamSettingsError) as refused:
        DatastreamSettings().object_tables(objects)
    assert str(refused.value) == (
        "Datastream objects 'ea-main_users' and 'ea.main_users' both map to table 'ea_main_users'; "
        "map one of them to another table in table_names"
    )
    # One of them mapped elsewhere, or both mapped to one table on purpose, is accepted.
    renamed = DatastreamSettings(table_names={"ea.main_users": "legacy_users"})
    assert renamed.object_tables(objects) == {
        "ea-main_orders": "ea_main_orders",
        "ea-main_users": "ea_main_users",
        "ea.main_users": "legacy_users",
    }
    merged = DatastreamSettings(table_names={"ea-main_users": "users", "ea.main_users": "users"})
    assert set(merged.object_tables(objects).values()) == {"users", "ea_main_orders"}
    # An explicit name equal to another object's default name is a collision too.
    taken = DatastreamSettings(table_names={"ea.main_users": "ea_main_orders"})
    with pytest.raises(DatastreamSettingsError, match="'ea-main_orders' and 'ea.main_users' both map"):
        taken.object_tables(objects)


def test_settings_round_trip_and_validation() -> None:
    settings = DatastreamSettings(
        source_database="postgres",
        primary_keys={"orders": ("region", "order_id")},
        column_types={"orders": {"amount": "numeric", "tags": "ARRAY<INT64>"}},
        table_names={"public.orders": "orders"},
    )
    assert settings.source_database == "postgresql"
    assert settings.to_dict()["column_types"] == {"orders": {"amount": "NUMERIC", "tags": "ARRAY<INT64>"}}
    assert DatastreamSettings.from_dict(settings.to_dict()) == settings
    assert hash(DatastreamSettings.from_dict(settings.to_dict())) == hash(settings)
    for bad, message in [
        ({"source_database": "db2"}, "source_database"),
        ({"primary_keys": {"orders": "id"}}, "non-empty list"),
        ({"primary_keys": {"orders": ["id;drop"]}}, "invalid column name"),
        ({"column_types": {"orders": {"amount": "MONEY"}}}, "MONEY"),
        ({"table_names": {"a/b": "t"}}, "not a Datastream object name"),
        ({"colum_types": {}}, "unknown Datastream setting"),
    ]:
        with pytest.raises(DatastreamSettingsError, match=message):
            DatastreamSettings.from_dict(bad)
