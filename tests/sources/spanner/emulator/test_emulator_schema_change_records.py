"""Change records follow the schema: after ``DROP COLUMN`` the column leaves later records (and the
ordinal positions close up), after ``ALTER COLUMN`` a STRING <-> BYTES column is typed and valued anew (old
values too), after ``ADD COLUMN`` the column joins the records of streams that track the whole table but not
of a stream that lists its columns. The records are Google's emulator's, and the project's must be the same
(Google's half skipped where it is not installed).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from google.cloud.spanner_v1 import KeySet
from table_targets import Target, fresh, project_tables, target

from airflow_provider_cdc.testing.lineage_walk import walk_lineage

__all__ = ["fresh", "project_tables", "target"]

SCHEMA = [
    "CREATE TABLE T (K INT64 NOT NULL, S STRING(MAX), X STRING(MAX), U INT64, Y BYTES(MAX)) PRIMARY KEY (K)",
    "CREATE CHANGE STREAM Everything FOR ALL",
    "CREATE CHANGE STREAM Listed FOR T(S, U)",
    "CREATE CHANGE STREAM Whole FOR T",
]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def k(key: int) -> dict[str, str]:
    return {"K": str(key)}


# (mod type, column_types as (name, type code, ordinal position), mods as (keys, new values, old values))
K = ("K", "INT64", 1)
WHOLE_TABLE = [
    (
        "INSERT",
        [K, ("S", "STRING", 2), ("X", "STRING", 3), ("U", "INT64", 4), ("Y", "BYTES", 5)],
        [
            (k(1), {"S": "one", "X": "x1", "U": "10", "Y": b64("y1")}, {}),
            (k(2), {"S": "two", "X": "x2", "U": "20", "Y": None}, {}),
        ],
    ),
    ("UPDATE", [K, ("S", "STRING", 2)], [(k(1), {"S": "uno"}, {"S": "one"})]),
    # DROP COLUMN X
    (
        "INSERT",
        [K, ("S", "STRING", 2), ("U", "INT64", 3), ("Y", "BYTES", 4)],
        [
            (k(3), {"S": "three", "U": "30", "Y": None}, {}),
        ],
    ),
    # ALTER COLUMN S BYTES(MAX), ALTER COLUMN Y STRING(MAX)
    (
        "UPDATE",
        [K, ("S", "BYTES", 2), ("Y", "STRING", 4)],
        [
            (k(1), {"S": b64("UNO"), "Y": "why"}, {"S": b64("uno"), "Y": "y1"}),
        ],
    ),
    # ADD COLUMN Z
    ("UPDATE", [K, ("U", "INT64", 3)], [(k(2), {"U": "21"}, {"U": "20"})]),
    (
        "INSERT",
        [K, ("S", "BYTES", 2), ("U", "INT64", 3), ("Y", "STRING", 4), ("Z", "INT64", 5)],
        [
            (k(4), {"S": b64("four"), "U": None, "Y": None, "Z": None}, {}),
        ],
    ),
    (
        "DELETE",
        [K, ("S", "BYTES", 2), ("U", "INT64", 3), ("Y", "STRING", 4), ("Z", "INT64", 5)],
        [
            (k(1), {}, {"S": b64("UNO"), "U": "10", "Y": "why", "Z": None}),
        ],
    ),
]
LISTED = [
    (
        "INSERT",
        [K, ("S", "STRING", 2), ("U", "INT64", 4)],
        [
            (k(1), {"S": "one", "U": "10"}, {}),
            (k(2), {"S": "two", "U": "20"}, {}),
        ],
    ),
    ("UPDATE", [K, ("S", "STRING", 2)], [(k(1), {"S": "uno"}, {"S": "one"})]),
    ("INSERT", [K, ("S", "STRING", 2), ("U", "INT64", 3)], [(k(3), {"S": "three", "U": "30"}, {})]),
    ("UPDATE", [K, ("S", "BYTES", 2)], [(k(1), {"S": b64("UNO")}, {"S": b64("uno")})]),
    ("UPDATE", [K, ("U", "INT64", 3)], [(k(2), {"U": "21"}, {"U": "20"})]),
    ("INSERT", [K, ("S", "BYTES", 2), ("U", "INT64", 3)], [(k(4), {"S": b64("four"), "U": None}, {})]),
    ("DELETE", [K, ("S", "BYTES", 2), ("U", "INT64", 3)], [(k(1), {}, {"S": b64("UNO"), "U": "10"})]),
]


def history(target: Target, fresh: Callable[[list[str]], Any]) -> tuple[Any, datetime, datetime]:
    """Commit writes around three schema changes; the database and the window that covers them."""
    database = fresh(SCHEMA)
    start = target.now()
    with database.batch() as batch:
        batch.insert("T", ["K", "S", "X", "U", "Y"], [[1, "one", "x1", 10, base64.b64encode(b"y1")]])
        batch.insert("T", ["K", "S", "X", "U", "Y"], [[2, "two", "x2", 20, None]])
    with database.batch() as batch:
        batch.update("T", ["K", "S"], [[1, "uno"]])
    database.update_ddl(["ALTER TABLE T DROP COLUMN X"]).result(60)
    with database.batch() as batch:
        batch.insert("T", ["K", "S", "U"], [[3, "three", 30]])
    database.update_ddl(
        ["ALTER TABLE T ALTER COLUMN S BYTES(MAX)", "ALTER TABLE T ALTER COLUMN Y STRING(MAX)"]
    ).result(60)
    with database.batch() as batch:
        batch.update("T", ["K", "S", "Y"], [[1, base64.b64encode(b"UNO"), "why"]])
    database.update_ddl(["ALTER TABLE T ADD COLUMN Z INT64"]).result(60)
    with database.batch() as batch:
        batch.update("T", ["K", "U"], [[2, 21]])
    with database.batch() as batch:
        batch.insert("T", ["K", "S"], [[4, base64.b64encode(b"four")]])
    with database.batch() as batch:
        batch.delete("T", KeySet(keys=[[1]]))
    if target.google:
        time.sleep(0.01)  # the window ends after the last commit on the real clock
    else:
        target.pass_time(timedelta(seconds=1))
    return database, start, target.now()


def records(database: Any, stream: str, start: datetime, end: datetime) -> list[tuple]:
    found = [record for read in walk_lineage(database, stream, start, end) for record in read.data_records]
    found.sort(key=lambda r: (r.commit_timestamp, r.record_sequence))
    return [
        (
            r.mod_type.value,
            [(c.name, c.type["code"], c.ordinal_position) for c in r.column_types],
            [(m.keys, m.new_values, m.old_values) for m in r.mods],
        )
        for r in found
    ]


def test_change_records_follow_schema_changes(target: Target, fresh: Any) -> None:
    database, start, end = history(target, fresh)
    assert records(database, "Everything", start, end) == WHOLE_TABLE
    assert records(database, "Whole", start, end) == WHOLE_TABLE
    assert records(database, "Listed", start, end) == LISTED
    with database.snapshot() as snapshot:
        rows = [list(row) for row in snapshot.execute_sql("SELECT * FROM T ORDER BY K")]
    assert rows == [
        [2, base64.b64encode(b"two"), 21, None, None],
        [3, base64.b64encode(b"three"), 30, None, None],
        [4, base64.b64encode(b"four"), None, None, None],
    ]
