"""The project's emulator against Google's Cloud Spanner emulator, and values at the edges of their types.

One seeded workload (several writes of a row per transaction, values Google's emulator reports
faithfully) is committed to both emulators; per transaction in commit order both must report the
same data change records: tables, mod types, keys, new and old values and column types (tokens,
transaction ids and timestamps aside), and both must equal the workload's ground truth. Google's
emulator is skipped where it is not installed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from google.api_core.exceptions import InvalidArgument

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, coerce_timestamp, format_timestamp
from airflow_provider_cdc.core.values import decode_value
from airflow_provider_cdc.sources.spanner.records import DataChangeRecord
from airflow_provider_cdc.testing.lineage_walk import walk_lineage
from airflow_provider_cdc.testing.spanner_emulator import ManualClock, SpannerEmulator
from airflow_provider_cdc.testing.workload import (
    ALL_CHANGES_STREAM,
    TABLES_BY_NAME,
    WORKLOAD_TABLES,
    CommittedTransaction,
    Workload,
    schema_ddl,
)
from tests.support.table_sources import sleep_until

SEED = 31
CHANGES = 400


def _plain(value: Any) -> str:
    if isinstance(value, Decimal):  # NUMERIC compares by value: 1.50 == 1.5
        return format(value.normalize(), "f")
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=_plain)


def _record(record: DataChangeRecord) -> str:
    """A record as compared: decoded values (Google's emulator writes TIMESTAMPs without fractional
    digits, the project's with six), everything but tokens, transaction ids and timestamps."""
    table = TABLES_BY_NAME[record.table_name]
    return _canonical(
        {
            "table": record.table_name,
            "mod_type": record.mod_type.value,
            "value_capture_type": record.value_capture_type,
            "records_in_transaction": record.number_of_records_in_transaction,
            "column_types": [
                [c.name, c.type, c.is_primary_key, c.ordinal_position] for c in record.column_types
            ],
            "mods": [
                [
                    table.decode_values(mod.keys),
                    table.decode_values(mod.new_values),
                    table.decode_values(mod.old_values),
                ]
                for mod in record.mods
            ],
        }
    )


def transactions(reads: list[Any]) -> list[tuple[datetime, list[str]]]:
    """Per transaction in commit order: its commit timestamp and records, grouped by table (Google's
    emulator lists a transaction's tables in no fixed order), each table's in record order."""
    by_transaction: dict[str, list[DataChangeRecord]] = defaultdict(list)
    for read in reads:
        for record in read.data_records:
            by_transaction[record.server_transaction_id].append(record)
    result = []
    for records in by_transaction.values():
        assert len({r.commit_timestamp for r in records}) == 1
        ordered = sorted(records, key=lambda r: (r.table_name, r.record_sequence))
        result.append((records[0].commit_timestamp, [_record(r) for r in ordered]))
    return sorted(result)


def truth(history: list[CommittedTransaction]) -> list[list[Any]]:
    """The workload's mods per transaction, grouped by table as :func:`transactions` groups them."""
    return [
        json.loads(
            _canonical(
                [
                    [m.table, m.mod_type, m.keys, m.new_values, m.old_values]
                    for m in sorted(t.mods, key=lambda m: m.table)  # stable: key order within a table
                ]
            )
        )
        for t in history
    ]


def flattened(history: list[tuple[datetime, list[str]]]) -> list[list[Any]]:
    """:func:`transactions`' records as :func:`truth` lists mods."""
    result = []
    for _stamp, records in history:
        mods = []
        for text in records:
            record = json.loads(text)
            for keys, new, old in record["mods"]:
                mods.append([record["table"], record["mod_type"], keys, new, old])
        result.append(mods)
    return result


def run_workload(database: Any) -> tuple[Workload, datetime]:
    """The seeded workload, committed without clock control (so both runs draw the same writes)."""
    start = datetime.now(timezone.utc)
    workload = Workload(
        database,
        None,
        SEED,
        max_writes_per_row=3,
        value_profile="google-emulator",
        max_mods_per_transaction=6,
        max_rows_per_table=40,
    )
    workload.run(CHANGES)
    return workload, start


@pytest.fixture(scope="module")
def project_run(emulator_instance: Any) -> Any:
    """The workload on the project's emulator (one partition, so records group as Google's do)."""
    clock = ManualClock(datetime.now(timezone.utc) - timedelta(minutes=5))
    with SpannerEmulator(clock=clock, seed=SEED, initial_partitions=1) as emulator:
        database = emulator_instance(emulator).database(
            "fidelity", ddl_statements=schema_ddl(tables=WORKLOAD_TABLES)
        )
        database.create().result(30)
        start = coerce_timestamp(clock.now())
        workload, _ = run_workload(database)
        end = clock.advance(timedelta(seconds=1))
        yield workload, transactions(walk_lineage(database, ALL_CHANGES_STREAM, start, end))


@pytest.fixture(scope="module")
def google_run(new_google_database: Any) -> Any:
    """The same workload on Google's emulator (real clock)."""
    database = new_google_database(schema_ddl(tables=WORKLOAD_TABLES), prefix="fidelity")
    workload, start = run_workload(database)
    # The window ends after the last commit as the emulator stamped it (its clock, not this
    # process's), and is read once the emulator's real clock has passed that end.
    last = max(coerce_timestamp(t.commit_timestamp) for t in workload.transactions)
    end = max(coerce_timestamp(datetime.now(timezone.utc)), last) + ONE_MICROSECOND
    sleep_until(end + timedelta(milliseconds=50))
    return workload, transactions(walk_lineage(database, ALL_CHANGES_STREAM, start, end))


def test_the_workload_coalesces_several_writes_of_a_row(project_run: Any) -> None:
    workload, history = project_run
    assert workload.change_count == CHANGES
    assert workload.write_count > CHANGES * 1.2, "rows written several times in a transaction"
    assert flattened(history) == truth(workload.transactions)
    mods = [m for t in workload.transactions for m in t.mods]
    assert {m.mod_type for m in mods} == {"INSERT", "UPDATE", "DELETE"}
    # NUMERICs with all 29 integer digits travel through both emulators
    numerics = [v for m in mods for v in m.new_values.values() if isinstance(v, Decimal)]
    assert any(abs(v) >= Decimal("1e28") for v in numerics)


def test_the_project_emulator_reports_what_google_emulator_reports(project_run: Any, google_run: Any) -> None:
    project_workload, project_history = project_run
    google_workload, google_history = google_run
    # the same seed drew the same writes for both
    assert truth(project_workload.transactions) == truth(google_workload.transactions)
    assert flattened(google_history) == truth(google_workload.transactions)
    assert len(project_history) == len(google_history) == len(project_workload.transactions)
    for index, ((_, project_records), (_, google_records)) in enumerate(
        zip(project_history, google_history, strict=True)
    ):
        assert project_records == google_records, f"transaction {index}"


# ---------------------------------------------------------------------------------------------
# Values at the edges of their types
# ---------------------------------------------------------------------------------------------

EDGES = (
    "CREATE TABLE Edges (K INT64 NOT NULL, N NUMERIC, D DATE, TS TIMESTAMP) PRIMARY KEY (K)",
    "CREATE CHANGE STREAM EdgeChanges FOR ALL",
)
LARGEST = Decimal("99999999999999999999999999999.999999999")  # 29 integer and 9 fractional digits


def _edge_values(database: Any, start: datetime, end: datetime) -> dict[int, dict[str, Any]]:
    values: dict[int, dict[str, Any]] = {}
    for read in walk_lineage(database, "EdgeChanges", start, end):
        for record in read.data_records:
            for mod in record.mods:
                values[int(mod.keys["K"])] = mod.new_values
    return values


def test_numeric_full_precision_round_trips(spanner_emulator: Any, new_spanner_database: Any) -> None:
    database = new_spanner_database(list(EDGES), prefix="edges")
    start = spanner_emulator.clock.now()
    numbers = [LARGEST, Decimal(f"-{LARGEST}"), Decimal("10000000000000000000"), Decimal("-0.000000001")]
    with database.batch() as batch:
        batch.insert("Edges", columns=["K", "N"], values=[[i, n] for i, n in enumerate(numbers)])
    end = spanner_emulator.clock.advance(timedelta(seconds=1))
    found = _edge_values(database, start, end)
    assert [found[i]["N"] for i in range(len(numbers))] == [
        "99999999999999999999999999999.999999999",
        "-99999999999999999999999999999.999999999",
        "10000000000000000000",
        "-0.000000001",
    ]
    assert [decode_value("NUMERIC", found[i]["N"]) for i in range(len(numbers))] == numbers
    # as text, past the client's own checks: one digit too many on either side
    for too_large in ("100000000000000000000000000000", "0.0000000001"):
        with pytest.raises(InvalidArgument, match="does not fit NUMERIC"), database.batch() as batch:
            batch.insert("Edges", columns=["K", "N"], values=[[99, too_large]])


def test_dates_and_timestamps_before_year_1000_keep_four_digit_years(
    spanner_emulator: Any, new_spanner_database: Any
) -> None:
    database = new_spanner_database(list(EDGES), prefix="edges")
    start = spanner_emulator.clock.now()
    rows = [
        (1, date(1, 1, 1), datetime(1, 1, 1, tzinfo=timezone.utc)),
        (2, date(999, 12, 31), datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)),
        (3, date(1000, 1, 1), datetime(1000, 1, 1, 0, 0, 0, 5, tzinfo=timezone.utc)),
    ]
    with database.batch() as batch:
        batch.insert("Edges", columns=["K", "D", "TS"], values=[list(row) for row in rows])
    end = spanner_emulator.clock.advance(timedelta(seconds=1))
    found = _edge_values(database, start, end)
    assert [(found[k]["D"], found[k]["TS"]) for k, _, _ in rows] == [
        ("0001-01-01", "0001-01-01T00:00:00.000000Z"),
        ("0999-12-31", "0999-12-31T23:59:59.999999Z"),
        ("1000-01-01", "1000-01-01T00:00:00.000005Z"),
    ]
    assert [
        (decode_value("DATE", found[k]["D"]), decode_value("TIMESTAMP", found[k]["TS"])) for k, _, _ in rows
    ] == [(day, moment) for _, day, moment in rows]
    assert format_timestamp(rows[1][2]) == "0999-12-31T23:59:59.999999Z"
