"""``ALTER TABLE … ADD / DROP / ALTER COLUMN`` and secondary indexes: each form, and each refusal, answered
by the project's emulator as by Google's, through the real client.

Every case runs on both emulators (Google's half skipped where it is not installed) and must give the
answer listed here, which is Google's emulator's: the same gRPC status code and message, at the same point
(``call``: the UpdateDatabaseDdl call fails and nothing changes; ``result``: the call succeeds and the
long-running operation fails, the statements before the failing one having taken effect; ``commit``: a
write fails). Where Google's emulator is installed, the two are thereby compared answer for answer.

Deliberate differences, not listed: column DEFAULT values are refused as unsupported (Google's emulator
accepts them), a read through a secondary index is refused as unsupported (Google's serves it), an unknown
column type is INVALID_ARGUMENT (Google's answers INTERNAL), shrinking a BYTES(n) column whose values fit
succeeds (Google's emulator fails with INTERNAL ``ZETASQL_RET_CHECK failure``), and parse errors word the
syntax problem differently after the same ``Error parsing Spanner DDL statement: <statement> :`` prefix.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.spanner_v1 import KeySet, param_types
from table_targets import Target, fresh, message, project_tables, target

__all__ = ["fresh", "project_tables", "target"]

BASE = [
    "CREATE TABLE T (K INT64 NOT NULL, K2 STRING(20) NOT NULL, S STRING(MAX), N INT64, B BYTES(MAX), "
    "TS TIMESTAMP OPTIONS (allow_commit_timestamp=true), A ARRAY<INT64>, F FLOAT64, NN STRING(10) NOT NULL, "
    "J JSON, D DATE, SA ARRAY<STRING(MAX)>, W STRING(MAX), X STRING(MAX)) PRIMARY KEY (K, K2)",
    "CREATE TABLE C (K INT64 NOT NULL, K2 STRING(20) NOT NULL, CK INT64 NOT NULL, V STRING(MAX)) "
    "PRIMARY KEY (K, K2, CK), INTERLEAVE IN PARENT T ON DELETE CASCADE",
    "CREATE CHANGE STREAM CS FOR T(W), C",
    "CREATE CHANGE STREAM Everything FOR ALL",
]
INDEXED = [*BASE, "CREATE INDEX TByS ON T(S)", "CREATE INDEX TByN ON T(N) STORING (F)"]
LEAF = [
    "CREATE TABLE L (K INT64 NOT NULL, KS STRING(20) NOT NULL, KN STRING(5), V STRING(MAX)) "
    "PRIMARY KEY (K, KS, KN)"
]
EMPTY_ROW = {"K": 1, "K2": "a", "NN": "x"}
FULL_ROW = {**EMPTY_ROW, "S": "hello world", "N": 5, "B": base64.b64encode(b"\xff\xfe"), "W": "w"}
KEY = '{Int64(1), String("a")}'
OK = "OK"

Outcome = Any  # "OK", (point, code name, message) or query rows


@dataclass
class Case:
    name: str
    statements: list[str]
    expected: Outcome
    rows: list[dict[str, Any]] = field(default_factory=list)
    base: list[str] = field(default_factory=lambda: BASE)
    table: str = "T"


def call(code: str, text: str) -> tuple[str, str, str]:
    return ("call", code, text)


def result(code: str, text: str) -> tuple[str, str, str]:
    return ("result", code, text)


def retype(column: str, old: str, new: str) -> tuple[str, str, str]:
    return call("INVALID_ARGUMENT", f"Cannot change type of column `{column}` from `{old}` to `{new}`")


def commit_timestamp_option(column: str) -> tuple[str, str, str]:
    return call(
        "FAILED_PRECONDITION",
        f"Column {column} has invalid allow_commit_timestamp option.  "
        "Option only allowed on TIMESTAMP columns.",
    )


def shrunk(column: str, limit: int, length: int, key: str) -> tuple[str, str, str]:
    text = (
        f"Reducing the length of column {column} to {limit} is not allowed because it has a value of length "
        f"{length} at key: {key}"
    )
    return result("FAILED_PRECONDITION", text)


def tracked(column: str, streams: list[str]) -> tuple[str, str, str]:
    where = f"T.{column}"
    return call(
        "FAILED_PRECONDITION",
        f"Cannot drop column {where} . Column {where} is tracked by {len(streams)} Change Stream: "
        f"{','.join(streams)}. Columns explicitly tracked by a Change Stream cannot be dropped. Please alter "
        "the Change Stream to stop tracking the column before dropping the column.",
    )


A = "ALTER TABLE T "
CASES = [
    # ADD COLUMN
    Case("add nullable", [A + "ADD COLUMN Z STRING(MAX)"], OK),
    Case("add without COLUMN", [A + "ADD Z INT64"], OK),
    Case("add if not exists, new", [A + "ADD COLUMN IF NOT EXISTS Z INT64"], OK),
    Case("add if not exists, existing", [A + "ADD COLUMN IF NOT EXISTS S INT64"], OK),
    Case(
        "add duplicate", [A + "ADD COLUMN S INT64"], call("FAILED_PRECONDITION", "Duplicate column name T.S.")
    ),
    Case(
        "add duplicate, other case",
        [A + "ADD COLUMN s INT64"],
        call("FAILED_PRECONDITION", "Duplicate column name T.s."),
    ),
    Case(
        "add NOT NULL",
        [A + "ADD COLUMN Z INT64 NOT NULL"],
        call("UNIMPLEMENTED", "Cannot add NOT NULL column T.Z to existing table T."),
    ),
    Case("add commit timestamp", [A + "ADD COLUMN Z TIMESTAMP OPTIONS (allow_commit_timestamp=true)"], OK),
    Case(
        "add commit timestamp option on STRING",
        [A + "ADD COLUMN Z STRING(MAX) OPTIONS (allow_commit_timestamp=true)"],
        commit_timestamp_option("T.Z"),
    ),
    Case(
        "add STRING(0)",
        ["ALTER TABLE C ADD COLUMN Z STRING(0)"],
        call("INVALID_ARGUMENT", "Bad length for column C.Z: 0 : Allowed length range: [1, 2621440]."),
    ),
    Case(
        "add to a missing table",
        ["ALTER TABLE Nope ADD COLUMN Z INT64"],
        call("NOT_FOUND", "Table not found: Nope"),
    ),
    # DROP COLUMN
    Case("drop", [A + "DROP COLUMN X"], OK, rows=[FULL_ROW]),
    Case("drop without COLUMN", [A + "DROP X"], OK),
    Case("drop, other case", [A + "DROP COLUMN x"], OK),
    Case("drop NOT NULL column", [A + "DROP COLUMN NN"], OK, rows=[FULL_ROW]),
    Case("drop commit timestamp column", [A + "DROP COLUMN TS"], OK),
    Case("drop missing", [A + "DROP COLUMN Nope"], call("NOT_FOUND", "Column not found in table T: Nope")),
    Case(
        "drop from a missing table",
        ["ALTER TABLE Nope DROP COLUMN X"],
        call("NOT_FOUND", "Table not found: Nope"),
    ),
    Case(
        "drop key",
        [A + "DROP COLUMN K2"],
        call("INVALID_ARGUMENT", "Cannot drop key column K2 from table T."),
    ),
    Case(
        "drop parent key in child",
        ["ALTER TABLE C DROP COLUMN K2"],
        call("INVALID_ARGUMENT", "Cannot drop key column K2 from table C."),
    ),
    Case("drop column a stream lists", [A + "DROP COLUMN W"], tracked("W", ["CS", "Everything"])),
    Case("drop column FOR ALL tracks", [A + "DROP COLUMN S"], OK),
    Case("drop column of a table a stream lists", ["ALTER TABLE C DROP COLUMN V"], OK),
    Case(
        "drop indexed",
        [A + "DROP COLUMN S"],
        call("FAILED_PRECONDITION", "Cannot drop column S from table T because it is used by index TByS."),
        base=INDEXED,
    ),
    Case(
        "drop stored",
        [A + "DROP COLUMN F"],
        call("FAILED_PRECONDITION", "Cannot drop column F from table T because it is used by index TByN."),
        base=INDEXED,
    ),
    # ALTER COLUMN: lengths and nullability
    Case("shrink, no rows", [A + "ALTER COLUMN S STRING(10)"], OK),
    Case("shrink, values fit", [A + "ALTER COLUMN S STRING(20)"], OK, rows=[FULL_ROW]),
    Case(
        "shrink below a value",
        [A + "ALTER COLUMN S STRING(5)"],
        shrunk("S", 5, 11, KEY),
        rows=[FULL_ROW],
    ),
    Case("NOT NULL, no rows", [A + "ALTER COLUMN S STRING(MAX) NOT NULL"], OK),
    Case("NOT NULL, every row set", [A + "ALTER COLUMN S STRING(MAX) NOT NULL"], OK, rows=[FULL_ROW]),
    Case(
        "NOT NULL over a NULL",
        [A + "ALTER COLUMN S STRING(MAX) NOT NULL"],
        result(
            "FAILED_PRECONDITION",
            f"Cannot specify a null value for column: S in table: T referenced by key: {KEY}",
        ),
        rows=[EMPTY_ROW],
    ),
    Case("drop NOT NULL", [A + "ALTER COLUMN NN STRING(10)"], OK, rows=[FULL_ROW]),
    Case("grow, keep NOT NULL", [A + "ALTER COLUMN NN STRING(MAX) NOT NULL"], OK, rows=[FULL_ROW]),
    Case("a column a stream lists", [A + "ALTER COLUMN W BYTES(MAX)"], OK),
    Case("a column a stream lists, NOT NULL", [A + "ALTER COLUMN W STRING(MAX) NOT NULL"], OK),
    Case(
        "bad length",
        ["ALTER TABLE C ALTER COLUMN V STRING(2621441)"],
        call("INVALID_ARGUMENT", "Bad length for column C.V: 2621441 : Allowed length range: [1, 2621440]."),
    ),
    # ALTER COLUMN: types
    Case("STRING to BYTES", [A + "ALTER COLUMN S BYTES(MAX)"], OK, rows=[FULL_ROW]),
    Case(
        "STRING to too short BYTES",
        [A + "ALTER COLUMN S BYTES(5)"],
        shrunk("S", 5, 11, KEY),
        rows=[FULL_ROW],
    ),
    Case(
        "BYTES that are not UTF-8 to STRING",
        [A + "ALTER COLUMN B STRING(MAX)"],
        result(
            "FAILED_PRECONDITION",
            f"Alteration of column B is not allowed because it has an invalid UTF-8 character at key: {KEY}",
        ),
        rows=[FULL_ROW],
    ),
    Case("BYTES to STRING, no rows", [A + "ALTER COLUMN B STRING(MAX)"], OK),
    Case("ARRAY<STRING> to ARRAY<BYTES>", [A + "ALTER COLUMN SA ARRAY<BYTES(MAX)>"], OK),
    Case("INT64 to STRING", [A + "ALTER COLUMN N STRING(MAX)"], retype("N", "INT64", "STRING")),
    Case("INT64 to FLOAT64", [A + "ALTER COLUMN N FLOAT64"], retype("N", "INT64", "FLOAT64")),
    Case("INT64 to NUMERIC", [A + "ALTER COLUMN N NUMERIC"], retype("N", "INT64", "NUMERIC")),
    Case("FLOAT64 to FLOAT32", [A + "ALTER COLUMN F FLOAT32"], retype("F", "FLOAT64", "FLOAT")),
    Case("TIMESTAMP to STRING", [A + "ALTER COLUMN TS STRING(MAX)"], retype("TS", "TIMESTAMP", "STRING")),
    Case("DATE to TIMESTAMP", [A + "ALTER COLUMN D TIMESTAMP"], retype("D", "DATE", "TIMESTAMP")),
    Case("JSON to STRING", [A + "ALTER COLUMN J STRING(MAX)"], retype("J", "JSON", "STRING")),
    Case("STRING to JSON", [A + "ALTER COLUMN S JSON"], retype("S", "STRING", "JSON")),
    Case(
        "ARRAY<INT64> to ARRAY<STRING>",
        [A + "ALTER COLUMN A ARRAY<STRING(MAX)>"],
        retype("A", "ARRAY<INT64>", "ARRAY<STRING>"),
    ),
    Case("ARRAY to scalar", [A + "ALTER COLUMN SA STRING(MAX)"], retype("SA", "ARRAY<STRING>", "STRING")),
    Case("same type", [A + "ALTER COLUMN N INT64"], OK),
    Case(
        "a missing column",
        [A + "ALTER COLUMN Nope STRING(MAX)"],
        call("NOT_FOUND", "Column not found in table T: Nope"),
    ),
    Case(
        "a missing table",
        ["ALTER TABLE Nope ALTER COLUMN S STRING(MAX)"],
        call("NOT_FOUND", "Table not found: Nope"),
    ),
    # ALTER COLUMN: key columns
    Case("key column's type", [A + "ALTER COLUMN K STRING(MAX) NOT NULL"], retype("K", "INT64", "STRING")),
    Case(
        "key column with children, same definition",
        [A + "ALTER COLUMN K INT64 NOT NULL"],
        call("INVALID_ARGUMENT", "Requested change to key column T.K could not be made."),
    ),
    Case(
        "key column with children, longer",
        [A + "ALTER COLUMN K2 STRING(30) NOT NULL"],
        call("INVALID_ARGUMENT", "Requested change to key column T.K2 could not be made."),
    ),
    Case(
        "key column with children, nullable",
        [A + "ALTER COLUMN K2 STRING(20)"],
        call("INVALID_ARGUMENT", "Requested change to key column T.K2 could not be made."),
    ),
    Case(
        "parent key column in the child",
        ["ALTER TABLE C ALTER COLUMN K2 STRING(30) NOT NULL"],
        call("INVALID_ARGUMENT", "Cannot alter parent key column C.K2."),
    ),
    Case("child's own key column", ["ALTER TABLE C ALTER COLUMN CK INT64 NOT NULL"], OK),
    Case("leaf key column, longer", ["ALTER TABLE L ALTER COLUMN KS STRING(30) NOT NULL"], OK, base=LEAF),
    Case("leaf key column to BYTES", ["ALTER TABLE L ALTER COLUMN KS BYTES(30) NOT NULL"], OK, base=LEAF),
    Case(
        "leaf key column, nullable",
        ["ALTER TABLE L ALTER COLUMN KS STRING(20)"],
        call("INVALID_ARGUMENT", "Cannot change key column L.KS."),
        base=LEAF,
    ),
    Case(
        "leaf key column, NOT NULL",
        ["ALTER TABLE L ALTER COLUMN KN STRING(5) NOT NULL"],
        call("INVALID_ARGUMENT", "Cannot change key column L.KN."),
        base=LEAF,
    ),
    # ALTER COLUMN: indexed columns
    Case("indexed, longer", [A + "ALTER COLUMN S STRING(100)"], OK, base=INDEXED),
    Case("indexed, to BYTES", [A + "ALTER COLUMN S BYTES(MAX)"], OK, base=INDEXED),
    Case(
        "indexed, NOT NULL",
        [A + "ALTER COLUMN S STRING(MAX) NOT NULL"],
        call(
            "FAILED_PRECONDITION",
            "Changing NOT NULL constraints on column S is not allowed because it affects index TByS.",
        ),
        base=INDEXED,
    ),
    Case("stored, type", [A + "ALTER COLUMN F FLOAT32"], retype("F", "FLOAT64", "FLOAT"), base=INDEXED),
    # ALTER COLUMN: options and defaults
    Case(
        "allow commit timestamps: null",
        [A + "ALTER COLUMN TS SET OPTIONS (allow_commit_timestamp = null)"],
        OK,
    ),
    Case(
        "allow commit timestamps: false",
        [A + "ALTER COLUMN TS SET OPTIONS (allow_commit_timestamp = false)"],
        OK,
    ),
    Case(
        "allow commit timestamps on STRING",
        [A + "ALTER COLUMN S SET OPTIONS (allow_commit_timestamp = true)"],
        commit_timestamp_option("T.S"),
    ),
    Case(
        "unknown column option",
        [A + "ALTER COLUMN TS SET OPTIONS (bogus=true)"],
        call(
            "INVALID_ARGUMENT",
            "Error parsing Spanner DDL statement: ALTER TABLE T ALTER COLUMN TS SET OPTIONS (bogus=true) : "
            "Option: bogus is unknown.",
        ),
    ),
    Case("retype keeps the commit timestamp option", [A + "ALTER COLUMN TS TIMESTAMP NOT NULL"], OK),
    Case("drop a default", [A + "ALTER COLUMN N DROP DEFAULT"], OK),
    # batches
    Case(
        "a refused statement refuses the batch",
        [A + "ADD COLUMN Z INT64", A + "DROP COLUMN Nope"],
        call("NOT_FOUND", "Column not found in table T: Nope"),
    ),
    # indexes
    Case("drop index, then the stored column", ["DROP INDEX TByN", A + "DROP COLUMN F"], OK, base=INDEXED),
    Case("create index if not exists", ["CREATE INDEX IF NOT EXISTS TByS ON T(N)"], OK, base=INDEXED),
    Case(
        "create index named as a table",
        ["CREATE INDEX C ON T(S)"],
        call("FAILED_PRECONDITION", "Duplicate name in schema: C."),
    ),
    Case(
        "create index on a missing column",
        ["CREATE INDEX X ON T(Nope)"],
        call(
            "INVALID_ARGUMENT",
            "Index X specifies key column Nope which does not exist in the index's base table.",
        ),
    ),
    Case(
        "create index on JSON",
        ["CREATE INDEX X ON T(J)"],
        call("FAILED_PRECONDITION", "Cannot reference JSON J in the creation of index X."),
    ),
    Case(
        "create index storing a key",
        ["CREATE INDEX X ON T(S) STORING (K)"],
        call("FAILED_PRECONDITION", "Index X specifies stored column K which is a key of table T."),
    ),
    Case(
        "interleave an index in a non-ancestor",
        ["CREATE TABLE O (OK INT64 NOT NULL) PRIMARY KEY (OK)", "CREATE INDEX X ON C(V), INTERLEAVE IN O"],
        call(
            "FAILED_PRECONDITION",
            "Cannot interleave index X of table C within table O because O is not an ancestor of C.",
        ),
    ),
    Case(
        "interleaved index without the parent key",
        ["CREATE INDEX X ON C(V), INTERLEAVE IN T"],
        call("FAILED_PRECONDITION", "Index X does not reference index parent key column K."),
    ),
    Case("interleaved index", ["CREATE INDEX X ON C(K, K2, V), INTERLEAVE IN T"], OK),
    Case("drop a missing index", ["DROP INDEX Nope"], call("NOT_FOUND", "Index not found: Nope")),
    Case(
        "create a UNIQUE index over duplicates",
        ["CREATE UNIQUE INDEX X ON T(NN)"],
        result("FAILED_PRECONDITION", 'Found uniqueness violation on index X,  duplicate key: {String("x")}'),
        rows=[EMPTY_ROW, {**EMPTY_ROW, "K": 2}],
    ),
    Case(
        "drop a table with an index",
        [
            "CREATE TABLE O (OK INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (OK)",
            "CREATE INDEX OByV ON O(V)",
            "DROP TABLE O",
        ],
        call("FAILED_PRECONDITION", "Cannot drop table O with indices: OByV."),
    ),
    Case(
        "drop a table a stream lists",
        ["DROP TABLE T"],
        call(
            "FAILED_PRECONDITION",
            "Cannot drop table T. Table T is tracked by 1 Change Stream: CS. Tables explicitly tracked by a "
            "Change Stream cannot be dropped. Please drop the Change Stream or modify its FOR clause to stop "
            "tracking the table explicitly before dropping the table.",
        ),
    ),
    Case(
        "drop a table with children",
        [
            "CREATE TABLE P (PK INT64 NOT NULL) PRIMARY KEY (PK)",
            "CREATE TABLE Q (PK INT64 NOT NULL, QK INT64 NOT NULL) PRIMARY KEY (PK, QK), "
            "INTERLEAVE IN PARENT P",
            "DROP TABLE P",
        ],
        call("FAILED_PRECONDITION", "Cannot drop table P with interleaved tables: Q."),
    ),
]


def apply(database: Any, statements: list[str]) -> Outcome:
    """The DDL batch's outcome as a user sees it through the client."""
    try:
        operation = database.update_ddl(statements)
    except exceptions.GoogleAPICallError as error:
        return ("call", error.grpc_status_code.name, message(error))
    try:
        operation.result(60)
    except exceptions.GoogleAPICallError as error:
        return ("result", error.grpc_status_code.name, message(error))
    return OK


