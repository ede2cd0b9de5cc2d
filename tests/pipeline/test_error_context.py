"""Errors carry their context: fault codes of the emulator, the retried codes the README lists,
relative local paths, unreadable change sets and failed Delta writes, an unreachable metastore."""

from __future__ import annotations

import json
import os
import re
import socket
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from support.change_sets import END, WINDOW_ID, write_window

from airflow_provider_cdc.core.timestamps import format_timestamp, to_micros
from airflow_provider_cdc.core.window import Window

README = Path(__file__).resolve().parents[2] / "README.md"
FAULT_CODES = [code.name for code in grpc.StatusCode if code is not grpc.StatusCode.OK]
SCHEMA = [
    "CREATE TABLE Items (Id INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE CHANGE STREAM Everything FOR ALL OPTIONS (retention_period = '7d')",
]
PASSWORD = "s3cr3t-pa55"


# ----- the emulator's injected faults -----------------------------------------------------------
@pytest.fixture(scope="module")
def fault_database(spanner_emulator: Any, new_spanner_database: Any) -> tuple[Any, datetime]:
    """A database with a stream and a change, and a time after the stream's creation."""
    database = new_spanner_database(SCHEMA, prefix="faults")
    start = spanner_emulator.clock.advance(timedelta(milliseconds=1))
    with database.batch() as batch:
        batch.insert("Items", ["Id", "Name"], [[i, f"item {i}"] for i in range(3)])
    spanner_emulator.clock.advance(timedelta(seconds=2))
    return database, start


def _initial_query(database: Any, start: datetime) -> list[Any]:
    sql = (
        "SELECT ChangeRecord FROM READ_Everything(start_timestamp => @start, end_timestamp => @end, "
        "partition_token => NULL, heartbeat_milliseconds => 10000)"
    )
    with database.snapshot() as snapshot:
        return list(snapshot.execute_sql(sql, params={"start": start, "end": start + timedelta(seconds=1)}))


@pytest.mark.parametrize("name", FAULT_CODES)
def test_every_grpc_status_code_can_be_injected(
    name: str, spanner_emulator: Any, fault_database: tuple[Any, datetime]
) -> None:
    from google.api_core import exceptions as gexc

    fault_database, start = fault_database
    spanner_emulator.inject_stream_faults(count=1, code=name.lower(), after_rows=0)
    try:
        if name == "UNAVAILABLE":  # the client resumes it from the last resume token
            assert _initial_query(fault_database, start)
            return
        with pytest.raises(gexc.GoogleAPICallError) as caught:
            _initial_query(fault_database, start)
        assert caught.value.grpc_status_code is grpc.StatusCode[name]
        assert "injected fault" in str(caught.value)
    finally:
        spanner_emulator.inject_stream_faults(count=0)
    assert _initial_query(fault_database, start), "the fault is used up"


@pytest.mark.parametrize("code", ["OK", "NOT_A_CODE", "404"])
def test_an_unknown_fault_code_is_refused_listing_the_codes(code: str, spanner_emulator: Any) -> None:
    with pytest.raises(ValueError) as caught:
        spanner_emulator.inject_stream_faults(code=code)
    assert repr(code) in str(caught.value) and "RESOURCE_EXHAUSTED" in str(caught.value)


def test_readme_lists_exactly_the_codes_the_reader_retries() -> None:
    from airflow_provider_cdc.sources.spanner.window_reader import RETRYABLE

    text = " ".join(README.read_text().split())
    match = re.search(r"\)\. ((?:`[A-Z_]+`,? (?:and )?)+)are retried from the last record received", text)
    assert match, "README describes the retried codes"
    listed = set(re.findall(r"`([A-Z_]+)`", match.group(1)))
    assert listed == {error.grpc_status_code.name for error in RETRYABLE}


