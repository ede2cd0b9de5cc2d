"""Queries over tables: commit-timestamp windows paged by keyset, parameters and values of every type,
INFORMATION_SCHEMA, and the errors Spanner words, on the project's emulator and on Google's (skipped where
it is not installed). Queries outside the project's emulator's subset are refused by name.
"""

from __future__ import annotations

import base64
import math
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.spanner_v1 import JsonObject, TypeCode, param_types
from table_targets import Target, message, project_tables, target

__all__ = ["project_tables", "target"]

EVENTS = [
    "CREATE TABLE Events (Shard INT64 NOT NULL, Id STRING(36) NOT NULL, Payload STRING(MAX), "
    "CommittedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp=true)) PRIMARY KEY (Shard, Id)"
]
WINDOW = (
    "SELECT Shard, Id, CommittedAt FROM Events WHERE CommittedAt >= @start AND CommittedAt < @end{more} "
    "ORDER BY CommittedAt, Shard, Id LIMIT @n"
)
AFTER = (
    " AND ((CommittedAt > @ts) OR (CommittedAt = @ts AND Shard > @shard)"
    " OR (CommittedAt = @ts AND Shard = @shard AND Id > @id))"
)


def rows_of(
    database: Any, sql: str, params: dict | None = None, types: dict | None = None, **bound: Any
) -> list:
    with database.snapshot(**bound) as snapshot:
        return [list(row) for row in snapshot.execute_sql(sql, params=params, param_types=types)]


def test_a_commit_timestamp_window_pages_in_commit_order_by_keyset(target: Target) -> None:
    database = target.database(EVENTS)
    columns = ["Shard", "Id", "Payload", "CommittedAt"]
    ts = "spanner.commit_timestamp()"
    with database.batch() as batch:
        batch.insert("Events", columns, [[s, i, "before", ts] for s in (0, 5) for i in ("a", "b")])
    target.pass_time(timedelta(milliseconds=5))
    with database.batch() as batch:  # two transactions sharing no row
        batch.insert("Events", columns, [[s, i, "one", ts] for s in (3, 1, 2) for i in ("c", "a", "b")])
    first = batch.committed
    with database.batch() as batch:
        batch.insert("Events", columns, [[s, i, "two", ts] for s in (2, 0) for i in ("z", "d")])
    second = batch.committed
    with database.batch() as batch:
        batch.insert("Events", columns, [[9, "late", "after", ts]])
    end = second + timedelta(microseconds=1)
    expected = [[s, i, first] for s in (1, 2, 3) for i in ("a", "b", "c")]
    expected += [[s, i, second] for s in (0, 2) for i in ("d", "z")]

    types = {"start": param_types.TIMESTAMP, "end": param_types.TIMESTAMP, "n": param_types.INT64}
    params = {"start": first, "end": end, "n": 4}
    assert rows_of(database, WINDOW.format(more=""), params, types) == expected[:4]
    found: list = []
    page = rows_of(database, WINDOW.format(more=""), params, types, read_timestamp=end)
    while page:
        found.extend(page)
        last = page[-1]
        more = {"ts": last[2], "shard": last[0], "id": last[1]}
        more_types = {"ts": param_types.TIMESTAMP, "shard": param_types.INT64, "id": param_types.STRING}
        page = rows_of(
            database,
            WINDOW.format(more=AFTER),
            {**params, **more},
            {**types, **more_types},
            read_timestamp=end,
        )
    assert found == expected


ALL_TYPES = [
    "CREATE TABLE AllTypes (K INT64 NOT NULL, S STRING(MAX), I INT64, F FLOAT64, B BOOL, N NUMERIC, D DATE, "
    "T TIMESTAMP, Y BYTES(MAX), J JSON, A ARRAY<STRING(MAX)>, AI ARRAY<INT64>) PRIMARY KEY (K)"
]
UTC = timezone.utc
VALUES = [
    [1, "alpha", -5, 1.5, True, Decimal("1.25"), date(2020, 1, 2),
     datetime(2021, 6, 1, 12, 0, 0, 500000, UTC), b"\x00\x01", JsonObject({"b": [1, 2], "a": "x"}),
     ["x", None], [1, 2]],
    [2, "Zoë 東京", 7, float("nan"), False, Decimal("-99999999999999999999999999999.999999999"),
     date(1999, 12, 31), datetime(2021, 6, 1, 12, 0, 1, tzinfo=UTC), b"", JsonObject([1, None]), [], []],
    [3, "", 0, float("inf"), None, Decimal("0"), None, None, None, None, None, None],
    [4, None, None, -0.25, True, None, date(2020, 1, 3), datetime(2020, 1, 1, tzinfo=UTC), b"\xff",
     JsonObject({"k": None}), ["y"], [None]],
]  # fmt: skip


