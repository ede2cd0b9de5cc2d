"""Scalar functions and aggregates of queries: ``FARM_FINGERPRINT``, ``FORMAT`` (``%T``, ``%d``, ``%s``),
``UNIX_MICROS``, ``BIT_XOR`` with ``COUNT``, and the errors Spanner words, on the project's emulator and on
Google's (skipped where it is not installed); the expected answers are Google's. A seeded random
differential compares ``FORMAT('%T')`` and fingerprints of values of every key type on both emulators.
"""

from __future__ import annotations

import base64
import random
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.spanner_v1 import param_types
from table_targets import Target, message, project_tables, target

__all__ = ["project_tables", "target"]

UTC = timezone.utc
DDL = [
    "CREATE TABLE Keys (K INT64 NOT NULL, I INT64, S STRING(MAX), Y BYTES(MAX), F FLOAT64, N NUMERIC, "
    "D DATE, T TIMESTAMP, B BOOL, U TIMESTAMP OPTIONS (allow_commit_timestamp=true)) PRIMARY KEY (K)"
]
COLUMNS = ["K", "I", "S", "Y", "F", "N", "D", "T", "B", "U"]
ROWS = [
    [1, 1, "a\"é\n", b"\x00\xff", 1.5, Decimal("1.50"), date(2020, 1, 2),
     datetime(2020, 1, 2, 3, 4, 5, 123456, tzinfo=UTC), True, datetime(2024, 1, 1, tzinfo=UTC)],
    [2, None, None, None, None, None, None, None, None, datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC)],
    [3, -2, "", b"", float("nan"), Decimal("-0.000000001"), date(1, 1, 1), datetime(1, 1, 1, tzinfo=UTC),
     False, datetime(2024, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)],
    [4, 2**63 - 1, "x'y\x01A", b"'\"\\\n", float("-inf"), Decimal("99999999999999999999999999999.999999999"),
     date(9999, 12, 31), datetime(2024, 1, 1, 0, 0, 0, 120000, tzinfo=UTC), False, None],
    [5, 0, "say \"hi\"", b"say \"hi\"", 1 / 3, Decimal("100"), date(2020, 1, 2),
     datetime(2024, 1, 1, tzinfo=UTC), None, None],
    [6, 6, "日本\t", b"y", 123456.0, Decimal("0"), date(2020, 1, 2), datetime(2024, 1, 1, tzinfo=UTC),
     None, None],
]  # fmt: skip
# Google's emulator's answers for the rows above
LITERALS = [
    [1, "1", "'a\"é\\n'", 'b"\\x00\\xff"', "1.5", 'NUMERIC "1.5"', 'DATE "2020-01-02"',
     'TIMESTAMP "2020-01-02 03:04:05.123456+00"', "true", 'TIMESTAMP "2024-01-01 00:00:00+00"'],
    [2, "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL",
     'TIMESTAMP "2024-01-01 00:00:00.000001+00"'],
    [3, "-2", '""', 'b""', 'CAST("nan" AS FLOAT64)', 'NUMERIC "-0.000000001"', 'DATE "0001-01-01"',
     'TIMESTAMP "0001-01-01 00:00:00+00"', "false", 'TIMESTAMP "2024-01-01 00:00:00.500+00"'],
    [4, "9223372036854775807", '"x\'y\\x01\\x41"', 'b"\'\\"\\\\\\x0a"', 'CAST("-inf" AS FLOAT64)',
     'NUMERIC "99999999999999999999999999999.999999999"', 'DATE "9999-12-31"',
     'TIMESTAMP "2024-01-01 00:00:00.120+00"', "false", "NULL"],
    [5, "0", "'say \"hi\"'", "b'say \"hi\"'", "0.33333333333333331", 'NUMERIC "100"', 'DATE "2020-01-02"',
     'TIMESTAMP "2024-01-01 00:00:00+00"', "NULL", "NULL"],
    [6, "6", '"日本\\t"', 'b"y"', "123456.0", 'NUMERIC "0"', 'DATE "2020-01-02"',
     'TIMESTAMP "2024-01-01 00:00:00+00"', "NULL", "NULL"],
]  # fmt: skip
_databases: dict[int, Any] = {}


def wire(value: Any) -> Any:
    return base64.b64encode(value) if isinstance(value, bytes) else value


