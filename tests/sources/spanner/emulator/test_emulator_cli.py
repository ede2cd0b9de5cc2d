"""``python -m airflow_provider_cdc.testing.spanner_emulator`` serves the real client."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND
from airflow_provider_cdc.testing.lineage_walk import walk_lineage
from airflow_provider_cdc.testing.workload import (
    ALL_CHANGES_STREAM,
    TABLES_BY_NAME,
    ExpectedMod,
    Workload,
    schema_ddl,
)

MANUAL_START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_serving(process: subprocess.Popen, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            _, stderr = process.communicate()
            raise AssertionError(f"the emulator exited with {process.returncode}: {stderr}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"the emulator did not listen on port {port} within {timeout} s")


@pytest.fixture
def run_cli() -> Iterator:
    processes: list[subprocess.Popen] = []

    def run(*flags: str) -> str:
        port = _free_port()
        command = [
            sys.executable,
            "-m",
            "airflow_provider_cdc.testing.spanner_emulator",
            "--port",
            str(port),
            *flags,
        ]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        processes.append(process)
        _wait_until_serving(process, port)
        return f"127.0.0.1:{port}"

    yield run
    for process in processes:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _write_and_read(instance: Any, wall_clock: bool) -> tuple[datetime, list]:
    """Create a database through the client, commit three rows and walk the stream up to the commit.

    The walk starts at the wall-clock time right after the database (and its stream) exist, or,
    on a manual clock that the client cannot read, at the commit timestamp itself.
    """
    database = instance.database(
        "clidb",
        ddl_statements=[
            "CREATE TABLE Singers (SingerId INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (SingerId)",
            "CREATE CHANGE STREAM Everything FOR ALL",
        ],
    )
    database.create().result(30)
    start = datetime.now(timezone.utc) if wall_clock else None
    time.sleep(0.01)
    with database.batch() as batch:
        batch.insert("Singers", columns=["SingerId", "Name"], values=[[1, "Ada"], [2, "Bo"], [3, "Cy"]])
    committed = batch.committed
    reads = walk_lineage(database, "Everything", start or committed, committed + ONE_MICROSECOND)
    return committed, reads


def test_cli_with_a_manual_clock_serves_the_client(run_cli, emulator_instance: Any) -> None:
    host = run_cli(
        "--clock", "manual", "--start", "2026-01-01T00:00:00Z", "--seed", "3", "--initial-partitions", "3"
    )
    committed, reads = _write_and_read(emulator_instance(host), wall_clock=False)
    assert MANUAL_START <= committed < MANUAL_START + timedelta(seconds=1), (
        "time stands still on a manual clock"
    )
    initial = reads[0]
    assert sum(len(record.child_partitions) for record in initial.child_records) == 3
    mods = [
        (record.mod_type.value, mod.keys, mod.new_values)
        for read in reads
        for record in read.data_records
        for mod in record.mods
    ]
    assert sorted(mods, key=lambda m: m[1]["SingerId"]) == [
        ("INSERT", {"SingerId": "1"}, {"Name": "Ada"}),
        ("INSERT", {"SingerId": "2"}, {"Name": "Bo"}),
        ("INSERT", {"SingerId": "3"}, {"Name": "Cy"}),
    ]


def test_cli_with_the_wall_clock_and_a_port_file(run_cli, emulator_instance: Any, tmp_path: Path) -> None:
    port_file = tmp_path / "emulator.addr"
    host = run_cli("--port-file", str(port_file))
    deadline = time.monotonic() + 10
    while not port_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert port_file.read_text().strip() == host
    before = datetime.now(timezone.utc)
    committed, reads = _write_and_read(emulator_instance(host), wall_clock=True)
    assert before - timedelta(seconds=5) <= committed <= datetime.now(timezone.utc)
    assert sum(len(record.mods) for read in reads for record in read.data_records) == 3


def test_workload_without_emulator_control_on_the_wall_clock(run_cli, emulator_instance: Any) -> None:
    """A workload without clock control (as against real Spanner) still records exact ground truth."""
    instance = emulator_instance(run_cli("--initial-partitions", "2"))
    database = instance.database("workload", ddl_statements=schema_ddl())
    database.create().result(30)
    start = datetime.now(timezone.utc)
    time.sleep(0.01)
    workload = Workload(database, None, seed=4)
    summary = workload.run(changes=300)
    assert summary.changes == 300 and summary.splits == 0
    reads = walk_lineage(database, ALL_CHANGES_STREAM, start, datetime.now(timezone.utc))

    def order(item: tuple[datetime, ExpectedMod]) -> tuple:
        return (item[0], item[1].table, repr(item[1].key))

    seen = []
    for read in reads:
        for record in read.data_records:
            table = TABLES_BY_NAME[record.table_name]
            for mod in record.mods:
                decoded = ExpectedMod(
                    record.table_name,
                    record.mod_type.value,
                    table.decode_values(mod.keys),
                    table.decode_values(mod.new_values),
                    table.decode_values(mod.old_values),
                )
                seen.append((record.commit_timestamp, decoded))
    expected = [(t.commit_timestamp, mod) for t in workload.transactions for mod in t.mods]
    assert sorted(seen, key=order) == sorted(expected, key=order)