def columns(database: Any, table: str) -> list[list[Any]]:
    with database.snapshot() as snapshot:
        return [
            list(row)
            for row in snapshot.execute_sql(
                "SELECT COLUMN_NAME, ORDINAL_POSITION, IS_NULLABLE, SPANNER_TYPE "
                "FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @t "
                "ORDER BY ORDINAL_POSITION",
                params={"t": table},
                param_types={"t": param_types.STRING},
            )
        ]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_schema_change_is_answered_as_google_answers(fresh: Any, case: Case) -> None:
    database = fresh(case.base)
    if case.rows:
        with database.batch() as batch:
            for row in case.rows:
                batch.insert(case.table, columns=list(row), values=[list(row.values())])
    before = columns(database, "T")
    assert apply(database, case.statements) == case.expected
    if case.expected != OK and case.expected[0] == "call":
        assert columns(database, "T") == before, "a refused batch changes nothing"


def test_a_failed_data_check_keeps_the_statements_before_it(fresh: Any) -> None:
    database = fresh(["CREATE TABLE T (K INT64 NOT NULL, S STRING(MAX)) PRIMARY KEY (K)"])
    with database.batch() as batch:
        batch.insert("T", columns=["K", "S"], values=[[2, "hello world"], [1, "abcdefg"], [3, None]])
    operation = database.update_ddl(
        [
            "ALTER TABLE T ADD COLUMN Z2 INT64",
            "ALTER TABLE T ALTER COLUMN S STRING(5)",
            "ALTER TABLE T ADD COLUMN Z3 INT64",
        ]
    )
    with pytest.raises(exceptions.FailedPrecondition) as caught:
        operation.result(60)
    assert ("result", "FAILED_PRECONDITION", message(caught.value)) == shrunk("S", 5, 7, "{Int64(1)}")
    assert len(operation.metadata.commit_timestamps) == 1, "the first statement took effect"
    assert columns(database, "T") == [
        ["K", 1, "NO", "INT64"],
        ["S", 2, "YES", "STRING(MAX)"],
        ["Z2", 3, "YES", "INT64"],
    ]


def test_alter_column_shows_in_information_schema_and_keeps_values(fresh: Any) -> None:
    database = fresh(
        ["CREATE TABLE T (K INT64 NOT NULL, S STRING(MAX), U INT64, Y BYTES(MAX)) PRIMARY KEY (K)"]
    )
    with database.batch() as batch:
        batch.insert("T", columns=["K", "S", "U", "Y"], values=[[1, "東京", 7, base64.b64encode(b"why")]])
    assert (
        apply(
            database,
            [
                "ALTER TABLE T ALTER COLUMN S BYTES(MAX)",
                "ALTER TABLE T ALTER COLUMN Y STRING(3) NOT NULL",
                "ALTER TABLE T DROP COLUMN U",
                "ALTER TABLE T ADD COLUMN U STRING(MAX)",
            ],
        )
        == OK
    )
    assert columns(database, "T") == [
        ["K", 1, "NO", "INT64"],
        ["S", 2, "YES", "BYTES(MAX)"],
        ["Y", 3, "NO", "STRING(3)"],
        ["U", 4, "YES", "STRING(MAX)"],
    ]
    with database.snapshot() as snapshot:
        rows = [list(row) for row in snapshot.execute_sql("SELECT K, S, Y, U FROM T")]
    converted = base64.b64encode("東京".encode())
    assert rows == [[1, converted, "why", None]], "values converted; a re-added column is NULL"


def test_writes_keep_to_declared_lengths_and_unique_indexes(fresh: Any) -> None:
    database = fresh(
        [
            "CREATE TABLE T (K INT64 NOT NULL, S STRING(5), Y BYTES(3), AS3 ARRAY<STRING(3)>) "
            "PRIMARY KEY (K)",
            "CREATE UNIQUE NULL_FILTERED INDEX ByS ON T(S DESC)",
            "CREATE TABLE U (K INT64 NOT NULL, Y BYTES(3)) PRIMARY KEY (K)",
            "CREATE UNIQUE INDEX ByY ON U(Y)",
        ]
    )

    def write(
        operation: str, *rows: list[Any], cols: tuple[str, ...] = ("K", "S"), table: str = "T"
    ) -> Outcome:
        try:
            with database.batch() as batch:
                getattr(batch, operation)(table, columns=list(cols), values=[list(r) for r in rows])
        except exceptions.GoogleAPICallError as error:
            return ("commit", error.grpc_status_code.name, message(error))
        return OK

    def too_long(column: str, size: int, limit: int) -> Outcome:
        return (
            "commit",
            "FAILED_PRECONDITION",
            "New value exceeds the maximum size limit for this column: "
            f"T.{column}, size: {size}, limit: {limit}.",
        )

    assert write("insert", [1, "abcdef"]) == too_long("S", 6, 5)
    assert write("insert", [1, "東京東京東"]) == OK, "STRING(n) counts characters"
    assert write("insert", [2, base64.b64encode(b"1234")], cols=("K", "Y")) == too_long("Y", 4, 3)
    assert write("insert", [3, ["abc", "abcd"]], cols=("K", "AS3")) == too_long("AS3", 4, 3)
    duplicate = 'UNIQUE violation on index ByS,  duplicate key: {String("東京東京東")↓} in this transaction.'
    assert write("insert", [4, "東京東京東"]) == ("commit", "ALREADY_EXISTS", duplicate)
    assert write("insert", [5, None], [6, None]) == OK, "a NULL_FILTERED index leaves NULLs out"
    assert write("update", [5, "a"], [1, "b"]) == OK
    assert write("update", [5, "b"], [1, "a"]) == OK, "a swap within a transaction is no violation"
    assert write("update", [6, "a"]) == (
        "commit",
        "ALREADY_EXISTS",
        'UNIQUE violation on index ByS,  duplicate key: {String("a")↓} in this transaction.',
    )
    assert write("insert", [1, None], cols=("K", "Y"), table="U") == OK
    assert write("insert", [2, None], cols=("K", "Y"), table="U") == (
        "commit",
        "ALREADY_EXISTS",
        "UNIQUE violation on index ByY,  duplicate key: {Bytes(NULL)} in this transaction.",
    ), "a UNIQUE index that is not NULL_FILTERED holds one NULL"
    with database.batch() as batch:
        batch.delete("U", KeySet(keys=[[1]]))
    assert write("insert", [2, None], cols=("K", "Y"), table="U") == OK


