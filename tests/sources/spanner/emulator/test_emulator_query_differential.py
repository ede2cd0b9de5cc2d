"""Seeded random queries of the subset, run on the project's emulator and on Google's, must answer the
same rows in the same order: comparisons of every type with literals and (un)typed parameters, NULLs, NaN and
infinities, ``IS [NOT] NULL``, ``[NOT] IN``, ``AND``/``OR``/``NOT``, ``ORDER BY`` and ``LIMIT``/``OFFSET``.
Skipped where Google's emulator is not installed.
"""

from __future__ import annotations

import base64
import math
import random
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import pytest
from google.cloud.spanner_v1 import KeyRange, KeySet, param_types
from table_targets import project_tables

__all__ = ["project_tables"]

UTC = timezone.utc
DDL = [
    "CREATE TABLE Diff (K INT64 NOT NULL, I INT64, S STRING(MAX), F FLOAT64, B BOOL, N NUMERIC, D DATE, "
    "T TIMESTAMP, Y BYTES(MAX)) PRIMARY KEY (K)"
]
COLUMNS = ["K", "I", "S", "F", "B", "N", "D", "T", "Y"]
# per column: values the rows hold (and constants are drawn from), and the parameter type
DOMAINS: dict[str, tuple[list[Any], Any]] = {
    "I": ([None, -(2**63), -7, 0, 3, 3, 42, 2**63 - 1], param_types.INT64),
    "S": ([None, "", "a", "A", "alpha", "Zoë", "東京", "a'b", "b"], param_types.STRING),
    "F": ([None, float("nan"), float("-inf"), -1.5, 0.0, 2.25, 1e300, float("inf")], param_types.FLOAT64),
    "B": ([None, True, False], param_types.BOOL),
    "N": (
        [None, Decimal("-1.5"), Decimal("0"), Decimal("2.000000001"), Decimal("1e20")],
        param_types.NUMERIC,
    ),
    "D": ([None, date(1999, 12, 31), date(2020, 1, 2), date(2020, 1, 3)], param_types.DATE),
    "T": (
        [
            None,
            datetime(2020, 1, 1, tzinfo=UTC),
            datetime(2021, 6, 1, 12, 0, 0, 500000, tzinfo=UTC),
            datetime(2021, 6, 1, 12, 0, 1, tzinfo=UTC),
        ],
        param_types.TIMESTAMP,
    ),
    "Y": ([None, b"", b"\x00", b"\x00\x01", b"\xff"], param_types.BYTES),
}
ROWS = 14
QUERIES = 160


def dataset(rng: random.Random) -> list[list[Any]]:
    return [[k, *(rng.choice(DOMAINS[c][0]) for c in COLUMNS[1:])] for k in range(1, ROWS + 1)]


def wire(value: Any) -> Any:
    return base64.b64encode(value) if isinstance(value, bytes) else value


