"""The change-stream example DAG end to end with every root on ``gs://``, against the Cloud Storage fake.

The demo database (three windows of inserts, partial updates, deletes and re-inserts, with partition
splits and merges) is served by the project's emulator in this process; the Cloud Storage fake
(``airflow_provider_cdc.testing.gcs_fake``) serves the JSON and XML APIs from a child process (pyarrow
holds the GIL while it waits on it). ``airflow dags test spanner_change_stream_to_lake <window end>
-c {...}`` runs each window with ``staging_root``, ``changeset_root`` and ``lake_root`` on
``gs://cdc/...``. The credentials come from the Google connection ``google_cloud_default``:

- a key: its ``keyfile_dict`` is a service-account key whose ``gcs_base_url`` names the fake and which
  sets ``disable_oauth`` (``object_store``'s own key fields), so delta-rs, handed the key as
  ``google_service_account_key``, talks to the fake; ``STORAGE_EMULATOR_HOST`` sends pyarrow and
  ``google-cloud-storage`` there;
- Application Default Credentials: the connection holds no key, so no storage option is set and every
  client finds its credentials in the environment (``STORAGE_EMULATOR_HOST``; for delta-rs the key
  file in ``GOOGLE_SERVICE_ACCOUNT``, which ``object_store`` reads from the environment; the file
  ``GOOGLE_APPLICATION_CREDENTIALS`` names would need a real private key, as it ignores the key's
  ``gcs_base_url`` and ``disable_oauth``).

The first window runs with the key and merges with ``spark-submit`` (the merge job copies the change
set to gs:// through its driver); the second runs with Application Default Credentials and merges on a
local Spark Connect server (the task reads and writes gs://), on the same pipeline. After every window
the Delta tables, read back through the fake, equal the committed history up to the window's end; then
the last window runs again and changes nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

DAG_ID = "spanner_change_stream_to_lake"
PIPELINE = DAG_ID  # the DAG's default pipeline_id
TABLES = ("Customers", "Orders", "Readings")
BUCKET = "cdc"
CHANGES_PER_WINDOW = 80
#: Per window: where the credentials come from, and where the merge runs (a cold ``spark-submit`` per
#: window, or the warm Spark Connect server, which reads and writes gs:// through the task).
WINDOW_RUNS = (("key", "submit"), ("adc", "connect"))
WINDOWS = len(WINDOW_RUNS)
RERUN_WINDOW = WINDOWS - 1  # the last: its run has no snapshot to read again

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        os.environ.get("CDC_E2E_TESTS") != "1",
        reason="end-to-end DAG tests run with CDC_E2E_TESTS=1, as scripts/test.sh sets it",
    ),
]


@dataclass
class GcsDag:
    """The DAG's Airflow home, the emulator's history and the Cloud Storage fake holding every root."""

    home: Any  # ExampleDagHome
    fake: Any  # FakeGcsProcess
    key_file: Path  # a service-account key pointing object_store at the fake
    spark_connect_port: int

    @property
    def storage_options(self) -> dict[str, str]:
        """What delta-rs needs to read the fake from this process."""
        return {"google_service_account_key": self.key_file.read_text()}

    def root(self, name: str) -> str:
        return f"gs://{BUCKET}/demo/{name}"

    @property
    def conf(self) -> dict[str, str]:
        """The DAG's roots, all on the fake."""
        return {
            "staging_root": self.root("staging"),
            "changeset_root": self.root("changesets"),
            "lake_root": self.root("lake"),
        }

    def use_credentials(self, source: str) -> None:
        """Give the Airflow commands the Google connection of ``source``: ``key`` (the key in the
        connection) or ``adc`` (no key in it; the clients' credentials come from the environment)."""
        env = self.home.env
        env.pop("GOOGLE_SERVICE_ACCOUNT", None)
        if source == "key":
            extra = {"keyfile_dict": self.key_file.read_text()}
        else:
            env["GOOGLE_SERVICE_ACCOUNT"] = str(self.key_file)  # object_store reads it from the environment
            extra = {}
        env["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"] = json.dumps(
            {"conn_type": "google_cloud_platform", "extra": extra}
        )

    def use_spark(self, where: str) -> None:
        """Merge with ``spark-submit`` (no Spark connection) or on the Spark Connect server."""
        from conftest import spark_connect_connection

        self.home.env.pop("AIRFLOW_CONN_SPARK_DEFAULT", None)
        if where == "connect":
            self.home.env["AIRFLOW_CONN_SPARK_DEFAULT"] = spark_connect_connection(self.spark_connect_port)

    def window(self, index: int) -> tuple[datetime, datetime]:
        return self.home.settings.window_bounds(index)

    def snapshot_window(self) -> tuple[datetime, datetime]:
        start = self.window(0)[0]
        return start - timedelta(microseconds=1), start

    def run(self, index: int, name: str) -> str:
        """``airflow dags test`` of window ``index`` (the date given is the window's end)."""
        end = self.window(index)[1]
        return self.home.airflow(
            "dags", "test", DAG_ID, end.isoformat(), "-c", json.dumps(self.conf),
            log=self.home.root / f"{name}.log", timeout=600,
        )  # fmt: skip

    def lake(self) -> Any:
        from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

        return DeltaLakeTarget(self.root("lake"), self.storage_options)

    def truth_after(self, index: int) -> dict[str, list[dict[str, Any]]]:
        from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND
        from airflow_provider_cdc.testing.workload import TABLES_BY_NAME

        state = self.home.workload.state_at(self.window(index)[1] - ONE_MICROSECOND)
        return {
            name: [TABLES_BY_NAME[name].encode_values(rows[key]) for key in sorted(rows)]
            for name, rows in state.items()
        }

    def lake_snapshot(self) -> dict[str, tuple[int, list[str]]]:
        """Per Delta table: version and every row (hidden CDC columns included), sorted."""
        lake = self.lake()
        return {
            table: (
                lake.open(table).version(),
                sorted(
                    json.dumps(r, sort_keys=True, default=str) for r in lake.read_table(table).to_pylist()
                ),
            )
            for table in TABLES
        }

    def metastore(self) -> Any:
        from airflow_provider_cdc.metastore import Metastore

        return Metastore(self.home.metastore_url)


