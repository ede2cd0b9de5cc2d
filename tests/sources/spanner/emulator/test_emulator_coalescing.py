"""One mod per row per transaction: how a change stream reports several writes of one row.

Each rule commits one transaction through the real client and reads its data change records back,
from the project's emulator and from Google's Cloud Spanner emulator (skipped where it is not
installed), which must report the same records: tables, mod types, ``column_types``, keys, new and
old values, in order (records of different tables compared table by table: Google's emulator lists a
transaction's tables in no fixed order).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest
from google.cloud.spanner_v1 import KeySet

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, coerce_timestamp
from airflow_provider_cdc.sources.spanner.records import DataChangeRecord
from airflow_provider_cdc.testing.lineage_walk import walk_lineage
from airflow_provider_cdc.testing.spanner_emulator import ManualClock, SpannerEmulator

TABLES = [
    "CREATE TABLE T (K INT64 NOT NULL, A STRING(MAX), B INT64, C FLOAT64) PRIMARY KEY (K)",
    "CREATE TABLE U (K INT64 NOT NULL, X STRING(MAX)) PRIMARY KEY (K)",
]
_ids = itertools.count(1)

Write = Callable[[Any], Any]


def write(operation: str, **values: Any) -> Write:
    """A mutation on table ``T`` (``table=`` picks another) with the given columns."""
    table = values.pop("table", "T")
    return lambda batch: getattr(batch, operation)(
        table, columns=list(values), values=[list(values.values())]
    )


def delete(key: int, table: str = "T") -> Write:
    return lambda batch: batch.delete(table, KeySet(keys=[[key]]))


ROW = write("insert", K=1, A="a", B=1, C=1.5)  # the row before the transaction


@dataclass(frozen=True)
class Record:
    """What the rules compare of a data change record."""

    table: str
    mod_type: str
    columns: tuple[str, ...]  # column_types names, in order
    mods: tuple[tuple[dict, dict, dict], ...]  # (keys, new values, old values)


def record(table: str, mod_type: str, columns: str, *mods: tuple[dict, dict, dict]) -> Record:
    return Record(table, mod_type, tuple(columns.split()), tuple(mods))


def k(key: int) -> dict[str, str]:
    return {"K": str(key)}


class Target:
    """A database on one emulator and how to read one transaction's records from it."""

    def __init__(self, make_database: Callable[[list[str]], Any], clock: ManualClock | None = None) -> None:
        self.make_database = make_database
        self.clock = clock  # the project's emulator's clock, moved past each commit before reading

    def records(self, ddl: list[str], setup: list[Write], body: list[Write]) -> list[DataChangeRecord]:
        """Commit ``setup`` then ``body`` (one transaction each); the records of ``body``'s transaction."""
        database = self.make_database(ddl)
        if setup:
            with database.batch() as batch:
                for change in setup:
                    change(batch)
        with database.batch() as batch:
            for change in body:
                change(batch)
        committed = coerce_timestamp(batch.committed)
        if self.clock is not None:
            self.clock.advance(ONE_MICROSECOND)
        reads = walk_lineage(database, "S", committed, committed + ONE_MICROSECOND)
        found = [r for read in reads for r in read.data_records if r.commit_timestamp == committed]
        return sorted(found, key=lambda r: r.record_sequence)


@pytest.fixture(scope="module")
def project_emulator(emulator_instance: Any) -> Iterator[tuple[SpannerEmulator, Any]]:
    """The project's emulator with one partition per database, so a transaction's records are not
    divided among partitions (Google's emulator keeps a transaction in one partition), and its
    instance."""
    with SpannerEmulator(
        clock=ManualClock(datetime(2026, 5, 1, tzinfo=timezone.utc)), seed=5, initial_partitions=1
    ) as emulator:
        yield emulator, emulator_instance(emulator)


@pytest.fixture(params=["project", "google"])
def target(request: pytest.FixtureRequest) -> Target:
    """Each rule runs against the project's emulator and against Google's."""
    clock = None
    if request.param == "project":
        emulator, instance = request.getfixturevalue("project_emulator")
        clock = emulator.clock
    else:
        instance = request.getfixturevalue("google_spanner_instance")

    def make(ddl: list[str]) -> Any:
        database = instance.database(f"coalesce{next(_ids)}", ddl_statements=ddl)
        database.create().result(60)
        return database

    return Target(make, clock)


def observed(records: list[DataChangeRecord]) -> list[Record]:
    """The records as :class:`Record` values, grouped by table (stable in record order)."""
    result = [
        Record(
            r.table_name,
            r.mod_type.value,
            tuple(c.name for c in r.column_types),
            tuple((m.keys, m.new_values, m.old_values) for m in r.mods),
        )
        for r in records
    ]
    assert all(r.number_of_records_in_transaction == len(records) for r in records)
    return sorted(result, key=lambda r: r.table)


