"""Per-key collapse of a window's changes (the reference the merge job must match)."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_cdc.core.collapse import (
    CollapseError,
    collapse_chain,
    collapse_key,
    collapse_window,
)
from airflow_provider_cdc.core.columns import LogicalTypeError, parse_column_types
from tests.support.staged_changes import spanner_staged_row

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)
TYPES_V1 = json.dumps(
    [
        {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
        {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
        {"name": "Balance", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 3},
    ]
)
TYPES_V2 = json.dumps(
    [*json.loads(TYPES_V1),
     {"name": "Note", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 4}]
)


def change(
    operation: str,
    values: dict[str, Any] | str | None = None,
    *,
    at: int,
    key: int = 1,
    table: str = "Accounts",
    transaction: str | None = None,
    record_sequence: str = "00000000",
    mod_index: int = 0,
    column_types: str = TYPES_V1,
) -> dict[str, Any]:
    """A staged change row (ARCHITECTURE.md) of a Spanner mod committed ``at`` seconds after T0."""
    if values is None:
        values = {}
    return spanner_staged_row(
        operation=operation,
        table=table,
        keys_json=json.dumps({"Id": str(key)}, separators=(",", ":")),
        after_json=values if isinstance(values, str) else json.dumps(values, separators=(",", ":")),
        commit_timestamp=T0 + timedelta(seconds=at),
        transaction=transaction or f"tx-{at}",
        column_types_json=column_types,
        record_sequence=record_sequence,
        mod_index=mod_index,
    )


def image(row: dict[str, Any]) -> dict[str, Any]:
    return json.loads(row["_values_json"])


def test_a_single_insert_is_a_full_upsert_that_keeps_its_text() -> None:
    insert = change("INSERT", '{"Name": "Ann", "Balance": "10"}', at=1)
    row = collapse_key([insert])
    assert row["_CHANGE_TYPE"] == "UPSERT"
    assert row["_full_image"] is True
    assert row["_values_json"] == '{"Name": "Ann", "Balance": "10"}'
    assert row["_present_columns"] == ["Balance", "Name"]
    assert row["_keys_json"] == '{"Id":"1"}'
    assert row["_CHANGE_SEQUENCE_NUMBER"] == insert["change_sequence_number"]
    assert row["_commit_timestamp"] == insert["commit_timestamp"]
    assert row["_column_types_json"] == TYPES_V1


def test_a_single_update_is_a_partial_upsert() -> None:
    row = collapse_key([change("UPDATE", {"Balance": "12"}, at=1)])
    assert (row["_CHANGE_TYPE"], row["_full_image"]) == ("UPSERT", False)
    assert image(row) == {"Balance": "12"}
    assert row["_present_columns"] == ["Balance"]


def test_a_single_delete_is_a_delete_with_an_empty_full_image() -> None:
    row = collapse_key([change("DELETE", at=1)])
    assert row["_CHANGE_TYPE"] == "DELETE"
    assert (row["_values_json"], row["_present_columns"], row["_full_image"]) == ("{}", [], True)


def test_insert_then_updates_is_a_full_image_with_the_latest_values() -> None:
    row = collapse_key(
        [
            change("INSERT", {"Name": "Ann", "Balance": "10"}, at=1),
            change("UPDATE", {"Balance": "11"}, at=2),
            change("UPDATE", {"Name": "Anna"}, at=3),
        ]
    )
    assert (row["_CHANGE_TYPE"], row["_full_image"]) == ("UPSERT", True)
    assert image(row) == {"Name": "Anna", "Balance": "11"}
    assert row["_values_json"] == '{"Balance":"11","Name":"Anna"}'  # merged: compact, sorted
    assert row["_present_columns"] == ["Balance", "Name"]


def test_updates_merge_column_wise_and_the_later_value_wins() -> None:
    row = collapse_key(
        [
            change("UPDATE", {"Balance": "11", "Name": "A"}, at=1),
            change("UPDATE", {"Balance": "12"}, at=2),
            change("UPDATE", {"Name": None}, at=3),
        ]
    )
    assert (row["_CHANGE_TYPE"], row["_full_image"]) == ("UPSERT", False)
    assert image(row) == {"Balance": "12", "Name": None}  # an explicit NULL is a value
    assert row["_present_columns"] == ["Balance", "Name"]


@pytest.mark.parametrize(
    "chain",
    [
        ["INSERT", "DELETE"],
        ["UPDATE", "DELETE"],
        ["INSERT", "UPDATE", "DELETE"],
        ["DELETE", "INSERT", "DELETE"],
    ],
)
def test_a_chain_ending_in_delete_is_a_delete(chain: list[str]) -> None:
    changes = [change(kind, {"Balance": str(i)} if kind != "DELETE" else None, at=i)
               for i, kind in enumerate(chain, start=1)]
    row = collapse_key(changes)
    assert row["_CHANGE_TYPE"] == "DELETE"
    assert (row["_values_json"], row["_full_image"]) == ("{}", True)
    assert row["_CHANGE_SEQUENCE_NUMBER"] == changes[-1]["change_sequence_number"]


def test_delete_then_insert_is_a_full_image_of_the_insert_only() -> None:
    row = collapse_key(
        [
            change("UPDATE", {"Note": "old"}, at=1),
            change("DELETE", at=2),
            change("INSERT", {"Name": "Bo", "Balance": "1"}, at=3),
            change("UPDATE", {"Balance": "2"}, at=4),
        ]
    )
    assert (row["_CHANGE_TYPE"], row["_full_image"]) == ("UPSERT", True)
    assert image(row) == {"Name": "Bo", "Balance": "2"}  # nothing from before the delete


@pytest.mark.parametrize(
    ("chain", "expected"),
    [
        ([("DELETE", None), ("UPDATE", {"Balance": "5"})], {"Balance": "5"}),
        ([("DELETE", None), ("UPDATE", {"Balance": "5"}), ("UPDATE", {"Name": "Cy"})],
         {"Balance": "5", "Name": "Cy"}),
        ([("UPDATE", {"Name": "old"}), ("DELETE", None), ("UPDATE", {"Balance": "5"})], {"Balance": "5"}),
        ([("INSERT", {"Name": "Al", "Balance": "1"}), ("DELETE", None), ("UPDATE", {"Balance": "5"})],
         {"Balance": "5"}),
        ([("DELETE", None), ("INSERT", {"Balance": "1"}), ("UPDATE", {"Name": "Cy"})],
         {"Balance": "1", "Name": "Cy"}),
    ],
)
def test_an_update_after_a_delete_is_a_full_image_of_the_updated_columns(
    chain: list[tuple[str, dict[str, Any] | None]], expected: dict[str, Any]
) -> None:
    # A source whose update of an absent row inserts it (Table Store's UpdateRow): after the DELETE
    # the row starts empty, so the columns the updates do not name are NULL, not the deleted row's.
    row = collapse_key([change(kind, values, at=i) for i, (kind, values) in enumerate(chain, start=1)])
    assert (row["_CHANGE_TYPE"], row["_full_image"]) == ("UPSERT", True)
    assert image(row) == expected
    assert row["_present_columns"] == sorted(expected)


def test_the_input_order_does_not_matter_and_duplicates_count_once() -> None:
    changes = [
        change("INSERT", {"Name": "Ann", "Balance": "10"}, at=1),
        change("UPDATE", {"Balance": "11"}, at=2),
        change("UPDATE", {"Balance": "12"}, at=3),
    ]
    expected = collapse_key(changes)
    shuffled = [*changes, dict(changes[1]), dict(changes[0])]
    random.Random(4).shuffle(shuffled)
    assert collapse_key(shuffled) == expected


def test_changes_of_one_transaction_follow_record_sequence_and_mod_index() -> None:
    first = change("UPDATE", {"Balance": "1"}, at=5, transaction="t", record_sequence="00000001")
    second = change("UPDATE", {"Balance": "2"}, at=5, transaction="t", record_sequence="00000002")
    assert image(collapse_key([second, first])) == {"Balance": "2"}


def test_column_types_are_the_newest_changes() -> None:
    row = collapse_key([change("INSERT", {"Name": "A"}, at=1),
                        change("UPDATE", {"Note": "n"}, at=2, column_types=TYPES_V2)])
    assert row["_column_types_json"] == TYPES_V2


def test_a_window_gives_all_keys_of_a_table_the_union_of_its_column_types() -> None:
    # Spanner's UPDATE records list only the key and the changed columns: no single record here
    # names every column of Accounts, the change set's column types do.
    only_note = json.dumps([c for c in json.loads(TYPES_V2) if c["name"] in ("Id", "Note")])
    only_name = json.dumps([c for c in json.loads(TYPES_V2) if c["name"] in ("Id", "Name")])
    tables = collapse_window(
        [
            change("INSERT", {"Name": "A"}, at=1, key=1),
            change("UPDATE", {"Note": "n"}, at=3, key=2, column_types=only_note),
            change("UPDATE", {"Name": "B"}, at=4, key=3, column_types=only_name),
            change("INSERT", {"Label": "x"}, at=4, key=1, table="Tags", column_types="[]"),
        ]
    )
    assert sorted(tables) == ["Accounts", "Tags"]
    assert [row["_keys_json"] for row in tables["Accounts"]] == ['{"Id":"1"}', '{"Id":"2"}', '{"Id":"3"}']
    (types,) = {row["_column_types_json"] for row in tables["Accounts"]}
    assert json.loads(types) == json.loads(TYPES_V2)
    assert tables["Tags"][0]["_column_types_json"] == "[]"


def test_the_union_keeps_each_columns_nullability_and_older_staging_reads_as_unknown() -> None:
    # Staged by a version that knew nullability (key "Id" not nullable, "Name" nullable), then by
    # one that did not: a column's newest description wins, an older one's nullability fills in.
    known = json.dumps([{**c, "is_nullable": not c["is_primary_key"]} for c in json.loads(TYPES_V1)])
    tables = collapse_window(
        [
            change("INSERT", {"Name": "A"}, at=1, key=1, column_types=known),
            change("UPDATE", {"Note": "n"}, at=2, key=2, column_types=TYPES_V2),
        ]
    )
    (types,) = {row["_column_types_json"] for row in tables["Accounts"]}
    assert [(c["name"], c.get("is_nullable")) for c in json.loads(types)] == [
        ("Id", False), ("Name", True), ("Balance", True), ("Note", None)
    ]
    only_old = collapse_window([change("INSERT", {"Name": "A"}, at=1, key=1)])["Accounts"][0]
    assert all("is_nullable" not in c for c in json.loads(only_old["_column_types_json"]))
    with pytest.raises(LogicalTypeError, match="'Id': is_nullable must be true or false, got 'no'"):
        parse_column_types([{"name": "Id", "type": {"code": "INT64"}, "is_nullable": "no"}])


def test_a_columns_newest_description_wins_in_the_union() -> None:
    as_bytes = json.dumps([{**c, "type": {"code": "BYTES"}} if c["name"] == "Note" else c
                           for c in json.loads(TYPES_V2)])
    for first, second in ((TYPES_V2, as_bytes), (as_bytes, TYPES_V2)):
        tables = collapse_window([change("INSERT", {"Note": "bg=="}, at=1, key=1, column_types=first),
                                  change("UPDATE", {"Note": "bg=="}, at=2, key=2, column_types=second)])
        (types,) = {row["_column_types_json"] for row in tables["Accounts"]}
        assert json.loads(types) == json.loads(second)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ([change("UPSERT", {"A": 1}, at=1)], "unknown operation 'UPSERT'"),
        ([change("UPDATE", "{not json", at=1)], "after_json is not valid JSON"),
        ([change("UPDATE", "[1, 2]", at=1)], "not a JSON object"),
        ([change("UPDATE", '{"F": NaN}', at=1)], "NaN is not valid JSON"),
        ([change("INSERT", {"A": 1}, at=1), change("UPDATE", "null", at=2)], "change 2: after_json"),
    ],
)
def test_bad_changes_are_refused_naming_table_and_key(changes: list[dict], problem: str) -> None:
    with pytest.raises(CollapseError, match=problem) as raised:
        collapse_key(changes)
    assert "table 'Accounts', key {\"Id\":\"1\"}" in str(raised.value)


def test_changes_of_different_keys_are_refused() -> None:
    with pytest.raises(CollapseError, match="different keys"):
        collapse_key([change("UPDATE", {"A": 1}, at=1, key=1), change("UPDATE", {"A": 2}, at=2, key=2)])
    with pytest.raises(CollapseError, match="no changes"):
        collapse_key([])


def test_collapse_chain_is_the_column_wise_core() -> None:
    assert collapse_chain(["UPDATE", "UPDATE"], ['{"a":1,"b":1}', '{"b":2}']) == (
        "UPSERT", '{"a":1,"b":2}', False)
    assert collapse_chain(["INSERT"], ['{"b": 1}']) == ("UPSERT", '{"b": 1}', True)
    assert collapse_chain(["INSERT", "DELETE"], ['{"b":1}', "{}"]) == ("DELETE", "{}", True)
    assert collapse_chain(["DELETE", "UPDATE"], ["{}", '{"qty":5}']) == ("UPSERT", '{"qty":5}', True)
    assert collapse_chain(["UPDATE"], ['{"qty":5}']) == ("UPSERT", '{"qty":5}', False)


# ------------------------------------------------------------------------------------------
# Property: applying the change-set row equals applying the changes one by one, whatever the
# target held before the window.

COLUMNS = ("A", "B", "C")
VALUES = st.one_of(
    st.none(), st.integers(-5, 5).map(str), st.floats(allow_nan=False, allow_infinity=False), st.booleans()
)


@st.composite
def valid_chains(draw: st.DrawFn) -> tuple[bool, list[tuple[str, dict[str, Any]]]]:
    """A chain a source could produce: INSERT only when the row is absent, DELETE when present, UPDATE
    when present or (a source whose update of an absent row inserts it, such as Table Store) absent."""
    exists = draw(st.booleans())
    started_exists = exists
    chain = []
    for _ in range(draw(st.integers(1, 7))):
        if exists:
            kind = draw(st.sampled_from(["UPDATE", "UPDATE", "DELETE"]))
        else:
            kind = draw(st.sampled_from(["INSERT", "UPDATE"]))
        if kind == "INSERT":
            values = {column: draw(VALUES) for column in COLUMNS}
        elif kind == "UPDATE":
            changed = draw(st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=3, unique=True))
            values = {column: draw(VALUES) for column in changed}
        else:
            values = {}
        exists = kind != "DELETE"
        chain.append((kind, values))
    return started_exists, chain


def apply_change(row: dict | None, kind: str, values: dict) -> dict | None:
    if kind == "DELETE":
        return None
    if kind == "INSERT":
        return dict(values)
    return {**(row or {}), **values}


def apply_change_set_row(row: dict | None, change_set_row: dict) -> dict | None:
    if change_set_row["_CHANGE_TYPE"] == "DELETE":
        return None
    values = json.loads(change_set_row["_values_json"])
    assert sorted(values) == change_set_row["_present_columns"]
    if change_set_row["_full_image"]:
        return values
    return {**(row or {}), **values}


@settings(max_examples=300, deadline=None)
@given(valid_chains(), st.fixed_dictionaries({column: VALUES for column in COLUMNS}), st.randoms())
def test_the_collapsed_row_has_the_same_effect_as_the_chain(chain_info, prior_row, random) -> None:
    exists, chain = chain_info
    prior = prior_row if exists else None
    changes = [change(kind, values, at=i) for i, (kind, values) in enumerate(chain)]
    expected = prior
    for kind, values in chain:
        expected = apply_change(expected, kind, values)
    random.shuffle(changes)
    row = collapse_key(changes)
    assert apply_change_set_row(prior, row) == expected
    assert row["_CHANGE_SEQUENCE_NUMBER"] == max(c["change_sequence_number"] for c in changes)
