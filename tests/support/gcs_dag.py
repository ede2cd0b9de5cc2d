"""The change-stream example DAG with every root on ``gs://`` (the Cloud Storage fake): its Airflow home,
credentials, Spark placement, runs, and the comparison of its Delta tables with the committed history."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from support.dag_runs import ExampleDagRuns

DAG_ID = "spanner_change_stream_to_lake"
PIPELINE = DAG_ID  # the DAG's default pipeline_id
TABLES = ("Customers", "Orders", "Readings")
BUCKET = "cdc"
CHANGES_PER_WINDOW = 80


@dataclass
class GcsRoots:
    """A DAG's roots on the Cloud Storage fake (``gs://cdc/{prefix}/...``) and the credentials every
    client of the DAG's tasks and of the test uses to reach them: ``google_cloud_default`` with the
    fake's key (delta-rs) and ``STORAGE_EMULATOR_HOST`` (pyarrow, ``google-cloud-storage``)."""

    fake: Any  # FakeGcsProcess
    key_file: Path
    prefix: str

    def root(self, name: str) -> str:
        return f"gs://{BUCKET}/{self.prefix}/{name}"

    @property
    def conf(self) -> dict[str, str]:
        """The DAG run's conf: its three roots on the fake."""
        return {
            "staging_root": self.root("staging"),
            "changeset_root": self.root("changesets"),
            "lake_root": self.root("lake"),
        }

    @property
    def storage_options(self) -> dict[str, str]:
        return {"google_service_account_key": self.key_file.read_text()}

    def lake(self) -> Any:
        """The Delta tables under the lake root, read through the fake with the key."""
        from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

        return DeltaLakeTarget(self.root("lake"), self.storage_options)

    def lake_snapshot(self, tables: Sequence[str]) -> dict[str, tuple[int, list[str]]]:
        """Per Delta table: version and every row (hidden CDC columns included), sorted."""
        lake = self.lake()
        return {
            table: (
                lake.open(table).version(),
                sorted(
                    json.dumps(r, sort_keys=True, default=str) for r in lake.read_table(table).to_pylist()
                ),
            )
            for table in tables
        }

    def configure(self, env: dict[str, str]) -> None:
        """Point an Airflow home's commands and tasks at the fake, with the key in the connection."""
        env["STORAGE_EMULATOR_HOST"] = self.fake.endpoint
        env["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"] = json.dumps(
            {"conn_type": "google_cloud_platform", "extra": {"keyfile_dict": self.key_file.read_text()}}
        )


@dataclass
class GcsDag(GcsRoots, ExampleDagRuns):
    """The change-stream DAG's Airflow home, the emulator's history and the Cloud Storage fake holding
    every root (under ``gs://cdc/demo``); its runs name the roots in their conf."""

    dag_id: ClassVar[str] = DAG_ID
    home: Any = None  # ExampleDagHome
    spark_connect_port: int = 0

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

    def lake_snapshot(self, tables: Sequence[str] = TABLES) -> dict[str, tuple[int, list[str]]]:
        return super().lake_snapshot(tables)


@contextmanager
def gcs_dag_home(root: Path, windows: int, spark_connect_port: int) -> Iterator[GcsDag]:
    """The demo database (``windows`` windows) on an emulator, the fake with the bucket ``cdc`` and an
    Airflow 3 home whose clients find the fake through ``STORAGE_EMULATOR_HOST`` and the key's
    ``gcs_base_url``."""
    from conftest import emulator_dag_home

    from airflow_provider_cdc.testing.demo import DemoSettings, load_demo
    from airflow_provider_cdc.testing.gcs_fake import FakeGcsProcess

    settings = DemoSettings(windows=windows, changes_per_window=CHANGES_PER_WINDOW, prior_changes=100)
    with (
        FakeGcsProcess([BUCKET]) as fake,
        emulator_dag_home(root, settings, load_demo, reserialize=False) as home,
    ):
        key_file = root / "service-account.json"
        key_file.write_text(fake.delta_storage_options()["google_service_account_key"])
        home.env["STORAGE_EMULATOR_HOST"] = fake.endpoint
        yield GcsDag(fake, key_file, "demo", home, spark_connect_port)


def assert_equal_to_history(dag: GcsDag, index: int, when: str) -> None:
    from airflow_provider_cdc.testing.lake_check import compare_lake_to_truth

    truth = dag.truth_after(index)
    assert sorted(truth) == list(TABLES)
    for result in compare_lake_to_truth(dag.lake(), truth):
        assert result.equal, (
            f"Delta table {result.table} {when}: {result.lake_rows} rows, {result.truth_rows} in the "
            f"history; only in the lake: {result.only_in_lake}; only in the history: {result.only_in_truth}"
        )


@contextmanager
def gcs_roots(directory: Path, prefix: str) -> Iterator[GcsRoots]:
    """The Cloud Storage fake (bucket ``cdc``, a child process) holding a DAG's roots under ``prefix``."""
    from airflow_provider_cdc.testing.gcs_fake import FakeGcsProcess

    with FakeGcsProcess([BUCKET]) as fake:
        key_file = directory / "service-account.json"
        key_file.write_text(fake.delta_storage_options()["google_service_account_key"])
        yield GcsRoots(fake, key_file, prefix)
