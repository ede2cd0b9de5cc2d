"""The emulator reproduces a scripted workload's history through the real client.

A seeded workload writes more than 10,000 changes over three tables through ``google-cloud-spanner``
while the emulator's partitions split and merge. Walking the change stream's partitions in lineage
order must return exactly the committed history: every mod once, with the right type, keys, old and
new values, commit timestamps and per-transaction record bookkeeping, and per key in commit order.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, format_timestamp
from airflow_provider_cdc.sources.spanner.records import (
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
)
from airflow_provider_cdc.testing.lineage_walk import LineageWalker, PartitionRead, walk_lineage
from airflow_provider_cdc.testing.spanner_emulator import PartitionSchedule
from airflow_provider_cdc.testing.workload import (
    ALL_CHANGES_STREAM,
    BULK_TABLE,
    DELETE,
    INSERT,
    ORDER_STATUS_COLUMNS,
    ORDER_STATUS_STREAM,
    TABLES_BY_NAME,
    UPDATE,
    WORKLOAD_TABLES,
    BulkWorkload,
    CommittedTransaction,
    ExpectedMod,
    Workload,
    apply_mod,
    schema_ddl,
)

HEARTBEAT_MS = 60_000


# ---------------------------------------------------------------------------------------------
# Comparing what the stream returned with the workload's ground truth
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeenMod:
    """A mod as read from the stream, decoded to Python values, with where it came from."""

    token: str
    record: DataChangeRecord
    mod: ExpectedMod


def decoded_mods(record: DataChangeRecord) -> list[ExpectedMod]:
    """The record's mods decoded to Python values with the workload schema."""
    table = TABLES_BY_NAME[record.table_name]
    return [
        ExpectedMod(
            record.table_name,
            record.mod_type.value,
            table.decode_values(mod.keys),
            table.decode_values(mod.new_values),
            table.decode_values(mod.old_values),
        )
        for mod in record.mods
    ]


def seen_mods(reads: Iterable[PartitionRead]) -> list[SeenMod]:
    """Every mod the reads returned, in walk order, decoded with the workload schema."""
    return [
        SeenMod(read.token or "", record, decoded)
        for read in reads
        for record in read.data_records
        for decoded in decoded_mods(record)
    ]


