"""The Datastream example DAGs end to end on Airflow 3: Datastream files → Delta Lake, and → BigQuery.

A seeded MySQL stream (Avro) and a PostgreSQL stream (gzipped JSONL) are written as Datastream lays them
out into local folders, every file stamped with its arrival (its modification time): duplicates, a
backfill arriving over several windows while CDC runs, a backlog of CDC files arriving windows late into
old minute folders, a column added mid-stream, primary-key changes, deletes and re-inserts. ``airflow
dags test <dag> <window end>`` runs each window in order (the lake DAG with its staging, change sets and
Delta tables on ``gs://``, the Cloud Storage fake; the BigQuery DAG on local roots); after every window
the Delta tables (and the BigQuery tables of the loopback fake) equal the truth of the files arrived so
far, computed from the history's own order. A window whose run is killed (SIGKILL to the whole process
group) during its merge and again during its upsert, then run again, lands on the same tables; a window
run again after later ones changes nothing. Merges run on this process's Spark Connect server: the
killed merge's job outlives its task there, and the next try of the window interrupts it before it
merges.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.dag_runs import END_TO_END, EXAMPLE_DAGS, example_dags_report

from airflow_provider_cdc.testing.datastream.compare import compare_to_truth, delta_rows
from airflow_provider_cdc.testing.datastream.scenario import DatastreamScenario
from airflow_provider_cdc.testing.datastream.writer import LocalFolderSink

LAKE_DAG, BIGQUERY_DAG = "datastream_to_lake", "datastream_to_bigquery"
WINDOWS = 3
WINDOW_SECONDS = 60
DATASET = ("demo-project", "cdc_demo")

_e2e = END_TO_END


@dataclass
class DatastreamDags:
    """The Airflow home, the two streams and the BigQuery fake the DAGs run against."""

    home: Any  # ExampleDagHome
    lake_stream: DatastreamScenario
    bigquery_stream: DatastreamScenario
    bigquery_conf: dict[str, Any]
    fake: Any
    roots: Any  # GcsRoots: the lake DAG's staging, change sets and Delta tables on the Cloud Storage fake

    @property
    def lake_root(self) -> str:
        return str(self.roots.root("lake"))

    def lake_rows(self, table: str) -> list[dict[str, Any]]:
        return delta_rows(self.lake_root, table, self.roots.storage_options)

    def command(self, dag_id: str, index: int, scenario: DatastreamScenario) -> list[str]:
        end = scenario.windows[index][1].isoformat()
        command = [str(Path(sys.executable).parent / "airflow"), "dags", "test", dag_id, end]
        if dag_id == BIGQUERY_DAG:
            command += ["-c", json.dumps(self.bigquery_conf)]
        else:
            command += ["-c", json.dumps(self.roots.conf)]
        return command

    def run(self, dag_id: str, index: int, scenario: DatastreamScenario, name: str) -> str:
        log = self.home.root / f"{name}.log"
        return self.home.airflow(*self.command(dag_id, index, scenario)[1:], log=log, timeout=600)

    def states(self, dag_id: str) -> list[str]:
        return [run[1] for run in self.home.dag_runs(dag_id)]

    def bigquery_rows(self, table: str) -> list[dict[str, Any]]:
        if (*DATASET, table) not in self.fake.state.tables:
            return []
        return self.fake.rows(*DATASET, table)


@pytest.fixture(scope="module")
def datastream_dags(
    spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DatastreamDags]:
    from conftest import ExampleDagHome, example_dag_environment, free_port
    from support.gcs_dag import gcs_roots

    from airflow_provider_cdc.testing.bigquery_fake import FakeBigQuery

    root = tmp_path_factory.mktemp("example-dag-datastream")
    lake_stream = DatastreamScenario("mysql", "avro", seed=21, windows=WINDOWS, window_seconds=WINDOW_SECONDS)
    bigquery_stream = DatastreamScenario(
        "postgresql", "jsonl.gz", seed=22, windows=WINDOWS, window_seconds=WINDOW_SECONDS
    )
    assert lake_stream.start == bigquery_stream.start  # one schedule for both DAGs
    for index in range(WINDOWS):  # every file now; a window lists only those that arrived in it
        lake_stream.write_window(index, LocalFolderSink(str(root / "mysql-stream")))
        bigquery_stream.write_window(index, LocalFolderSink(str(root / "postgresql-stream")))
    metastore_url, api_port = f"sqlite:///{root / 'cdc_metastore.db'}", free_port()
    with FakeBigQuery() as fake, gcs_roots(root, "datastream") as roots:
        fake.create_dataset(*DATASET)
        env = example_dag_environment(root, "", api_port, metastore_url, spark_connect_server.port)
        env.update(
            CDC_WINDOW_SECONDS=str(WINDOW_SECONDS),
            CDC_START_DATE=lake_stream.start.isoformat(),
            CDC_DATASTREAM_ROOT=str(root / "mysql-stream"),
            CDC_BIGQUERY_API_ENDPOINT=fake.rest_endpoint,
            CDC_BIGQUERY_WRITE_ENDPOINT=fake.write_endpoint,
        )
        env.pop("CDC_WINDOW_MINUTES", None)
        roots.configure(env)
        home = ExampleDagHome(root, root / "airflow", env, None, None, metastore_url, api_port)
        home.airflow_home.mkdir()
        home.airflow("db", "migrate", log=root / "db-migrate.log")
        conf = {
            "stream_root": str(root / "postgresql-stream"),
            "settings": {"column_types": bigquery_stream.jsonl_column_types()},
        }
        yield DatastreamDags(home, lake_stream, bigquery_stream, conf, fake, roots)


def _assert_lake_equals_truth(dags: DatastreamDags, index: int, when: str) -> None:
    truth = dags.lake_stream.truth_after(index)
    differences = compare_to_truth(truth, dags.lake_rows)
    assert not differences, f"Delta {when}: " + "; ".join(map(str, differences))


def _lake_versions(dags: DatastreamDags) -> dict[str, int]:
    from deltalake import DeltaTable

    return {
        table: DeltaTable(f"{dags.lake_root}/{table}", storage_options=dags.roots.storage_options).version()
        for table in ("shop_customers", "shop_orders")
    }


def _kill_when(dags: DatastreamDags, index: int, name: str, marker: str) -> None:
    """Run window ``index`` of the lake DAG and SIGKILL its process group once ``marker`` is logged."""
    log = dags.home.root / f"{name}.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            dags.command(LAKE_DAG, index, dags.lake_stream),
            env=dags.home.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 600
            while marker not in log.read_text(errors="replace"):
                assert process.poll() is None, (
                    f"{name}: the run ended before {marker!r}:\n{log.read_text()[-3000:]}"
                )
                assert time.monotonic() < deadline, f"{name}: {marker!r} never logged"
                time.sleep(0.2)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@_e2e
@pytest.mark.spark
@pytest.mark.timeout(2400)
def test_the_lake_dag_equals_the_truth_after_every_window_through_kills_and_reruns(
    datastream_dags: DatastreamDags,
) -> None:
    dags = datastream_dags
    described = dags.lake_stream.describe()
    assert all(window["files"] > 1 for window in described["windows"]), described
    for index in range(WINDOWS):
        if index == 1:
            # Killed during the merge, then during the upsert (between or after Delta commits), then
            # run again to the end: the tables hold the window once.
            _kill_when(dags, index, "window-1-killed-in-merge", "complete transaction(s)")
            _kill_when(dags, index, "window-1-killed-in-upsert", "tombstones committed")
        output = dags.run(LAKE_DAG, index, dags.lake_stream, f"window-{index}")
        # The killed runs opened window 1 and recorded its files: the run that completes reads them.
        listed = "recorded when it was first opened" if index == 1 else "arrived"
        assert listed in output, f"window {index}: {listed!r} not logged"
        assert dags.states(LAKE_DAG)[index] == "success"
        _assert_lake_equals_truth(dags, index, f"after window {index}")
    final = dags.lake_stream.final_truth()
    assert not compare_to_truth(final, dags.lake_rows)

    # A window run again after later ones (dags test clears its run): the same files read, nothing
    # applied twice, no Delta commit.
    versions = _lake_versions(dags)
    output = dags.run(LAKE_DAG, 1, dags.lake_stream, "window-1-again")
    assert "recorded when it was first opened" in output
    assert _lake_versions(dags) == versions
    _assert_lake_equals_truth(dags, WINDOWS - 1, "after window 1 ran again")


@_e2e
@pytest.mark.spark
def test_the_bigquery_dag_equals_the_truth_after_every_window(datastream_dags: DatastreamDags) -> None:
    dags = datastream_dags
    stream = dags.bigquery_stream
    for index in range(WINDOWS):
        dags.run(BIGQUERY_DAG, index, stream, f"bigquery-window-{index}")
        assert dags.states(BIGQUERY_DAG)[index] == "success"
        differences = compare_to_truth(stream.truth_after(index), dags.bigquery_rows)
        assert not differences, f"BigQuery after window {index}: " + "; ".join(map(str, differences))
    assert not compare_to_truth(stream.final_truth(), dags.bigquery_rows)


def test_both_dags_load_with_their_defaults(tmp_path: Path) -> None:
    """The DAG files import without errors, serialize, and wire the window handle and tombstones."""
    check = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.serialized_objects import DagSerialization
bag = DagBag(dag_folder=sys.argv[1])
report = {"errors": {str(k): v for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids)}
for dag_id in ("datastream_to_lake", "datastream_to_bigquery"):
    dag = bag.dags[dag_id]
    DagSerialization.to_dict(dag)
    handle = dag.get_task("merge").window_handle
    report[dag_id] = {
        "tasks": sorted(t.task_id for t in dag.tasks),
        "window": [handle.operator.task_id, handle.key],
        "upsert": getattr(dag.task_dict.get("upsert"), "tombstone_horizon", None),
    }
print(json.dumps(report))
"""
    report = example_dags_report(check, tmp_path, str(EXAMPLE_DAGS))
    assert report["errors"] == {}
    assert {LAKE_DAG, BIGQUERY_DAG} <= set(report["dags"])
    lake, bigquery = report[LAKE_DAG], report[BIGQUERY_DAG]
    assert lake["tasks"] == ["commit", "complete", "merge", "open_window", "read", "upsert", "wait_for_files"]
    assert bigquery["tasks"] == [
        "commit", "complete", "merge", "open_window", "read", "to_bigquery", "wait_for_files"
    ]  # fmt: skip
    for report_of in (lake, bigquery):  # the merge takes the open step's handle (its basis: arrival)
        assert report_of["window"] == ["open_window", "return_value"]
    assert "tombstone_horizon_days" in str(lake["upsert"])


def test_a_lake_run_with_a_tombstone_horizon_of_zero_days_is_refused_when_created(tmp_path: Path) -> None:
    """The lake DAG's params are checked as Airflow checks a run's conf when it creates the run (before
    any task, so before anything is read or recorded): 0 days is refused naming the param."""
    check = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.serialized_objects import DagSerialization
dag = DagSerialization.from_dict(DagSerialization.to_dict(DagBag(dag_folder=sys.argv[1]).dags[sys.argv[2]]))
report = {}
for days in (7, 0.5, 0, -1):
    try:
        dag.params.deep_merge({"tombstone_horizon_days": days}).validate()  # as create_dagrun does
        report[str(days)] = "accepted"
    except Exception as error:
        report[str(days)] = f"{type(error).__name__}: {error}"
print(json.dumps(report))
"""
    report = example_dags_report(check, tmp_path, str(EXAMPLE_DAGS / "datastream_to_lake.py"), LAKE_DAG)
    assert report["7"] == report["0.5"] == "accepted"
    for days in ("0", "-1"):
        assert report[days].startswith(
            f"ParamValidationError: Invalid input for param tombstone_horizon_days: {days} is less than or "
            "equal to the minimum of 0"
        ), report[days]
