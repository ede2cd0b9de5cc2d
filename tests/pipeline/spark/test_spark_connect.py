"""Spark Connect without a job: connections, the server's lifecycle checks, an unreachable server."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from support.log_lines import LineLog

from airflow_provider_cdc.placement.connect.jobs import on_this_machine
from airflow_provider_cdc.placement.connect.server import (
    LocalSparkConnectServer,
    SparkConnectServerError,
    free_port,
)
from airflow_provider_cdc.placement.connect.session import (
    SparkConnectUnavailableError,
    connect_url,
    redacted,
)

START, END = "2024-06-01T12:00:00Z", "2024-06-01T12:10:00Z"


def _connection(monkeypatch, conn_id: str, **fields: object) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))
    return conn_id


def test_a_spark_connect_connection_gives_its_uri_and_others_none(monkeypatch) -> None:
    warm = _connection(monkeypatch, "spark_warm", conn_type="spark_connect", host="sc://spark.internal",
                       port=15002, login="etl", password="s3cret", extra={"use_ssl": True})
    url = connect_url(warm)
    assert url is not None and url.startswith("sc://spark.internal:15002/;")
    assert "token=s3cret" in url and "user_id=etl" in url
    assert "s3cret" not in redacted(url) and "token=***" in redacted(url)
    assert connect_url(_connection(monkeypatch, "spark_yarn", conn_type="spark", host="yarn")) is None
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    assert connect_url("spark_default") is None  # the default may be missing: local[*]
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_NOWHERE", raising=False)
    from airflow_provider_cdc._errors import ConnectionNotDefinedError

    refused = "connection 'spark_nowhere' given as conn_id is not defined"
    with pytest.raises(ConnectionNotDefinedError, match=refused):
        connect_url("spark_nowhere")  # a connection named explicitly must exist


def test_only_a_loopback_server_shares_this_disk() -> None:
    assert on_this_machine("sc://127.0.0.1:15002")
    assert on_this_machine("sc://localhost:15002/;user_id=a")
    assert not on_this_machine("sc://spark.internal:15002")


def test_the_upsert_runs_with_the_workers_python_beside_a_spark_connect_server(monkeypatch) -> None:
    from airflow_provider_cdc.placement.spark_submit import connection_master, is_connect
    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    warm = _connection(monkeypatch, "spark_warm", conn_type="spark_connect", host="127.0.0.1", port=15002)
    assert is_connect(connection_master(warm))
    upsert = SparkUpsertWindowOperator(
        task_id="upsert", locations={"changeset_root": "/c", "lake_root": "/l"}, pipeline_id="shop",
        conn_id=warm,
    )
    assert upsert.runs_locally(connection_master(warm))  # delta-rs: nothing to run on the server


def test_a_merge_on_an_unreachable_server_fails_fast_naming_it_without_its_token(
    tmp_path: Path, monkeypatch
) -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator

    port = free_port()  # nothing listens there
    warm = _connection(monkeypatch, "spark_warm", conn_type="spark_connect", host="sc://127.0.0.1",
                       port=port, login="etl", password="s3cret")
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda *a, **k: pytest.fail("spark-submit ran"))
    staging = tmp_path / "staging" / "stream"
    staging.mkdir(parents=True)
    merge = SparkMergeWindowOperator(
        task_id="merge", conn_id=warm, stream_key="projects/p/instances/i/databases/d/stream",
        locations={"staging_root": str(tmp_path / "staging"), "changeset_root": str(tmp_path / "changesets")},
        metastore_conn_id=None, window_start=START, window_end=END,
    )
    began = time.monotonic()
    with pytest.raises(SparkConnectUnavailableError) as failure:
        merge.execute({})
    message = str(failure.value)
    assert f"sc://127.0.0.1:{port}" in message and "s3cret" not in message
    assert "during the merge of window" in message and "retry" in message
    assert time.monotonic() - began < 60
    assert not (tmp_path / "changesets").exists()
    # pyspark's builder marks the process as a Connect client; a later spark-submit must not inherit it
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ and "SPARK_REMOTE" not in os.environ


def test_a_server_is_not_started_on_a_port_another_process_holds(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(SparkConnectServerError, match=f"port {port} is taken"):
            LocalSparkConnectServer(tmp_path).start(port)
    assert LocalSparkConnectServer(tmp_path).state() is None


def test_a_stale_server_record_is_dropped(tmp_path: Path) -> None:
    server = LocalSparkConnectServer(tmp_path)
    server.state_file.write_text(json.dumps({"pid": 2**22 + 12345, "port": 1, "log": "x"}))
    assert server.state() is None and not server.state_file.exists()
    assert server.stop() is False


def test_jobs_with_the_same_artifacts_share_one_session_id_and_the_url_keeps_its_parameters(
    tmp_path: Path,
) -> None:
    from airflow_provider_cdc.placement.connect.session import _with_session_id, shared_session_id

    first, second = tmp_path / "a.zip", tmp_path / "b.zip"
    first.write_bytes(b"domain v1")
    second.write_bytes(b"domain v2")
    shared = shared_session_id([str(first)])
    assert shared == shared_session_id([str(first)])  # another task, another process: the same id
    assert shared != shared_session_id([str(second)])  # other code: other workers
    assert shared != shared_session_id([str(first)], attempt=1)  # after the server closed it
    import uuid

    assert uuid.UUID(shared).version == 4  # what the Spark Connect client accepts
    url = _with_session_id("sc://h:15002/;user_id=etl;token=t;session_id=old", shared)
    assert url == f"sc://h:15002/;user_id=etl;token=t;session_id={shared}"
    assert _with_session_id("sc://h:15002", shared) == f"sc://h:15002/;session_id={shared}"


def test_the_domain_zip_of_the_same_code_is_the_same_bytes(tmp_path: Path, monkeypatch) -> None:
    """What lets every window's merge share one session (and its warm Python workers)."""
    from airflow_provider_cdc.operators.merge import build_domain_zip

    zips = []
    for name, now in (("first", 1_700_000_000.0), ("second", 1_800_000_000.0)):  # built years apart
        monkeypatch.setattr(time, "time", lambda now=now: now)
        (tmp_path / name).mkdir()
        zips.append(Path(build_domain_zip(tmp_path / name)))
    monkeypatch.undo()
    assert zips[0] != zips[1] and zips[0].read_bytes() == zips[1].read_bytes()