def keys_table(target: Target) -> Any:
    """The Keys table with :data:`ROWS`, one per emulator (the rules only read it)."""
    if id(target.instance) not in _databases:
        database = _databases[id(target.instance)] = target.database(DDL)
        with database.batch() as batch:
            batch.insert("Keys", COLUMNS, [[wire(v) for v in row] for row in ROWS])
    return _databases[id(target.instance)]


def rows_of(database: Any, sql: str, params: dict | None = None, types: dict | None = None) -> list:
    with database.snapshot() as snapshot:
        return [list(row) for row in snapshot.execute_sql(sql, params=params, param_types=types)]


def test_format_t_writes_each_value_as_a_googlesql_literal(target: Target) -> None:
    database = keys_table(target)
    items = ", ".join(f"FORMAT('%T', {c})" for c in COLUMNS[1:])
    assert rows_of(database, f"SELECT K, {items} FROM Keys ORDER BY K") == LITERALS


def test_fingerprints_and_unix_micros(target: Target) -> None:
    database = keys_table(target)
    found = rows_of(
        database,
        "SELECT K, FARM_FINGERPRINT(S), FARM_FINGERPRINT(Y), UNIX_MICROS(T), UNIX_MICROS(U) FROM Keys "
        "WHERE K <= 3 ORDER BY K",
    )
    assert found == [
        [1, 7306117289811628110, 2909837915285000904, 1577934245123456, 1704067200000000],
        [2, None, None, None, 1704067200000001],
        [3, -7286425919675154353, -7286425919675154353, -62135596800000000, 1704067200500000],
    ]
    constants = (
        "SELECT farm_fingerprint('hello'), FARM_FINGERPRINT(b'hello'), UNIX_MICROS('2020-01-01 00:00:00+00')"
    )
    assert rows_of(database, constants) == [[-5436999610281751320, -5436999610281751320, 1577836800000000]]
    typed = rows_of(
        database, "SELECT FARM_FINGERPRINT(@s), FORMAT('%T', @s)", {"s": "日本"}, {"s": param_types.STRING}
    )
    assert typed == [[5676833963740711883, '"日本"']]


def test_bit_xor_of_fingerprints_with_count_is_one_row(target: Target) -> None:
    database = keys_table(target)
    digest = (
        "SELECT COUNT(*), BIT_XOR(FARM_FINGERPRINT(FORMAT('%d/%T,%T,%T,%T,%T,%T,%T,%T', UNIX_MICROS(U), "
        "K, I, S, Y, F, N, D, T))) AS fp FROM Keys WHERE U >= @low"
    )
    low = {"low": datetime(2023, 1, 1, tzinfo=UTC)}
    found = rows_of(database, digest, low, {"low": param_types.TIMESTAMP})
    assert found == [[3, 7820835700408092036]]
    empty = rows_of(
        database, digest, {"low": datetime(2030, 1, 1, tzinfo=UTC)}, {"low": param_types.TIMESTAMP}
    )
    assert empty == [[0, None]]
    assert rows_of(database, "SELECT BIT_XOR(I), BIT_XOR(K), 1, 'x' FROM Keys") == [
        [-9223372036854775802, 7, 1, "x"]
    ]
    found = rows_of(database, "SELECT FORMAT('%d|%i|%s|%%', K, I, S) FROM Keys WHERE K IN (1, 2) ORDER BY K")
    assert found == [['1|1|a"é\n|%'], [None]]