# ----- relative local paths ---------------------------------------------------------------------
def _expect_relative_refused(call: Any, field: str, value: str) -> None:
    from airflow_provider_cdc._compat import AirflowFailException

    with pytest.raises(AirflowFailException) as caught:
        call()
    message = str(caught.value)
    assert f"{field} {value!r} is a relative path" in message, message
    assert repr(os.path.abspath(value)) in message, message


def test_read_path_operators_refuse_a_relative_staging_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_cdc.sources.spanner.change_stream_operators import (
        SpannerChangeStreamOpenWindowOperator,
        SpannerChangeStreamReadWindowOperator,
    )

    monkeypatch.chdir(tmp_path)
    fields = dict(
        project_id="test-project", instance_id="test-instance", database_id="db1", stream="Everything",
        staging_root="cdc/staging", window_start="2026-01-01T00:00:00Z", window_end="2026-01-01T00:10:00Z",
    )
    context = {"ti": SimpleNamespace(dag_id="cdc", run_id="r", task_id="t", map_index=0)}
    reader = SpannerChangeStreamReadWindowOperator(task_id="t", **fields)
    _expect_relative_refused(lambda: reader.execute(context), "staging_root", "cdc/staging")
    # The open step's preflight refuses it before anything is recorded, naming the setting and the fix.
    from airflow_provider_cdc.preflight import PreflightFailure

    with pytest.raises(PreflightFailure) as caught:
        SpannerChangeStreamOpenWindowOperator(task_id="t", **fields).execute(context)
    message = str(caught.value)
    assert "staging_root of task t: 'cdc/staging' is a relative path" in message, message
    assert f"Fix: give an absolute path such as {os.path.abspath('cdc/staging')!r}" in message, message
    assert not (tmp_path / "cdc").exists()


def test_apply_path_operators_refuse_relative_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator
    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    monkeypatch.chdir(tmp_path)
    window = {"window_start": "2026-01-01T00:00:00Z", "window_end": "2026-01-01T00:10:00Z"}
    context: dict[str, Any] = {
        "data_interval_start": datetime(2026, 1, 1, tzinfo=timezone.utc),
        "data_interval_end": datetime(2026, 1, 1, 0, 10, tzinfo=timezone.utc),
        "ti": SimpleNamespace(dag_id="cdc"),
    }
    key = "projects/p/instances/i/databases/d/s"
    merge = SparkMergeWindowOperator(
        task_id="m", locations={"staging_root": "staging", "changeset_root": "/abs/c"}, stream_key=key,
        **window,
    )
    _expect_relative_refused(lambda: merge.execute(context), "locations['staging_root']", "staging")
    merge = SparkMergeWindowOperator(
        task_id="m", locations={"staging_root": "gs://b/s", "changeset_root": "changesets"}, stream_key=key,
        **window,
    )
    _expect_relative_refused(lambda: merge.execute(context), "locations['changeset_root']", "changesets")
    upsert = SparkUpsertWindowOperator(
        task_id="u", locations={"lake_root": "lake", "changeset_root": "/c"}, pipeline_id="p", **window
    )
    _expect_relative_refused(lambda: upsert.execute(context), "locations['lake_root']", "lake")
    upsert = SparkUpsertWindowOperator(
        task_id="u", locations={"lake_root": "gs://b/l", "changeset_root": "./cs"}, pipeline_id="p", **window
    )
    _expect_relative_refused(lambda: upsert.execute(context), "locations['changeset_root']", "./cs")
    commit = CdcCommitWindowOperator(
        task_id="c", pipeline_id="p", locations={"changeset_root": "cs"}, **window
    )
    _expect_relative_refused(lambda: commit.execute(context), "locations['changeset_root']", "cs")
    commit = CdcCommitWindowOperator(
        task_id="c", pipeline_id="p", locations={"changeset_root": "/cs", "lake_root": "lk"}, **window
    )
    _expect_relative_refused(lambda: commit.execute(context), "locations['lake_root']", "lk")
    # absolute paths and URIs pass the check
    merge = SparkMergeWindowOperator(
        task_id="m", locations={"staging_root": "/s", "changeset_root": "gs://b/c"}, stream_key=key, **window
    )
    assert merge.merge_arguments()[1].startswith("/s/s/")


