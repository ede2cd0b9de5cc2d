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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.dag_runs import END_TO_END
from support.gcs_dag import BUCKET, DAG_ID, PIPELINE, TABLES, GcsDag, assert_equal_to_history, gcs_dag_home

#: Per window: where the credentials come from, and where the merge runs (a cold ``spark-submit`` per
#: window, or the warm Spark Connect server, which reads and writes gs:// through the task).
WINDOW_RUNS = (("key", "submit"), ("adc", "connect"))
WINDOWS = len(WINDOW_RUNS)
RERUN_WINDOW = WINDOWS - 1  # the last: its run has no snapshot to read again

pytestmark = [pytest.mark.spark, END_TO_END]


@pytest.fixture(scope="module")
def gcs_dag(spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsDag]:
    with gcs_dag_home(tmp_path_factory.mktemp("example-dag-gcs"), WINDOWS, spark_connect_server.port) as dag:
        yield dag


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
        assert_equal_to_history(dag, index, f"after window {index}")
        store = dag.metastore()
        try:
            windows = [(w.start, w.end, w.state.value) for w in store.list_windows(PIPELINE)]
            marks = store.table_watermarks(PIPELINE, target="delta")
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
    assert_equal_to_history(dag, WINDOWS - 1, f"after window {RERUN_WINDOW} ran again")