FAILURES = [
    ("SELECT FARM_FINGERPRINT(1)", "No matching signature for function FARM_FINGERPRINT for argument types: "
     "INT64. Supported signatures: FARM_FINGERPRINT(BYTES); FARM_FINGERPRINT(STRING) [at 1:8]"),
    ("SELECT FARM_FINGERPRINT()", "No matching signature for function FARM_FINGERPRINT with no arguments. "
     "Supported signatures: FARM_FINGERPRINT(BYTES); FARM_FINGERPRINT(STRING) [at 1:8]"),
    ("SELECT UNIX_MICROS(D) FROM Keys", "No matching signature for function UNIX_MICROS for argument types: "
     "DATE. Supported signature: UNIX_MICROS(TIMESTAMP) [at 1:8]"),
    ("SELECT BIT_XOR(S) FROM Keys", "No matching signature for aggregate function BIT_XOR for argument "
     "types: STRING. Supported signature: BIT_XOR(INT64) [at 1:8]"),
    ("SELECT I, BIT_XOR(I) FROM Keys",
     "SELECT list expression references column I which is neither grouped nor aggregated [at 1:8]"),
    ("SELECT BIT_XOR(BIT_XOR(I)) FROM Keys", "Aggregations of aggregations are not allowed [at 1:8]"),
    ("SELECT K FROM Keys WHERE BIT_XOR(I) = 1",
     "Aggregate function BIT_XOR not allowed in WHERE clause [at 1:26]"),
    ("SELECT BIT_XOR(NULL)", "Aggregate function BIT_XOR not allowed in SELECT without FROM clause [at 1:8]"),
    ("SELECT FORMAT('%d', 'a')",
     "Invalid type for argument 2 to FORMAT; Expected integer; Got STRING [at 1:8]"),
    ("SELECT FORMAT('%s', NULL)",
     "Invalid type for argument 2 to FORMAT; Expected STRING; Got INT64 [at 1:8]"),
    ("SELECT FORMAT('%T')", 'Too few arguments to FORMAT for pattern "%T"; Expected 2; Got 1 [at 1:8]'),
    ("SELECT FORMAT('%T', 1, 2)",
     'Too many arguments to FORMAT for pattern "%T"; Expected 2; Got 3 [at 1:8]'),
    ("SELECT FORMAT(1)", "No matching signature for function FORMAT for argument types: INT64. "
     "Supported signature: FORMAT(STRING, [ANY, ...]) [at 1:8]"),
    ("SELECT FORMAT('%q', 1)", 'Invalid format specifier character "q" in FORMAT string: "%q" [at 1:8]'),
    ("SELECT FORMAT('abc%', 1)", 'Invalid FORMAT string: "abc%" [at 1:8]'),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "text"), FAILURES, ids=[f[0] for f in FAILURES])
def test_calls_spanner_refuses_fail_as_it_words_them(target: Target, sql: str, text: str) -> None:
    database = keys_table(target)
    with pytest.raises(exceptions.InvalidArgument) as caught:
        rows_of(database, sql)
    assert message(caught.value).split("\n")[0] == text


def random_text(rng: random.Random) -> str:
    alphabet = "aA0f'\"\\\n\t\r\x01\x07\x1f\x7f é日\u2028`%,"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))


def random_row(rng: random.Random, key: int) -> list[Any]:
    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.15 else value

    floats = [0.0, -0.0, 0.1, 1e15, 1e16, 1e-5, 2.5e-7, 5e-324, 1.7976931348623157e308, float("nan")]
    return [
        key,
        maybe(rng.choice([0, 1, -1, 2**63 - 1, -(2**63), rng.randrange(-(10**12), 10**12)])),
        maybe(random_text(rng)),
        maybe(bytes(rng.randrange(256) for _ in range(rng.randint(0, 6)))),
        maybe(rng.choice([*floats, rng.uniform(-1e6, 1e6), rng.randrange(10**9) * 1.0])),
        maybe(Decimal(rng.randrange(-(10**12), 10**12)).scaleb(-rng.randint(0, 9))),
        maybe(date(rng.randint(1, 9999), rng.randint(1, 12), rng.randint(1, 28))),
        maybe(datetime(rng.randint(1, 9999), 1, 1, tzinfo=UTC).replace(microsecond=rng.choice([0, 1000, 7]))),
        maybe(rng.random() < 0.5),
        datetime(2024, 1, 1, tzinfo=UTC).replace(microsecond=rng.randrange(10**6)),
    ]


def test_random_values_format_and_fingerprint_as_on_google(
    project_tables: Any, google_spanner_instance: Any
) -> None:
    rng = random.Random(20260401)
    rows = [random_row(rng, key) for key in range(1, 61)]
    answers = []
    items = ", ".join(f"FORMAT('%T', {c}), FARM_FINGERPRINT(FORMAT('%T', {c}))" for c in COLUMNS[1:])
    for instance in (project_tables[1], google_spanner_instance):
        database = instance.database(f"fmt{rng.randrange(10**6)}", ddl_statements=DDL)
        database.create().result(60)
        with database.batch() as batch:
            batch.insert("Keys", COLUMNS, [[wire(v) for v in row] for row in rows])
        answers.append(rows_of(database, f"SELECT K, {items} FROM Keys ORDER BY K"))
    different = [(a, b) for a, b in zip(*answers, strict=True) if a != b]
    assert not different, "\n".join(f"project: {a}\ngoogle:  {b}" for a, b in different[:3])
