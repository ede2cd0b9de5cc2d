"""``explain`` and ``pipelines`` as an operator runs them (``python -m airflow_provider_cdc``), on a
metastore holding a window whose commit really failed (its change set is missing), the window after it
waiting on it with units leased, expired and never claimed, and another pipeline's applied window.
A step's failure is kept on its window (first lines, credentials redacted) and cleared by a later try
that succeeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore, PartitionSpec, WindowState

PIPELINE = "shop"
STREAM = "projects/p/instances/i/databases/d/OrdersStream"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
LENGTH = timedelta(minutes=10)
FIRST, SECOND = Window(T0, T0 + LENGTH), Window(T0 + LENGTH, T0 + 2 * LENGTH)
DAG_FILE = """
try:
    from airflow.sdk import DAG
except ImportError:
    from airflow import DAG
try:
    from airflow.providers.standard.operators.empty import EmptyOperator
except ImportError:
    from airflow.operators.empty import EmptyOperator

with DAG("shop_to_lake", schedule=None, params={"pipeline_id": "shop"}):
    EmptyOperator(task_id="noop")
"""


def _connection(url: str) -> str:
    return json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": url}})


def _context(task_id: str, run_id: str, *, try_number: int = 1, map_index: int = -1) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id=PIPELINE, run_id=run_id, task_id=task_id, map_index=map_index,
                         try_number=try_number, xcom_push=lambda key, value: None)  # fmt: skip
    return {"ti": ti}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A metastore file with the windows above, an Airflow home whose DAG folder runs pipeline shop, and
    the environment the command runs in."""
    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator

    url = f"sqlite:///{tmp_path / 'cdc_metastore.db'}"
    monkeypatch.setenv("AIRFLOW_CONN_CDC_EXPLAINED", _connection(url))
    store = Metastore(url)
    store.create_schema()
    store.record_pipeline(PIPELINE, T0)
    store.open_window(PIPELINE, STREAM, FIRST.start, FIRST.end)
    # the first window's commit runs while its change set is missing: the step fails and keeps why
    (tmp_path / "changesets").mkdir()
    commit = CdcCommitWindowOperator(
        task_id="commit", pipeline_id=PIPELINE, window_start=FIRST.start, window_end=FIRST.end, epoch=1,
        locations={"changeset_root": str(tmp_path / "changesets")}, metastore_conn_id="cdc_explained",
    )  # fmt: skip
    with pytest.raises(Exception, match="has no _manifest.json"):
        commit.execute(_context("commit", "scheduled__2026-03-01T12:00:00+00:00"))
    # the next window is opened and read by three readers: one reads, one's lease expired, one never ran
    store.open_window(PIPELINE, STREAM, SECOND.start, SECOND.end)
    store.add_partitions(STREAM, [PartitionSpec(token, T0) for token in ("tokA", "tokB", "tokC")])
    store.add_window_partitions(STREAM, SECOND.start, SECOND.end, ["tokA", "tokB", "tokC"])
    run = "scheduled__2026-03-01T12:10:00+00:00"
    for reader, lease, token in ((0, 600, "tokA"), (1, 0.001, "tokB")):
        owner = f"shop/{run}/read/{reader}"
        assert store.claim_window_partition(STREAM, SECOND.start, SECOND.end, owner, lease) == token
    # another pipeline with a window applied
    store.record_pipeline("orders", T0)
    store.open_window("orders", "datastream/local/data/orders", FIRST.start, FIRST.end)
    store.transition_window("orders", FIRST.start, FIRST.end, "reading", "applied", record_count=7)
    store.advance_table_watermark("orders", "Orders", FIRST.end, target="delta")
    store.dispose()
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "shop_to_lake.py").write_text(DAG_FILE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CDC_", "SPANNER_EMULATOR"))}
    env.update(AIRFLOW_HOME=str(tmp_path / "airflow"), AIRFLOW__CORE__DAGS_FOLDER=str(dags),
               AIRFLOW__CORE__LOAD_EXAMPLES="False")  # fmt: skip
    return {"env": env, "cwd": tmp_path, "url": url}


def _cli(home: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_cdc", *args, "--metastore-url", home["url"]],
        env=home["env"], cwd=home["cwd"], capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_explain_names_why_a_window_failed_and_what_to_do(home: dict[str, Any]) -> None:
    done = _cli(home, "explain", "--pipeline", PIPELINE, "--window", "2026-03-01T12:00:00Z")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr[-3000:]
    lines = out.splitlines()
    assert lines[0] == (
        "Window [2026-03-01T12:00:00.000000Z, 2026-03-01T12:10:00.000000Z) of pipeline shop "
        f"(window id {FIRST.window_id}): FAILED"
    ), out
    assert "  state reading, epoch 1, opened " in out and f"  source {STREAM}" in out
    failure = next(line for line in lines if line.startswith("  1. "))
    assert failure.startswith(
        "  1. task commit of DAG shop (run scheduled__2026-03-01T12:00:00+00:00, try 1) failed "
    ), failure
    assert " ago: ChangeSetError: change set " in failure and "has no _manifest.json" in failure
    assert (
        "then run the window again: airflow tasks clear shop -s 2026-03-01T12:00:00.000000Z -y" in out
    ), out
    # the same window by its id, as JSON
    done = _cli(home, "explain", "--pipeline", PIPELINE, "--window", FIRST.window_id, "--json")
    found = json.loads(done.stdout)
    assert (found["verdict"], found["window_id"]) == ("failed", FIRST.window_id)
    assert found["reasons"][0]["detail"].startswith("ChangeSetError: change set ")


def test_explain_names_why_a_window_waits_its_units_and_their_leases(home: dict[str, Any]) -> None:
    done = _cli(home, "explain", "--pipeline", PIPELINE)  # latest: the second window
    out = done.stdout
    assert done.returncode == 1, out + done.stderr[-3000:]
    assert out.startswith(f"Window [2026-03-01T12:10:00.000000Z, 2026-03-01T12:20:00.000000Z) of pipeline "
                          f"shop (window id {SECOND.window_id}): WAITING"), out  # fmt: skip
    reasons = {line[5:] for line in out.splitlines() if line[:5] in ("  1. ", "  2. ", "  3. ", "  4. ")}
    run = "scheduled__2026-03-01T12:10:00+00:00"
    waits = next(r for r in reasons if r.startswith("window [2026-03-01T12:10"))
    assert (
        "waits for window [2026-03-01T12:00:00.000000Z, 2026-03-01T12:10:00.000000Z), which is reading, "
        "attempt 1" in waits and ". That window failed " in waits and "ChangeSetError" in waits
    ), waits
    assert f"explain --pipeline shop --window {FIRST.window_id}" in out
    reading = next(r for r in reasons if r.startswith("unit tokA"))
    assert (
        f"is being read (running) by task read[0] of DAG shop (run {run}); its lease expires in " in reading
    )
    assert " min" in reading.split("expires in ")[1]
    expired = next(r for r in reasons if r.startswith("unit tokB"))
    assert f"was left running by task read[1] of DAG shop (run {run}), whose lease expired " in expired
    assert "no reader is reading it" in expired
    unclaimed = next(r for r in reasons if r.startswith("unit tokC"))
    assert "was never claimed by a reader (pending)" in unclaimed
    assert "run the window's read tasks again (clear them)" in out


def test_explain_a_window_not_recorded_that_ends_in_the_future(home: dict[str, Any]) -> None:
    done = _cli(home, "explain", "--pipeline", PIPELINE, "--window", "2099-01-01T00:00:00Z")
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "2099-01-01T00:10:00.000000Z) of pipeline shop" in done.stdout  # the pipeline's window length
    assert "WAITING" in done.stdout and "ends in the future" in done.stdout


def test_explain_an_applied_window_and_a_name_nobody_knows(home: dict[str, Any]) -> None:
    done = _cli(home, "explain", "--pipeline", "orders")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "): APPLIED" in done.stdout.splitlines()[0] and ", 7 change rows" in done.stdout
    assert "Nothing to do." in done.stdout
    done = _cli(home, "explain", "--pipeline", "shp")
    assert done.returncode == 2
    assert "explain: no pipeline or DAG is named 'shp'; did you mean 'shop'?" in done.stderr


def test_pipelines_lists_each_pipeline_with_its_dags_windows_and_state(home: dict[str, Any]) -> None:
    done = _cli(home, "pipelines")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("pipeline ")) :]  # after logs
    header = lines[0].split()
    assert header[:4] == ["pipeline", "DAG", "source", "targets"] and header[-2:] == ["lag", "state"]
    rows = {line.split()[0]: line for line in lines[1:3]}
    shop = rows["shop"].split()
    assert shop[1:7] == ["shop_to_lake", "OrdersStream", "-", "0", "1", "1"], rows["shop"]
    assert shop[-1] == "failed" and "  -    " in rows["shop"]  # no window applied: no lag
    orders = rows["orders"].split()
    assert orders[1:7] == ["-", "orders", "delta", "1", "0", "0"], rows["orders"]
    assert orders[-1] == "idle" and "2026-03-01T12:00:00.000Z + 10 min" in rows["orders"]
    assert " d " in rows["orders"] or rows["orders"].split("10 min")[1].split()[1] == "d"  # lag in days
    assert "why: python -m airflow_provider_cdc explain --pipeline shop" in done.stdout
    # a DAG id names its pipeline too
    done = _cli(home, "explain", "--pipeline", "shop_to_lake", "--window", FIRST.window_id)
    assert "\nDAG shop_to_lake runs pipeline shop\n" in f"\n{done.stdout}", done.stdout + done.stderr[-2000:]
    assert "FAILED" in done.stdout


