"""The Table Store example DAGs end to end on Airflow 3: a table's stream → Delta Lake, and → BigQuery.

The project's Table Store stream emulator (HTTP, protobuf, signed requests, PlainBuffer records with the
sequence extension) serves from this process; a seeded workload writes three one-minute windows of full
puts, partial updates that set and delete columns, row deletes and re-puts, with a shard split in the
second window and a merge in the third, on the emulator's clock a few minutes in the past (the windows
have settled). ``airflow dags test <dag> <window end>`` runs each window in order through the
``tablestore`` connection (the lake DAG with its staging, change sets and Delta tables on ``gs://``, the
Cloud Storage fake; the BigQuery DAG on local roots); after every window the Delta tables (and the
BigQuery tables of the loopback fake) equal the emulator's table state at the window's end, and a window
run again changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from support.dag_runs import END_TO_END, EXAMPLE_DAGS, example_dags_report

LAKE_DAG, BIGQUERY_DAG = "tablestore_stream_to_lake", "tablestore_stream_to_bigquery"
WINDOWS = 3
WINDOW_SECONDS = 60
DATASET = ("demo-project", "cdc_demo")
KEY = ("region", "order_id")

_e2e = END_TO_END


@dataclass
class TablestoreDags:
    home: Any  # ExampleDagHome
    workload: Any  # TablestoreWorkload
    fake: Any
    roots: Any  # GcsRoots: the lake DAG's roots on the Cloud Storage fake

    def run(self, dag_id: str, index: int, name: str) -> str:
        end = self.workload.window(index)[1].isoformat()
        conf = ["-c", json.dumps(self.roots.conf)] if dag_id == LAKE_DAG else []
        return self.home.airflow(
            "dags", "test", dag_id, end, *conf, log=self.home.root / f"{name}.log", timeout=600
        )

    def lake_rows(self, lake_root: Path | str) -> list[dict[str, Any]]:
        from deltalake import DeltaTable

        uri = f"{lake_root}/orders"
        options = self.roots.storage_options if uri.startswith("gs://") else None
        if not DeltaTable.is_deltatable(uri, storage_options=options):
            return []
        return DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist()

    def bigquery_rows(self) -> list[dict[str, Any]]:
        if (*DATASET, "orders") not in self.fake.state.tables:
            return []
        return self.fake.rows(*DATASET, "orders")


def _assert_equal(rows: list[dict[str, Any]], truth: dict[tuple, dict[str, Any]], when: str) -> None:
    from airflow_provider_cdc.testing.tablestore_emulator.workload import COLUMN_TYPES

    got = {tuple(row[k] for k in KEY): {c: row.get(c) for c in COLUMN_TYPES} for row in rows}
    want = {key: {c: values.get(c) for c in COLUMN_TYPES} for key, values in truth.items()}
    missing, unexpected = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    differing = [(key, want[key], got[key]) for key in sorted(set(want) & set(got)) if want[key] != got[key]]
    assert not (missing or unexpected or differing), (
        f"{when}: {len(missing)} missing {missing[:3]}, {len(unexpected)} unexpected {unexpected[:3]}, "
        f"{len(differing)} differing {differing[:2]}"
    )


@pytest.fixture(scope="module")
def tablestore_dags(
    spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TablestoreDags]:
    from conftest import ExampleDagHome, example_dag_environment, free_port
    from support.gcs_dag import gcs_roots

    from airflow_provider_cdc.testing.bigquery_fake import FakeBigQuery
    from airflow_provider_cdc.testing.tablestore_emulator import ManualClock, TablestoreEmulator
    from airflow_provider_cdc.testing.tablestore_emulator.workload import TablestoreWorkload, workload_start

    root = tmp_path_factory.mktemp("example-dag-tablestore")
    start = workload_start(WINDOWS, WINDOW_SECONDS, timedelta(minutes=5))
    emulator = TablestoreEmulator(ManualClock(int(start.timestamp() * 1_000_000) - 1_000_000), shards=2)
    endpoint = emulator.start()
    try:
        workload = TablestoreWorkload(emulator, start, WINDOW_SECONDS, changes_per_window=80, seed=5)
        workload.create()
        for index in range(WINDOWS):
            workload.write_window(index)
        # The service's clock is the real one: requests are signed with it.
        now_us = int(datetime.now(timezone.utc).timestamp() * 1_000_000)
        emulator.clock.advance(max(now_us - emulator.clock(), 0) / 1_000_000)
        metastore_url, api_port = f"sqlite:///{root / 'cdc_metastore.db'}", free_port()
        with FakeBigQuery() as fake, gcs_roots(root, "tablestore") as roots:
            fake.create_dataset(*DATASET)
            env = example_dag_environment(root, "", api_port, metastore_url, spark_connect_server.port)
            env.pop("CDC_WINDOW_MINUTES", None)
            env.update(
                CDC_WINDOW_SECONDS=str(WINDOW_SECONDS),
                CDC_START_DATE=start.isoformat(),
                CDC_BIGQUERY_API_ENDPOINT=fake.rest_endpoint,
                CDC_BIGQUERY_WRITE_ENDPOINT=fake.write_endpoint,
                AIRFLOW_CONN_TABLESTORE_DEFAULT=json.dumps(
                    {
                        "conn_type": "tablestore",
                        "host": endpoint,
                        "login": "test-key",
                        "password": "test-secret",
                        "extra": {"instance": emulator.instance},
                    }
                ),
            )
            roots.configure(env)
            home = ExampleDagHome(root, root / "airflow", env, None, None, metastore_url, api_port)
            home.airflow_home.mkdir()
            home.airflow("db", "migrate", log=root / "db-migrate.log")
            yield TablestoreDags(home, workload, fake, roots)
    finally:
        emulator.stop()


@_e2e
@pytest.mark.spark
@pytest.mark.timeout(2400)
def test_both_dags_equal_the_emulators_table_after_every_window(tablestore_dags: TablestoreDags) -> None:
    dags = tablestore_dags
    shards = dags.workload.emulator.shards("orders")
    assert any(s.get("parent_sibling_id") for s in shards), shards  # a merge
    assert sum(1 for s in shards if s.get("parent_id")) >= 3, shards  # a split's two children and a merge
    lake = dags.roots.root("lake")  # the lake DAG runs with every root on gs://
    bigquery_lake = dags.home.demo_home / "tablestore" / "bigquery" / "lake"
    for index in range(WINDOWS):
        dags.run(LAKE_DAG, index, f"lake-window-{index}")
        _assert_equal(dags.lake_rows(lake), dags.workload.truths[index], f"Delta after window {index}")
        dags.run(BIGQUERY_DAG, index, f"bigquery-window-{index}")
        _assert_equal(
            dags.lake_rows(bigquery_lake), dags.workload.truths[index], f"Delta (BigQuery DAG) {index}"
        )
        _assert_equal(dags.bigquery_rows(), dags.workload.truths[index], f"BigQuery after window {index}")
    before = sorted(map(repr, dags.lake_rows(lake)))
    dags.run(LAKE_DAG, 1, "lake-window-1-again")
    assert sorted(map(repr, dags.lake_rows(lake))) == before


def test_both_dags_load(tmp_path: Path) -> None:

    check = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({"errors": {str(k): v for k, v in bag.import_errors.items()},
                  "tasks": {d: sorted(t.task_id for t in bag.dags[d].tasks)
                            for d in ("tablestore_stream_to_lake", "tablestore_stream_to_bigquery")}}))
"""
    report = example_dags_report(check, tmp_path, str(EXAMPLE_DAGS))
    assert report["errors"] == {}
    assert report["tasks"][LAKE_DAG] == ["commit", "complete", "merge", "open_window", "read", "upsert"]
    assert report["tasks"][BIGQUERY_DAG] == [
        "commit", "complete", "merge", "open_window", "read", "to_bigquery", "upsert"
    ]  # fmt: skip