class Generator:
    """Random conditions and queries, with their parameters."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.params: dict[str, Any] = {}
        self.types: dict[str, Any] = {}

    def constant(self, column: str) -> str:
        values, type_ = DOMAINS[column]
        value = self.rng.choice([v for v in values if v is not None] + [None])
        literal = self.literal(column, value)
        if literal is not None and self.rng.random() < 0.4:
            return literal
        name = f"p{len(self.params)}"
        self.params[name] = wire(value)
        if self.rng.random() < 0.8:  # else untyped: Spanner reads it as the other side's type
            self.types[name] = type_
        return f"@{name}"

    def literal(self, column: str, value: Any) -> str | None:
        if value is None:
            return None
        if column == "I":
            return str(value)
        if column == "S":
            return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        if column == "F":
            return repr(value) if math.isfinite(value) else None
        if column == "B":
            return "TRUE" if value else "FALSE"
        if column == "N":
            return f"NUMERIC '{value}'"
        if column == "D":
            return f"DATE '{value.isoformat()}'" if self.rng.random() < 0.5 else f"'{value.isoformat()}'"
        if column == "T":
            return f"TIMESTAMP '{value.isoformat()}'" if self.rng.random() < 0.5 else f"'{value.isoformat()}'"
        return None

    def atom(self) -> str:
        column = self.rng.choice(COLUMNS[1:])
        roll = self.rng.random()
        if roll < 0.12:
            return f"{column} IS {'NOT ' if self.rng.random() < 0.5 else ''}NULL"
        if roll < 0.22:
            items = ", ".join(self.constant(column) for _ in range(self.rng.randint(1, 3)))
            return f"{column} {'NOT ' if self.rng.random() < 0.3 else ''}IN ({items})"
        if column == "B" and roll < 0.3:
            return "B"
        op = self.rng.choice(["=", "!=", "<>", "<", "<=", ">", ">="])
        if self.rng.random() < 0.5:
            return f"{column} {op} {self.constant(column)}"
        return f"{self.constant(column)} {op} {column}"

    def condition(self, depth: int = 0) -> str:
        roll = self.rng.random()
        if depth >= 3 or roll < 0.4:
            return self.atom()
        if roll < 0.5:
            return f"NOT ({self.condition(depth + 1)})"
        joiner = " AND " if roll < 0.75 else " OR "
        return "(" + joiner.join(self.condition(depth + 1) for _ in range(self.rng.randint(2, 3))) + ")"

    def query(self) -> str:
        selected = self.rng.sample(COLUMNS[1:], self.rng.randint(1, 3))
        order = self.rng.choice(COLUMNS[1:])
        sql = f"SELECT K, {', '.join(selected)} FROM Diff"
        if self.rng.random() < 0.9:
            sql += f" WHERE {self.condition()}"
        sql += f" ORDER BY {order}{' DESC' if self.rng.random() < 0.5 else ''}, K"
        if self.rng.random() < 0.3:
            sql += f" LIMIT {self.rng.randint(0, 6)}"
            if self.rng.random() < 0.5:
                sql += f" OFFSET {self.rng.randint(0, 4)}"
        return sql


def same(left: Any, right: Any) -> bool:
    if isinstance(left, float) and isinstance(right, float):
        return (math.isnan(left) and math.isnan(right)) or left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    return left == right


def answer(database: Any, sql: str, params: dict, types: dict) -> Any:
    try:
        with database.snapshot() as snapshot:
            return [
                list(row)
                for row in snapshot.execute_sql(sql, params=params or None, param_types=types or None)
            ]
    except Exception as error:  # both must fail alike
        return (type(error).__name__, getattr(error, "message", str(error)).split(", request_id")[0])


def test_random_queries_answer_as_on_google(project_tables: Any, google_spanner_instance: Any) -> None:
    rng = random.Random(20260301)
    rows = dataset(rng)
    databases = []
    for instance in (project_tables[1], google_spanner_instance):
        database = instance.database(f"diff{rng.randrange(10**6)}", ddl_statements=DDL)
        database.create().result(60)
        with database.batch() as batch:
            batch.insert("Diff", COLUMNS, [[wire(v) for v in row] for row in rows])
        databases.append(database)
    different = []
    for _ in range(QUERIES):
        generator = Generator(rng)
        sql = generator.query()
        ours, google = (answer(db, sql, generator.params, generator.types) for db in databases)
        if not same(ours, google):
            different.append((sql, generator.params, ours, google))
    assert not different, "\n".join(
        f"{sql} {params}\n  project: {a}\n  google:  {b}" for sql, params, a, b in different[:5]
    )


KEYED = ["CREATE TABLE Keyed (A STRING(8) NOT NULL, B INT64, V INT64) PRIMARY KEY (A, B DESC)"]


def key_set(rng: random.Random) -> KeySet:
    def key(full: bool) -> list[Any]:
        parts = [rng.choice("abcd")]
        if full or rng.random() < 0.5:
            parts.append(rng.choice([None, 0, 1, 2, 3, 4]))
        return parts

    ranges = []
    for _ in range(rng.randint(0, 2)):
        bounds: dict[str, Any] = {}
        for side in rng.choice([("start",), ("end",), ("start", "end"), ("start", "end")]):
            bounds[f"{side}_{rng.choice(['closed', 'open'])}"] = key(full=False)
        ranges.append(KeyRange(**bounds))
    keys = [key(full=True) for _ in range(rng.randint(0, 3))]
    return KeySet(keys=keys, ranges=ranges) if keys or ranges else KeySet(all_=True)


def test_random_key_sets_read_as_on_google(project_tables: Any, google_spanner_instance: Any) -> None:
    rng = random.Random(7)
    rows = [[a, b, index] for index, (a, b) in enumerate((a, b) for a in "abc" for b in (None, 1, 2, 3))]
    databases = []
    for instance in (project_tables[1], google_spanner_instance):
        database = instance.database(f"keyed{rng.randrange(10**6)}", ddl_statements=KEYED)
        database.create().result(60)
        with database.batch() as batch:
            batch.insert("Keyed", ["A", "B", "V"], rows)
        databases.append(database)
    different = []
    for _ in range(120):
        keys = key_set(rng)
        found = []
        for database in databases:
            with database.snapshot() as snapshot:
                found.append([list(row) for row in snapshot.read("Keyed", ["A", "B", "V"], keys)])
        if found[0] != found[1]:
            different.append((keys, *found))
    assert not different, "\n".join(f"{k}\n  project: {a}\n  google:  {b}" for k, a, b in different[:5])


@pytest.fixture(autouse=True)
def _skip_without_google(request: pytest.FixtureRequest) -> None:
    request.getfixturevalue("google_spanner_emulator")
