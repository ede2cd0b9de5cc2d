"""Datastream streams of every source database, in Avro and JSONL, through the whole pipeline.

For MySQL, Oracle, PostgreSQL and SQL Server, a seeded history (duplicates, a backfill overlapping CDC,
a backlog of CDC files arriving windows late into old minute folders, a column added mid-stream,
primary-key changes, deletes and re-inserts) is written as Datastream lays it out, in Avro and in JSONL
(plain and gzip). Each arrival window is opened and read by the source's hook, merged by the real Spark
merge job (every window on a Spark Connect server, as the merge operator runs it there), then applied
to Delta Lake (with tombstones) and to BigQuery CDC tables (the loopback fake). After every window both
targets equal the truth: the state the history gives from the files arrived so far, computed from the
history's own order, never from sequence numbers. Applying every window again changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.clock import ManualClock
from support.fake_bigquery import fake_clients
from support.log_lines import LineLog

from airflow_provider_cdc.changesets.reader import ChangeSetReader
from airflow_provider_cdc.core.contract.locations import partition_key
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.merge.input import StagedUnit, units_json
from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.sources.datastream.hook import DatastreamHook
from airflow_provider_cdc.targets.bigquery.target import BigQueryCdcTarget
from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget
from airflow_provider_cdc.testing.bigquery_fake import FakeBigQuery
from airflow_provider_cdc.testing.datastream.compare import compare_to_truth, delta_rows
from airflow_provider_cdc.testing.datastream.scenario import DatastreamScenario
from airflow_provider_cdc.testing.datastream.writer import LocalFolderSink

pytestmark = pytest.mark.spark

PIPELINE = "datastream"
PROJECT = "pipeline-project"
WINDOWS = 3
COMBINATIONS = [
    ("mysql", "avro"),
    ("mysql", "jsonl"),
    ("oracle", "avro"),
    ("oracle", "jsonl.gz"),
    ("postgresql", "avro"),
    ("postgresql", "jsonl"),
    ("sqlserver", "avro"),
    ("sqlserver", "jsonl.gz"),
]


@dataclass
class Stream:
    """One database and format: its scenario, hook and folders."""

    name: str
    scenario: DatastreamScenario
    hook: DatastreamHook
    root: Path

    @property
    def staging(self) -> Path:
        return self.root / "staging"

    def changeset(self, window: Window) -> Path:
        return self.root / "changesets" / window.window_id

    def window(self, index: int) -> Window:
        return Window(*self.scenario.windows[index])


def _stream(root: Path, database: str, file_format: str, seed: int) -> Stream:
    scenario = DatastreamScenario(database, file_format, seed=seed, windows=WINDOWS, events_per_window=150)
    for index in range(WINDOWS):  # every file written now; each window lists only those that arrived in it
        scenario.write_window(index, LocalFolderSink(str(root / "stream")))
    store = Metastore(f"sqlite:///{root / 'metastore.db'}", clock=ManualClock())
    store.ensure_schema()

    class Hook(DatastreamHook):
        @property
        def metastore(self) -> Metastore:
            return store

    settings = {"column_types": scenario.jsonl_column_types()} if file_format != "avro" else {}
    end = scenario.windows[-1][1]
    hook = Hook(str(root / "stream"), "shop", settings=settings, clock=lambda: end + timedelta(hours=1))
    return Stream(f"{database}-{file_format}", scenario, hook, root)


def _merge_arguments(stream: Stream, window: Window) -> list[str]:
    """The merge job's command line for a window, as the merge operator builds it."""
    store = stream.hook.metastore
    items = store.window_partitions(stream.hook.source_key, window.start, window.end)
    units = [StagedUnit(partition_key(i.token), i.claim_id, i.output_files, i.rows, i.token) for i in items]
    claims = {unit.key: unit.claim for unit in units}
    return [
        "--staging", str(stream.staging / stream.hook.staging_folder / window.window_id),
        "--changeset", str(stream.changeset(window)),
        "--window-start", format_timestamp(window.start),
        "--window-end", format_timestamp(window.end),
        "--window-basis", "arrival",
        "--partition-claims", json.dumps(claims, sort_keys=True),
        "--staged-units", units_json(units),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def streams(spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Stream]:
    """Every combination read window by window, and merged on a Spark Connect server as the merge
    operator runs it there (the job's own command line, the same plan as ``spark-submit``)."""
    from airflow_provider_cdc.operators.merge import build_domain_zip
    from airflow_provider_cdc.spark_connect.jobs import SparkConnectJobError, run_merge

    made: dict[str, Stream] = {}
    jobs: dict[str, list[str]] = {}
    for seed, (database, file_format) in enumerate(COMBINATIONS):
        root = tmp_path_factory.mktemp(f"{database}-{file_format}")
        stream = _stream(root, database, file_format, seed + 11)
        made[stream.name] = stream
        for index in range(WINDOWS):
            window = stream.window(index)
            stream.hook.open_window_epoch(PIPELINE, window, str(stream.staging), "reader")
            stream.hook.read_window(window, str(stream.staging), "reader")
            jobs[f"{stream.name}/{index}"] = _merge_arguments(stream, window)
    artifacts = [build_domain_zip(tmp_path_factory.mktemp("merge"))]
    failed: dict[str, str] = {}
    for name, arguments in jobs.items():
        try:
            run_merge(
                spark_connect_server.url, arguments, artifacts=artifacts, storage_options=None, log=LineLog()
            )
        except SparkConnectJobError as error:
            failed[name] = str(error)[-2000:]
    assert not failed, failed
    return made


def _bigquery(fake: FakeBigQuery, dataset: str, ledger: Metastore) -> BigQueryCdcTarget:
    client, write = fake_clients(fake, PROJECT)
    return BigQueryCdcTarget(client, write, PROJECT, dataset, ledger=ledger)


def _apply(target: Any, stream: Stream, window: Window) -> list[str]:
    outcomes = []
    for table in ChangeSetReader(str(stream.changeset(window))).tables():
        outcomes.append(target.apply_window(table, PIPELINE, window).outcome)
    return outcomes


@pytest.mark.parametrize("name", [f"{database}-{file_format}" for database, file_format in COMBINATIONS])
def test_every_window_lands_on_delta_and_bigquery_equal_to_the_truth(
    streams: dict[str, Stream], name: str, tmp_path: Path
) -> None:
    stream = streams[name]
    scenario = stream.scenario
    assert scenario.final_truth() == scenario.final_state()
    lake_root = str(tmp_path / "lake")
    lake = DeltaLakeTarget(lake_root, tombstone_horizon=timedelta(days=7))
    dataset = name.replace("-", "_").replace(".", "_")
    ledger = Metastore(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.ensure_schema()
    with FakeBigQuery() as fake:
        fake.create_dataset(PROJECT, dataset)
        target = _bigquery(fake, dataset, ledger)

        def bigquery_rows(table: str) -> list[dict[str, Any]]:
            if (PROJECT, dataset, table) not in fake.state.tables:
                return []
            return fake.rows(PROJECT, dataset, table)

        for index in range(WINDOWS):
            window = stream.window(index)
            _apply(lake, stream, window)
            _apply(target, stream, window)
            truth = scenario.truth_after(index)
            delta = compare_to_truth(truth, lambda table: delta_rows(lake_root, table))
            assert not delta, f"{name}, Delta after window {index}: " + "; ".join(map(str, delta))
            bq = compare_to_truth(truth, bigquery_rows)
            assert not bq, f"{name}, BigQuery after window {index}: " + "; ".join(map(str, bq))
        before = {
            table: sorted(map(repr, delta_rows(lake_root, table)))
            for table in ("shop_customers", "shop_orders")
        }
        for index in range(WINDOWS):  # a re-run of every window changes nothing
            window = stream.window(index)
            assert set(_apply(lake, stream, window)) <= {"already_applied"}
            _apply(target, stream, window)
        after = {table: sorted(map(repr, delta_rows(lake_root, table))) for table in before}
        assert after == before
        bq = compare_to_truth(scenario.final_truth(), bigquery_rows)
        assert not bq, f"{name}, BigQuery after re-runs: " + "; ".join(map(str, bq))