def test_a_failure_is_kept_without_credentials_and_cleared_by_a_later_try(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_cdc.hooks.pipeline import CdcPipelineHook
    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator

    monkeypatch.setenv("AIRFLOW_CONN_CDC_KEPT", _connection(sqlite_url))
    store = Metastore(sqlite_url)
    store.create_schema()
    store.open_window(PIPELINE, STREAM, FIRST.start, FIRST.end)
    commit = CdcCommitWindowOperator(task_id="commit", pipeline_id=PIPELINE, window_start=FIRST.start,
                                     window_end=FIRST.end, metastore_conn_id="cdc_kept")  # fmt: skip

    def refused(self: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("could not reach postgresql://cdc:hunter2@db.internal:5432/cdc\nline 2\n" +
                           "\n".join(f"detail {i}" for i in range(20)))  # fmt: skip

    with monkeypatch.context() as broken:
        broken.setattr(CdcPipelineHook, "commit_window", refused)
        with pytest.raises(RuntimeError):
            commit.execute(_context("commit", "manual__1", try_number=1))
    error = store.get_window(PIPELINE, FIRST.start, FIRST.end).error
    assert error is not None and "hunter2" not in error.text
    assert error.text.startswith("RuntimeError: could not reach postgresql://cdc:***@db.internal:5432/cdc")
    assert len(error.text.splitlines()) == 9 and error.text.endswith("…")  # the first lines only
    # a try of another task that succeeds leaves it; the same task's later try clears it
    assert not store.clear_window_error(PIPELINE, FIRST.start, FIRST.end, "shop/manual__1/merge/-1")
    commit.execute(_context("commit", "manual__1", try_number=2))
    record = store.get_window(PIPELINE, FIRST.start, FIRST.end)
    assert record.state is WindowState.APPLIED and record.error is None