@pytest.fixture(scope="module")
def gcs_dag(spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsDag]:
    """The demo database on an emulator, the fake with the bucket ``cdc`` and an Airflow 3 home whose
    clients find the fake through ``STORAGE_EMULATOR_HOST`` and the key's ``gcs_base_url``."""
    from conftest import emulator_dag_home

    from airflow_provider_cdc.testing.demo import DemoSettings, load_demo
    from airflow_provider_cdc.testing.gcs_fake import FakeGcsProcess

    root = tmp_path_factory.mktemp("example-dag-gcs")
    settings = DemoSettings(windows=WINDOWS, changes_per_window=CHANGES_PER_WINDOW, prior_changes=100)
    with (
        FakeGcsProcess([BUCKET]) as fake,
        emulator_dag_home(root, settings, load_demo, reserialize=False) as home,
    ):
        key_file = root / "service-account.json"
        key_file.write_text(fake.delta_storage_options()["google_service_account_key"])
        home.env["STORAGE_EMULATOR_HOST"] = fake.endpoint
        yield GcsDag(home, fake, key_file, spark_connect_server.port)


def _assert_equal_to_history(dag: GcsDag, index: int, when: str) -> None:
    from airflow_provider_cdc.testing.lake_check import compare_lake_to_truth

    truth = dag.truth_after(index)
    assert sorted(truth) == list(TABLES)
    for result in compare_lake_to_truth(dag.lake(), truth):
        assert result.equal, (
            f"Delta table {result.table} {when}: {result.lake_rows} rows, {result.truth_rows} in the "
            f"history; only in the lake: {result.only_in_lake}; only in the history: {result.only_in_truth}"
        )


def test_windows_on_gcs_equal_the_history_and_a_rerun_changes_nothing(gcs_dag: GcsDag) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    dag = gcs_dag
    for index, (source, spark) in enumerate(WINDOW_RUNS):
        dag.use_credentials(source)
        dag.use_spark(spark)
        output = dag.run(index, f"window-{index}")
        # The upsert job got the key as a storage option, or (ADC) no storage option at all.
        names = ["google_service_account_key"] if source == "key" else []
        assert f'"storage_option_names": {json.dumps(names)}' in output, source
        assert ("Spark-Submit cmd" in output) == (spark == "submit"), spark
        assert dag.home.dag_runs(DAG_ID)[-1][1:] == ("success", *dag.window(index))
        _assert_equal_to_history(dag, index, f"after window {index}")
        store = dag.metastore()
        try:
            windows = [(w.start, w.end, w.state.value) for w in store.list_windows(PIPELINE)]
            marks = store.table_watermarks(PIPELINE)
        finally:
            store.dispose()
        assert windows == [(*dag.snapshot_window(), "applied")] + [
            (*dag.window(i), "applied") for i in range(index + 1)
        ]
        assert marks == dict.fromkeys(TABLES, dag.window(index)[1])

    # Every root is on the fake and nothing was written locally.
    client = storage.Client(
        project="demo-project",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": dag.fake.endpoint},
    )
    names = [blob.name for blob in client.list_blobs(BUCKET)]
    for prefix in ("demo/staging/", "demo/changesets/", *(f"demo/lake/{t}/_delta_log/" for t in TABLES)):
        assert any(name.startswith(prefix) for name in names), f"nothing under gs://{BUCKET}/{prefix}"
    assert not Path(dag.home.demo_home).exists() or not any(Path(dag.home.demo_home).iterdir())

    # A window again: nothing changes in the lake.
    before = dag.lake_snapshot()
    dag.use_credentials("key")  # the Spark Connect server still merges
    dag.run(RERUN_WINDOW, f"window-{RERUN_WINDOW}-again")
    runs = [run[1:] for run in dag.home.dag_runs(DAG_ID)]
    assert runs == [("success", *dag.window(i)) for i in range(WINDOWS)], runs
    assert dag.lake_snapshot() == before
    _assert_equal_to_history(dag, WINDOWS - 1, f"after window {RERUN_WINDOW} ran again")
