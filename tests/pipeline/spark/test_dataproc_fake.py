"""The Dataproc fake through the google provider's own hook, and ``DataprocJobsHook`` against it.

The provider's clients are unchanged: gRPC over TLS to ``us-central1-dataproc.googleapis.com:443``,
reaching the fake through its ``CONNECT`` proxy (``grpc_proxy``) and trusting its certificate
(``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, set at start-up by conftest). Workloads run with ``spark-submit``.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from conftest import EMULATOR_PROJECT, dataproc_connection
from google.api_core import exceptions
from support.log_lines import LineLog

REGION = "us-central1"

pytestmark = pytest.mark.spark


def _hook() -> Any:
    from airflow.providers.google.cloud.hooks.dataproc import DataprocHook

    return DataprocHook(gcp_conn_id="google_cloud_dataproc")


def _upload(gcs: Any, name: str, text: str) -> str:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project="p", credentials=AnonymousCredentials(), client_options={"api_endpoint": gcs.endpoint}
    )
    client.bucket("cdc").blob(name).upload_from_string(text.encode())
    return f"gs://cdc/{name}"


def _job(main: str, job_id: str, cluster: str = "cdc", **pyspark: Any) -> dict[str, Any]:
    return {
        "reference": {"job_id": job_id},
        "placement": {"cluster_name": cluster},
        "pyspark_job": {"main_python_file_uri": main, **pyspark},
    }


class _TaskInstance:
    """What the provider's operators use of the calling task's instance: its try and ``xcom_push``
    (the console links)."""

    try_number = 1

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any, **_: Any) -> None:
        self.pushed[key] = value


def _wait(predicate: Any, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"{what} after {seconds} s"
        time.sleep(0.2)


def test_a_failed_job_ends_in_error_with_its_output_and_the_request_id_is_idempotent(dataproc_fake) -> None:
    dataproc, gcs, _ = dataproc_fake
    hook = _hook()
    main = _upload(
        gcs, "jobs/fails.py", "import sys\nprint('staged rows checked:', sys.argv[1:])\nsys.exit(3)\n"
    )
    job = hook.submit_job(project_id=EMULATOR_PROJECT, region=REGION, job=_job(main, "j-fails", args=["w1"]),
                          request_id="r-1")  # fmt: skip
    again = hook.submit_job(
        project_id=EMULATOR_PROJECT, region=REGION, job=_job(main, "j-other"), request_id="r-1"
    )
    assert again.reference.job_id == "j-fails" and again.job_uuid == job.job_uuid  # the first request's job
    with pytest.raises(Exception, match="Job failed"):
        hook.wait_for_job(job_id="j-fails", project_id=EMULATOR_PROJECT, region=REGION, wait_time=1)
    done = hook.get_job(job_id="j-fails", project_id=EMULATOR_PROJECT, region=REGION)
    assert (
        "reports job failure" in done.status.details
        and done.driver_output_resource_uri in done.status.details
    )
    states = [status.state.name for status in done.status_history] + [done.status.state.name]
    assert states == ["PENDING", "SETUP_DONE", "RUNNING", "ERROR"] and done.done
    # the driver output is where the job says, as Dataproc writes it
    assert dataproc.proxy.tunnelled and set(dataproc.proxy.tunnelled) == {
        f"{REGION}-dataproc.googleapis.com:443"
    }
    from airflow_provider_cdc.placement.dataproc.hook import DataprocJobsHook

    output = DataprocJobsHook().driver_output(done.driver_output_resource_uri, None)
    assert "staged rows checked: ['w1']" in output
    with pytest.raises(exceptions.FailedPrecondition, match="job is in state ERROR"):
        hook.cancel_job(job_id="j-fails", project_id=EMULATOR_PROJECT, region=REGION)


def test_a_job_runs_on_the_clusters_master_and_one_that_picks_its_own_fails(dataproc_fake) -> None:
    """As on Dataproc, the master is the cluster's (``spark-defaults.conf``), not the job's command line;
    a driver that replaces it with a master of its own fails, naming both."""
    from airflow_provider_cdc.placement.dataproc.hook import DataprocJobsHook
    from airflow_provider_cdc.testing.dataproc_fake.workloads import DEFAULT_CLUSTER_MASTER

    dataproc, gcs, _ = dataproc_fake
    hook = _hook()
    session = "from pyspark.sql import SparkSession\nbuilder = SparkSession.builder\n"
    report = "spark = builder.getOrCreate()\nprint('ran on', spark.sparkContext.master)\nspark.stop()\n"
    cases = {
        "j-cluster-master": (session + report, "DONE"),
        "j-own-master": (session + "builder = builder.master('local[1]')\n" + report, "ERROR"),
    }
    for job_id, (text, _) in cases.items():
        main = _upload(gcs, f"jobs/{job_id}.py", text)
        hook.submit_job(project_id=EMULATOR_PROJECT, region=REGION, job=_job(main, job_id))
    for job_id, (_, state) in cases.items():
        def job(job_id: str = job_id) -> Any:
            return hook.get_job(job_id=job_id, project_id=EMULATOR_PROJECT, region=REGION)

        _wait(lambda: job().done, f"job {job_id} not done")
        done = job()
        assert done.status.state.name == state, (job_id, done.status.details)
        output = "\n".join(DataprocJobsHook().driver_output(done.driver_output_resource_uri, None))
        if state == "DONE":
            assert f"ran on {DEFAULT_CLUSTER_MASTER}" in output
        else:
            assert "ran on local[1]" in output
            assert f"ran Spark on master local[1], not the cluster's {DEFAULT_CLUSTER_MASTER}" in output


def test_the_fake_refuses_what_dataproc_refuses(dataproc_fake) -> None:
    dataproc, gcs, _ = dataproc_fake
    hook = _hook()
    main = _upload(gcs, "jobs/missing-file.py", "print('never')\n")
    refused = [
        (exceptions.NotFound, "Cluster", _job(main, "j1", cluster="nowhere")),
        (exceptions.InvalidArgument, "must be a .py file", _job("gs://cdc/jobs/job.jar", "j2")),
        (
            exceptions.InvalidArgument,
            ".py, .egg or .zip",
            _job(main, "j3", python_file_uris=["gs://cdc/a.tar"]),
        ),
        (exceptions.InvalidArgument, "Invalid job id", _job(main, "job id with spaces")),
        (exceptions.InvalidArgument, "Invalid label key", {**_job(main, "j4"), "labels": {"Bad": "x"}}),
    ]
    for error, message, job in refused:
        with pytest.raises(error, match=message):
            hook.submit_job(project_id=EMULATOR_PROJECT, region=REGION, job=job)
    with pytest.raises(exceptions.InvalidArgument, match="requestId"):
        hook.submit_job(project_id=EMULATOR_PROJECT, region=REGION, job=_job(main, "j5"), request_id="x" * 41)
    with pytest.raises(exceptions.InvalidArgument, match="Batch id"):
        hook.create_batch(region=REGION, project_id=EMULATOR_PROJECT, batch_id="B1",
                          batch={"pyspark_batch": {"main_python_file_uri": main}})  # fmt: skip
    # A job whose files are not in Cloud Storage fails without running.
    hook.submit_job(project_id=EMULATOR_PROJECT, region=REGION, job=_job("gs://cdc/jobs/absent.py", "j6"))
    _wait(lambda: hook.get_job(job_id="j6", project_id=EMULATOR_PROJECT, region=REGION).done, "j6 not done")
    failed = hook.get_job(job_id="j6", project_id=EMULATOR_PROJECT, region=REGION)
    assert failed.status.state.name == "ERROR" and "Failed to fetch" in failed.status.details
    with pytest.raises(exceptions.AlreadyExists):
        hook.submit_job(project_id=EMULATOR_PROJECT, region=REGION, job=_job(main, "j6"))
    # The proxy tunnels Dataproc's endpoints only.
    with socket.create_connection(("127.0.0.1", dataproc.proxy.port)) as proxy:
        proxy.sendall(b"CONNECT storage.googleapis.com:443 HTTP/1.1\r\n\r\n")
        assert proxy.recv(100).startswith(b"HTTP/1.1 403")


@pytest.mark.parametrize("cluster", ["cdc", None], ids=["cluster-job", "serverless-batch"])
def test_fencing_cancels_what_an_earlier_try_of_the_step_left_running(
    dataproc_fake, monkeypatch, cluster
) -> None:
    """A task killed without cleanup leaves its Dataproc job running; the next try of the same step and
    window cancels it and waits for its end before submitting; another window's job runs on."""
    from airflow_provider_cdc.placement.dataproc.hook import DataprocJobsHook
    from airflow_provider_cdc.placement.dataproc.resources import pyspark_batch, pyspark_job, workload_labels

    dataproc, gcs, _ = dataproc_fake
    monkeypatch.setenv("AIRFLOW_CONN_DATAPROC_JOBS", dataproc_connection(cluster))
    jobs_hook = DataprocJobsHook("dataproc_jobs")
    placement, google = jobs_hook.placement, _hook()
    main = _upload(gcs, "jobs/sleeps.py", "import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    ours = workload_labels(placement, "merge", "orders", "1-2", "orders", "merge")
    others = workload_labels(placement, "merge", "orders", "2-3", "orders", "merge")

    def submit(identifier: str, labels: dict[str, str]) -> None:
        resource = dict(main_uri=main, file_uris=[], args=[], properties={}, labels=labels)
        if cluster:
            google.submit_job(project_id=EMULATOR_PROJECT, region=REGION,
                              job=pyspark_job(placement, job_id=identifier, **resource))  # fmt: skip
        else:
            google.create_batch(region=REGION, project_id=EMULATOR_PROJECT, batch_id=identifier,
                                batch=pyspark_batch(placement, **resource))  # fmt: skip

    submit("stale-try", ours)
    submit("other-window", others)
    workloads = dataproc.state.workloads
    names = sorted(workloads)
    _wait(lambda: all(workloads[n].process is not None for n in names), "the workloads did not start")
    log = LineLog()
    jobs_hook.log.info = log.info  # type: ignore[method-assign]
    assert jobs_hook.fence(ours) == 1
    stale = next(w for n, w in workloads.items() if "stale-try" in n)
    other = next(w for n, w in workloads.items() if "other-window" in n)
    assert stale.cancelled and stale.process.poll() is not None  # ended before fence() returned
    assert not other.cancelled and other.process.poll() is None  # another window's job runs on
    if cluster:
        assert google.get_job(
            job_id="stale-try", project_id=EMULATOR_PROJECT, region=REGION
        ).status.state.name == ("CANCELLED")
    else:
        batch = google.get_batch(batch_id="stale-try", region=REGION, project_id=EMULATOR_PROJECT)
        assert batch.state.name == "CANCELLED"
    assert any("stale-try" in line and "earlier try" in line for line in log.lines)
    assert jobs_hook.fence(ours) == 0  # nothing of this step and window is left


def test_a_dataproc_step_refuses_local_locations_and_credentials_it_would_carry(
    monkeypatch, tmp_path
) -> None:
    import json

    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator

    monkeypatch.setenv("AIRFLOW_CONN_DATAPROC_JOBS", dataproc_connection("cdc"))
    kwargs = dict(
        task_id="merge",
        conn_id="dataproc_jobs",
        stream_key="projects/p/instances/i/databases/d/s",
        metastore_conn_id=None,
        window_start="2024-06-01T12:00:00Z",
        window_end="2024-06-01T12:10:00Z",
    )
    local = SparkMergeWindowOperator(
        locations={"staging_root": str(tmp_path / "staging"), "changeset_root": "gs://cdc/changesets"},
        **kwargs,
    )
    with pytest.raises(ValueError, match="cannot read this worker's disk") as failure:
        local.execute({})
    assert str(tmp_path / "staging") in str(failure.value)
    key = {
        "type": "service_account",
        "client_email": "etl@p.iam.gserviceaccount.com",
        "private_key": "k" * 40,
    }
    connection = {"conn_type": "google_cloud_platform", "extra": {"keyfile_dict": json.dumps(key)}}
    monkeypatch.setenv("AIRFLOW_CONN_ETL_KEY", json.dumps(connection))
    keyed = SparkMergeWindowOperator(
        locations={"staging_root": "gs://cdc/staging", "changeset_root": "gs://cdc/changesets"},
        gcp_conn_id="etl_key", **kwargs,
    )  # fmt: skip
    with pytest.raises(ValueError, match="Dataproc job's resource") as failure:
        keyed.execute({})
    assert "k" * 40 not in str(failure.value)


def test_a_step_whose_batch_fails_raises_with_the_driver_outputs_last_lines(
    dataproc_fake, monkeypatch, tmp_path
) -> None:
    from airflow_provider_cdc.placement.dataproc.hook import DataprocJobError, DataprocJobsHook
    from airflow_provider_cdc.placement.dataproc.resources import workload_labels

    dataproc, _, _ = dataproc_fake
    monkeypatch.setenv("AIRFLOW_CONN_DATAPROC_JOBS", dataproc_connection(None))
    hook = DataprocJobsHook("dataproc_jobs")
    main = tmp_path / "job.py"
    main.write_text("import sys\nprint('window w1: table Orders holds version 7, expected 6')\nsys.exit(2)\n")
    log, ti = LineLog(), _TaskInstance()
    with pytest.raises(DataprocJobError) as failure:
        hook.run(
            {"ti": ti}, task_id="upsert", step="upsert", window_end_micros=2, main=str(main), py_files=[],
            args=["w1"],
            properties={}, storage_options=None, log=log, dag_id="orders",
            labels=workload_labels(hook.placement, "upsert", "orders", "1-2", "orders", "upsert"),
        )  # fmt: skip
    message = str(failure.value)
    assert message.startswith("Dataproc batch cdc-upsert-2-") and "(job.py) did not succeed" in message
    assert "Last lines of its driver output:" in message and "holds version 7, expected 6" in message
    assert ti.pushed  # the provider's link to the batch, on the calling task
    (name,) = dataproc.state.submitted
    assert dataproc.state.batches[name].labels["cdc-step"] == "upsert"


def test_job_files_are_staged_once_per_content_with_the_connections_key(
    dataproc_fake, monkeypatch, tmp_path
) -> None:
    """With a key in the step's Google connection the files go through delta-rs's object store (the XML
    API); a second staging of the same files writes nothing."""
    from airflow_provider_cdc.placement.dataproc.hook import DataprocJobsHook

    _, gcs, _ = dataproc_fake
    # as a worker with a key in its Google connection: the key names the endpoint, the environment none
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    monkeypatch.delenv("GOOGLE_SERVICE_ACCOUNT")
    monkeypatch.setenv("AIRFLOW_CONN_DATAPROC_JOBS", dataproc_connection("cdc"))
    job, archive = tmp_path / "job.py", tmp_path / "jobs.zip"
    job.write_text("print('merge')\n")
    archive.write_bytes(b"PK\x05\x06" + bytes(18))
    hook = DataprocJobsHook("dataproc_jobs")
    uris = hook.stage([str(job), str(archive)], gcs.delta_storage_options())
    assert [u.rsplit("/", 1)[-1] for u in uris] == ["job.py", "jobs.zip"]
    assert uris[0].rsplit("/", 1)[0] == uris[1].rsplit("/", 1)[0]
    assert uris[0].startswith("gs://cdc/dataproc/cdc-jobs/")
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project="p", credentials=AnonymousCredentials(), client_options={"api_endpoint": gcs.endpoint}
    )
    blob = client.bucket("cdc").get_blob(uris[0].split("gs://cdc/", 1)[1])
    assert blob.download_as_bytes() == b"print('merge')\n"
    generation = blob.generation
    assert hook.stage([str(job), str(archive)], gcs.delta_storage_options()) == uris
    assert client.bucket("cdc").get_blob(blob.name).generation == generation  # not written again
    job.write_text("print('merge v2')\n")
    assert (
        hook.stage([str(job), str(archive)], gcs.delta_storage_options())[0] != uris[0]
    )  # new content: new folder