_databases: dict[int, Any] = {}


def all_types(target: Target) -> Any:
    """The AllTypes table with :data:`VALUES`, one per emulator (the rules only read it)."""
    if id(target.instance) in _databases:
        return _databases[id(target.instance)]
    database = _databases[id(target.instance)] = target.database(ALL_TYPES)
    columns = ["K", "S", "I", "F", "B", "N", "D", "T", "Y", "J", "A", "AI"]
    rows = [[base64.b64encode(v) if isinstance(v, bytes) else v for v in row] for row in VALUES]
    with database.batch() as batch:
        batch.insert("AllTypes", columns, rows)
    return database


def same(left: Any, right: Any) -> bool:
    """Equal values, NaN equal to NaN; the client gives BYTES base64-encoded."""
    if isinstance(right, bytes):
        return isinstance(left, bytes) and base64.b64decode(left) == right
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left):
        return math.isnan(right)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    return left == right


def test_values_of_every_type_come_back_as_written(target: Target) -> None:
    database = all_types(target)
    found = rows_of(database, "SELECT * FROM AllTypes ORDER BY K")
    assert len(found) == len(VALUES)
    for got, wrote in zip(found, VALUES, strict=True):
        assert all(same(g, w) for g, w in zip(got, wrote, strict=True)), [
            (g, w) for g, w in zip(got, wrote, strict=True) if not same(g, w)
        ]
    with database.snapshot() as snapshot:
        result = snapshot.execute_sql("SELECT K, A, AI, J FROM AllTypes WHERE K = 1")
        list(result)
        assert [(f.name, TypeCode(f.type_.code).name) for f in result.fields] == [
            ("K", "INT64"), ("A", "ARRAY"), ("AI", "ARRAY"), ("J", "JSON")
        ]  # fmt: skip


# (condition, parameter, its type or None for untyped, keys matching)
PARAMETER_RULES = [
    ("S = @p", "alpha", param_types.STRING, [1]),
    ("S > @p", "a", param_types.STRING, [1]),
    ("I <= @p", 0, param_types.INT64, [1, 3]),
    ("I != @p", 7, param_types.INT64, [1, 3]),
    ("F < @p", 2.0, param_types.FLOAT64, [1, 4]),
    ("F > @p", 1e300, param_types.FLOAT64, [3]),
    ("B = @p", True, param_types.BOOL, [1, 4]),
    ("N >= @p", Decimal("0"), param_types.NUMERIC, [1, 3]),
    ("D > @p", date(2020, 1, 2), param_types.DATE, [4]),
    ("T >= @p", datetime(2021, 6, 1, 12, 0, 0, 500000, tzinfo=timezone.utc), param_types.TIMESTAMP, [1, 2]),
    ("Y = @p", base64.b64encode(b"\xff"), param_types.BYTES, [4]),
    ("I > @p", 1, None, [2]),
    ("S = @p", "", None, [3]),
    ("T < @p", datetime(2021, 1, 1, tzinfo=timezone.utc), None, [4]),
    ("T < @p", "2021-06-01T12:00:00.6Z", None, [1, 4]),
    ("B = @p", False, None, [2]),
    ("F >= @p", -0.25, None, [1, 3, 4]),
    ("N > @p", 1.0, param_types.FLOAT64, [1]),
    ("I = @p OR S IS NULL", 0, param_types.INT64, [3, 4]),
    ("NOT (I = @p) AND D IS NOT NULL", 7, param_types.INT64, [1]),
    ("K IN (@p, 3, 5)", 1, param_types.INT64, [1, 3]),
    ("K NOT IN (@p, 3)", 1, param_types.INT64, [2, 4]),
    ("S = @p", None, param_types.STRING, []),
    ("T > '2021-06-01T12:00:00Z' AND D = '2020-01-02'", None, None, [1]),
    ("T > TIMESTAMP '2021-06-01 05:00:00' AND N = NUMERIC '1.25'", None, None, [1]),
]