# ----- the upsert job: unreadable change sets, failed Delta writes --------------------------------
def _corrupt_pages(path: Path) -> None:
    """Flip bytes in the column data, keeping the footer: the file opens, its pages do not decode."""
    data = bytearray(path.read_bytes())
    for i in range(8, min(len(data) - 200, 400)):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def _job_error(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    from airflow_provider_cdc.targets.delta import upsert_job

    code = upsert_job.main(list(args))
    assert code == 2
    return json.loads(capsys.readouterr().err.strip().splitlines()[-1])


def test_a_corrupt_part_after_another_table_committed_names_window_table_and_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from deltalake import DeltaTable

    from airflow_provider_cdc.targets.delta import upsert_job
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

    changeset = write_window(tmp_path / "changesets")
    part = next((changeset / "table=Orders").glob("*.parquet"))
    _corrupt_pages(part)
    lake = tmp_path / "lake"
    error = _job_error(capsys, "--changeset", str(changeset), "--lake-root", str(lake), "--pipeline-id", "p")
    message = error["message"]
    assert error["error"] == "ApplyError"
    assert f"window {WINDOW_ID}" in message and "table 'Orders'" in message and repr(str(part)) in message
    assert "tables applied before it in this run: Customers" in message
    # Customers (applied first) holds the window; Orders was not touched
    assert DeltaLakeTarget(str(lake)).applied_window_version("Customers", "p") == to_micros(END)
    assert not (lake / "Orders").exists()
    with pytest.raises(upsert_job.ApplyError) as caught:
        upsert_job.run(str(changeset), str(lake), "p", None)
    assert isinstance(caught.value.__cause__, OSError)
    assert "no table was applied in this run" in str(caught.value)  # Customers is skipped as applied
    assert DeltaTable(str(lake / "Customers")).version() == 0


def test_a_corrupt_footer_is_refused_before_anything_is_applied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changeset = write_window(tmp_path / "changesets")
    part = next((changeset / "table=Orders").glob("*.parquet"))
    part.write_bytes(part.read_bytes()[:-12])  # truncated: no footer
    lake = tmp_path / "lake"
    error = _job_error(capsys, "--changeset", str(changeset), "--lake-root", str(lake), "--pipeline-id", "p")
    assert error["error"] == "ChangeSetError"
    assert WINDOW_ID in error["message"] and "table 'Orders'" in error["message"], error
    assert repr(str(part)) in error["message"], error
    assert not lake.exists()


def test_an_os_error_of_delta_rs_names_window_table_and_delta_location(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from deltalake.exceptions import DeltaError

    from airflow_provider_cdc.targets.delta import upsert_job

    changeset = write_window(tmp_path / "changesets")
    (tmp_path / "not-a-folder").write_text("a file where the lake's folder would be")
    lake = tmp_path / "not-a-folder" / "lake"
    error = _job_error(capsys, "--changeset", str(changeset), "--lake-root", str(lake), "--pipeline-id", "p")
    message = error["message"]
    assert f"window {WINDOW_ID}" in message and "table 'Customers'" in message, message
    assert f"writing Delta table {str(lake / 'Customers')!r} failed" in message, message
    with pytest.raises(upsert_job.ApplyError) as caught:
        upsert_job.run(str(changeset), str(lake), "p", None)
    assert isinstance(caught.value.__cause__, (OSError, DeltaError))


# ----- an unreachable metastore -----------------------------------------------------------------
@pytest.fixture
def unreachable_metastore(monkeypatch: pytest.MonkeyPatch) -> str:
    """The default metastore connection points at a PostgreSQL port nothing listens on (with a password)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql+psycopg2://cdc:{PASSWORD}@127.0.0.1:{port}/metastore"
    monkeypatch.setenv(
        "AIRFLOW_CONN_CDC_METASTORE_DEFAULT",
        json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": url}}),
    )
    return url


def _expect_metastore_failure(call: Any, *parts: str) -> None:
    from sqlalchemy.exc import OperationalError

    from airflow_provider_cdc._errors import MetastoreUnavailableError

    with pytest.raises(MetastoreUnavailableError) as caught:
        call()
    message = str(caught.value)
    for part in parts:
        assert part in message, message
    assert "the metastore failed (OperationalError: connection to server at" in message, message
    assert PASSWORD not in message
    assert isinstance(caught.value.__cause__, OperationalError)


def test_metastore_failures_name_the_window_and_operation(
    unreachable_metastore: str, spanner_emulator: Any, new_spanner_database: Any,
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator
    from airflow_provider_cdc.sensors.partitions_drained import SpannerChangeStreamPartitionsDrainedSensor
    from airflow_provider_cdc.sources.spanner.change_stream_operators import (
        SpannerChangeStreamOpenWindowOperator,
        SpannerChangeStreamReadWindowOperator,
    )
    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    database = new_spanner_database(SCHEMA, prefix="metastore")
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", spanner_emulator.host)
    start = spanner_emulator.clock.now()
    window = Window(start, start + timedelta(minutes=1))
    fields = dict(
        project_id="test-project", instance_id="test-instance", database_id=database.database_id,
        stream="Everything", staging_root=str(tmp_path), window_start=window.start, window_end=window.end,
        pipeline_id="orders",
    )
    context = {"ti": SimpleNamespace(dag_id="cdc", run_id="r", task_id="t", map_index=0)}
    opener = SpannerChangeStreamOpenWindowOperator(task_id="open", **fields)
    _expect_metastore_failure(lambda: opener.execute(context), f"window {window} of pipeline 'orders'")
    reader = SpannerChangeStreamReadWindowOperator(task_id="read", **fields)
    _expect_metastore_failure(lambda: reader.execute(context), f"window {window}: reading it")
    sensor = SpannerChangeStreamPartitionsDrainedSensor(
        task_id="drained", project_id="test-project", instance_id="test-instance",
        database_id=database.database_id, stream="Everything", timestamp=window.end,
        window_start=window.start, window_end=window.end,
    )
    _expect_metastore_failure(lambda: sensor.poke({}), f"window {window}: checking which partitions")
    interval = {"data_interval_start": window.start, "data_interval_end": window.end}
    upsert = SparkUpsertWindowOperator(
        task_id="upsert", locations={"lake_root": str(tmp_path / "lake"), "changeset_root": str(tmp_path)},
        pipeline_id="orders", window_start=window.start, window_end=window.end,
    )
    _expect_metastore_failure(lambda: upsert.execute(interval), f"window {window} of pipeline 'orders'")
    commit = CdcCommitWindowOperator(
        task_id="commit", pipeline_id="orders", window_start=window.start, window_end=window.end
    )
    _expect_metastore_failure(lambda: commit.execute(context), "committing the window")
    merge = SparkMergeWindowOperator(
        task_id="merge",
        locations={"staging_root": f"{tmp_path}/staging", "changeset_root": f"{tmp_path}/cs"},
        window_start=format_timestamp(window.start), window_end=format_timestamp(window.end),
        stream_key="projects/p/instances/i/databases/d/Everything",
    )
    _expect_metastore_failure(
        lambda: merge.execute(context), f"window {window} of projects/p/instances/i/databases/d"
    )


def test_credentials_are_removed_from_metastore_messages() -> None:
    from airflow_provider_cdc._errors import redact

    assert redact(f"could not use postgresql://cdc:{PASSWORD}@db:5432/m") == "could not use postgresql://cdc:***@db:5432/m"
    assert PASSWORD not in redact(f"host=db user=cdc password={PASSWORD} dbname=m")
