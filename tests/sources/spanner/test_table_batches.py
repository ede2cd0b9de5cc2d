"""Batch plans of table-source windows: written once, read back exactly, claimed like partitions."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_provider_cdc.core.columns import ColumnType
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore, PartitionSpec
from airflow_provider_cdc.sources.spanner.table_batches import (
    BatchPlan,
    BatchPlanError,
    PlannedTable,
    TableBatch,
    batch_token,
    clear_batches,
    plan_id_of,
    read_plan,
    write_plan,
)
from airflow_provider_cdc.sources.spanner.table_reader import BatchResult, TableReadSummary, page_query
from airflow_provider_cdc.sources.spanner.table_rows import CommitTimestampTable

T = datetime(2026, 1, 1, tzinfo=timezone.utc)
WINDOW = Window(T, T + timedelta(minutes=10))
COLUMNS = (
    ColumnType("Id", {"code": "INT64"}, True, 1),
    ColumnType("Name", {"code": "STRING"}, False, 2),
    ColumnType("Ts", {"code": "TIMESTAMP"}, False, 3),
)
DOCS = PlannedTable(
    table="Docs",
    target="Docs",
    select=("Id", "Name", "Ts"),
    columns=COLUMNS,
    primary_key=("Id",),
    config=CommitTimestampTable("Docs", "Ts"),
    page_rows=100,
)


def _plan(plan_id: str = "abc123") -> BatchPlan:
    users = PlannedTable(
        table="Users", target="Users", select=("Id", "Name"), columns=COLUMNS[:2], primary_key=("Id",)
    )
    return BatchPlan(
        plan_id=plan_id,
        source="Snap",
        mode="snapshot",
        window=WINDOW,
        read_timestamp=T,
        tables={"Users": users, "Docs": DOCS},
        batches=(
            TableBatch(batch_token("Users", 0, plan_id), "Users", 0, b"\x00token-0"),
            TableBatch(batch_token("Users", 1, plan_id), "Users", 1, b"\xfftoken-1"),
            TableBatch(batch_token("Docs", 0, plan_id), "Docs", 0, None),
        ),
        session_id="projects/p/instances/i/databases/d/sessions/s1",
        transaction_id=b"\x01\x02",
    )


def test_a_plan_is_written_once_and_read_back_exactly(tmp_path: Path) -> None:
    plan = _plan()
    path = write_plan(plan, str(tmp_path))
    assert path == f"{tmp_path}/Snap/{WINDOW.window_id}/_plans/abc123.json"
    again = read_plan(str(tmp_path), "Snap", WINDOW, "abc123")
    assert again == plan
    assert again.tokens == ["Users#0@abc123", "Users#1@abc123", "Docs#0@abc123"]
    assert again.batch("Users#1@abc123").partition == b"\xfftoken-1"
    assert again.snapshot_state() == {"session_id": plan.session_id, "transaction_id": b"\x01\x02"}
    with pytest.raises(BatchPlanError, match="already written"):
        write_plan(plan, str(tmp_path))
    with pytest.raises(BatchPlanError, match="plan nothere is missing"):
        read_plan(str(tmp_path), "Snap", WINDOW, "nothere")
    assert not list(Path(path).parent.glob("*.tmp"))


def test_a_plan_whose_query_differs_from_the_one_built_is_refused(tmp_path: Path) -> None:
    text = json.loads(_plan().to_json())
    text["tables"][0]["sql"] = "SELECT * FROM Users; DELETE FROM Users"
    with pytest.raises(BatchPlanError, match="open the window again"):
        BatchPlan.from_json(json.dumps(text))
    text = json.loads(_plan().to_json())
    text["batches"][0]["token"] = "Users#0@other"
    with pytest.raises(BatchPlanError, match="does not belong to it"):
        BatchPlan.from_json(json.dumps(text))


def test_tokens_name_table_index_and_plan() -> None:
    assert plan_id_of(batch_token("Users", 3, "f00d")) == "f00d"
    with pytest.raises(BatchPlanError):
        plan_id_of("not-a-batch")
    with pytest.raises(ValueError, match="invalid table name"):
        batch_token("Users#1", 0, "f00d")


def test_queries_are_partitionable_and_pages_follow_the_keyset() -> None:
    assert (
        DOCS.sql()
        == "SELECT `Id`, `Name`, `Ts` FROM `Docs` WHERE `Ts` >= @window_start AND `Ts` < @window_end"
    )
    first, params, _ = page_query(DOCS, None)
    assert first.endswith("ORDER BY `Ts`, `Id` LIMIT 100") and params == {}
    sql, params, types = page_query(DOCS, ["42", "n", "2026-01-01T00:00:01Z"])
    assert "AND (`Ts` > @p0 OR (`Ts` = @p0 AND (`Id` > @p1)))" in sql
    assert params == {"p0": "2026-01-01T00:00:01Z", "p1": "42"} and set(types) == {"p0", "p1"}
    with pytest.raises(BatchPlanError, match="NULL"):
        page_query(DOCS, [None, "n", "2026-01-01T00:00:01Z"])
    with pytest.raises(ValueError, match="page_rows"):
        PlannedTable(
            table="Users",
            target="Users",
            select=("Id",),
            columns=COLUMNS[:1],
            primary_key=("Id",),
            page_rows=10,
        )


def test_batches_registered_as_window_partitions_are_claimed_fenced_and_never_lag(metastore_url: str) -> None:
    store = Metastore(metastore_url)
    store.create_schema()
    source = "projects/p/instances/i/databases/d/Snap"
    tokens = _plan().tokens
    store.add_partitions(source, [PartitionSpec(token, WINDOW.start) for token in tokens])
    assert store.end_partitions(source, tokens, WINDOW.end) == 3
    assert store.end_partitions(source, tokens, WINDOW.end) == 0
    store.add_window_partitions(source, WINDOW.start, WINDOW.end, tokens)
    assert store.lagging_partitions(source, WINDOW.end + timedelta(hours=1)) == []
    claimed = store.claim_window_partition(source, WINDOW.start, WINDOW.end, "a", 30, claim_id="c1")
    assert claimed in tokens
    assert store.claim_window_partition(source, WINDOW.start, WINDOW.end, "b", 30, claim_id="c2") != claimed
    # a retried reader takes its own batch back at once, under a new claim
    assert store.claim_window_partition(source, WINDOW.start, WINDOW.end, "a", 30, claim_id="c3") == claimed
    # a stale claim cannot complete the batch, nor count its rows
    assert not store.complete_window_partition(
        source,
        WINDOW.start,
        WINDOW.end,
        claimed,
        "a",
        rows=9,
        transactions=9,
        claim_id="c1",
        partition_rows=True,
    )
    assert store.get_partition(source, claimed).record_count == 0
    assert store.complete_window_partition(
        source,
        WINDOW.start,
        WINDOW.end,
        claimed,
        "a",
        rows=7,
        transactions=7,
        claim_id="c3",
        partition_rows=True,
    )
    # the batch's rows are its record count (what `status` lists per partition)
    assert store.get_partition(source, claimed).record_count == 7


def test_a_summary_counts_rows_per_target_table() -> None:
    summary = TableReadSummary(
        "1-2",
        "/s",
        [BatchResult("A#0@p", "A", 5, 1), BatchResult("A#1@p", "A", 2), BatchResult("B#0@p", "B", 0)],
        seconds=2.0,
    )
    assert summary.to_dict() == {
        "window_id": "1-2",
        "staging_uri": "/s",
        "rows": 7,
        "data_records": 7,
        "transactions": 7,
        "batches": 3,
        "partitions": 3,
        "tables": {"A": 7, "B": 0},
        "retries": 1,
        "seconds": 2.0,
        "rows_per_second": 3.5,
    }


def test_opening_a_window_again_clears_what_earlier_plans_staged_but_keeps_the_plans(tmp_path: Path) -> None:
    plan = _plan()
    write_plan(plan, str(tmp_path))
    folder = tmp_path / "Snap" / WINDOW.window_id
    staged = folder / "partition=0123456789abcdef" / "claim=c1" / "part-00000.parquet"
    staged.parent.mkdir(parents=True)
    staged.write_bytes(b"old")
    (tmp_path / "Snap" / "other-window").mkdir()
    assert clear_batches(str(tmp_path), "Snap", WINDOW) == 1
    assert not staged.exists() and (folder / "_plans" / "abc123.json").exists()
    assert clear_batches(str(tmp_path), "Snap", WINDOW) == 0


def test_columns_of_one_value_are_staged_as_that_value_in_every_row() -> None:
    import pyarrow as pa

    from airflow_provider_cdc.staging.batches import _array

    field = pa.field("column_types_json", pa.string())
    for values in (['[{"name":"Id"}]'] * 4096, [""] * 3, ["é"] * 2, ["a", "b", "a"]):
        array = _array(values, field)
        array.validate(full=True)
        assert array.to_pylist() == values
    for flags in ([True] * 4096, [True] * 13, [True, False, True]):
        array = _array(flags, pa.field("is_last_record_in_transaction_in_partition", pa.bool_()))
        array.validate(full=True)
        assert array.to_pylist() == flags


def test_reading_defers_full_collections_and_restores_the_thresholds() -> None:
    import gc

    from airflow_provider_cdc.sources.spanner.garbage_collection import fewer_full_collections

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with fewer_full_collections(100):
            assert gc.get_threshold() == (700, 10, 1000)
        assert gc.get_threshold() == (700, 10, 10)
        outer, inner = fewer_full_collections(100), fewer_full_collections(100)
        outer.__enter__()
        inner.__enter__()  # another reader's block (in another thread) overlapping the first
        assert gc.get_threshold() == (700, 10, 1000)
        outer.__exit__(None, None, None)
        assert gc.get_threshold() == (700, 10, 1000)
        inner.__exit__(None, None, None)
        assert gc.get_threshold() == (700, 10, 10)
        with pytest.raises(RuntimeError), fewer_full_collections(100):
            raise RuntimeError("a failed read")
        assert gc.get_threshold() == (700, 10, 10)
        with fewer_full_collections(1):
            assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(0, 10, 10)  # automatic collection off: left off
        with fewer_full_collections(100):
            assert gc.get_threshold() == (0, 10, 10)
    finally:
        gc.set_threshold(*before)
