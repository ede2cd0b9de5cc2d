"""Table rows as staged change rows: snapshots, commit-timestamp tables, changelogs, soft deletes."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_cdc.domain.collapse import collapse_window
from airflow_provider_cdc.domain.columns import ColumnType
from airflow_provider_cdc.domain.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.domain.sequence_number import spanner_change_sequence_number
from airflow_provider_cdc.domain.table_rows import (
    DELETE,
    INSERT,
    UPDATE,
    ChangeRowEncoder,
    CommitTimestampTable,
    TableRowError,
    table_change_rows,
)
from airflow_provider_cdc.domain.timestamps import ONE_MICROSECOND, to_micros

T = datetime(2026, 1, 1, tzinfo=timezone.utc)
USERS = [
    ColumnType("UserId", {"code": "INT64"}, True, 1),
    ColumnType("Name", {"code": "STRING"}, False, 2),
    ColumnType("Photo", {"code": "BYTES"}, False, 3),
    ColumnType("Tags", {"code": "ARRAY", "array_element_type": {"code": "STRING"}}, False, 4),
]
HISTORY = [
    ColumnType("UserId", {"code": "INT64"}, True, 1),
    ColumnType("DocumentId", {"code": "INT64"}, True, 2),
    ColumnType("Ts", {"code": "TIMESTAMP"}, True, 3),
    ColumnType("Delta", {"code": "STRING"}, False, 4),
]


def _rows(columns: list[list]) -> list[dict]:
    return [dict(zip(STAGED_CHANGE_COLUMNS, values, strict=True)) for values in zip(*columns, strict=True)]


def test_snapshot_rows_are_inserts_below_every_change_of_the_stream() -> None:
    snapshot_at = T - ONE_MICROSECOND
    encoder = ChangeRowEncoder(
        "Users",
        USERS,
        ["UserId", "Name", "Photo", "Tags"],
        partition_token="Users#0@p",
        commit_timestamp=snapshot_at,
    )
    rows = _rows(encoder.columns([["7", "Ann", "AAE=", ["a", None]], ["8", None, None, None]]))
    assert [r["mod_type"] for r in rows] == [INSERT, INSERT]
    first = rows[0]
    assert first["keys_json"] == '{"UserId":"7"}'
    assert json.loads(first["new_values_json"]) == {"Name": "Ann", "Photo": "AAE=", "Tags": ["a", None]}
    assert json.loads(rows[1]["new_values_json"]) == {"Name": None, "Photo": None, "Tags": None}
    assert first["commit_timestamp"] == snapshot_at and first["partition_token"] == "Users#0@p"
    assert (
        first["number_of_records_in_transaction"] == 1 and first["is_last_record_in_transaction_in_partition"]
    )
    # The sequence number is the contract's: commit µs / fingerprint(transaction) / 0 / 0.
    assert first["change_sequence_number"] == spanner_change_sequence_number(
        to_micros(snapshot_at), first["server_transaction_id"], "00000000", 0
    )
    earliest_stream_change = spanner_change_sequence_number(to_micros(T), "any transaction", "00000000", 0)
    assert max(r["change_sequence_number"] for r in rows) < earliest_stream_change
    assert len({r["server_transaction_id"] for r in rows}) == 2  # each row a transaction of its own
    assert [c["name"] for c in json.loads(first["column_types_json"])] == ["UserId", "Name", "Photo", "Tags"]


def test_python_values_and_encoded_values_give_the_same_rows() -> None:
    python = list(
        table_change_rows(
            "Users",
            USERS,
            [{"UserId": 7, "Name": "Ann", "Photo": b"\x00\x01", "Tags": ["a", None]}],
            partition_token="p",
            commit_timestamp=T,
        )
    )
    encoded = _rows(
        ChangeRowEncoder(
            "Users", USERS, ["UserId", "Name", "Photo", "Tags"], partition_token="p", commit_timestamp=T
        ).columns([["7", "Ann", "AAE=", ["a", None]]])
    )
    assert python == encoded


def test_a_changelog_row_changes_its_entity_and_orders_by_timestamp() -> None:
    config = CommitTimestampTable.of(
        {
            "table": "DocumentHistory",
            "timestamp_column": "Ts",
            "entity_key": ["UserId", "DocumentId"],
            "target_table": "Documents",
        }
    )
    columns = config.change_columns(HISTORY)
    assert [(c.name, c.is_primary_key) for c in columns] == [
        ("UserId", True),
        ("DocumentId", True),
        ("Ts", False),
        ("Delta", False),
    ]
    later = T + timedelta(seconds=1)
    rows = list(
        table_change_rows(
            config.target,
            columns,
            [
                {"UserId": 1, "DocumentId": 2, "Ts": later, "Delta": "b"},
                {"UserId": 1, "DocumentId": 2, "Ts": T, "Delta": "a"},
            ],
            partition_token="p",
            config=config,
        )
    )
    assert {r["table_name"] for r in rows} == {"Documents"}
    assert rows[0]["commit_timestamp"] == later and rows[1]["commit_timestamp"] == T
    collapsed = collapse_window(rows)["Documents"]
    assert len(collapsed) == 1 and json.loads(collapsed[0]["_values_json"])["Delta"] == "b"


def test_two_keys_sharing_a_timestamp_order_by_key_and_never_collide() -> None:
    config = CommitTimestampTable("Users", "Ts")
    columns = [*USERS[:2], ColumnType("Ts", {"code": "TIMESTAMP"}, False, 3)]
    encoder = ChangeRowEncoder("Users", columns, ["UserId", "Name", "Ts"], partition_token="p", config=config)
    stamp = "2026-01-01T00:00:01.5Z"
    rows = _rows(encoder.columns([["1", "a", stamp], ["2", "b", stamp]]))
    assert rows[0]["commit_timestamp"] == rows[1]["commit_timestamp"] == T + timedelta(seconds=1.5)
    assert rows[0]["change_sequence_number"] != rows[1]["change_sequence_number"]
    assert rows[0]["server_transaction_id"] != rows[1]["server_transaction_id"]


def test_soft_delete_and_change_type_columns_give_deletes_and_are_not_carried() -> None:
    columns = [
        *USERS[:2],
        ColumnType("Ts", {"code": "TIMESTAMP"}, False, 3),
        ColumnType("Deleted", {"code": "BOOL"}, False, 4),
        ColumnType("Op", {"code": "STRING"}, False, 5),
    ]
    soft = CommitTimestampTable("Users", "Ts", soft_delete_column="Deleted")
    assert [c.name for c in soft.change_columns(columns)] == ["UserId", "Name", "Ts", "Op"]
    typed = CommitTimestampTable("Users", "Ts", change_type_column="Op")
    select = ["UserId", "Name", "Ts", "Deleted", "Op"]
    stamp = "2026-01-01T00:00:00Z"
    rows = _rows(
        ChangeRowEncoder(
            "Users", soft.change_columns(columns), select, partition_token="p", config=soft
        ).columns([["1", "a", stamp, True, None], ["2", "b", stamp, False, None]])
    )
    assert [r["mod_type"] for r in rows] == [DELETE, INSERT]
    assert rows[0]["new_values_json"] == "{}"
    assert "Deleted" not in json.loads(rows[1]["new_values_json"])
    encoder = ChangeRowEncoder(
        "Users", typed.change_columns(columns), select, partition_token="p", config=typed
    )
    rows = _rows(
        encoder.columns(
            [["1", "a", stamp, None, "d"], ["2", "b", stamp, None, "UPDATE"], ["3", "c", stamp, None, "I"]]
        )
    )
    assert [r["mod_type"] for r in rows] == [DELETE, UPDATE, INSERT]
    with pytest.raises(TableRowError, match=r"'Op' holds 'MERGE'.*key \{\"UserId\":\"4\"\}"):
        encoder.columns([["4", "d", stamp, None, "MERGE"]])


def test_refusals_name_the_table_and_the_column() -> None:
    with pytest.raises(TableRowError, match="has no column 'Missing'"):
        CommitTimestampTable("Users", "Missing").change_columns(USERS)
    with pytest.raises(ValueError, match="invalid table name"):
        CommitTimestampTable("Users; DROP", "Ts")
    with pytest.raises(ValueError, match="unknown field"):
        CommitTimestampTable.of({"table": "Users", "timestamp_column": "Ts", "colour": "red"})
    with pytest.raises(ValueError, match="entity_key must be a list"):
        CommitTimestampTable("Users", "Ts", entity_key="UserId")  # type: ignore[arg-type]
    config = CommitTimestampTable("Users", "Ts")
    columns = [*USERS[:2], ColumnType("Ts", {"code": "TIMESTAMP"}, False, 3)]
    encoder = ChangeRowEncoder("Users", columns, ["UserId", "Name", "Ts"], partition_token="p", config=config)
    with pytest.raises(TableRowError, match=r"key \{\"UserId\":\"1\"\}: column 'Ts' is None"):
        encoder.columns([["1", "a", None]])
    with pytest.raises(TableRowError, match=r"columns \['Name'\] are not read"):
        ChangeRowEncoder("Users", USERS[:2], ["UserId"], partition_token="p", commit_timestamp=T)
    assert CommitTimestampTable.of(config.to_dict()) == config
