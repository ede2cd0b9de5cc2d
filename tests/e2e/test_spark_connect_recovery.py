"""A Spark Connect server that dies while a window's merge runs on it: the task fails naming the
server and the window, publishes nothing, and its retry, once the server is back, writes the same
change set a clean run writes."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

from airflow_provider_cdc.core.contract.locations import MANIFEST_NAME
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.merge.files import ArrowFiles
from airflow_provider_cdc.spark_connect.server import LocalSparkConnectServer, free_port
from airflow_provider_cdc.spark_connect.session import SparkConnectUnavailableError
from tests.pipeline.spark.test_merge_job import (
    END,
    START,
    WINDOW_ID,
    read_change_set,
    reference,
    scenario_rows,
    staging_files,
    write_staging,
)

pytestmark = pytest.mark.spark
CONN_ID = "spark_warm"


def _merge_operator(root: Path):
    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator

    return SparkMergeWindowOperator(
        task_id="merge",
        conn_id=CONN_ID,
        locations={"staging_root": str(root / "staging"), "changeset_root": str(root / "changesets")},
        stream_key="projects/p/instances/i/databases/d/stream",
        metastore_conn_id=None,
        window_start=format_timestamp(START),
        window_end=format_timestamp(END),
    )


def test_a_server_that_dies_mid_window_fails_the_merge_and_a_retry_heals_it(
    tmp_path: Path, monkeypatch
) -> None:
    from conftest import spark_connect_connection

    server = LocalSparkConnectServer(tmp_path / "server")
    port = free_port()
    state = server.start(port, master="local[2]")
    try:
        monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", spark_connect_connection(port))
        rows = scenario_rows(random.Random(23))
        write_staging(tmp_path / "staging" / "stream" / WINDOW_ID, staging_files(rows))
        changeset = tmp_path / "changesets" / WINDOW_ID

        # The server is killed (JVM and its Python workers) after the window's checks, just
        # before its change set is written: the job is mid-window.
        delete = ArrowFiles.delete
        killed: list[float] = []

        def kill_server_first(self: ArrowFiles, uri: str) -> None:
            if uri.endswith(MANIFEST_NAME) and not killed:
                os.killpg(state.pid, signal.SIGKILL)
                killed.append(time.monotonic())
            delete(self, uri)

        monkeypatch.setattr(ArrowFiles, "delete", kill_server_first)
        with pytest.raises(SparkConnectUnavailableError) as failure:
            _merge_operator(tmp_path).execute({})
        assert killed, "the merge never reached its write"
        message = str(failure.value)
        assert f"sc://127.0.0.1:{port}" in message and "retry" in message
        assert f"during the merge of window [{format_timestamp(START)}" in message
        assert "UNAVAILABLE" in message  # gRPC's status, not the client's object dump
        assert time.monotonic() - killed[0] < 60  # fails within the client's short retries
        assert not (changeset / MANIFEST_NAME).exists()  # nothing published

        monkeypatch.setattr(ArrowFiles, "delete", delete)
        server.stop()
        server.start(port, master="local[2]")
        _merge_operator(tmp_path).execute({})  # Airflow's retry of the task
        expected = reference(rows)
        got = read_change_set(changeset)
        assert sorted(got) == sorted(expected)
        for table in expected:
            assert got[table] == expected[table], table
        manifest = json.loads((changeset / MANIFEST_NAME).read_text())
        assert manifest["window_id"] == WINDOW_ID
        assert manifest["rows"] == sum(len(table) for table in expected.values())
    finally:
        server.stop()