def assert_transactions_match(
    reads: list[PartitionRead],
    expected: list[CommittedTransaction],
    project: dict[str, tuple[str, ...] | None] | None = None,
) -> None:
    """The reads hold exactly the ``expected`` transactions (optionally projected to watched columns).

    Checks per transaction: one commit timestamp and server transaction id, every expected mod once
    with its type, keys and values, record counts, partition counts, unique record sequences that
    increase within each partition, and the last-record-in-partition flag.
    """
    by_timestamp: dict[datetime, list[ExpectedMod]] = {}
    for transaction in expected:
        mods = []
        for mod in transaction.mods:
            if project is not None:
                if mod.table not in project:
                    continue
                projected = mod.project(project[mod.table])
                if projected is None:
                    continue
                mod = projected
            mods.append(mod)
        if mods:
            by_timestamp[transaction.commit_timestamp] = mods

    records_by_txn: dict[str, list[tuple[str, DataChangeRecord]]] = defaultdict(list)
    for read in reads:
        for record in read.data_records:
            records_by_txn[record.server_transaction_id].append((read.token or "", record))

    seen_timestamps: dict[datetime, str] = {}
    for txn_id, records in records_by_txn.items():
        stamps = {record.commit_timestamp for _, record in records}
        assert len(stamps) == 1, f"transaction {txn_id} has records with commit timestamps {sorted(stamps)}"
        stamp = stamps.pop()
        assert stamp not in seen_timestamps, (
            f"transactions {seen_timestamps.get(stamp)} and {txn_id} share commit timestamp {stamp}"
        )
        seen_timestamps[stamp] = txn_id
        assert stamp in by_timestamp, f"transaction {txn_id} at {format_timestamp(stamp)} was never committed"

        counts = {record.number_of_records_in_transaction for _, record in records}
        assert counts == {len(records)}, f"transaction {txn_id}: {len(records)} records, records say {counts}"
        tokens = [token for token, _ in records]
        partitions = {record.number_of_partitions_in_transaction for _, record in records}
        assert partitions == {len(set(tokens))}, (
            f"transaction {txn_id}: records in {len(set(tokens))} partitions, records say {partitions}"
        )
        sequences = [int(record.record_sequence) for _, record in records]
        assert len(set(sequences)) == len(sequences), f"transaction {txn_id}: repeated record sequences"
        for token in set(tokens):
            in_partition = [record for t, record in records if t == token]
            numbers = [int(record.record_sequence) for record in in_partition]
            assert numbers == sorted(numbers), f"transaction {txn_id}: sequences out of order in {token}"
            flags = [record.is_last_record_in_transaction_in_partition for record in in_partition]
            assert flags == [False] * (len(flags) - 1) + [True], (
                f"transaction {txn_id} partition {token}: last-record flags {flags}"
            )
        for _, record in records:
            assert record.value_capture_type == "OLD_AND_NEW_VALUES"

        actual: dict[tuple[str, tuple[Any, ...]], ExpectedMod] = {}
        for _, record in records:
            for decoded in decoded_mods(record):
                slot = (decoded.table, decoded.key)
                assert slot not in actual, f"transaction {txn_id} reports {slot} twice"
                actual[slot] = decoded
        wanted = {(mod.table, mod.key): mod for mod in by_timestamp[stamp]}
        missing_mods = sorted(map(str, set(wanted) - set(actual)))
        unexpected = sorted(map(str, set(actual) - set(wanted)))
        assert not missing_mods and not unexpected, (
            f"transaction at {format_timestamp(stamp)}: missing {missing_mods}, unexpected {unexpected}"
        )
        for slot, mod in wanted.items():
            assert actual[slot] == mod, f"transaction at {format_timestamp(stamp)}, {slot}"

    missing = sorted(set(by_timestamp) - set(seen_timestamps))
    assert not missing, f"{len(missing)} committed transactions not returned, first at {missing[0]}"


def assert_per_key_commit_order(reads: list[PartitionRead], expected: list[CommittedTransaction]) -> None:
    """Reading partitions in walk order gives every key's changes in commit order."""
    actual: dict[tuple[str, tuple[Any, ...]], list[tuple[datetime, str]]] = defaultdict(list)
    for seen in seen_mods(reads):
        actual[(seen.mod.table, seen.mod.key)].append((seen.record.commit_timestamp, seen.mod.mod_type))
    wanted: dict[tuple[str, tuple[Any, ...]], list[tuple[datetime, str]]] = defaultdict(list)
    for transaction in expected:
        for mod in transaction.mods:
            wanted[(mod.table, mod.key)].append((transaction.commit_timestamp, mod.mod_type))
    assert set(actual) == set(wanted)
    for key, changes in wanted.items():
        assert actual[key] == changes, f"{key}: changes in walk order {actual[key]} != commit order {changes}"