@pytest.mark.spark
def test_a_shared_session_the_server_closed_is_followed_by_the_next_id(
    spark_connect_server, tmp_path: Path
) -> None:
    """An idle timeout (here: a release) ends a shared session for good; the next job takes the next id."""
    from airflow_provider_cdc.placement.connect.session import (
        _connect_mode,
        _session,
        _with_session_id,
        remote_session,
        shared_session_id,
    )

    artifact = tmp_path / "cdc_closed_session.zip"
    with __import__("zipfile").ZipFile(artifact, "w") as archive:
        archive.writestr("cdc_closed_session_probe.py", f"VALUE = {time.time_ns()}\n")
    artifacts = [str(artifact)]
    url = spark_connect_server.url
    with remote_session(url, artifacts=artifacts, shared=True) as spark:
        assert spark.client._session_id == shared_session_id(artifacts, 0)
        assert spark.range(3).count() == 3
    with _connect_mode():  # the server forgets the shared session, as after its idle timeout
        closing = _session(_with_session_id(url, shared_session_id(artifacts, 0)))
        closing.release_session_on_close = True
        closing.stop()
    with remote_session(url, artifacts=artifacts, shared=True) as spark:
        assert spark.client._session_id == shared_session_id(artifacts, 1)
        assert spark.range(5).count() == 5


@pytest.mark.spark
def test_a_retry_interrupts_what_a_killed_try_of_its_merge_left_running_on_the_server(
    spark_connect_server, tmp_path: Path
) -> None:
    """A task killed mid-merge leaves its operations running on the server; the retry stops them first,
    and only them: another window's merge in the same shared session goes on."""
    import threading

    from airflow_provider_cdc.operators.merge import build_domain_zip
    from airflow_provider_cdc.placement.connect.jobs import merge_tag, run_merge
    from airflow_provider_cdc.placement.connect.session import remote_session

    artifacts = [str(build_domain_zip(tmp_path))]
    changeset = str(tmp_path / "changesets" / "1717243200000000-1717243800000000")
    manifest_name = "_manifest.pending-2.json"
    arguments = [
        "--staging", str(tmp_path / "staging" / "1717243200000000-1717243800000000"),
        "--changeset", changeset,
        "--window-start", START, "--window-end", END,
        "--manifest-name", manifest_name,
    ]  # fmt: skip
    other_changeset = changeset.replace("1717243200000000", "1717242600000000")
    started = {tag: threading.Event() for tag in (merge_tag(changeset), merge_tag(other_changeset))}
    ended: dict[str, str] = {}

    def long_job(tag: str) -> None:  # a job with a merge's tag, running until it is interrupted
        with remote_session(spark_connect_server.url, artifacts=artifacts, shared=True) as spark:
            spark.registerProgressHandler(lambda **progress: started[tag].set())
            spark.addTag(tag)
            try:
                spark.range(0, 10**13, numPartitions=2).selectExpr("sum(id % 7)").collect()
                ended[tag] = "finished"
            except Exception as error:  # the interrupt reaches the client as an error
                ended[tag] = str(error)

    # what the killed try left on the server, and another window's merge in the same shared session
    threads = {tag: threading.Thread(target=long_job, args=(tag,), daemon=True) for tag in started}
    for tag, thread in threads.items():
        thread.start()
        assert started[tag].wait(300), "a job never started"  # a bound, not a wait
    log = LineLog()
    interrupts: list[Any] = []
    run_merge(spark_connect_server.url, arguments, artifacts=artifacts, storage_options=None, log=log,
              on_interruptible=interrupts.append)  # fmt: skip
    killed, other = threads[merge_tag(changeset)], threads[merge_tag(other_changeset)]
    killed.join(300)
    assert not killed.is_alive(), "the earlier try's job was not interrupted"
    outcome = ended[merge_tag(changeset)]
    assert "OPERATION_CANCELED" in outcome or "interrupt" in outcome.lower(), outcome
    fenced = "Interrupted 1 operation(s) an earlier try of the merge of window"
    assert any(fenced in line for line in log.lines)
    assert other.is_alive(), f"another window's merge was interrupted: {ended}"
    # what on_kill calls while the merge runs, and nothing once it is over
    assert callable(interrupts[0]) and interrupts[-1] is None
    with remote_session(spark_connect_server.url, artifacts=artifacts, shared=True) as spark:
        assert len(spark.interruptTag(merge_tag(other_changeset))) == 1
    other.join(300)
    assert not other.is_alive()
    # jobs that overlapped in threads leave no Connect mode behind (a later spark-submit would fail)
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ
