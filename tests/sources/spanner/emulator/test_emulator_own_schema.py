"""A user's own schema: ``cdc-spanner-emulator --ddl schema.sql --database shop`` started as a user starts it,
written to through the real client, its manual clock moved by ``cdc-spanner-emulator clock``, a schema change
rehearsed, and a change-stream window read back through the client, without waiting on real time.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions
from table_targets import message

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, parse_timestamp
from airflow_provider_cdc.testing.emulator_client import emulator_client
from airflow_provider_cdc.testing.lineage_walk import walk_lineage
from airflow_provider_cdc.testing.spanner_emulator.admin import parse_clock_duration
from airflow_provider_cdc.testing.spanner_emulator.ddl import DdlError, split_statements

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
SCHEMA = """\
-- The shop: the statements gcloud spanner databases create --ddl-file would take.
CREATE TABLE Customers (
  CustomerId INT64 NOT NULL,
  Name STRING(100),  # as shown on invoices
) PRIMARY KEY (CustomerId);

/* Orders live with their customer; a ';' in a comment ends nothing. */
CREATE TABLE Orders (
  CustomerId INT64 NOT NULL,
  OrderId INT64 NOT NULL,
  Note STRING(MAX),
  UpdatedAt TIMESTAMP OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (CustomerId, OrderId),
  INTERLEAVE IN PARENT Customers ON DELETE CASCADE;

CREATE INDEX OrdersByNote ON Orders(Note);
CREATE CHANGE STREAM ShopChanges FOR ALL OPTIONS (retention_period = '7d');
"""


def command() -> list[str]:
    """The installed ``cdc-spanner-emulator`` script (``python -m`` where it is not installed)."""
    script = Path(sys.executable).with_name("cdc-spanner-emulator")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "airflow_provider_cdc.testing.spanner_emulator"]


class Emulator:
    """A running ``cdc-spanner-emulator`` and what it printed on start."""

    def __init__(self, args: list[str]) -> None:
        self.process = subprocess.Popen(
            [*command(), "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        assert self.process.stdout is not None
        for line in self.process.stdout:  # the connection help, ending with the clock's line
            self.lines.append(line.rstrip("\n"))
            if line.startswith(("  manual clock", "  wall clock")):
                break
        assert self.lines, (
            f"the emulator printed nothing: {self.process.stderr.read() if self.process.stderr else ''}"
        )
        self.host = next(line.split("=", 1)[1] for line in self.lines if "SPANNER_EMULATOR_HOST=" in line)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def start() -> Iterator[Any]:
    started: list[Emulator] = []

    def run(*args: str) -> Emulator:
        emulator = Emulator(list(args))
        started.append(emulator)
        return emulator

    yield run
    for emulator in started:
        emulator.stop()


def clock(host: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``cdc-spanner-emulator clock --host HOST <args>``, as a user runs it."""
    return subprocess.run(
        [*command(), "clock", "--host", host, *args], capture_output=True, text=True, timeout=30, check=False
    )


def moved(host: str, *args: str) -> datetime:
    """Move (or read) the clock through the command; the time it prints."""
    done = clock(host, *args)
    assert done.returncode == 0, done.stderr
    return parse_timestamp(done.stdout.strip())


@pytest.fixture
def schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "schema.sql"
    path.write_text(SCHEMA)
    return path


def test_own_schema_clock_command_and_a_window(start: Any, schema_file: Path) -> None:
    emulator = start(
        "--ddl", str(schema_file), "--database", "shop", "--project", "acme", "--instance", "shop-instance",
        "--clock", "manual", "--start", "2026-01-01T00:00:00Z",
    )  # fmt: skip
    host = emulator.host
    assert f"  export SPANNER_EMULATOR_HOST={host}" in emulator.lines
    assert (
        "  project acme, instance shop-instance, database shop (2 tables, 1 change stream)" in emulator.lines
    )
    database = emulator_client(host, "acme").instance("shop-instance").database("shop")
    with database.snapshot() as snapshot:
        tables = list(
            snapshot.execute_sql("SELECT TABLE_NAME FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = ''")
        )
    assert sorted(row[0] for row in tables) == ["Customers", "Orders"]

    schema_time = moved(host, "show")
    assert START < schema_time < START + timedelta(seconds=1), "the DDL took the clock's first microseconds"
    first = moved(host, "advance", "1m")
    assert first == schema_time + timedelta(minutes=1)
    with database.batch() as batch:
        batch.insert("Customers", columns=["CustomerId", "Name"], values=[[1, "Ada"]])
        batch.insert(
            "Orders",
            columns=["CustomerId", "OrderId", "Note", "UpdatedAt"],
            values=[[1, 10, "gift", "spanner.commit_timestamp()"]],
        )
    assert batch.committed == first + ONE_MICROSECOND, "a commit takes the clock's time"

    # Rehearse a schema change: the index stands in the way, then the column goes.
    with pytest.raises(exceptions.FailedPrecondition) as refused:
        database.update_ddl(["ALTER TABLE Orders DROP COLUMN Note"])
    assert message(refused.value) == (
        "Cannot drop column Note from table Orders because it is used by index OrdersByNote."
    )
    database.update_ddl(["DROP INDEX OrdersByNote", "ALTER TABLE Orders DROP COLUMN Note"]).result(30)

    second = moved(host, "set", "2026-01-01T00:05:00Z")
    assert second == START + timedelta(minutes=5)
    with database.batch() as batch:
        batch.update(
            "Orders",
            columns=["CustomerId", "OrderId", "UpdatedAt"],
            values=[[1, 10, "spanner.commit_timestamp()"]],
        )
    assert batch.committed == second + ONE_MICROSECOND

    backwards = clock(host, "set", "2026-01-01T00:01:00Z")
    assert backwards.returncode == 1 and "cannot move backwards" in backwards.stderr

    # A window that ends ten minutes in: read while the clock is short of it, done once the clock gets there.
    window_end = START + timedelta(minutes=10)
    reads: list[Any] = []
    reader = threading.Thread(
        target=lambda: reads.extend(walk_lineage(database, "ShopChanges", schema_time, window_end))
    )
    reader.start()
    assert moved(host, "advance", "5m") >= window_end
    reader.join(timeout=60)
    assert not reader.is_alive(), "the window ended when the clock reached its end"
    changes = sorted(
        (record.commit_timestamp, record.table_name, record.mod_type.value, mod.keys, mod.new_values)
        for read in reads
        for record in read.data_records
        for mod in record.mods
    )
    first_commit, second_commit = first + ONE_MICROSECOND, second + ONE_MICROSECOND
    stamp = first_commit.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert changes == [
        (first_commit, "Customers", "INSERT", {"CustomerId": "1"}, {"Name": "Ada"}),
        (
            first_commit,
            "Orders",
            "INSERT",
            {"CustomerId": "1", "OrderId": "10"},
            {"Note": "gift", "UpdatedAt": stamp},
        ),
        (
            second_commit,
            "Orders",
            "UPDATE",
            {"CustomerId": "1", "OrderId": "10"},
            {"UpdatedAt": second_commit.strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
        ),
    ]


@pytest.mark.parametrize(
    ("ddl", "refusal"),
    [
        (
            "CREATE TABLE A (K INT64 NOT NULL) PRIMARY KEY (K);\n\nALTER TABLE A DROP COLUMN K;",
            ":3: statement 2 refused (INVALID_ARGUMENT): Cannot drop key column K from table A.\n"
            "  ALTER TABLE A DROP COLUMN K",
        ),
        (
            "CREATE TABLE A (\n  K INT64 NOT NULL,\n  S STRING(MAX) OPTIONS (allow_commit_timestamp = true)\n"
            ") PRIMARY KEY (K);",
            ":1: statement 1 refused (FAILED_PRECONDITION): Column A.S has invalid allow_commit_timestamp "
            "option.  Option only allowed on TIMESTAMP columns.\n"
            "  CREATE TABLE A ( K INT64 NOT NULL, S STRING(MAX) OPTIONS (allow_commit_timestamp = true) ) "
            "PRIMARY KEY (K)",
        ),
        (
            "CREATE TABLE A (K INT64 NOT NULL) PRIMARY KEY (K);\n"
            "CREATE VIEW V SQL SECURITY INVOKER AS SELECT K FROM A;",
            ":2: statement 2 refused (INVALID_ARGUMENT): unsupported DDL statement:",
        ),
        ("CREATE TABLE A (K INT64 NOT NULL) PRIMARY KEY (K); /* never closed", ": unterminated /* comment"),
    ],
    ids=["schema", "column option", "unsupported", "syntax"],
)
def test_a_bad_statement_is_refused_at_start(tmp_path: Path, ddl: str, refusal: str) -> None:
    path = tmp_path / "schema.sql"
    path.write_text(ddl)
    done = subprocess.run(
        [*command(), "--port", "0", "--ddl", str(path), "--database", "shop"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == "", "nothing served"
    assert done.stderr.startswith(f"error: {path}"), done.stderr
    assert refusal in done.stderr


def test_an_empty_database_on_the_wall_clock_cannot_be_moved(start: Any) -> None:
    emulator = start("--database", "scratch")
    assert (
        "  project test-project, instance test-instance, database scratch (0 tables, 0 change streams)"
        in (emulator.lines)
    )
    before = datetime.now(timezone.utc)
    assert before - timedelta(seconds=5) <= moved(emulator.host, "show") <= datetime.now(timezone.utc)
    refused = clock(emulator.host, "advance", "10m")
    assert refused.returncode == 1
    assert "FAILED_PRECONDITION: the emulator runs on the wall clock, which cannot be moved" in refused.stderr


def test_a_bad_database_id_is_refused_as_spanner_refuses_it() -> None:
    done = subprocess.run(
        [*command(), "--port", "0", "--database", "Shop"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "Invalid database name. Database name must start with a lowercase letter" in done.stderr


def test_a_ddl_file_splits_as_gcloud_reads_it() -> None:
    text = (
        "-- header; not a statement\n"
        "CREATE TABLE A (K INT64 NOT NULL, S STRING(MAX)) PRIMARY KEY (K);  # trailing\n"
        "/* a block\n   ; comment */ CREATE CHANGE STREAM `S;x` FOR A OPTIONS (retention_period = '1d');\n"
        "ALTER TABLE A ADD COLUMN T STRING(MAX)\n"
        "  -- between lines\n"
        ";\n;\n"
    )
    assert split_statements(text) == [
        (2, "CREATE TABLE A (K INT64 NOT NULL, S STRING(MAX)) PRIMARY KEY (K)"),
        (4, "CREATE CHANGE STREAM `S;x` FOR A OPTIONS (retention_period = '1d')"),
        (5, "ALTER TABLE A ADD COLUMN T STRING(MAX)"),
    ]
    with pytest.raises(DdlError, match="unterminated quoted text starting on line 1"):
        split_statements("CREATE TABLE 'A")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10m", timedelta(minutes=10)), ("1h30m", timedelta(minutes=90)), ("1.5s", timedelta(seconds=1.5)),
     ("250ms", timedelta(milliseconds=250)), ("2d", timedelta(days=2)), ("0s", timedelta(0))],
)  # fmt: skip
def test_clock_durations(text: str, expected: timedelta) -> None:
    assert parse_clock_duration(text) == expected


@pytest.mark.parametrize("text", ["", "10", "-5m", "5 minutes", "m10"])
def test_bad_clock_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_clock_duration(text)