def stream(capture: str = "OLD_AND_NEW_VALUES", scope: str = "ALL") -> list[str]:
    return [*TABLES, f"CREATE CHANGE STREAM S FOR {scope} OPTIONS (value_capture_type = '{capture}')"]


# (rule, setup, transaction, expected records)
RULES: list[tuple[str, list[Write], list[Write], list[Record]]] = [
    (
        "insert then update: one INSERT of the final row",
        [],
        [write("insert", K=1, A="a"), write("update", K=1, B=5)],
        [record("T", "INSERT", "K A B C", (k(1), {"A": "a", "B": "5", "C": None}, {}))],
    ),
    (
        "two updates: one UPDATE of both columns, old values from before the transaction",
        [ROW],
        [write("update", K=1, A="x"), write("update", K=1, B=7)],
        [record("T", "UPDATE", "K A B", (k(1), {"A": "x", "B": "7"}, {"A": "a", "B": "1"}))],
    ),
    (
        "one column updated twice: final value against the value before the transaction",
        [ROW],
        [write("update", K=1, A="x"), write("update", K=1, A="y")],
        [record("T", "UPDATE", "K A", (k(1), {"A": "y"}, {"A": "a"}))],
    ),
    (
        "a column set back to its value: still reported, new equal to old",
        [ROW],
        [write("update", K=1, A="x", B=2), write("update", K=1, A="a")],
        [record("T", "UPDATE", "K A B", (k(1), {"A": "a", "B": "2"}, {"A": "a", "B": "1"}))],
    ),
    (
        "an update writing an unchanged value reports it",
        [ROW],
        [write("update", K=1, A="a", B=9)],
        [record("T", "UPDATE", "K A B", (k(1), {"A": "a", "B": "9"}, {"A": "a", "B": "1"}))],
    ),
    (
        "replace of an existing row: an INSERT with every column, unset ones null",
        [ROW],
        [write("replace", K=1, A="z")],
        [record("T", "INSERT", "K A B C", (k(1), {"A": "z", "B": None, "C": None}, {}))],
    ),
    (
        "delete then insert again: an INSERT of the new row",
        [ROW],
        [delete(1), write("insert", K=1, A="q")],
        [record("T", "INSERT", "K A B C", (k(1), {"A": "q", "B": None, "C": None}, {}))],
    ),
    (
        "update, replace, update: an INSERT of the final row",
        [ROW],
        [write("update", K=1, B=7), write("replace", K=1, A="z"), write("update", K=1, C=9.5)],
        [record("T", "INSERT", "K A B C", (k(1), {"A": "z", "B": None, "C": 9.5}, {}))],
    ),
    (
        "insert_or_update of a new row: an INSERT with every column",
        [],
        [write("insert_or_update", K=1, A="n")],
        [record("T", "INSERT", "K A B C", (k(1), {"A": "n", "B": None, "C": None}, {}))],
    ),
    (
        "insert_or_update of an existing row: an UPDATE of the columns it writes",
        [ROW],
        [write("insert_or_update", K=1, A="n")],
        [record("T", "UPDATE", "K A", (k(1), {"A": "n"}, {"A": "a"}))],
    ),
    ("insert then delete: no mod", [], [write("insert", K=1, A="a"), delete(1)], []),
    (
        "update then delete: one DELETE with the values from before the transaction",
        [ROW],
        [write("update", K=1, A="x"), delete(1)],
        [record("T", "DELETE", "K A B C", (k(1), {}, {"A": "a", "B": "1", "C": 1.5}))],
    ),
    (
        "delete, insert, delete: one DELETE with the values from before the transaction",
        [ROW],
        [delete(1), write("insert", K=1, A="q"), delete(1)],
        [record("T", "DELETE", "K A B C", (k(1), {}, {"A": "a", "B": "1", "C": 1.5}))],
    ),
    (
        "a table's mods in key order, one record",
        [],
        [write("insert", K=3, A="c"), write("insert", K=1, A="a"), write("insert", K=2, A="b")],
        [
            record(
                "T",
                "INSERT",
                "K A B C",
                (k(1), {"A": "a", "B": None, "C": None}, {}),
                (k(2), {"A": "b", "B": None, "C": None}, {}),
                (k(3), {"A": "c", "B": None, "C": None}, {}),
            )
        ],
    ),
    (
        "a record per run of one mod type (and column set) in key order, a record per table",
        [write("insert", K=k_, A="a") for k_ in (1, 2, 3, 4)],
        [
            write("insert", K=9, A="e"),
            write("update", K=2, A="x"),
            write("insert", K=5, X="u", table="U"),
            delete(1),
            write("insert", K=0, A="z"),
            write("update", K=3, B=4),
            write("update", K=4, B=5),
            write("insert", K=1, X="v", table="U"),
        ],
        [
            record("T", "INSERT", "K A B C", (k(0), {"A": "z", "B": None, "C": None}, {})),
            record("T", "DELETE", "K A B C", (k(1), {}, {"A": "a", "B": None, "C": None})),
            record("T", "UPDATE", "K A", (k(2), {"A": "x"}, {"A": "a"})),
            record("T", "UPDATE", "K B", (k(3), {"B": "4"}, {"B": None}), (k(4), {"B": "5"}, {"B": None})),
            record("T", "INSERT", "K A B C", (k(9), {"A": "e", "B": None, "C": None}, {})),
            record("U", "INSERT", "K X", (k(1), {"X": "v"}, {}), (k(5), {"X": "u"}, {})),
        ],
    ),
]


