"""Delta Lake target: ordering, partial images, idempotent window commits, schema, crash safety."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_cdc.changesets.reader import ChangeSetError, ChangeSetReader
from airflow_provider_cdc.changesets.writer import (
    CHANGE_SET_SCHEMA,
    Change,
    change_set_table,
    write_change_set,
)
from airflow_provider_cdc.targets.delta.target import (
    APP_ID_PREFIX,
    DeltaLakeTarget,
    IncompatibleSchemaError,
    LakeError,
    WindowOrderError,
)

EMPLOYEES = [
    {"name": "ID", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
    {"name": "Salary", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 3},
]
BASE = datetime(2024, 5, 1, tzinfo=timezone.utc)
SOURCE_COLUMNS = ["ID", "Name", "Salary"]
_OWN_COLUMNS = ["_change_sequence_number", "_commit_timestamp"]


def seq(n: int, tx: int = 0) -> str:
    return f"{n:016X}/{tx:016X}/{0:016X}/{0:016X}"


def at(n: int) -> datetime:
    return BASE + timedelta(seconds=n)


def upsert(key: int, n: int, present: list[str] | None = None, **values: Any) -> Change:
    return Change({"ID": key}, "UPSERT", seq(n), at(n), values, present)


def delete(key: int, n: int) -> Change:
    return Change({"ID": key}, "DELETE", seq(n), at(n))


def window_version(n: int) -> int:
    return int((at(n) - datetime(1970, 1, 1, tzinfo=timezone.utc)) / timedelta(microseconds=1))


def rows(
    target: DeltaLakeTarget, table: str = "Employees", columns: list[str] = SOURCE_COLUMNS
) -> list[dict]:
    return sorted(
        target.read_table(table, columns=columns).to_pylist(), key=lambda r: json.dumps(r, default=str)
    )


@pytest.fixture
def target(tmp_path: Path) -> DeltaLakeTarget:
    return DeltaLakeTarget(str(tmp_path / "lake"))


def apply(target: DeltaLakeTarget, n: int, changes: list[Change], column_types=EMPLOYEES, table="Employees"):
    return target.apply_change_set(
        table, change_set_table(column_types, changes), column_types, "orders", window_version(n)
    )


def seed_003(target: DeltaLakeTarget) -> None:
    apply(
        target,
        10,
        [
            upsert(100, 1, Name="Charlie", Salary=2000),
            upsert(101, 1, Name="Tal", Salary=3000),
            upsert(102, 1, Name="Lee", Salary=5000),
        ],
    )


def test_seed_003_upsert_and_delete_example(target: DeltaLakeTarget) -> None:
    seed_003(target)
    result = apply(
        target,
        20,
        [delete(100, 2), upsert(101, 2, Name="Tal", Salary=8000), upsert(105, 2, Name="Izumi", Salary=6000)],
    )
    assert (result.status, result.rows_deleted, result.rows_updated, result.rows_inserted) == (
        "applied",
        1,
        1,
        1,
    )
    assert rows(target) == [
        {"ID": 101, "Name": "Tal", "Salary": 8000},
        {"ID": 102, "Name": "Lee", "Salary": 5000},
        {"ID": 105, "Name": "Izumi", "Salary": 6000},
    ]


def test_a_table_written_with_the_earlier_field_metadata_keys_keeps_its_keys_and_types(
    target: DeltaLakeTarget,
) -> None:
    """A table created by an earlier version names the logical type and the key flag in the field
    metadata keys ``spanner.type``/``spanner.primary_key``: its keys and types are still read, and
    windows still apply to it (a column added later carries the current keys)."""
    from deltalake import write_deltalake

    from airflow_provider_cdc.targets.delta.compare import lake_rows_encoded, schema_column_types

    old = pa.schema(
        [
            pa.field("ID", pa.int64(), True, {"spanner.type": "INT64", "spanner.primary_key": "true"}),
            pa.field("Name", pa.string(), True, {"spanner.type": "STRING", "spanner.primary_key": "false"}),
            pa.field("Salary", pa.int64(), True, {"spanner.type": "INT64", "spanner.primary_key": "false"}),
            pa.field("_change_sequence_number", pa.string()),
            pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC")),
        ]
    )
    rows_before = pa.Table.from_pylist(
        [{"ID": 100, "Name": "Charlie", "Salary": 2000, "_change_sequence_number": seq(1),
          "_commit_timestamp": at(1)}],
        schema=old,
    )  # fmt: skip
    write_deltalake(target.table_uri("Employees"), rows_before, name="Employees")
    assert target.key_columns("Employees") == ["ID"]
    types = schema_column_types(target.read_table("Employees").schema)
    assert {name: str(kind) for name, kind in types.items()} == {
        "ID": "INT64", "Name": "STRING", "Salary": "INT64"
    }  # fmt: skip
    with_note = [*EMPLOYEES, {"name": "Note", "type": {"code": "STRING"}, "is_primary_key": False,
                              "ordinal_position": 4, "is_nullable": True}]  # fmt: skip
    result = apply(target, 20, [upsert(101, 2, Name="Tal", Salary=3000, Note="new")], with_note)
    assert result.status == "applied"
    assert sorted(lake_rows_encoded(target, "Employees"), key=lambda row: row["ID"]) == [
        {"ID": "100", "Name": "Charlie", "Salary": "2000", "Note": None},
        {"ID": "101", "Name": "Tal", "Salary": "3000", "Note": "new"},
    ]
    note = pa.schema(target.open("Employees").schema().to_arrow()).field("Note")
    assert note.metadata == {b"cdc.type": b"STRING", b"cdc.primary_key": b"false", b"cdc.nullable": b"true"}
    target.optimize("Employees", z_order=True)  # Z-ordered by the key the earlier metadata names
    assert target.key_columns("Employees") == ["ID"]


def test_a_change_sets_column_types_join_the_nullability_its_rows_describe(tmp_path: Path) -> None:
    """Rows of one table whose column types differ (a change set written from several sources'
    descriptions): a column is nullable when one says so, not nullable when one says so and none
    says otherwise, else unknown."""
    described = [
        [{**c, "is_nullable": c["name"] == "Name"} for c in EMPLOYEES],
        [{**c, "is_nullable": True} if c["name"] == "Salary" else c for c in EMPLOYEES],
    ]
    parts = [change_set_table(types, [upsert(100 + n, n, Name="x")]) for n, types in enumerate(described)]
    write_change_set(str(tmp_path / "cs"), {"Employees": pa.concat_tables(parts)})
    (table,) = ChangeSetReader(str(tmp_path / "cs")).tables()
    assert [(c["name"], c.get("is_nullable")) for c in table.column_types()] == [
        ("ID", False), ("Name", True), ("Salary", True)
    ]


def test_table_layout_and_one_tagged_commit_per_window(target: DeltaLakeTarget) -> None:
    seed_003(target)
    dt = DeltaTable(target.table_uri("Employees"))
    assert dt.version() == 0
    schema = pa.schema(dt.schema().to_arrow())
    assert schema.names == ["ID", "Name", "Salary", "_change_sequence_number", "_commit_timestamp"]
    assert schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")
    assert schema.field("ID").metadata[b"cdc.primary_key"] == b"true"
    assert schema.field("Salary").metadata[b"cdc.type"] == b"INT64"
    assert b"cdc.nullable" not in schema.field("ID").metadata  # the change set does not say
    assert target.key_columns("Employees") == ["ID"]
    apply(target, 20, [upsert(101, 2, Name="Tal", Salary=8000), delete(102, 2)])
    dt = DeltaTable(target.table_uri("Employees"))
    assert dt.version() == 1  # the window is exactly one commit
    assert dt.transaction_version(APP_ID_PREFIX + "orders") == window_version(20)
    assert dt.history(1)[0]["operation"] == "MERGE"
    with pytest.raises(LakeError, match="no column"):
        target.read_table("Employees", ["ID", "Bonus"])
    stored = {r["ID"]: r for r in target.read_table("Employees").to_pylist()}
    assert stored[101]["_change_sequence_number"] == seq(2)
    assert stored[101]["_commit_timestamp"] == at(2)


def test_only_a_greater_sequence_number_changes_a_row(target: DeltaLakeTarget) -> None:
    apply(target, 10, [upsert(1, 5, Name="new", Salary=50), upsert(2, 5, Name="kept", Salary=20)])
    # A later window carrying changes older than what the table holds (e.g. a late-arriving
    # record) must not overwrite or delete.
    result = apply(target, 20, [upsert(1, 3, Name="old", Salary=30), delete(2, 4), upsert(3, 4, Name="c")])
    assert (result.rows_updated, result.rows_deleted, result.rows_inserted) == (0, 0, 1)
    assert rows(target) == [
        {"ID": 1, "Name": "new", "Salary": 50},
        {"ID": 2, "Name": "kept", "Salary": 20},
        {"ID": 3, "Name": "c", "Salary": None},
    ]
    # Equal sequence number: not greater, no change either.
    apply(target, 30, [upsert(1, 5, Name="same-seq", Salary=0)])
    assert rows(target)[0] == {"ID": 1, "Name": "new", "Salary": 50}
    # The sequence number compares section by section, not just by its first section.
    later = Change({"ID": 1}, "UPSERT", seq(5, tx=1), at(5), {"Name": "tx1", "Salary": 51})
    apply(target, 40, [later])
    assert rows(target)[0] == {"ID": 1, "Name": "tx1", "Salary": 51}


def test_partial_images_update_only_their_columns(target: DeltaLakeTarget) -> None:
    seed_003(target)
    apply(
        target,
        20,
        [
            upsert(100, 2, present=["Salary"], Salary=2100),  # keeps Name
            upsert(101, 2, present=["Name"], Name="Tal B."),  # keeps Salary
            upsert(102, 2, present=["Name", "Salary"], Name=None, Salary=None),  # explicit NULLs
            upsert(200, 2, present=["Name"], Name="Newcomer"),  # absent row: NULL elsewhere
        ],
    )
    assert rows(target) == [
        {"ID": 100, "Name": "Charlie", "Salary": 2100},
        {"ID": 101, "Name": "Tal B.", "Salary": 3000},
        {"ID": 102, "Name": None, "Salary": None},
        {"ID": 200, "Name": "Newcomer", "Salary": None},
    ]


def test_full_image_replaces_every_column(target: DeltaLakeTarget) -> None:
    seed_003(target)
    apply(target, 20, [upsert(100, 2, Name="Charlie II")])  # full image without Salary → NULL
    assert rows(target)[0] == {"ID": 100, "Name": "Charlie II", "Salary": None}


def test_reapplying_a_window_is_a_no_op(target: DeltaLakeTarget) -> None:
    seed_003(target)
    changes = [delete(100, 2), upsert(101, 2, Name="Tal", Salary=8000)]
    apply(target, 20, changes)
    before = (DeltaTable(target.table_uri("Employees")).version(), rows(target))
    for n, again in ((20, changes), (10, [upsert(100, 1, Name="Charlie", Salary=2000)])):
        result = apply(target, n, again)
        assert result.status == "already_applied"
        assert (DeltaTable(target.table_uri("Employees")).version(), rows(target)) == before


def test_replaying_an_older_window_cannot_resurrect_a_deleted_row(target: DeltaLakeTarget) -> None:
    seed_003(target)
    apply(target, 20, [delete(100, 2)])
    apply(target, 30, [upsert(101, 3, present=["Salary"], Salary=1)])
    # Window 10 inserted 100; replaying it late (a backfill, a cleared task) is skipped.
    result = apply(target, 10, [upsert(100, 1, Name="Charlie", Salary=2000)])
    assert result.status == "already_applied"
    assert "applied in table version 0" in result.detail
    assert 100 not in {r["ID"] for r in rows(target)}


def test_a_never_applied_older_window_is_refused(target: DeltaLakeTarget) -> None:
    seed_003(target)
    apply(target, 30, [delete(100, 3)])
    with pytest.raises(WindowOrderError) as info:
        apply(target, 20, [upsert(100, 2, Name="Ghost", Salary=1)])
    message = str(info.value)
    assert str(window_version(20)) in message and str(window_version(30)) in message
    assert "'Employees'" in message
    assert 100 not in {r["ID"] for r in rows(target)}


def test_pipelines_have_separate_window_versions(target: DeltaLakeTarget) -> None:
    seed_003(target)
    other = target.apply_change_set(
        "Employees", change_set_table(EMPLOYEES, [upsert(300, 1, Name="x")]), EMPLOYEES, "backfill", 5
    )
    assert other.status == "applied"
    assert target.applied_window_version("Employees", "backfill") == 5
    assert target.applied_window_version("Employees", "orders") == window_version(10)


def test_new_columns_are_added_in_a_commit_before_the_window_commit(target: DeltaLakeTarget) -> None:
    seed_003(target)
    evolved = EMPLOYEES + [
        {
            "name": "Tags",
            "type": {"code": "ARRAY", "array_element_type": {"code": "STRING"}},
            "is_primary_key": False,
            "ordinal_position": 4,
        },
    ]
    result = apply(
        target,
        20,
        [upsert(101, 2, present=["Tags"], Tags=["a", "b"]), upsert(106, 2, Name="Kim", Salary=1, Tags=None)],
        column_types=evolved,
    )
    assert result.added_columns == ("Tags",)
    dt = DeltaTable(target.table_uri("Employees"))
    assert dt.version() == 2 and result.table_version == 2
    added, merged = sorted(dt.history(2), key=lambda entry: entry["version"])
    assert added["operation"] == "ADD COLUMN" and "airflow-provider-cdc.windowVersion" not in added
    assert merged["airflow-provider-cdc.windowVersion"] == str(window_version(20))
    # Only the new column is added: the merge source's helper columns never reach the table.
    assert pa.schema(dt.schema().to_arrow()).names == [*SOURCE_COLUMNS, *_OWN_COLUMNS, "Tags"]
    assert dt.transaction_version(APP_ID_PREFIX + "orders") == window_version(20)
    assert rows(target, columns=["ID", "Name", "Tags"]) == [
        {"ID": 100, "Name": "Charlie", "Tags": None},
        {"ID": 101, "Name": "Tal", "Tags": ["a", "b"]},
        {"ID": 102, "Name": "Lee", "Tags": None},
        {"ID": 106, "Name": "Kim", "Tags": None},
    ]
    # Later windows may still carry the old column set (a dropped column keeps its values).
    apply(target, 30, [upsert(101, 3, present=["Salary"], Salary=9)])
    assert rows(target, columns=["ID", "Salary", "Tags"])[1] == {"ID": 101, "Salary": 9, "Tags": ["a", "b"]}


def test_a_window_of_partial_updates_never_narrows_the_table(target: DeltaLakeTarget) -> None:
    # Spanner's UPDATE records list only the key and the changed columns; a window holding only
    # such records has column types without Name.
    seed_003(target)
    narrow = [column for column in EMPLOYEES if column["name"] in ("ID", "Salary")]
    result = apply(target, 20, [upsert(100, 2, present=["Salary"], Salary=1),
                                upsert(300, 2, present=["Salary"], Salary=3)], column_types=narrow)
    assert result.status == "applied" and result.added_columns == ()
    dt = DeltaTable(target.table_uri("Employees"))
    assert pa.schema(dt.schema().to_arrow()).names == [*SOURCE_COLUMNS, *_OWN_COLUMNS]
    assert rows(target) == [
        {"ID": 100, "Name": "Charlie", "Salary": 1},
        {"ID": 101, "Name": "Tal", "Salary": 3000},
        {"ID": 102, "Name": "Lee", "Salary": 5000},
        # First seen through a partial UPDATE (it existed before the pipeline): the columns it carries.
        {"ID": 300, "Name": None, "Salary": 3},
    ]


WITH_NOTE = [
    *EMPLOYEES,
    {"name": "Note", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 4},
]
WITH_BONUS = [
    *WITH_NOTE,
    {"name": "Bonus", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 5},
]
EVOLVED_COLUMNS = [*SOURCE_COLUMNS, "Note"]


def seed_with_sequence_5(target: DeltaLakeTarget) -> None:
    apply(target, 10, [upsert(k, 5, Name=f"n{k}", Salary=k) for k in range(100, 107)])


# The window adding Note: late changes (older than the stored rows), newer partial images with and
# without the new column, a delete, a late delete and an insert.
EVOLVING_WINDOW = [
    upsert(100, 3, Name="late", Salary=0, Note="late full image"),
    upsert(101, 4, present=["Note"], Note="late partial image"),
    upsert(102, 6, present=["Name"], Name="p102"),
    upsert(103, 6, present=["Note"], Note="n103"),
    delete(104, 6),
    delete(105, 2),
    upsert(107, 6, Name="n107", Salary=107, Note="n107"),
]
AFTER_EVOLVING_WINDOW = [
    {"ID": 100, "Name": "n100", "Salary": 100, "Note": None},
    {"ID": 101, "Name": "n101", "Salary": 101, "Note": None},
    {"ID": 102, "Name": "p102", "Salary": 102, "Note": None},
    {"ID": 103, "Name": "n103", "Salary": 103, "Note": "n103"},
    {"ID": 105, "Name": "n105", "Salary": 105, "Note": None},
    {"ID": 106, "Name": "n106", "Salary": 106, "Note": None},
    {"ID": 107, "Name": "n107", "Salary": 107, "Note": "n107"},
]


@pytest.mark.parametrize("path", ["materialised", "streamed", "tombstones"])
def test_a_change_ignored_as_older_leaves_a_new_column_null(tmp_path: Path, path: str) -> None:
    target = DeltaLakeTarget(
        str(tmp_path / "lake"),
        max_materialized_rows=0 if path == "streamed" else 1_000_000,
        tombstone_horizon=timedelta(days=1) if path == "tombstones" else None,
    )
    seed_with_sequence_5(target)
    result = apply(target, 20, EVOLVING_WINDOW, column_types=WITH_NOTE)
    assert result.added_columns == ("Note",)
    assert (result.rows_inserted, result.rows_updated, result.rows_deleted) == (1, 2, 1)
    assert rows(target, columns=EVOLVED_COLUMNS) == AFTER_EVOLVING_WINDOW
    # A new column that every image carries, the late one's included.
    result = apply(
        target,
        30,
        [upsert(102, 4, Name="late", Salary=0, Note="late", Bonus=1), upsert(108, 7, Name="n108", Bonus=8)],
        column_types=WITH_BONUS,
    )
    assert result.added_columns == ("Bonus",) and (result.rows_inserted, result.rows_updated) == (1, 0)
    assert rows(target, columns=["ID", "Name", "Bonus"])[2:] == [
        {"ID": 102, "Name": "p102", "Bonus": None},
        {"ID": 103, "Name": "n103", "Bonus": None},
        {"ID": 105, "Name": "n105", "Bonus": None},
        {"ID": 106, "Name": "n106", "Bonus": None},
        {"ID": 107, "Name": "n107", "Bonus": None},
        {"ID": 108, "Name": "n108", "Bonus": 8},
    ]


def test_a_crash_between_adding_columns_and_the_merge_is_healed_by_a_rerun(
    target: DeltaLakeTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_with_sequence_5(target)
    before = rows(target)

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("killed before the MERGE")

    with monkeypatch.context() as patch:
        patch.setattr(DeltaTable, "merge", crash)
        with pytest.raises(RuntimeError, match="killed before the MERGE"):
            apply(target, 20, EVOLVING_WINDOW, column_types=WITH_NOTE)
    # The columns are added, NULL everywhere; the window is not recorded, so readers see the table
    # of the previous window with one more column.
    dt = DeltaTable(target.table_uri("Employees"))
    assert dt.version() == 1 and "Note" in pa.schema(dt.schema().to_arrow()).names
    assert rows(target) == before
    assert {row["Note"] for row in target.read_table("Employees").to_pylist()} == {None}
    assert target.applied_window_version("Employees", "orders") == window_version(10)
    assert dt.transaction_version(APP_ID_PREFIX + "orders") == window_version(10)

    result = apply(target, 20, EVOLVING_WINDOW, column_types=WITH_NOTE)
    assert result.status == "applied" and result.added_columns == () and result.table_version == 2
    assert rows(target, columns=EVOLVED_COLUMNS) == AFTER_EVOLVING_WINDOW
    assert target.applied_window_version("Employees", "orders") == window_version(20)
    assert apply(target, 20, EVOLVING_WINDOW, column_types=WITH_NOTE).status == "already_applied"
    assert DeltaTable(target.table_uri("Employees")).version() == 2


def test_incompatible_type_change_fails_naming_table_and_column(target: DeltaLakeTarget) -> None:
    seed_003(target)
    changed = [dict(c) for c in EMPLOYEES]
    changed[2]["type"] = {"code": "STRING"}
    with pytest.raises(IncompatibleSchemaError) as info:
        apply(target, 20, [upsert(101, 2, Name="Tal", Salary="8000")], column_types=changed)
    assert "'Employees'" in str(info.value) and "'Salary'" in str(info.value)
    assert DeltaTable(target.table_uri("Employees")).version() == 0


def test_null_key_values_match_their_stored_row(target: DeltaLakeTarget) -> None:
    column_types = [
        {"name": "Region", "type": "STRING", "is_primary_key": True, "ordinal_position": 1},
        {"name": "ID", "type": "INT64", "is_primary_key": True, "ordinal_position": 2},
        {"name": "Name", "type": "STRING", "is_primary_key": False, "ordinal_position": 3},
    ]

    def change(n: int, region: str | None, name: str) -> Change:
        return Change({"Region": region, "ID": 1}, "UPSERT", seq(n), at(n), {"Name": name})

    apply(target, 10, [change(1, None, "a"), change(1, "eu", "b")], column_types, "Regional")
    apply(target, 20, [change(2, None, "c")], column_types, "Regional")
    assert rows(target, "Regional", ["Region", "ID", "Name"]) == [
        {"Region": "eu", "ID": 1, "Name": "b"},
        {"Region": None, "ID": 1, "Name": "c"},
    ]


def test_streamed_and_materialised_applies_agree(tmp_path: Path) -> None:
    windows = [
        (10, [upsert(1, 1, Name="a", Salary=1), upsert(2, 1, Name="b", Salary=2), delete(9, 1)]),
        (
            20,
            [
                upsert(1, 2, present=["Salary"], Salary=10),
                delete(2, 2),
                upsert(3, 2, present=["Name"], Name="c"),
            ],
        ),
    ]
    results = []
    for limit in (0, 1_000_000):
        target = DeltaLakeTarget(str(tmp_path / f"lake{limit}"), max_materialized_rows=limit)
        for n, changes in windows:
            assert apply(target, n, changes).status == "applied"
        results.append(rows(target))
    assert (
        results[0]
        == results[1]
        == [{"ID": 1, "Name": "a", "Salary": 10}, {"ID": 3, "Name": "c", "Salary": None}]
    )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda t: t.set_column(4, "_CHANGE_TYPE", pa.array(["MERGE"] * t.num_rows)),
            "UPSERT or DELETE, got 'MERGE'",
        ),
        (
            lambda t: t.set_column(5, "_CHANGE_SEQUENCE_NUMBER", pa.array(["7B"] * t.num_rows)),
            "'7B' is not in",
        ),
        (lambda t: t.set_column(2, "_present_columns", pa.array([["Bonus"]] * t.num_rows)), "names 'Bonus'"),
        (
            lambda t: t.set_column(0, "_keys_json", pa.array(['{"Other":1}'] * t.num_rows)),
            "names column(s) ['Other']",
        ),
        (
            lambda t: t.set_column(0, "_keys_json", pa.array(["{}"] * t.num_rows)),
            "lacks key column(s) ['ID']",
        ),
        (lambda t: pa.concat_tables([t, t]), "several rows for key"),
    ],
)
def test_bad_change_sets_fail_naming_table_and_problem(target: DeltaLakeTarget, mutate, message: str) -> None:
    table = mutate(change_set_table(EMPLOYEES, [upsert(1, 1, Name="a", Salary=1)]))
    with pytest.raises(ChangeSetError) as info:
        target.apply_change_set("Employees", table, EMPLOYEES, "orders", window_version(10))
    assert "'Employees'" in str(info.value) and message in str(info.value)
    assert not target.exists("Employees")


CODES = [
    {"name": "Code", "type": {"code": "STRING"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
]


def _with_keys_json(table: pa.Table, texts: list[str]) -> pa.Table:
    return table.set_column(0, "_keys_json", pa.array(texts, pa.string()))


def test_a_key_spelled_differently_in_json_is_the_same_key(target: DeltaLakeTarget) -> None:
    verbatim, escaped = ["plain", "ünïcødé", ""], ['quote"d', "back\\slash", "tab\tand\nnewline"]
    windows = [
        (verbatim + escaped, lambda c: json.dumps({"Code": c})),  # spaces, \u escapes
        (verbatim, lambda c: json.dumps({"Code": c}, ensure_ascii=False, separators=(",", ":"))),
        (escaped, lambda c: json.dumps({"Code": c}, ensure_ascii=False, separators=(",", ":"))),
    ]
    for n, (codes, spell) in enumerate(windows, start=1):
        changes = [Change({"Code": c}, "UPSERT", seq(n), at(n), {"Name": f"v{n}"}) for c in codes]
        table = _with_keys_json(change_set_table(CODES, changes), [spell(c) for c in codes])
        result = target.apply_change_set("Codes", table, CODES, "orders", window_version(10 * n))
        assert result.rows_inserted + result.rows_updated == len(codes)
        assert result.rows_inserted == (len(codes) if n == 1 else 0)
    stored = {r["Code"]: r["Name"] for r in target.read_table("Codes", ["Code", "Name"]).to_pylist()}
    assert stored == {**{c: "v2" for c in verbatim}, **{c: "v3" for c in escaped}}

    ids = [7, -3, 12]
    apply(target, 30, [upsert(i, 3, Name="a", Salary=i) for i in ids])
    numbers = _with_keys_json(
        change_set_table(EMPLOYEES, [upsert(i, 4, present=["Name"], Name="b") for i in ids]),
        ['{"ID":7}', '{"ID": "-3"}', '{"ID":"012"}'],  # a JSON number, a space, a leading zero
    )
    result = target.apply_change_set("Employees", numbers, EMPLOYEES, "orders", window_version(40))
    assert (result.rows_updated, result.rows_inserted) == (3, 0)
    assert sorted(rows(target), key=lambda r: r["ID"]) == [
        {"ID": i, "Name": "b", "Salary": i} for i in sorted(ids)
    ]


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (['{"ID":"0x10"}'], "expected an integer: '0x10'"),
        (['{"ID":"99999999999999999999"}'], "99999999999999999999"),
        (['{"ID":"1"}', '{"ID":"01"}'], "several rows for key"),
    ],
)
def test_keys_that_are_not_int64_or_repeat_a_key_are_refused(
    target: DeltaLakeTarget, keys: list[str], message: str
) -> None:
    changes = [upsert(i, 1, Name="a") for i in range(len(keys))]
    table = _with_keys_json(change_set_table(EMPLOYEES, changes), keys)
    with pytest.raises(ChangeSetError, match="'Employees'") as info:
        target.apply_change_set("Employees", table, EMPLOYEES, "orders", window_version(10))
    assert message in str(info.value)
    assert not target.exists("Employees")


@pytest.mark.parametrize(
    "bad",
    [
        "000000000000000a/0000000000000000/0000000000000000/0000000000000000",  # lower-case hex
        "0000000000000001-0000000000000000/0000000000000000/0000000000000000",  # separator
        "0000000000000001/000000000000000/00000000000000000/0000000000000000",  # misplaced '/'
    ],
)
def test_a_sequence_number_not_in_sortable_form_is_refused_among_valid_ones(
    target: DeltaLakeTarget, bad: str
) -> None:
    changes = [upsert(i, 1, Name="a") for i in range(5000)]
    sequences = [seq(1)] * 4999 + [bad]
    table = change_set_table(EMPLOYEES, changes)
    table = table.set_column(5, "_CHANGE_SEQUENCE_NUMBER", pa.array(sequences, pa.string()))
    with pytest.raises(ChangeSetError, match=f"'{bad}' is not in sortable form"):
        target.apply_change_set("Employees", table, EMPLOYEES, "orders", window_version(10))


def test_sequence_numbers_of_different_lengths_apply_in_order(target: DeltaLakeTarget) -> None:
    one_section = Change({"ID": 1}, "UPSERT", f"{5:016X}", at(5), {"Name": "short"})
    apply(target, 10, [one_section, upsert(2, 5, Name="long")])
    # "…05" < "…05/…01": the longer number with the same first section is the later change.
    apply(target, 20, [Change({"ID": 1}, "UPSERT", seq(5, tx=1), at(5), {"Name": "later"})])
    assert [r["Name"] for r in rows(target)] == ["later", "long"]


def _service_account_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return json.dumps(
        {
            "type": "service_account",
            "project_id": "lake-project",
            "private_key_id": "0123456789abcdef",
            "private_key": pem.decode(),
            "client_email": "lake-writer@lake-project.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": "https://oauth2.googleapis.com/token",
        }
    )


def test_gcs_configuration_reaches_the_object_store_and_stays_private() -> None:
    key = _service_account_key()
    options = {"google_service_account_key": key}
    target = DeltaLakeTarget("gs://bucket/lake/", options)
    assert target.table_uri("Orders") == "gs://bucket/lake/Orders"
    assert "PRIVATE KEY" not in repr(target) and "google_service_account_key" in repr(target)
    # delta-rs's GCS store parses the key when the change-set reader opens the bucket (no I/O yet).
    reader = ChangeSetReader("gs://bucket/changesets/1-2", options)
    assert reader.window_bounds() == (1, 2)
    assert "PRIVATE KEY" not in repr(reader)
    broken = json.dumps({**json.loads(key), "private_key_id": None})
    with pytest.raises(OSError, match="service account") as info:
        ChangeSetReader("gs://bucket/changesets/1-2", {"google_service_account_key": broken})
    assert "PRIVATE KEY" not in str(info.value)


# --------------------------------------------------------------------------- other readers


def _duckdb_read(table_path: str) -> pa.Table:
    """Read a Delta table with DuckDB from its JSON transaction log (added minus removed files)."""
    log = f"read_json_auto('{table_path}/_delta_log/*.json', format='newline_delimited', union_by_name=true)"
    con = duckdb.connect()
    files = [
        f"{table_path}/{path}"
        for (path,) in con.sql(
            f"SELECT add.path FROM {log} WHERE add IS NOT NULL "
            f"EXCEPT SELECT remove.path FROM {log} WHERE remove IS NOT NULL"
        ).fetchall()
    ]
    return con.sql(f"SELECT * FROM read_parquet({files!r})").arrow().read_all()


def _normalise(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["ID"])


def test_duckdb_and_polars_read_what_pyarrow_reads(target: DeltaLakeTarget) -> None:
    seed_003(target)
    apply(
        target,
        20,
        [delete(100, 2), upsert(101, 2, present=["Salary"], Salary=8000), upsert(105, 2, Name="Izumi")],
    )
    expected = _normalise(target.read_table("Employees"))
    assert len(expected) == 3
    assert _normalise(_duckdb_read(target.table_uri("Employees"))) == expected
    polars = pytest.importorskip("polars")
    assert _normalise(polars.read_delta(target.table_uri("Employees")).to_arrow()) == expected


# --------------------------------------------------------------------------- crash safety


def test_a_crash_before_the_commit_then_a_rerun_gives_the_same_table(tmp_path: Path) -> None:
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is needed to kill the job at the moment of its Delta commit")
    lake = tmp_path / "lake"
    changesets = tmp_path / "changesets"
    window1, window2 = (
        f"{window_version(0)}-{window_version(10)}",
        f"{window_version(10)}-{window_version(20)}",
    )
    write_change_set(
        str(changesets / window1),
        {"Employees": change_set_table(EMPLOYEES, [upsert(i, 1, Name=f"n{i}", Salary=i) for i in range(50)])},
    )
    write_change_set(
        str(changesets / window2),
        {
            "Employees": change_set_table(
                EMPLOYEES,
                [delete(0, 2)] + [upsert(i, 2, present=["Salary"], Salary=-i) for i in range(1, 40)],
            )
        },
    )
    job = [
        sys.executable,
        "-m",
        "airflow_provider_cdc.targets.delta.upsert_job",
        "--lake-root",
        str(lake),
        "--pipeline-id",
        "p",
    ]
    env = {**os.environ, "CDC_STORAGE_OPTIONS": ""}
    subprocess.run([*job, "--changeset", str(changesets / window1)], check=True, env=env, capture_output=True)

    table = lake / "Employees"
    commit_file = table / "_delta_log" / f"{1:020d}.json"
    killed = subprocess.run(
        [
            strace,
            "-f",
            "-qq",
            "-o",
            os.devnull,
            "-P",
            str(commit_file),
            "-e",
            "trace=linkat,rename,renameat2",
            "-e",
            "inject=linkat,rename,renameat2:error=EIO:signal=KILL",
            *job,
            "--changeset",
            str(changesets / window2),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert killed.returncode in (-9, 137), killed.stderr
    dt = DeltaTable(str(table))
    assert dt.version() == 0 and dt.transaction_version(APP_ID_PREFIX + "p") == window_version(10)
    referenced = {Path(uri).name for uri in dt.file_uris()}
    written = {p.name for p in table.glob("*.parquet")}
    assert written - referenced, "the killed apply should have written data files before its commit"

    rerun = subprocess.run(
        [*job, "--changeset", str(changesets / window2)], env=env, capture_output=True, text=True
    )
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout.strip().splitlines()[-1])["tables_applied"] == ["Employees"]

    reference = DeltaLakeTarget(str(tmp_path / "reference"))
    for window in (window1, window2):
        for part in ChangeSetReader(str(changesets / window)).tables():
            reference.apply_change_set(
                part.name, part.dataset, part.column_types(), "p", int(window.split("-")[1])
            )
    recovered = DeltaLakeTarget(str(lake))
    assert DeltaTable(str(table)).version() == 1
    assert rows(recovered) == rows(reference)
    assert len(rows(recovered)) == 49


# --------------------------------------------------------------------------- property test

VALUE_COLUMNS = ["Name", "Salary"]
KEYS = [1, 2, 3, 4]


@st.composite
def histories(draw) -> tuple[list[dict], list[int]]:
    """A valid INSERT/UPDATE/DELETE history over a few keys, and window cut points."""
    present: dict[int, bool] = {}
    mods = []
    for step in range(draw(st.integers(1, 24))):
        key = draw(st.sampled_from(KEYS))
        if present.get(key):
            kind = draw(st.sampled_from(["UPDATE", "UPDATE", "DELETE"]))
        else:
            kind = "INSERT"
        if kind == "INSERT":
            values = {"Name": draw(st.text("abc", max_size=3)), "Salary": str(draw(st.integers(0, 99)))}
        elif kind == "UPDATE":
            columns = draw(st.sets(st.sampled_from(VALUE_COLUMNS), min_size=1))
            values = {
                c: (draw(st.text("xyz", max_size=2)) if c == "Name" else str(draw(st.integers(0, 99))))
                for c in columns
            }
        else:
            values = {}
        present[key] = kind != "DELETE"
        mods.append({"step": step, "key": key, "mod_type": kind, "values": values})
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(mods) - 1)), max_size=4)))
    return mods, cuts


def _staged(mod: dict) -> dict:
    step = mod["step"]
    return {
        "table_name": "Employees",
        "keys_json": json.dumps({"ID": str(mod["key"])}, separators=(",", ":")),
        "operation": mod["mod_type"],
        "after_json": json.dumps(mod["values"]),
        "change_sequence_number": seq(step + 1),
        "transaction_id": f"tx{step}",
        "transaction_record": "00000000",
        "commit_timestamp": at(step + 1),
        "column_types_json": json.dumps(EMPLOYEES),
    }


def _model(mods: list[dict]) -> list[dict]:
    state: dict[int, dict] = {}
    for mod in mods:
        if mod["mod_type"] == "DELETE":
            state.pop(mod["key"], None)
        elif mod["mod_type"] == "INSERT":
            state[mod["key"]] = {"Name": None, "Salary": None}
            state[mod["key"]].update(mod["values"])
        else:
            state[mod["key"]].update(mod["values"])
    return sorted(
        (
            {"ID": k, "Name": v["Name"], "Salary": None if v["Salary"] is None else int(v["Salary"])}
            for k, v in state.items()
        ),
        key=lambda r: json.dumps(r, default=str),
    )


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=histories(), streamed=st.booleans(), replay=st.integers(0, 10))
def test_random_histories_applied_per_window_equal_the_final_state(
    tmp_path_factory, history, streamed, replay
) -> None:
    collapse = pytest.importorskip("airflow_provider_cdc.core.collapse")
    mods, cuts = history
    bounds = [0, *cuts, len(mods)]
    target = DeltaLakeTarget(
        str(tmp_path_factory.mktemp("lake")), max_materialized_rows=0 if streamed else 10**6
    )
    windows = []
    for index, (start, end) in enumerate(zip(bounds, bounds[1:], strict=False)):
        changes = [_staged(m) for m in mods[start:end]]
        rows_ = collapse.collapse_window(changes).get("Employees", [])
        windows.append(
            (window_version(100 * (index + 1)), pa.Table.from_pylist(rows_, schema=CHANGE_SET_SCHEMA))
        )
    for version, table in windows:
        status = target.apply_change_set("Employees", table, EMPLOYEES, "prop", version).status
        assert status == ("applied" if table.num_rows else "empty")
    final = rows(target)
    table_version = DeltaTable(target.table_uri("Employees")).version()
    assert final == _model(mods)
    # Every window again (a re-run), then an older one late (a backfill): nothing changes.
    for version, table in [*windows, windows[replay % len(windows)]]:
        status = target.apply_change_set("Employees", table, EMPLOYEES, "prop", version).status
        assert status == ("already_applied" if table.num_rows else "empty")
    assert rows(target) == final
    assert DeltaTable(target.table_uri("Employees")).version() == table_version


# --------------------------------------------------------------------------- snapshot load, maintenance


def test_bulk_load_then_windows_apply_on_top(target: DeltaLakeTarget) -> None:
    rows_ = pa.table(
        {
            "ID": pa.array([3, 1, 2], pa.int64()),
            "Name": ["c", "a", "b"],
            "Salary": pa.array([30, 10, 20], pa.int64()),
            "_change_sequence_number": [seq(1)] * 3,
            "_commit_timestamp": pa.array([at(1)] * 3, pa.timestamp("us", tz="UTC")),
        }
    )
    loaded = target.bulk_load("Employees", EMPLOYEES, rows_, "orders", window_version(10))
    assert (loaded.created, loaded.rows_inserted, loaded.table_version) == (True, 3, 0)
    assert [r["ID"] for r in target.read_table("Employees").to_pylist()] == [1, 2, 3]  # stored in key order
    with pytest.raises(LakeError, match="already exists"):
        target.bulk_load("Employees", EMPLOYEES, rows_, "orders", window_version(10))
    # A window the snapshot already holds is skipped; later windows apply on top.
    covered = apply(target, 5, [delete(1, 0)])
    assert covered.status == "already_applied" and "snapshot" in covered.detail
    apply(target, 20, [delete(1, 2), upsert(2, 2, present=["Salary"], Salary=21)])
    assert rows(target) == [{"ID": 2, "Name": "b", "Salary": 21}, {"ID": 3, "Name": "c", "Salary": 30}]


@pytest.mark.parametrize("z_order", [False, True])
def test_optimize_rewrites_files_without_changing_rows(target: DeltaLakeTarget, z_order: bool) -> None:
    seed_003(target)
    for n in range(2, 6):
        apply(target, 10 * n, [upsert(100 + n, n, Name=f"n{n}", Salary=n)])
    before = rows(target)
    files_before = len(DeltaTable(target.table_uri("Employees")).file_uris())
    target.optimize("Employees", z_order=z_order)
    dt = DeltaTable(target.table_uri("Employees"))
    assert rows(target) == before
    assert len(dt.file_uris()) < files_before
    assert dt.transaction_version(APP_ID_PREFIX + "orders") == window_version(50)


def test_concurrent_applies_of_the_same_window_commit_once(tmp_path: Path) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    # A retried task can overlap its still-running previous attempt.
    first = change_set_table(EMPLOYEES, [upsert(i, 1, Name=f"n{i}", Salary=i) for i in range(200)])
    second = change_set_table(EMPLOYEES, [delete(i, 2) for i in range(0, 200, 2)])

    def race(table: pa.Table, n: int) -> list[str]:
        barrier = threading.Barrier(2)

        def run(_: int) -> str:
            target = DeltaLakeTarget(str(tmp_path / "lake"))
            barrier.wait()
            return target.apply_change_set("Employees", table, EMPLOYEES, "orders", window_version(n)).status

        with ThreadPoolExecutor(2) as pool:
            return sorted(pool.map(run, range(2)))

    assert race(first, 10) == ["already_applied", "applied"]  # creating the table
    dt = DeltaTable(str(tmp_path / "lake" / "Employees"))
    assert dt.version() == 0 and dt.count() == 200
    assert race(second, 20) == ["already_applied", "applied"]  # merging into it
    dt = DeltaTable(str(tmp_path / "lake" / "Employees"))
    assert dt.version() == 1 and dt.count() == 100


def test_a_window_that_changes_no_row_is_still_recorded(target: DeltaLakeTarget) -> None:
    seed_003(target)
    result = apply(target, 20, [delete(999, 2), upsert(100, 0, Name="stale")])  # absent key, older change
    assert result.status == "applied" and (result.rows_deleted, result.rows_updated) == (0, 0)
    assert result.table_version == 1
    dt = DeltaTable(target.table_uri("Employees"))
    assert dt.version() == 1 and dt.transaction_version(APP_ID_PREFIX + "orders") == window_version(20)
    assert apply(target, 20, [delete(999, 2)]).status == "already_applied"
    assert len(rows(target)) == 3
