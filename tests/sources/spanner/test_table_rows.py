"""Table rows as staged change rows: snapshots, commit-timestamp tables, changelogs, soft deletes."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_cdc.core.collapse import collapse_window
from airflow_provider_cdc.core.columns import ColumnType
from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, to_micros
from airflow_provider_cdc.sources.spanner.sequence_numbers import spanner_change_sequence_number
from airflow_provider_cdc.sources.spanner.table_rows import (
    DELETE,
    INSERT,
    UPDATE,
    ChangeRowEncoder,
    ColumnChunk,
    CommitTimestampTable,
    TableRowError,
    json_texts,
    table_change_rows,
)

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
    assert [r["operation"] for r in rows] == [INSERT, INSERT]
    first = rows[0]
    assert first["keys_json"] == '{"UserId":"7"}'
    assert json.loads(first["after_json"]) == {"Name": "Ann", "Photo": "AAE=", "Tags": ["a", None]}
    assert json.loads(rows[1]["after_json"]) == {"Name": None, "Photo": None, "Tags": None}
    assert first["commit_timestamp"] == snapshot_at and first["unit"] == "Users#0@p"
    assert first["transaction_record_count"] == 1 and first["transaction_record"] == "00000000"
    assert json.loads(first["source_metadata_json"]) == {
        "value_capture_type": "NEW_ROW",
        "number_of_partitions_in_transaction": 1,
        "is_last_record_in_transaction_in_partition": True,
    }
    # The sequence number is the contract's: commit µs / fingerprint(transaction) / 0 / 0.
    assert first["change_sequence_number"] == spanner_change_sequence_number(
        to_micros(snapshot_at), first["transaction_id"], "00000000", 0
    )
    earliest_stream_change = spanner_change_sequence_number(to_micros(T), "any transaction", "00000000", 0)
    assert max(r["change_sequence_number"] for r in rows) < earliest_stream_change
    assert len({r["transaction_id"] for r in rows}) == 2  # each row a transaction of its own
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
    assert rows[0]["transaction_id"] != rows[1]["transaction_id"]


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
    assert [r["operation"] for r in rows] == [DELETE, INSERT]
    assert rows[0]["after_json"] == "{}"
    assert "Deleted" not in json.loads(rows[1]["after_json"])
    encoder = ChangeRowEncoder(
        "Users", typed.change_columns(columns), select, partition_token="p", config=typed
    )
    rows = _rows(
        encoder.columns(
            [["1", "a", stamp, None, "d"], ["2", "b", stamp, None, "UPDATE"], ["3", "c", stamp, None, "I"]]
        )
    )
    assert [r["operation"] for r in rows] == [DELETE, UPDATE, INSERT]
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


# -- column-wise encoding against a row-by-row reference ---------------------------------------------

ALL_TYPES = [
    ColumnType("Id", {"code": "INT64"}, True, 1),
    ColumnType("Region", {"code": "STRING"}, True, 2),
    ColumnType("Name", {"code": "STRING"}, False, 3),
    ColumnType("Score", {"code": "FLOAT64"}, False, 4),
    ColumnType("Ratio", {"code": "FLOAT32"}, False, 5),
    ColumnType("Active", {"code": "BOOL"}, False, 6),
    ColumnType("Born", {"code": "DATE"}, False, 7),
    ColumnType("Ts", {"code": "TIMESTAMP", "allow_commit_timestamp": True}, False, 8),
    ColumnType("Amount", {"code": "NUMERIC"}, False, 9),
    ColumnType("Doc", {"code": "JSON"}, False, 10),
    ColumnType("Photo", {"code": "BYTES"}, False, 11),
    ColumnType("Tags", {"code": "ARRAY", "array_element_type": {"code": "STRING"}}, False, 12),
    ColumnType("Points", {"code": "ARRAY", "array_element_type": {"code": "FLOAT64"}}, False, 13),
    ColumnType("Deleted", {"code": "BOOL"}, False, 14),
    ColumnType("Kind", {"code": "STRING"}, False, 15),
]
ALL_SELECT = [c.name for c in ALL_TYPES]
STAMP = "2026-01-01T00:00:00.000001Z"
# Values in Spanner's JSON encoding, NULLs and edge cases in every column.
ALL_ROWS = [
    [
        "1",
        "eu",
        "Ann",
        1.5,
        0.25,
        True,
        "2020-01-02",
        STAMP,
        "0.01",
        '{"a":1}',
        "AAE=",
        ["a", None],
        [1.0, 2.5],
        False,
        "INSERT",
    ],
    ["2", "", None, None, None, None, None, STAMP, None, None, None, None, None, None, "u"],
    [
        "3",
        "us",
        "",
        0.0,
        -0.0,
        False,
        "1970-01-01",
        "2026-01-01T00:00:00.5Z",
        "-1e-9",
        "null",
        "",
        [],
        [],
        True,
        "UPDATE",
    ],
    [
        "4",
        'q"uote,\\',
        "é ü 日本 \x00\x1f\u2028",
        "NaN",
        "Infinity",
        True,
        "9999-12-31",
        STAMP,
        "99999999999999999999999999999.999999999",
        '"text"',
        "//8=",
        ["x,y", "", None, "\x00"],
        ["NaN", "-Infinity", None],
        None,
        "delete",
    ],
    [
        "5",
        "a%sb",
        "%d %%",
        1e300,
        3.4e38,
        False,
        "2000-02-29",
        STAMP,
        "0",
        "[1,2]",
        "AA==",
        ["only"],
        [0.1],
        None,
        "D",
    ],
]


def _reference(encoder_args: dict, rows: list[list]) -> list[dict]:
    """Staged rows built one row at a time with ``json.dumps`` (the contract, spelled out)."""
    columns, config = encoder_args["columns"], encoder_args.get("config")
    ordered = sorted(columns, key=lambda c: c.name)
    at = {name: index for index, name in enumerate(encoder_args["select"])}
    table = encoder_args["table"]
    result = []
    for row in rows:
        keys = json.dumps(
            {c.name: row[at[c.name]] for c in ordered if c.is_primary_key}, separators=(",", ":")
        )
        if config is None:
            stamp, mod = encoder_args["commit_timestamp"], INSERT
        else:
            from airflow_provider_cdc.core.timestamps import parse_timestamp

            stamp = parse_timestamp(row[at[config.timestamp_column]])
            names = [n for n in (config.soft_delete_column, config.change_type_column) if n is not None]
            mod = config.mod_type({n: row[at[n]] for n in names})
        image = json.dumps(
            {c.name: row[at[c.name]] for c in ordered if not c.is_primary_key}, separators=(",", ":")
        )
        transaction = f"{table}/{to_micros(stamp)}/{keys}"
        result.append(
            {
                "unit": "p",
                "commit_timestamp": stamp,
                "transaction_id": transaction,
                "transaction_record": "00000000",
                "transaction_record_count": 1,
                "table_name": table,
                "operation": mod,
                "keys_json": keys,
                "after_json": "{}" if mod == DELETE else image,
                "before_json": "{}",
                "column_types_json": None,  # compared apart
                "source_metadata_json": '{"is_last_record_in_transaction_in_partition":true,'
                '"number_of_partitions_in_transaction":1,"value_capture_type":"NEW_ROW"}',
                "change_sequence_number": spanner_change_sequence_number(
                    to_micros(stamp), transaction, "00000000", 0
                ),
            }
        )
    return result


@pytest.mark.parametrize(
    "config",
    [
        None,
        CommitTimestampTable("All", "Ts"),
        CommitTimestampTable("All", "Ts", soft_delete_column="Deleted"),
        CommitTimestampTable("All", "Ts", change_type_column="Kind"),
    ],
    ids=["snapshot", "commit-timestamp", "soft-delete", "change-type"],
)
def test_column_wise_encoding_matches_the_row_by_row_reference(config: CommitTimestampTable | None) -> None:
    columns = ALL_TYPES if config is None else config.change_columns(ALL_TYPES)
    args: dict = {"table": "All", "columns": columns, "select": ALL_SELECT}
    if config is None:
        args["commit_timestamp"] = T - ONE_MICROSECOND
    else:
        args["config"] = config
    encoder = ChangeRowEncoder(
        args["table"],
        columns,
        ALL_SELECT,
        partition_token="p",
        commit_timestamp=args.get("commit_timestamp"),
        config=config,
    )
    from_rows = _rows(encoder.columns(ALL_ROWS))
    from_columns = _rows(encoder.columns(ColumnChunk(list(map(list, zip(*ALL_ROWS, strict=True))))))
    assert from_rows == from_columns
    expected = _reference(args, ALL_ROWS)
    for row in from_rows:
        assert json.loads(row.pop("column_types_json")) == [c.to_json_dict() for c in columns]
    for row in expected:
        row.pop("column_types_json")
    assert from_rows == expected
    if config is not None and config.soft_delete_column:
        assert [r["operation"] for r in from_rows] == [INSERT, INSERT, DELETE, INSERT, INSERT]
    if config is not None and config.change_type_column:
        assert [r["operation"] for r in from_rows] == [INSERT, UPDATE, UPDATE, DELETE, DELETE]


def test_an_empty_chunk_and_a_table_of_keys_only() -> None:
    keys_only = [ColumnType("A", {"code": "STRING"}, True, 1), ColumnType("B", {"code": "INT64"}, True, 2)]
    encoder = ChangeRowEncoder("K", keys_only, ["B", "A"], partition_token="p", commit_timestamp=T)
    assert encoder.columns([]) == [[] for _ in STAGED_CHANGE_COLUMNS]
    assert encoder.columns(ColumnChunk([[], []])) == [[] for _ in STAGED_CHANGE_COLUMNS]
    rows = _rows(encoder.columns([["2", "x"], [None, None]]))
    assert [r["keys_json"] for r in rows] == ['{"A":"x","B":"2"}', '{"A":null,"B":null}']
    assert [r["after_json"] for r in rows] == ["{}", "{}"]
    with pytest.raises(ValueError, match="expected 2 columns"):
        encoder.columns(ColumnChunk([["x"]]))
    with pytest.raises(ValueError, match="differ in length"):
        encoder.columns(ColumnChunk([["2"], ["x", "y"]]))


@pytest.mark.parametrize("strings", [False, True])
def test_json_texts_are_what_json_dumps_writes(strings: bool) -> None:
    values = [
        None,
        True,
        False,
        0,
        -7,
        2**70,
        0.0,
        -0.0,
        1.5,
        1e-300,
        float("nan"),
        float("inf"),
        float("-inf"),
        "",
        "plain",
        'é\u2028\x00,"\\',
        "NaN",
        [],
        [None],
        [1, 2],
        ["a,b", ["c", None]],
        {},
        {"b": 1, "a": [2, 3]},
    ]
    expected = [json.dumps(v, separators=(",", ":")) for v in values]
    assert json_texts(values, strings) == expected
    assert json_texts(tuple(values), strings) == expected
    for value, text in zip(values, expected, strict=True):
        assert json_texts([value], strings) == [text]
    assert json_texts(["a", "b\x00"], True) == ['"a"', '"b\\u0000"']
    assert json_texts([], strings) == []
    with pytest.raises(TypeError):
        json_texts([b"bytes"], strings)