@pytest.mark.parametrize(
    ("condition", "value", "type_", "keys"), PARAMETER_RULES, ids=[r[0] for r in PARAMETER_RULES]
)
def test_parameters_of_every_type(
    target: Target, condition: str, value: Any, type_: Any, keys: list[int]
) -> None:
    database = all_types(target)
    sql = f"SELECT K FROM AllTypes WHERE {condition} ORDER BY K"
    params = {"p": value} if "@p" in condition else None
    types = {"p": type_} if params and type_ is not None else None
    assert [row[0] for row in rows_of(database, sql, params, types)] == keys


def test_a_json_parameter_comes_back_as_sent(target: Target) -> None:
    database = all_types(target)
    value = JsonObject({"z": 1, "a": [True, None]})
    found = rows_of(
        database, "SELECT @p AS j, K FROM AllTypes WHERE K = 1", {"p": value}, {"p": param_types.JSON}
    )
    assert found == [[value, 1]]


def test_count_counts_the_rows_that_pass(target: Target) -> None:
    database = all_types(target)
    assert rows_of(database, "SELECT COUNT(*) FROM AllTypes") == [[4]]
    found = rows_of(
        database,
        "SELECT COUNT(*) AS n, COUNT(S), count(D) FROM AllTypes WHERE K >= @k",
        {"k": 2},
        {"k": param_types.INT64},
    )
    assert found == [[3, 2, 2]]
    assert rows_of(database, "SELECT COUNT(*) FROM AllTypes WHERE K > 10") == [[0]]
    with pytest.raises(exceptions.InvalidArgument) as caught:
        rows_of(database, "SELECT K, COUNT(*) FROM AllTypes")
    text = "SELECT list expression references column K which is neither grouped nor aggregated"
    assert message(caught.value) == positioned("SELECT K, COUNT(*) FROM AllTypes", 8, text)


def test_database_options_list_the_dialect(target: Target) -> None:
    database = all_types(target)
    assert rows_of(database, "SELECT * FROM INFORMATION_SCHEMA.DATABASE_OPTIONS") == [
        ["", "", "database_dialect", "STRING", "GOOGLE_STANDARD_SQL"]
    ]
    retention = rows_of(
        database,
        "SELECT OPTION_VALUE FROM INFORMATION_SCHEMA.DATABASE_OPTIONS "
        "WHERE OPTION_NAME = 'version_retention_period'",
    )
    assert retention == []


COLUMNS_QUERY = (
    "SELECT * FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @table "
    "ORDER BY ORDINAL_POSITION"
)
CUSTOMERS = [
    "CREATE TABLE Customers (Region STRING(8) NOT NULL, CustomerId INT64 NOT NULL, Name STRING(MAX), "
    "Tags ARRAY<STRING(MAX)>, Avatar BYTES(256), UpdatedAt TIMESTAMP OPTIONS (allow_commit_timestamp=true)) "
    "PRIMARY KEY (Region, CustomerId DESC)",
    "CREATE TABLE Orders (OrderId STRING(36) NOT NULL, Amount NUMERIC) PRIMARY KEY (OrderId)",
    "CREATE TABLE Notes (Region STRING(8) NOT NULL, CustomerId INT64 NOT NULL, NoteId INT64 NOT NULL) "
    "PRIMARY KEY (Region, CustomerId DESC, NoteId), INTERLEAVE IN PARENT Customers ON DELETE CASCADE",
]