def test_a_key_column_turned_to_bytes_keeps_its_rows_and_order(target: Target, fresh: Any) -> None:
    if target.google:
        pytest.skip(
            "Google's emulator accepts the change but then answers every insert into the table with "
            "'already exists' and finds no row by its new key; the project's emulator re-keys the rows"
        )
    database = fresh(LEAF)
    with database.batch() as batch:
        batch.insert("L", columns=["K", "KS", "KN", "V"], values=[[1, "b", "n", "1b"], [1, "a", None, "1a"]])
    assert apply(database, ["ALTER TABLE L ALTER COLUMN KS BYTES(30) NOT NULL"]) == OK
    with database.batch() as batch:
        batch.insert("L", columns=["K", "KS", "KN", "V"], values=[[1, base64.b64encode(b"ab"), None, "1ab"]])
    with database.snapshot(multi_use=True) as snapshot:
        rows = [list(row) for row in snapshot.execute_sql("SELECT KS, V FROM L ORDER BY KS")]
        point = list(snapshot.read("L", ["V"], KeySet(keys=[[1, base64.b64encode(b"b"), "n"]])))
    assert rows == [
        [base64.b64encode(b"a"), "1a"],
        [base64.b64encode(b"ab"), "1ab"],
        [base64.b64encode(b"b"), "1b"],
    ]
    assert point == [["1b"]]
