"""A ``dataproc`` connection's fields, and the job and batch resources built from them."""

from __future__ import annotations

import re

import pytest

from airflow_provider_cdc.placement.dataproc.resources import (
    DataprocConnectionError,
    DataprocPlacement,
    pyspark_batch,
    pyspark_job,
    window_label,
    workload_id,
    workload_labels,
)

EXTRAS = {"project_id": "my-project", "region": "us-central1", "staging_uri": "gs://bucket/dataproc/"}


def test_a_connection_without_a_cluster_places_serverless_batches() -> None:
    placement = DataprocPlacement.from_connection("spark_default", EXTRAS)
    assert placement.serverless and placement.staging_uri == "gs://bucket/dataproc"
    assert placement.gcp_conn_id == "google_cloud_default" and placement.wait_timeout_seconds is None
    clustered = DataprocPlacement.from_connection("spark_default", {**EXTRAS, "cluster_name": "cdc"})
    assert not clustered.serverless and clustered.where.endswith("/clusters/cdc")
    assert placement.staged("abc", "job.py") == "gs://bucket/dataproc/cdc-jobs/abc/job.py"


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"project_id": None}, "'project_id'"),
        ({"region": ""}, "'region'"),
        ({"staging_uri": "/tmp/jobs"}, "staging_uri must be a gs:// folder"),
        ({"staging_uri": "gs://"}, "staging_uri must be a gs:// folder"),
        ({"region": "US Central"}, "invalid region"),
        ({"cluster_name": "Bad_Cluster"}, "invalid cluster_name"),
        ({"properties": ["spark.x=1"]}, "'properties' must be an object"),
        ({"wait_timeout_seconds": "-5"}, "wait_timeout_seconds must be a positive"),
    ],
)
def test_a_bad_connection_names_the_connection_and_the_field(change: dict, names: str) -> None:
    with pytest.raises(DataprocConnectionError) as failure:
        DataprocPlacement.from_connection("dataproc_jobs", {**EXTRAS, **change})
    assert "'dataproc_jobs'" in str(failure.value) and names in str(failure.value)


def test_a_workload_id_fits_every_id_dataproc_takes_and_never_repeats() -> None:
    ids = {workload_id("upsert", 1_767_226_800_000_000, try_number) for try_number in (None, 1, 12, 12)}
    assert len(ids) == 4
    for identifier in ids:
        # job id, batch id (4-63, [a-z0-9-], letter or digit at both ends) and request id (at most 40)
        assert len(identifier) <= 40 and re.fullmatch(r"[a-z0-9][a-z0-9-]{2,61}[a-z0-9]", identifier)


def test_labels_name_the_step_and_window_and_keep_the_connections() -> None:
    placement = DataprocPlacement.from_connection("d", {**EXTRAS, "labels": {"team": "data"}})
    labels = workload_labels(placement, "merge", "orders", "1-2", "Orders_To_Lake", "merge")
    assert labels == {
        "team": "data",
        "airflow-dag-id": "orders-to-lake",
        "airflow-task-id": "merge",
        "cdc-step": "merge",
        "cdc-window": window_label("orders", "1-2"),
    }
    assert window_label("orders", "1-2") != window_label("orders", "1-3")
    assert all(re.fullmatch(r"[a-z0-9_-]{0,63}", value) for value in labels.values())


def test_the_resources_carry_the_files_arguments_and_properties() -> None:
    placement = DataprocPlacement.from_connection(
        "d",
        {**EXTRAS, "cluster_name": "cdc", "properties": {"spark.executor.memory": "4g"},
         "service_account": "jobs@my-project.iam.gserviceaccount.com", "runtime_version": "2.2",
         "container_image": "us-docker.pkg.dev/my-project/cdc/jobs:1"},
    )  # fmt: skip
    common = dict(main_uri="gs://b/job.py", file_uris=["gs://b/a.zip"], args=["--window-end", 5],
                  properties={"spark.sql.shuffle.partitions": 8}, labels={"cdc-step": "merge"})  # fmt: skip
    job = pyspark_job(placement, job_id="cdc-merge-1", **common)
    assert job["placement"] == {"cluster_name": "cdc"} and job["reference"]["job_id"] == "cdc-merge-1"
    assert job["pyspark_job"]["args"] == ["--window-end", "5"]
    assert job["pyspark_job"]["properties"] == {
        "spark.executor.memory": "4g",
        "spark.sql.shuffle.partitions": "8",
    }
    batch = pyspark_batch(placement, **common)
    assert batch["runtime_config"]["version"] == "2.2"
    assert batch["runtime_config"]["container_image"] == "us-docker.pkg.dev/my-project/cdc/jobs:1"
    assert batch["environment_config"]["execution_config"] == {
        "service_account": "jobs@my-project.iam.gserviceaccount.com"
    }
    assert batch["pyspark_batch"]["python_file_uris"] == ["gs://b/a.zip"] and batch["labels"] == {
        "cdc-step": "merge"
    }
    serverless = DataprocPlacement.from_connection("d", EXTRAS)
    with pytest.raises(ValueError, match="Serverless"):
        pyspark_job(serverless, job_id="x", **common)
