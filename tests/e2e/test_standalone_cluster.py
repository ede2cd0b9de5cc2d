"""The change-stream example DAG with ``spark_default`` on a real Spark standalone cluster.

A master and one worker run from the ``pyspark`` distribution on loopback ports of their own
(:class:`airflow_provider_cdc.testing.spark_cluster.StandaloneCluster`); the Airflow connection
``spark_default`` names the master. Every merge (the initial snapshot's and each window's) must run
there: an application on the master with executors on the worker, and no step may start Spark in local
mode. The Delta upsert writes with delta-rs and starts no Spark, so in client deploy mode it runs with the
worker's Python and submits nothing. After every window the Delta tables equal the committed history.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from support.dag_runs import END_TO_END, ExampleDagRuns
from support.gcs_dag import assert_equal_to_history

DAG_ID = "spanner_change_stream_to_lake"
TABLES = ("Customers", "Orders", "Readings")
WINDOWS = 3
#: the message Spark logs when an application runs in local mode (its executor is the driver)
LOCAL_MODE = "Starting executor ID driver"

pytestmark = [pytest.mark.spark, END_TO_END]


@dataclass
class ClusterDag(ExampleDagRuns):
    """The example DAG's home with ``spark_default`` on the cluster."""

    dag_id: ClassVar[str] = DAG_ID
    home: Any  # ExampleDagHome
    cluster: Any  # StandaloneCluster

    def lake(self) -> Any:
        from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

        return DeltaLakeTarget(str(self.home.lake_root))


@pytest.fixture(scope="module")
def cluster_dag(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterDag]:
    from conftest import example_dag_home_at

    from airflow_provider_cdc.testing.spark_cluster import StandaloneCluster

    root = tmp_path_factory.mktemp("standalone-cluster")
    (root / "dag").mkdir()
    with StandaloneCluster(root / "spark") as cluster, example_dag_home_at(root / "dag", WINDOWS, 80) as home:
        home.env.update(
            AIRFLOW_CONN_SPARK_DEFAULT=cluster.connection(),
            PYSPARK_PYTHON=sys.executable,  # the executors' Python: the worker's, with pyarrow
            **cluster.environment(),
        )
        yield ClusterDag(home, cluster)


def test_every_merge_runs_on_the_cluster_and_the_lake_equals_the_history(cluster_dag: ClusterDag) -> None:
    dag = cluster_dag
    merges = 0
    for index in range(WINDOWS):
        end = dag.window(index)[1]
        output = dag.home.airflow(
            "dags", "test", DAG_ID, end.isoformat(), log=dag.home.root / f"window-{index}.log", timeout=900
        )
        assert dag.home.dag_runs(DAG_ID)[-1][1:] == ("success", *dag.window(index)), output[-3000:]
        assert LOCAL_MODE not in output, f"a step of window {index} started Spark in local mode"
        # each merge job says where it runs: the cluster's master, an application of its own
        ran = re.findall(r"Spark master (\S+) \(application (\S+)\)", output)
        assert ran and {master for master, _ in ran} == {dag.cluster.master_url}, ran
        merges += len(ran)
        # only the merges were submitted: the upsert ran with this worker's Python
        assert output.count("Spark-Submit cmd") == len(ran), "the upsert must not start a JVM"
        assert "no spark-submit" in output
        assert_equal_to_history(dag, index, f"after window {index} on the cluster")

        apps = dag.cluster.applications()
        assert [app["id"] for app in apps][-len(ran) :] == [app_id for _, app_id in ran]
        executors = dag.cluster.executor_applications()
        for _, app_id in ran:
            assert app_id in executors, f"application {app_id} had no executor on the worker"
    # the initial snapshot's merge and one merge per window, every one an application of the master
    assert merges == WINDOWS + 1
    assert len(dag.cluster.applications()) == merges
    assert all(app["name"] == "cdc-merge-window" for app in dag.cluster.applications())
