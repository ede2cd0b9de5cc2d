"""Staged change rows built from data change records."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.core.sequence_number import ChangeSequenceNumber
from airflow_provider_cdc.core.timestamps import format_timestamp, to_micros
from airflow_provider_cdc.sources.spanner.change_row import canonical_json, change_rows
from airflow_provider_cdc.sources.spanner.record_parser import parse_record_dict
from airflow_provider_cdc.sources.spanner.records import HeartbeatRecord
from airflow_provider_cdc.sources.spanner.sequence_numbers import spanner_change_sequence_number

UTC = timezone.utc
COMMIT = datetime(2022, 9, 27, 12, 30, 0, 123456, tzinfo=UTC)


def order_record(commit: datetime = COMMIT, record_sequence: str = "00000003", transaction: str = "tx-42"):
    return parse_record_dict(
        "data_change_record",
        {
            "commit_timestamp": format_timestamp(commit),
            "record_sequence": record_sequence,
            "server_transaction_id": transaction,
            "is_last_record_in_transaction_in_partition": False,
            "table_name": "OrderLines",
            "column_types": [
                {"name": "OrderId", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
                {"name": "Line", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 2},
                {
                    "name": "Tags",
                    "type": {"code": "ARRAY", "array_element_type": {"code": "STRING"}},
                    "is_primary_key": False,
                    "ordinal_position": 3,
                },
            ],
            "mods": [
                {
                    "keys": {"OrderId": "7", "Line": "1"},
                    "new_values": {"Tags": ["a", "b"]},
                    "old_values": None,
                },
                {"keys": {"Line": "2", "OrderId": "7"}, "new_values": {"Tags": None}, "old_values": {}},
            ],
            "mod_type": "INSERT",
            "value_capture_type": "NEW_ROW",
            "number_of_records_in_transaction": 5,
            "number_of_partitions_in_transaction": 3,
        },
    )


def test_one_row_per_mod_with_exactly_the_staged_columns():
    rows = list(change_rows(order_record(), "token-A"))
    assert len(rows) == 2
    for index, row in enumerate(rows):
        assert tuple(row) == STAGED_CHANGE_COLUMNS
        assert ChangeSequenceNumber.parse(row["change_sequence_number"]).sections[3] == index  # mod index
        assert row["unit"] == "token-A"
        assert row["commit_timestamp"] == COMMIT
        assert row["transaction_id"] == "tx-42"
        assert row["transaction_record"] == "00000003"
        assert row["transaction_record_count"] == 5
        assert row["table_name"] == "OrderLines"
        assert row["operation"] == "INSERT" and type(row["operation"]) is str
        assert json.loads(row["source_metadata_json"]) == {
            "value_capture_type": "NEW_ROW",
            "number_of_partitions_in_transaction": 3,
            "is_last_record_in_transaction_in_partition": False,
        }


def test_json_columns_are_canonical():
    first, second = change_rows(order_record(), "token-A")
    # keys given in different orders give the same text: sorted, compact
    assert first["keys_json"] == '{"Line":"1","OrderId":"7"}'
    assert second["keys_json"] == '{"Line":"2","OrderId":"7"}'
    assert first["after_json"] == '{"Tags":["a","b"]}'
    assert first["before_json"] == "{}"
    assert second["after_json"] == '{"Tags":null}'
    columns = json.loads(first["column_types_json"])
    assert [column["name"] for column in columns] == ["OrderId", "Line", "Tags"]
    assert columns[2] == {
        "name": "Tags",
        "type": {"code": "ARRAY", "array_element_type": {"code": "STRING"}},
        "is_primary_key": False,
        "ordinal_position": 3,
    }
    assert first["column_types_json"] == canonical_json(columns)
    assert first["source_metadata_json"] == canonical_json(json.loads(first["source_metadata_json"]))


def test_change_sequence_numbers_follow_commit_order():
    record = order_record()
    first, second = change_rows(record, "token-A")
    assert first["change_sequence_number"] == spanner_change_sequence_number(
        to_micros(COMMIT), "tx-42", "00000003", 0
    )
    assert ChangeSequenceNumber.parse(first["change_sequence_number"]).sections[0] == to_micros(COMMIT)
    later_record = next(change_rows(order_record(COMMIT + timedelta(microseconds=1), "00000000"), "token-B"))
    later_sequence = next(change_rows(order_record(record_sequence="00000004"), "token-A"))
    assert first["change_sequence_number"] < second["change_sequence_number"]  # later mod of the record
    assert second["change_sequence_number"] < later_sequence["change_sequence_number"]  # later record
    assert later_sequence["change_sequence_number"] < later_record["change_sequence_number"]  # later commit


def test_only_data_change_records_and_real_tokens():
    with pytest.raises(TypeError, match="data change records, got HeartbeatRecord"):
        change_rows(HeartbeatRecord(COMMIT), "token-A")
    with pytest.raises(ValueError, match="partition token must be a non-empty string"):
        change_rows(order_record(), "")
    with pytest.raises(ValueError, match="partition token must be a non-empty string, got None"):
        change_rows(order_record(), None)  # type: ignore[arg-type]
