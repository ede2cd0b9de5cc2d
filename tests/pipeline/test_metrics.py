"""Metrics through Airflow's own ``Stats``: a StatsD listener on loopback receives every metric the
README's "Metrics" table documents, with its tags, from real steps of a pipeline (open and read against
the change-stream emulator, the merge with its Spark job standing in, the Delta upsert as a local job, a
commit that fails and its retry); and a metric that cannot be sent never fails a step."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_cdc import metrics
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore, WindowState
from airflow_provider_cdc.testing.workload import ALL_CHANGES_STREAM, Workload, schema_ddl

README = Path(__file__).resolve().parents[2] / "README.md"
PREFIX = "cdc_test"
PIPELINE = "metrics_shop"
RUN_ID = "scheduled__metrics"


def documented_metrics() -> dict[str, dict[str, Any]]:
    """The README's "Metrics" table: name → type, tags and the name that holds its variables."""
    text = README.read_text()
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    found = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`cdc."):
            continue
        found[cells[0].strip("`")] = {
            "type": cells[1].split()[0],
            "tags": tuple(re.findall(r"`([a-z_]+)`", cells[2])),
            "legacy": cells[3].strip("`"),
        }
    return found


@dataclass
class Datagram:
    name: str
    tags: dict[str, str]
    value: float
    kind: str


@dataclass
class StatsdListener:
    """A UDP socket on loopback that Airflow's StatsD client sends to."""

    sock: socket.socket
    received: list[Datagram] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def drain(self, quiet: float = 0.3) -> list[Datagram]:
        """Every datagram received until none came for ``quiet`` seconds."""
        self.sock.settimeout(quiet)
        while True:
            try:
                packet = self.sock.recv(65_535).decode()
            except TimeoutError:
                return self.received
            for line in packet.splitlines():
                stat, _, rest = line.partition(":")
                value, _, kind = rest.partition("|")
                name, *pairs = stat.split(",")
                self.received.append(
                    Datagram(name, dict(pair.split("=", 1) for pair in pairs), float(value), kind)
                )

    def named(self, name: str) -> list[Datagram]:
        return [d for d in self.drain() if d.name == f"{PREFIX}.{name}"]


def _use_statsd(port: int | None) -> Any:
    """Point Airflow's ``Stats`` at the configured StatsD, as Airflow sets it up in a task process
    (``None``: back to no metrics); returns what undoes it."""
    try:  # Airflow 3: the task runner initializes the task SDK's Stats in every task process
        from airflow.sdk._shared.observability.metrics import stats
        from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
        from airflow.sdk.observability.metrics import stats_utils

        stats.initialize(
            factory=stats_utils.get_stats_factory() if port else NoStatsLogger, export_legacy_names=True
        )
        return None
    except ImportError:  # Airflow 2.11: Stats chooses its backend from [metrics] when first used
        from airflow.metrics import statsd_logger
        from airflow.metrics.base_stats_logger import NoStatsLogger as NoStatsLogger2
        from airflow.stats import Stats

        type(Stats).factory = statsd_logger.get_statsd_logger if port else NoStatsLogger2
        Stats.instance = None
        return None


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatsdListener]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    listener = StatsdListener(sock)
    for name, value in {
        "STATSD_ON": "True",
        "STATSD_HOST": "127.0.0.1",
        "STATSD_PORT": str(listener.port),
        "STATSD_PREFIX": PREFIX,
        "STATSD_INFLUXDB_ENABLED": "True",  # tags appended to the name: ,pipeline=…
    }.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{name}", value)
    _use_statsd(listener.port)
    try:
        yield listener
    finally:
        monkeypatch.undo()
        _use_statsd(None)
        sock.close()


def _context(task_id: str, *, try_number: int = 1, map_index: int = -1, pushed: dict | None = None) -> dict:
    ti = SimpleNamespace(dag_id=PIPELINE, run_id=RUN_ID, task_id=task_id, map_index=map_index,
                         try_number=try_number)  # fmt: skip
    ti.xcom_push = lambda key, value: (pushed if pushed is not None else {}).update({key: value})
    return {"ti": ti}