def assert_partition_reads_consistent(reads: list[PartitionRead]) -> None:
    """Within a read: records in timestamp order, inside the query bounds, before the children.

    A heartbeat promises that every change at or before its timestamp has been returned.
    """
    for read in reads:
        name = read.token or "initial query"
        last_data = last_heartbeat = read.start - ONE_MICROSECOND
        for record in read.records:
            if isinstance(record, DataChangeRecord):
                stamp = record.commit_timestamp
                assert stamp >= last_data, f"{name}: data record at {stamp} after one at {last_data}"
                assert stamp > last_heartbeat, (
                    f"{name}: data record at {stamp} after heartbeat {last_heartbeat}"
                )
                assert read.start <= stamp <= read.end, f"{name}: data record at {stamp} outside the query"
                last_data = stamp
            elif isinstance(record, HeartbeatRecord):
                stamp = record.timestamp
                assert stamp >= max(last_data, last_heartbeat), f"{name}: heartbeat {stamp} goes back"
                assert stamp <= read.end, f"{name}: heartbeat {stamp} after the query end"
                last_heartbeat = stamp
            else:
                stamp = record.start_timestamp
                assert read.start <= stamp <= read.end, f"{name}: children at {stamp} outside the query"
                assert stamp > last_data or read.token is None, f"{name}: children at {stamp} before its data"
                assert stamp >= last_heartbeat, (
                    f"{name}: children at {stamp} before heartbeat {last_heartbeat}"
                )
        if read.finished:
            starts = {record.start_timestamp for record in read.child_records}
            assert len(starts) == 1, f"{name}: child partitions records with different starts {starts}"
            assert isinstance(read.records[-1], ChildPartitionsRecord), f"{name}: records after its children"


def lineage_events(reads: list[PartitionRead]) -> tuple[list[datetime], list[datetime]]:
    """Start timestamps of the splits (one parent, several children) and merges (several parents)."""
    splits, merges = [], []
    merged_children: set[str] = set()
    for read in reads:
        if read.token is None:
            continue
        for record in read.child_records:
            children = record.child_partitions
            multi_parent = [c for c in children if len(c.parent_partition_tokens) > 1]
            for child in multi_parent:
                if child.token not in merged_children:
                    merged_children.add(child.token)
                    merges.append(record.start_timestamp)
        if read.finished and all(
            len(c.parent_partition_tokens) == 1 for r in read.child_records for c in r.child_partitions
        ):
            if sum(len(r.child_partitions) for r in read.child_records) > 1:
                splits.append(read.child_records[0].start_timestamp)
    return splits, merges


def replay(reads: list[PartitionRead], state: dict[str, dict[tuple[Any, ...], dict[str, Any]]]) -> None:
    """Apply the mods of the reads, in walk order, to ``state``."""
    for seen in seen_mods(reads):
        apply_mod(state, seen.mod)


# ---------------------------------------------------------------------------------------------
# The scripted workload: > 10,000 changes, splits and merges
# ---------------------------------------------------------------------------------------------


@dataclass
class WorkloadRun:
    workload: Workload
    database: Any
    start: datetime
    end: datetime  # exclusive, after the last commit and partition event
    reads: list[PartitionRead]


@pytest.fixture(scope="module")
def workload_run(spanner_emulator: Any, new_spanner_database: Any) -> WorkloadRun:
    database = new_spanner_database(schema_ddl(), prefix="workload")
    clock = spanner_emulator.clock
    clock.advance(timedelta(seconds=1))
    start = clock.now()
    workload = Workload(database, spanner_emulator, seed=20260101)
    workload.run(changes=10_000, step=timedelta(seconds=1), split_every=1_500, merge_every=2_500)
    end = clock.advance(timedelta(seconds=1))
    reads = walk_lineage(database, ALL_CHANGES_STREAM, start, end, HEARTBEAT_MS)
    return WorkloadRun(workload, database, start, end, reads)


def test_workload_writes_the_promised_mix(workload_run: WorkloadRun) -> None:
    workload = workload_run.workload
    assert workload.change_count >= 10_000
    assert len(workload.splits) >= 5 and len(workload.merges) >= 3
    kinds = Counter((mod.table, mod.mod_type) for t in workload.transactions for mod in t.mods)
    for table in WORKLOAD_TABLES:
        for mod_type in (INSERT, UPDATE, DELETE):
            assert kinds[(table.name, mod_type)] > 50, (table.name, mod_type, kinds)
    multi_table = [t for t in workload.transactions if len({mod.table for mod in t.mods}) > 1]
    assert len(multi_table) > 500
    partial = [
        mod
        for t in workload.transactions
        for mod in t.mods
        if mod.mod_type == UPDATE and len(mod.new_values) < len(TABLES_BY_NAME[mod.table].value_columns)
    ]
    assert len(partial) > 500
    histories = workload.mods_by_key()
    reinserted = [
        key for key, changes in histories.items() if [m.mod_type for _, m in changes].count(INSERT) > 1
    ]
    assert len(reinserted) > 20, "keys deleted and inserted again"
    span = workload.transactions[-1].commit_timestamp - workload.transactions[0].commit_timestamp
    assert span > timedelta(minutes=20)
    # the commit-timestamp column holds each transaction's commit timestamp
    for transaction in workload.transactions[:200]:
        for mod in transaction.mods:
            if "UpdatedAt" in mod.new_values:
                assert mod.new_values["UpdatedAt"] == transaction.commit_timestamp


def test_lineage_walk_returns_every_committed_mod_once(workload_run: WorkloadRun) -> None:
    assert_transactions_match(workload_run.reads, workload_run.workload.transactions)
    total = sum(len(record.mods) for read in workload_run.reads for record in read.data_records)
    assert total == workload_run.workload.change_count


def test_per_key_changes_arrive_in_commit_order_in_lineage_order(workload_run: WorkloadRun) -> None:
    assert_per_key_commit_order(workload_run.reads, workload_run.workload.transactions)


def test_partition_lineage_matches_the_splits_and_merges(workload_run: WorkloadRun) -> None:
    reads = workload_run.reads
    assert_partition_reads_consistent(reads)
    initial = reads[0]
    assert initial.token is None and not initial.data_records
    assert all(not c.parent_partition_tokens for r in initial.child_records for c in r.child_partitions)
    assert {r.start_timestamp for r in initial.child_records} == {workload_run.start}
    tokens = [read.token for read in reads[1:]]
    assert len(tokens) == len(set(tokens)), "a partition was queried twice"
    splits, merges = lineage_events(reads)
    workload = workload_run.workload
    assert sorted(splits) == [event.at for event in workload.splits]
    assert sorted(merges) == [event.at for event in workload.merges]
    # each child was queried only after all of its parents
    position = {read.token: index for index, read in enumerate(reads)}
    for read in reads[1:]:
        for parent in read.parent_tokens:
            assert position[parent] < position[read.token]
        assert read.start == read.partition_start
    alive = [read for read in reads[1:] if not read.finished]
    assert len(alive) == 2 + len(workload.splits) - len(workload.merges)


def test_column_types_describe_the_tables(workload_run: WorkloadRun) -> None:
    """INSERT and DELETE records list every column; UPDATE records the key columns and the columns
    their mods write, which are the same for every mod of the record."""
    seen_tables, partial = set(), 0
    for read in workload_run.reads:
        for record in read.data_records:
            every = TABLES_BY_NAME[record.table_name].column_types()
            expected = every
            if record.mod_type.value == UPDATE:
                written = {name for mod in record.mods for name in mod.new_values}
                assert all(set(mod.new_values) == written for mod in record.mods)
                expected = [c for c in every if c["is_primary_key"] or c["name"] in written]
                partial += len(expected) < len(every)
            assert [column.to_json_dict() for column in record.column_types] == expected
            seen_tables.add(record.table_name)
    assert seen_tables == {table.name for table in WORKLOAD_TABLES}
    assert partial > 100


def test_replaying_the_stream_rebuilds_the_final_state(workload_run: WorkloadRun) -> None:
    state: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {table.name: {} for table in WORKLOAD_TABLES}
    replay(workload_run.reads, state)
    assert state == workload_run.workload.state
    assert workload_run.workload.state_at(workload_run.end) == workload_run.workload.state