@pytest.mark.parametrize(("rule", "setup", "body", "expected"), RULES, ids=[r[0] for r in RULES])
def test_writes_of_one_row_in_one_transaction_make_one_mod(
    target: Target, rule: str, setup: list[Write], body: list[Write], expected: list[Record]
) -> None:
    assert observed(target.records(stream(), setup, body)) == sorted(expected, key=lambda r: r.table)


TWO_UPDATES = [write("update", K=1, A="x"), write("update", K=1, B=7)]
CAPTURE_RULES: list[tuple[str, str, list[Write], list[Record]]] = [
    (
        "NEW_VALUES",
        "ALL",
        TWO_UPDATES,
        [record("T", "UPDATE", "K A B", (k(1), {"A": "x", "B": "7"}, {}))],
    ),
    (
        "NEW_ROW",
        "ALL",
        TWO_UPDATES,
        [record("T", "UPDATE", "K A B C", (k(1), {"A": "x", "B": "7", "C": 1.5}, {}))],
    ),
    (
        "NEW_ROW_AND_OLD_VALUES",
        "ALL",
        TWO_UPDATES,
        [record("T", "UPDATE", "K A B C", (k(1), {"A": "x", "B": "7", "C": 1.5}, {"A": "a", "B": "1"}))],
    ),
    ("NEW_VALUES", "ALL", [delete(1)], [record("T", "DELETE", "K A B C", (k(1), {}, {}))]),
    ("NEW_ROW", "ALL", [delete(1)], [record("T", "DELETE", "K A B C", (k(1), {}, {}))]),
    (
        "NEW_ROW_AND_OLD_VALUES",
        "ALL",
        [delete(1)],
        [record("T", "DELETE", "K A B C", (k(1), {}, {"A": "a", "B": "1", "C": 1.5}))],
    ),
    # a stream watching some columns: an UPDATE lists the watched columns written ...
    ("OLD_AND_NEW_VALUES", "T(A)", [write("update", K=1, B=4)], []),
    (
        "OLD_AND_NEW_VALUES",
        "T(A)",
        [write("update", K=1, A="q", B=4)],
        [record("T", "UPDATE", "K A", (k(1), {"A": "q"}, {"A": "a"}))],
    ),
    # ... while NEW_ROW reports every write of the row, even of unwatched columns only
    (
        "NEW_ROW",
        "T(A, C)",
        [write("update", K=1, B=4)],
        [record("T", "UPDATE", "K A C", (k(1), {"A": "a", "C": 1.5}, {}))],
    ),
    (
        "NEW_ROW_AND_OLD_VALUES",
        "T(A, C)",
        [write("update", K=1, A="q", B=4)],
        [record("T", "UPDATE", "K A C", (k(1), {"A": "q", "C": 1.5}, {"A": "a"}))],
    ),
    (
        "NEW_ROW",
        "ALL",
        [write("update", K=1)],
        [record("T", "UPDATE", "K A B C", (k(1), {"A": "a", "B": "1", "C": 1.5}, {}))],
    ),
    ("OLD_AND_NEW_VALUES", "ALL", [write("update", K=1)], []),
]


@pytest.mark.parametrize(
    ("capture", "scope", "body", "expected"),
    CAPTURE_RULES,
    ids=[f"{c}-{s}-{i}" for i, (c, s, _, _) in enumerate(CAPTURE_RULES)],
)
def test_value_capture_types_and_column_scopes(
    target: Target, capture: str, scope: str, body: list[Write], expected: list[Record]
) -> None:
    assert observed(target.records(stream(capture, scope), [ROW], body)) == expected
