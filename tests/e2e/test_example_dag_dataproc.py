"""The change-stream example DAG with its merge and upsert jobs on Dataproc, every root on ``gs://``.

The DAG param ``spark_conn_id`` picks where a run's Spark jobs go. Window 0 (with the initial snapshot)
runs on the group's Spark Connect server; window 1 on a Dataproc cluster (``DataprocSubmitJobOperator``
with a ``pyspark_job``), window 2 as Serverless batches (``DataprocCreateBatchOperator``), all on one
pipeline. The google provider's operators run unchanged: their gRPC clients reach the loopback
Dataproc fake (``airflow_provider_cdc.testing.dataproc_fake``) through ``grpc_proxy`` and trust its
certificate through ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``; the fake fetches the staged job files from the
Cloud Storage fake and runs them with ``spark-submit`` in the "cluster's" environment (its identity: the
key file in ``GOOGLE_SERVICE_ACCOUNT``). After every window the Delta tables equal the committed history,
as they do after a local window.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from support.dag_runs import END_TO_END
from support.gcs_dag import BUCKET, DAG_ID, PIPELINE, TABLES, GcsDag, assert_equal_to_history, gcs_dag_home

#: Per window: the Spark connection its run names (DAG param ``spark_conn_id``).
WINDOW_SPARK = ("spark_default", "dataproc_cluster", "dataproc_serverless")
WINDOWS = len(WINDOW_SPARK)
LINEAGE_FILE = "openlineage-events.jsonl"

pytestmark = [pytest.mark.spark, END_TO_END]


@pytest.fixture(scope="module")
def dataproc_dag(
    spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[GcsDag, Any]]:
    from conftest import (
        DATAPROC_FAKE_TLS_DIR,
        EMULATOR_PROJECT,
        dataproc_connection,
        spark_connect_connection,
    )

    from airflow_provider_cdc.testing.dataproc_fake import FakeDataproc

    root = tmp_path_factory.mktemp("example-dag-dataproc")
    with gcs_dag_home(root, WINDOWS, spark_connect_server.port) as dag:
        dag.use_credentials("adc")
        cluster_env = {
            "STORAGE_EMULATOR_HOST": dag.fake.endpoint,
            "GOOGLE_SERVICE_ACCOUNT": str(dag.key_file),
        }
        with FakeDataproc(
            dag.fake.endpoint,
            output_bucket=BUCKET,
            cluster_env=cluster_env,
            certificate_dir=DATAPROC_FAKE_TLS_DIR,
        ) as dataproc:
            dataproc.create_cluster(EMULATOR_PROJECT, "us-central1", "cdc")
            dag.home.env.update(dataproc.client_environ())
            dag.home.env.update(
                AIRFLOW_CONN_SPARK_DEFAULT=spark_connect_connection(spark_connect_server.port),
                AIRFLOW_CONN_DATAPROC_CLUSTER=dataproc_connection("cdc"),
                AIRFLOW_CONN_DATAPROC_SERVERLESS=dataproc_connection(None, runtime_version="2.2"),
                AIRFLOW_CONN_GOOGLE_CLOUD_DATAPROC=json.dumps(
                    {"conn_type": "google_cloud_platform", "extra": {"is_anonymous": True}}
                ),
                # OpenLineage: the provider's file transport, one event per line
                AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(
                    {"type": "file", "log_file_path": str(root / LINEAGE_FILE), "append": True}
                ),
                AIRFLOW__OPENLINEAGE__NAMESPACE="cdc-e2e",
            )
            yield dag, dataproc


def test_windows_on_dataproc_apply_what_a_local_window_does(dataproc_dag: tuple[GcsDag, Any]) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    dag, dataproc = dataproc_dag
    submitted = 0
    for index, spark in enumerate(WINDOW_SPARK):
        conf = {**dag.conf, "spark_conn_id": spark}
        end = dag.window(index)[1]
        output = dag.home.airflow(
            "dags", "test", DAG_ID, end.isoformat(), "-c", json.dumps(conf),
            log=dag.home.root / f"window-{index}.log", timeout=900,
        )  # fmt: skip
        assert dag.home.dag_runs(DAG_ID)[-1][1:] == ("success", *dag.window(index)), output[-3000:]
        assert_equal_to_history(dag, index, f"after window {index} ({spark})")
        store = dag.metastore()
        try:
            marks = store.table_watermarks(PIPELINE, target="delta")
        finally:
            store.dispose()
        assert marks == dict.fromkeys(TABLES, dag.window(index)[1])

        new = dataproc.state.submitted[submitted:]
        submitted = len(dataproc.state.submitted)
        if spark == "spark_default":
            assert new == []  # the Spark Connect server merged; nothing reached Dataproc
            continue
        # One merge and one upsert, each its own job (cluster) or batch (Serverless), both succeeded.
        kind = "jobs" if spark == "dataproc_cluster" else "batches"
        assert len(new) == 2 and all(f"/{kind}/" in name for name in new), new
        steps = []
        for name in new:
            if kind == "jobs":
                job = dataproc.state.jobs[tuple(name.split("/")[i] for i in (1, 3, 5))]
                assert job.status.state.name == "DONE", job.status
                labels, main = dict(job.labels), job.pyspark_job.main_python_file_uri
                files = list(job.pyspark_job.python_file_uris)
            else:
                batch = dataproc.state.batches[name]
                assert batch.state.name == "SUCCEEDED", batch.state_message
                assert batch.runtime_config.version == "2.2"
                labels, main = dict(batch.labels), batch.pyspark_batch.main_python_file_uri
                files = list(batch.pyspark_batch.python_file_uris)
            steps.append(labels["cdc-step"])
            assert labels["airflow-dag-id"] == DAG_ID.replace("_", "-")
            assert main.startswith(f"gs://{BUCKET}/dataproc/cdc-jobs/") and main.endswith(".py")
            assert [f.rsplit("/", 1)[-1] for f in files] == ["airflow_provider_cdc_jobs.zip"]
        assert steps == ["merge", "upsert"]
        # The driver's output reached the task log: the upsert job's summary line.
        assert (
            '"tables_applied"' in output and f"Dataproc {kind[:-1] if kind == 'jobs' else 'batch'}" in output
        )

    # The job files are staged once per content: a folder for the merge's, one for the upsert's, used by
    # both windows.
    client = storage.Client(
        project="demo-project",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": dag.fake.endpoint},
    )
    staged = {blob.name.rsplit("/", 1)[0] for blob in client.list_blobs(BUCKET, prefix="dataproc/cdc-jobs/")}
    assert len(staged) == 2, staged
    assert dataproc.proxy.refused == []  # nothing but Dataproc's endpoints went through the proxy


def test_each_step_reports_its_datasets_and_the_window_to_openlineage(
    dataproc_dag: tuple[GcsDag, Any],
) -> None:
    """The OpenLineage provider (file transport) sent, for each step of the windows run above, the
    datasets it read and wrote and the window as the ``cdcWindow`` run facet."""
    from airflow_provider_cdc.testing.workload import TABLES_BY_NAME

    dag, _ = dataproc_dag
    path = dag.home.root / LINEAGE_FILE
    assert path.exists(), "no OpenLineage event was written"
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    complete = [
        e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].startswith(DAG_ID + ".")
    ]

    def of(task: str, index: int) -> dict[str, Any]:
        start, end = dag.window(index)
        window_id = f"{int(start.timestamp() * 1e6)}-{int(end.timestamp() * 1e6)}"
        found = [
            e for e in complete
            if e["job"]["name"] == f"{DAG_ID}.{task}"
            and e["run"]["facets"].get("cdcWindow", {}).get("windowId") == window_id
        ]  # fmt: skip
        assert found, f"no COMPLETE event of {task} with the window of run {index}"
        return found[-1]

    def names(datasets: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(d["namespace"], d["name"]) for d in datasets}

    bucket = f"gs://{BUCKET}"
    for index in range(WINDOWS):
        start, end = dag.window(index)
        window_id = f"{int(start.timestamp() * 1e6)}-{int(end.timestamp() * 1e6)}"
        merge = of("merge", index)
        assert names(merge["inputs"]) == {(bucket, f"demo/staging/WorkloadChanges/{window_id}")}
        assert names(merge["outputs"]) == {(bucket, f"demo/changesets/{window_id}")}
        facet = merge["run"]["facets"]["cdcWindow"]
        assert (facet["pipeline"], facet["windowStart"][:19], facet["windowEnd"][:19]) == (
            PIPELINE, start.strftime("%Y-%m-%dT%H:%M:%S"), end.strftime("%Y-%m-%dT%H:%M:%S")
        )  # fmt: skip
        lake = {(bucket, f"demo/lake/{table}") for table in TABLES}
        upsert = of("upsert", index)
        assert names(upsert["outputs"]) <= lake and names(upsert["outputs"])
        assert all(
            name.startswith(f"demo/changesets/{window_id}/table=") for _, name in names(upsert["inputs"])
        )
        read = of("read", index)
        assert names(read["inputs"]) == {("spanner://demo-project/demo-instance", "demo.WorkloadChanges")}
        assert names(read["outputs"]) == {(bucket, f"demo/staging/WorkloadChanges/{window_id}")}
        commit = of("commit", index)
        assert names(commit["outputs"]) == lake
        sources = {("spanner://demo-project/demo-instance", f"demo.{table}") for table in TABLES}
        assert names(commit["inputs"]) == sources
        for output in commit["outputs"]:
            table = output["name"].rsplit("/", 1)[-1]
            fields = output["facets"]["columnLineage"]["fields"]
            assert set(fields) == set(TABLES_BY_NAME[table].column_names), table
            for column, lineage in fields.items():
                (source,) = lineage["inputFields"]
                assert (source["namespace"], source["name"], source["field"]) == (
                    "spanner://demo-project/demo-instance", f"demo.{table}", column
                )  # fmt: skip
    # The snapshot's readers name the tables they read: together every table of the lake (and any
    # other table the stream watches), each a table of the demo database.
    snapshot_reads = [e for e in complete if e["job"]["name"] == f"{DAG_ID}.initial_snapshot.read"]
    read_tables = set().union(*(names(e["inputs"]) for e in snapshot_reads))
    spanner = "spanner://demo-project/demo-instance"
    assert {(spanner, f"demo.{table}") for table in TABLES} <= read_tables
    assert all(namespace == spanner and name.startswith("demo.") for namespace, name in read_tables)