def test_windowed_walk_matches_history_between(workload_run: WorkloadRun) -> None:
    """Consecutive windows [start, end) give each transaction to exactly one window.

    Some window ends fall exactly on a commit timestamp (that transaction belongs to the next
    window) or on a split or merge (the children start in the next window).
    """
    workload = workload_run.workload
    transactions = workload.transactions
    boundaries = {workload_run.start, workload_run.end}
    boundaries.update(transactions[len(transactions) * k // 6].commit_timestamp for k in range(1, 6))
    boundaries.update((workload.splits[1].at, workload.merges[1].at))
    boundaries.add(transactions[len(transactions) // 2].commit_timestamp + ONE_MICROSECOND)
    edges = sorted(boundaries)
    walker = LineageWalker(workload_run.database, ALL_CHANGES_STREAM, HEARTBEAT_MS)
    state: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {table.name: {} for table in WORKLOAD_TABLES}
    for start, end in zip(edges, edges[1:], strict=False):
        reads = walker.read_window(start, end)
        expected = workload.history_between(start, end)
        assert expected, f"window {start} - {end} is empty"
        assert_transactions_match(reads, expected)
        assert_per_key_commit_order(reads, expected)
        assert_partition_reads_consistent(reads)
        replay(reads, state)
        assert state == workload.state_at(end - ONE_MICROSECOND), f"state after window ending {end}"
    assert len(edges) >= 9
    assert state == workload.state
    assert len(walker.open_tokens) == 2 + len(workload.splits) - len(workload.merges)
    assert set(walker.known_partitions) == walker.finished_tokens | set(walker.open_tokens)


def test_column_list_stream_reports_only_watched_columns(workload_run: WorkloadRun) -> None:
    reads = walk_lineage(
        workload_run.database, ORDER_STATUS_STREAM, workload_run.start, workload_run.end, HEARTBEAT_MS
    )
    assert {record.table_name for read in reads for record in read.data_records} == {"Orders"}
    assert_transactions_match(
        reads, workload_run.workload.transactions, project={"Orders": ORDER_STATUS_COLUMNS}
    )
    orders = TABLES_BY_NAME["Orders"]
    watched = {column.name for column in orders.key_columns} | set(ORDER_STATUS_COLUMNS)
    for read in reads:
        for record in read.data_records:
            names = {column.name for column in record.column_types}
            if record.mod_type.value == UPDATE:  # the key and the watched columns the mods write
                keys = {column.name for column in orders.key_columns}
                assert names == keys | {name for mod in record.mods for name in mod.new_values}
                assert names <= watched
            else:
                assert names == watched
            for column in record.column_types:
                assert column.to_json_dict() in orders.column_types()
    skipped = [
        mod
        for t in workload_run.workload.transactions
        for mod in t.mods
        if mod.table == "Orders" and mod.project(ORDER_STATUS_COLUMNS) is None
    ]
    assert skipped, "the workload updates Orders columns the stream does not watch"


# ---------------------------------------------------------------------------------------------
# The emulator's own partition schedule, and the bulk workload
# ---------------------------------------------------------------------------------------------


def test_partition_schedule_splits_and_merges_preserve_history(
    start_emulator: Any, emulator_instance: Any
) -> None:
    schedule = PartitionSchedule(every=timedelta(seconds=20), seed=11, min_partitions=2, max_partitions=6)
    emulator = start_emulator(initial_partitions=3, partition_schedule=schedule, seed=11)
    instance = emulator_instance(emulator)
    database = instance.database("scheduled", ddl_statements=schema_ddl())
    database.create().result(30)
    start = emulator.clock.now()
    workload = Workload(database, emulator, seed=5)
    workload.run(changes=3_000, step=timedelta(seconds=1))
    end = emulator.clock.advance(timedelta(seconds=1))
    reads = walk_lineage(database, ALL_CHANGES_STREAM, start, end, HEARTBEAT_MS)
    assert sum(len(record.child_partitions) for record in reads[0].child_records) == 3
    splits, merges = lineage_events(reads)
    assert len(splits) >= 3 and len(merges) >= 3, (len(splits), len(merges))
    assert_partition_reads_consistent(reads)
    assert_transactions_match(reads, workload.transactions)
    assert_per_key_commit_order(reads, workload.transactions)
    alive = [read for read in reads[1:] if not read.finished]
    assert 2 <= len(alive) <= 6


def test_bulk_workload_changes_all_arrive(spanner_emulator: Any, new_spanner_database: Any) -> None:
    database = new_spanner_database(schema_ddl(tables=[BULK_TABLE]), prefix="bulk")
    clock = spanner_emulator.clock
    start = clock.advance(timedelta(seconds=1))
    bulk = BulkWorkload(database, spanner_emulator, seed=3)
    summary = bulk.run(changes=6_000, rows_per_commit=500, split_every=2_000, merge_every=2_000)
    end = clock.advance(timedelta(seconds=1))
    assert summary.changes == 6_000 and summary.transactions == 12
    assert summary.splits == 3 and summary.merges == 2
    reads = walk_lineage(database, ALL_CHANGES_STREAM, start, end, HEARTBEAT_MS)
    per_commit: dict[datetime, Counter[str]] = defaultdict(Counter)
    for read in reads:
        for record in read.data_records:
            assert record.table_name == BULK_TABLE.name
            per_commit[record.commit_timestamp][record.mod_type.value] += len(record.mods)
    assert len(per_commit) == len(bulk.commits)
    for commit in bulk.commits:
        counts = per_commit[commit.commit_timestamp]
        assert (counts[INSERT], counts[UPDATE], counts[DELETE]) == (
            commit.inserts,
            commit.updates,
            commit.deletes,
        )
    assert bulk.changes_between(start, end) == 6_000
    state: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {BULK_TABLE.name: {}}
    replay(reads, state)
    rows = {BULK_TABLE.key_of(row): row for row in bulk.rows()}
    assert len(rows) == bulk.row_count
    assert state[BULK_TABLE.name] == rows


# ---------------------------------------------------------------------------------------------
# Several writes of a row per transaction
# ---------------------------------------------------------------------------------------------


def test_rows_written_several_times_per_transaction_make_one_mod_each(
    spanner_emulator: Any, new_spanner_database: Any
) -> None:
    """With ``max_writes_per_row`` a transaction writes rows repeatedly (its mutations outnumber its
    mods); through splits and merges the stream reports exactly the coalesced ground truth, in both
    value profiles, and replaying it rebuilds the tables."""
    for profile in ("full", "google-emulator"):
        database = new_spanner_database(schema_ddl(), prefix="rewrites")
        clock = spanner_emulator.clock
        start = clock.advance(timedelta(seconds=1))
        workload = Workload(database, spanner_emulator, seed=99, max_writes_per_row=4, value_profile=profile)
        workload.run(changes=3_000, split_every=700, merge_every=1_100)
        end = clock.advance(timedelta(seconds=1))
        assert workload.write_count > 1.3 * workload.change_count
        reads = walk_lineage(database, ALL_CHANGES_STREAM, start, end, HEARTBEAT_MS)
        assert_transactions_match(reads, workload.transactions)
        assert_per_key_commit_order(reads, workload.transactions)
        state: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {
            table.name: {} for table in WORKLOAD_TABLES
        }
        replay(reads, state)
        assert state == workload.state
        scoped = walk_lineage(database, ORDER_STATUS_STREAM, start, end, HEARTBEAT_MS)
        assert_transactions_match(scoped, workload.transactions, project={"Orders": ORDER_STATUS_COLUMNS})
        # an UPDATE may carry a column whose new value equals its old one (set back in the transaction)
        reverted = [
            mod
            for t in workload.transactions
            for mod in t.mods
            if mod.mod_type == UPDATE and any(mod.new_values[c] == mod.old_values[c] for c in mod.new_values)
        ]
        assert reverted, profile