def _change_set_job(window: Window, rows: int):
    """The merge job's stand-in: writes the window's change set (one table, ``rows`` changes)."""
    from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set

    types = [
        {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
        {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
    ]

    def submit(self: Any, context: Any) -> None:
        changes = [Change({"Id": i}, "UPSERT", f"{i + 1:016X}", window.start, {"Name": f"n{i}"})
                   for i in range(max(rows, 1))]  # fmt: skip
        location = self.window_locations("changeset_root").change_set(window)
        write_change_set(location, {"Orders": change_set_table(types, changes)})

    return submit


def test_every_documented_metric_reaches_statsd_from_the_steps_of_a_window(
    statsd: StatsdListener,
    spanner_emulator: Any,
    new_spanner_database: Any,
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator
    from airflow_provider_cdc.sources.spanner.change_stream_operators import (
        SpannerChangeStreamOpenWindowOperator,
        SpannerChangeStreamReadWindowOperator,
    )
    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    documented = documented_metrics()
    assert set(documented) == set(metrics.METRICS), "the README's Metrics table and metrics.py disagree"
    for name, metric in metrics.METRICS.items():
        assert documented[name] == {"type": metric.kind, "tags": metric.tags, "legacy": metric.legacy_name}

    monkeypatch.setenv("SPANNER_EMULATOR_HOST", spanner_emulator.host)
    monkeypatch.setenv("AIRFLOW_CONN_CDC_METASTORE_DEFAULT",
                       json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": sqlite_url}}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_HERE", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    database = new_spanner_database(schema_ddl(), prefix="metrics")
    clock = spanner_emulator.clock
    start = clock.advance(timedelta(seconds=1))
    window = Window(start, start + timedelta(seconds=60))
    Workload(database, spanner_emulator, seed=5).run(changes=40, step=timedelta(milliseconds=300))
    assert clock.now() < window.end, "the workload outgrew the window"
    clock.set(window.end + timedelta(seconds=1))
    roots = {name: str(tmp_path / name) for name in ("staging_root", "changeset_root", "lake_root")}
    source = dict(project_id="test-project", instance_id="test-instance", database_id=database.database_id,
                  stream=ALL_CHANGES_STREAM, staging_root=roots["staging_root"],
                  window_start=window.start.isoformat(), window_end=window.end.isoformat())  # fmt: skip
    bounds = {"window_start": window.start.isoformat(), "window_end": window.end.isoformat()}

    pushed: dict[str, Any] = {}
    opener = SpannerChangeStreamOpenWindowOperator(task_id="open_window", **source)
    handle = opener.execute(_context("open_window", pushed=pushed))  # the window handle
    assert handle["window_id"] == window.window_id
    read = SpannerChangeStreamReadWindowOperator(task_id="read", reader_index=0, **source)
    summary = read.execute(_context("read", map_index=0))
    assert summary["rows"] > 0 and summary["partitions"] > 0
    stream_key = pushed["window"]["source_key"]

    with monkeypatch.context() as job:  # the merge job's stand-in (Spark is not needed to count)
        job.setattr(SparkSubmitOperator, "execute", _change_set_job(window, summary["rows"]))
        SparkMergeWindowOperator(
            task_id="merge", stream_key=stream_key, conn_id="spark_here", metastore_conn_id=None, **bounds,
            locations={"staging_root": roots["staging_root"], "changeset_root": roots["changeset_root"]},
        ).execute(_context("merge"))  # fmt: skip

    def commit() -> CdcCommitWindowOperator:
        return CdcCommitWindowOperator(task_id="commit", pipeline_id=PIPELINE, locations=roots, epoch=1,
                                       read_summaries=[summary], **bounds)  # fmt: skip

    store = Metastore(sqlite_url)
    with pytest.raises(Exception, match="does not hold it"):  # committed before the upsert applied it
        commit().execute(_context("commit"))
    failure = store.get_window(PIPELINE, window.start, window.end).error
    assert failure is not None and failure.try_number == 1
    assert failure.task == f"{PIPELINE}/{RUN_ID}/commit/-1" and failure.task_id == "commit"
    assert failure.text.startswith("TargetNotAppliedError: window ") and "does not hold it" in failure.text

    SparkUpsertWindowOperator(task_id="upsert", conn_id="spark_here", pipeline_id=PIPELINE, locations=roots,
                              epoch=1, **bounds).execute(_context("upsert"))  # fmt: skip
    committed = commit().execute(_context("commit", try_number=2))
    record = store.get_window(PIPELINE, window.start, window.end)
    assert record.state is WindowState.APPLIED and record.error is None  # the retry cleared it

    received = statsd.drain()
    names = {d.name for d in received}
    for name in documented:
        assert f"{PREFIX}.{name}" in names, f"{name} was not received; got {sorted(names)}"
    tagged = {name: [d for d in received if d.name == f"{PREFIX}.{name}"] for name in documented}
    for name, datagrams in tagged.items():
        for datagram in datagrams:
            assert datagram.tags["pipeline"] == PIPELINE and datagram.tags["dag_id"] == PIPELINE, datagram
            assert set(datagram.tags) <= set(documented[name]["tags"]), datagram
    assert {d.tags["step"] for d in tagged[metrics.STEP_DURATION]} == set(metrics.STEPS)
    assert {d.kind for d in tagged[metrics.STEP_DURATION]} == {"ms"}
    source_name = stream_key.rsplit("/", 1)[-1]
    for step in ("open", "read", "merge"):
        durations = [d for d in tagged[metrics.STEP_DURATION] if d.tags["step"] == step]
        assert [d.tags.get("source") for d in durations] == [source_name], step
    upsert = [d for d in tagged[metrics.STEP_DURATION] if d.tags["step"] == "upsert"]
    assert upsert[0].tags["target"] == "delta"
    assert [(d.tags["step"], d.value) for d in tagged[metrics.STEP_RETRIES]] == [("commit", 1)]
    assert [(d.tags["step"], d.value) for d in tagged[metrics.STEP_FAILURES]] == [("commit", 1)]
    assert [d.value for d in tagged[metrics.READ_UNITS]] == [summary["partitions"]]
    assert [d.value for d in tagged[metrics.READ_ROWS]] == [summary["rows"]]
    assert committed["rows"] == summary["rows"]
    assert [d.value for d in tagged[metrics.WINDOW_ROWS]] == [summary["rows"]]
    assert [d.value for d in tagged[metrics.WINDOW_TRANSACTIONS]] == [committed["transactions"]]
    assert all(d.tags["source"] == source_name for d in tagged[metrics.WINDOW_ROWS])
    now = datetime.now(timezone.utc)
    (delay,) = tagged[metrics.WINDOW_APPLIED_DELAY]
    assert delay.kind == "ms" and 0 <= delay.value <= (now - window.end).total_seconds() * 1000
    (lag,) = tagged[metrics.TABLE_WATERMARK_LAG]
    assert (lag.kind, lag.tags["target"], lag.tags["table"]) == ("g", "delta", "Orders")
    assert abs(lag.value - (now - window.end).total_seconds()) < 120
    # StatsD without tags: each name once more with its variables in it, as Airflow's own legacy names
    assert f"{PREFIX}.cdc.{PIPELINE}.commit.duration" in names
    assert f"{PREFIX}.cdc.{PIPELINE}.delta.Orders.watermark_lag" in names
    assert f"{PREFIX}.cdc.{PIPELINE}.read.units" in names


def test_a_metric_that_cannot_be_sent_never_fails_a_step(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow_provider_cdc import _compat
    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator

    class Broken:
        def __getattr__(self, name: str) -> Any:
            raise OSError("the metrics backend is down")

    monkeypatch.setattr(_compat, "airflow_stats", lambda: Broken())
    monkeypatch.setenv("AIRFLOW_CONN_CDC_M",
                       json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": sqlite_url}}))
    store = Metastore(sqlite_url)
    store.create_schema()
    start = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    store.open_window(PIPELINE, "OrdersStream", start, start + timedelta(minutes=5))
    with caplog.at_level("DEBUG", logger="airflow_provider_cdc.metrics"):
        result = CdcCommitWindowOperator(
            task_id="commit", pipeline_id=PIPELINE, metastore_conn_id="cdc_m", window_start=start,
            window_end=start + timedelta(minutes=5), read_summaries=[{"rows": 3}],
        ).execute(_context("commit", try_number=3))  # fmt: skip
    assert result["rows"] == 3
    assert store.get_window(PIPELINE, start, start + timedelta(minutes=5)).state is WindowState.APPLIED
    assert any("not sent: OSError: the metrics backend is down" in r.getMessage() for r in caplog.records)


def test_sending_the_metrics_of_a_commit_takes_well_under_a_millisecond_a_table(
    statsd: StatsdListener,
) -> None:
    tags = metrics.StepTags(pipeline=PIPELINE, dag_id=PIPELINE, step="commit", source="OrdersStream")
    end = datetime(2026, 3, 1, 12, 5, tzinfo=timezone.utc)
    marks = {f"T{i}": "2026-03-01T12:05:00Z" for i in range(50)}
    summary = {"rows": 10, "transactions": 2, "watermarks": {"delta": marks}}
    metrics.window_committed(tags, end, summary)  # the first sends resolve the host and load the registry
    statsd.drain()
    took = []
    for _ in range(5):
        started = time.perf_counter()
        metrics.window_committed(tags, end, summary)
        took.append(time.perf_counter() - started)
        statsd.drain(quiet=0.1)
    assert min(took) < 0.05, f"{min(took) * 1000:.1f} ms for the metrics of a commit of 50 tables"
    lags = statsd.named(metrics.TABLE_WATERMARK_LAG)
    assert {d.tags["table"] for d in lags} == {f"T{i}" for i in range(50)}