def test_information_schema_describes_the_tables(target: Target) -> None:
    database = target.database(CUSTOMERS)
    table = {"table": "Customers"}
    types = {"table": param_types.STRING}
    with database.snapshot() as snapshot:
        result = snapshot.execute_sql(COLUMNS_QUERY, params=table, param_types=types)
        rows = [list(row) for row in result]
        fields = [(f.name, TypeCode(f.type_.code).name) for f in result.fields]
    assert fields[:9] == [
        ("TABLE_CATALOG", "STRING"), ("TABLE_SCHEMA", "STRING"), ("TABLE_NAME", "STRING"),
        ("COLUMN_NAME", "STRING"), ("ORDINAL_POSITION", "INT64"), ("COLUMN_DEFAULT", "STRING"),
        ("DATA_TYPE", "STRING"), ("IS_NULLABLE", "STRING"), ("SPANNER_TYPE", "STRING"),
    ]  # fmt: skip
    tail = ["NEVER", None, None, "COMMITTED", "NO", None, None, None, None, None]
    assert rows == [
        ["", "", "Customers", "Region", 1, None, None, "NO", "STRING(8)", *tail],
        ["", "", "Customers", "CustomerId", 2, None, None, "NO", "INT64", *tail],
        ["", "", "Customers", "Name", 3, None, None, "YES", "STRING(MAX)", *tail],
        ["", "", "Customers", "Tags", 4, None, None, "YES", "ARRAY<STRING(MAX)>", *tail],
        ["", "", "Customers", "Avatar", 5, None, None, "YES", "BYTES(256)", *tail],
        ["", "", "Customers", "UpdatedAt", 6, None, None, "YES", "TIMESTAMP", *tail],
    ]
    keys = rows_of(
        database,
        "SELECT COLUMN_NAME, ORDINAL_POSITION, COLUMN_ORDERING, SPANNER_TYPE "
        "FROM INFORMATION_SCHEMA.INDEX_COLUMNS WHERE TABLE_NAME = @table AND INDEX_TYPE = 'PRIMARY_KEY' "
        "ORDER BY ORDINAL_POSITION",
        table,
        types,
    )
    assert keys == [["Region", 1, "ASC", "STRING(8)"], ["CustomerId", 2, "DESC", "INT64"]]
    tables = rows_of(
        database,
        "SELECT TABLE_NAME, PARENT_TABLE_NAME, ON_DELETE_ACTION, TABLE_TYPE FROM INFORMATION_SCHEMA.TABLES "
        "WHERE TABLE_SCHEMA = '' ORDER BY TABLE_NAME",
    )
    assert tables == [
        ["Customers", None, None, "BASE TABLE"],
        ["Notes", "Customers", "CASCADE", "BASE TABLE"],
        ["Orders", None, None, "BASE TABLE"],
    ]
    options = rows_of(
        database,
        "SELECT TABLE_NAME, COLUMN_NAME, OPTION_NAME, OPTION_TYPE, OPTION_VALUE "
        "FROM INFORMATION_SCHEMA.COLUMN_OPTIONS WHERE TABLE_SCHEMA = ''",
    )
    assert options == [["Customers", "UpdatedAt", "allow_commit_timestamp", "BOOL", "TRUE"]]


def test_a_key_column_without_not_null_is_nullable_in_information_schema(target: Target) -> None:
    # Spanner allows NULL in a key column not declared NOT NULL: IS_NULLABLE says YES for it.
    database = target.database(
        [
            "CREATE TABLE Parts (Maker STRING(8) NOT NULL, Serial INT64, Label STRING(MAX), "
            "Size INT64 NOT NULL) PRIMARY KEY (Maker, Serial)"
        ]
    )
    columns = rows_of(
        database,
        "SELECT COLUMN_NAME, IS_NULLABLE FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = '' "
        "AND TABLE_NAME = 'Parts' ORDER BY ORDINAL_POSITION",
    )
    assert columns == [["Maker", "NO"], ["Serial", "YES"], ["Label", "YES"], ["Size", "NO"]]
    keys = rows_of(
        database,
        "SELECT COLUMN_NAME, IS_NULLABLE FROM INFORMATION_SCHEMA.INDEX_COLUMNS WHERE TABLE_SCHEMA = '' "
        "AND TABLE_NAME = 'Parts' AND INDEX_TYPE = 'PRIMARY_KEY' ORDER BY ORDINAL_POSITION",
    )
    assert keys == [["Maker", "NO"], ["Serial", "YES"]]


def positioned(sql: str, column: int, text: str) -> str:
    """Spanner's wording of an error at ``column`` of a one-line query (``0``: no position)."""
    return text if not column else f"{text} [at 1:{column}]\n{sql}\n{' ' * (column - 1)}^"


NO_MATCH, ANY = "No matching signature for operator", "Supported signature: ANY %s ANY"
# (query, column of the error, message): invalid on Spanner, worded the same by both emulators
INVALID_QUERIES = [
    ("SELECT Z FROM AllTypes", 8, "Unrecognized name: Z"),
    ("SELECT K FROM Nope", 15, "Table not found: Nope"),
    ("SELECT K FROM AllTypes WHERE", 29, "Syntax error: Unexpected end of statement"),
    ("SELECT K FROM AllTypes WHERE K = = 1", 34, 'Syntax error: Unexpected "="'),
    (
        "SELECT K FROM AllTypes WHERE K = 'a'",
        30,
        f"{NO_MATCH} = for argument types: INT64, STRING. {ANY % '='}",
    ),
    (
        "SELECT K FROM AllTypes WHERE K <> 'a'",
        30,
        f"{NO_MATCH} != for argument types: INT64, STRING. {ANY % '!='}",
    ),
    ("SELECT K FROM AllTypes WHERE S = NULL", 34, "Operands of = cannot be literal NULL"),
    ("SELECT K FROM AllTypes WHERE K", 30, "WHERE clause should return type BOOL, but returns INT64"),
    ("SELECT K FROM AllTypes WHERE J = J", 30, "Equality is not defined for arguments of type JSON"),
    (
        "SELECT K FROM AllTypes WHERE AI < AI",
        30,
        "Less than is not defined for arguments of type ARRAY<INT64>",
    ),
    ("SELECT K FROM AllTypes WHERE T > 'xyz'", 34, 'Could not cast literal "xyz" to type TIMESTAMP'),
    ("SELECT K FROM AllTypes ORDER BY J", 33, "ORDER BY does not support expressions of type JSON"),
    ("SELECT K FROM AllTypes ORDER BY 2", 33, "ORDER BY is out of SELECT column number range: 2"),
    ("SELECT K FROM AllTypes ORDER BY K NULLS LAST", 35, "NULLS FIRST and NULLS LAST are not supported"),
    ("SELECT x.Z FROM AllTypes AS x", 10, "Name Z not found inside x"),
    ("SELECT AllTypes.K FROM AllTypes AS x", 8, "Unrecognized name: AllTypes"),
    ("SELECT K FROM AllTypes x y", 26, 'Syntax error: Expected end of input but got identifier "y"'),
    ("SELECT K FROM AllTypes WHERE K = @nope", 0, "Incomplete query parameters nope"),
    ("SELECT K FROM AllTypes LIMIT -1", 30, "LIMIT expects a non-negative integer literal or parameter"),
    ("SELECT K AS A, S AS A FROM AllTypes ORDER BY A", 46, "Column name A is ambiguous"),
]


def test_information_schema_lists_what_change_streams_watch(target: Target) -> None:
    database = target.database(
        [
            "CREATE TABLE A (K INT64 NOT NULL, V STRING(MAX), W INT64) PRIMARY KEY (K)",
            "CREATE TABLE B (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)",
            "CREATE TABLE C (K INT64 NOT NULL) PRIMARY KEY (K)",
            "CREATE CHANGE STREAM AllS FOR ALL",
            "CREATE CHANGE STREAM SomeS FOR A(V, W), B",
            "CREATE CHANGE STREAM KeyS FOR A()",
        ]
    )
    streams = (
        "SELECT CHANGE_STREAM_NAME, `ALL` FROM INFORMATION_SCHEMA.CHANGE_STREAMS "
        "WHERE CHANGE_STREAM_NAME = @s"
    )
    tables = (
        "SELECT TABLE_NAME, ALL_COLUMNS FROM INFORMATION_SCHEMA.CHANGE_STREAM_TABLES "
        "WHERE CHANGE_STREAM_NAME = @s ORDER BY TABLE_NAME"
    )
    columns = (
        "SELECT TABLE_NAME, COLUMN_NAME FROM INFORMATION_SCHEMA.CHANGE_STREAM_COLUMNS "
        "WHERE CHANGE_STREAM_NAME = @s ORDER BY TABLE_NAME, COLUMN_NAME"
    )
    types = {"s": param_types.STRING}

    def of(sql: str, stream: str) -> list:
        return rows_of(database, sql, {"s": stream}, types)

    assert [of(streams, s) for s in ("AllS", "SomeS", "KeyS", "Nope")] == [
        [["AllS", True]],
        [["SomeS", False]],
        [["KeyS", False]],
        [],
    ]
    # a FOR ALL stream lists no table; a table listed bare watches all its columns
    assert [of(tables, s) for s in ("AllS", "SomeS", "KeyS")] == [
        [],
        [["A", False], ["B", True]],
        [["A", False]],
    ]
    assert [of(columns, s) for s in ("AllS", "SomeS", "KeyS")] == [[], [["A", "V"], ["A", "W"]], []]


@pytest.mark.parametrize(("sql", "column", "text"), INVALID_QUERIES, ids=[q[0] for q in INVALID_QUERIES])
def test_invalid_queries_fail_as_spanner_words_them(target: Target, sql: str, column: int, text: str) -> None:
    database = all_types(target)
    with pytest.raises(exceptions.InvalidArgument) as caught:
        rows_of(database, sql)
    assert message(caught.value) == positioned(sql, column, text)


def test_a_parameter_of_the_wrong_type_fails(target: Target) -> None:
    database = all_types(target)
    with pytest.raises(exceptions.InvalidArgument) as caught:
        rows_of(database, "SELECT K FROM AllTypes WHERE K = @p", {"p": "1"}, {"p": param_types.STRING})
    assert message(caught.value).startswith("No matching signature for operator = for argument types: INT64")
    with pytest.raises(exceptions.InvalidArgument) as caught:
        rows_of(database, "SELECT K FROM AllTypes WHERE K > @p", {"p": "xyz"})
    assert message(caught.value) == "Could not parse xyz as an integer"
    with pytest.raises(exceptions.OutOfRange) as caught:
        rows_of(database, "SELECT K FROM AllTypes LIMIT @n", {"n": None}, {"n": param_types.INT64})
    assert message(caught.value) == "Limit requires non-null count and offset"


UNSUPPORTED = [
    ("SELECT a.K FROM AllTypes a JOIN AllTypes b ON a.K = b.K", "joins"),
    ("SELECT MAX(K) FROM AllTypes", "function calls (MAX)"),
    ("SELECT DISTINCT S FROM AllTypes", "SELECT DISTINCT"),
    ("SELECT K FROM AllTypes GROUP BY K", "GROUP clauses"),
    ("SELECT K + 1 FROM AllTypes", "the operator +"),
    ("SELECT K FROM (SELECT K FROM AllTypes)", "subqueries in FROM"),
    ("SELECT K FROM AllTypes WHERE S LIKE 'a%'", "LIKE"),
    ("WITH x AS (SELECT 1) SELECT * FROM x", "WITH clauses"),
    ("SELECT K FROM AllTypes UNION ALL SELECT K FROM AllTypes", "set operations (UNION)"),
    ("INSERT INTO AllTypes (K) VALUES (9)", "INSERT statements"),
    ("SELECT * FROM INFORMATION_SCHEMA.TABLES", "rows of Spanner's system views in INFORMATION_SCHEMA"),
]


@pytest.mark.parametrize(("sql", "named"), UNSUPPORTED, ids=[u[1] for u in UNSUPPORTED])
def test_queries_outside_the_subset_fail_naming_what(target: Target, sql: str, named: str) -> None:
    if target.google:
        pytest.skip("Google's emulator answers all of GoogleSQL; the subset is the project's emulator's")
    database = all_types(target)
    with pytest.raises(exceptions.InvalidArgument) as caught:
        rows_of(database, sql)
    assert message(caught.value).startswith(f"Unsupported by the emulator: {named}"), message(caught.value)
