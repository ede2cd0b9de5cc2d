"""Where and how a window's job runs on Dataproc, from a ``dataproc`` connection (pure: no I/O).

A Spark connection of type ``dataproc`` names the project, the region, the cluster (or none: Serverless
for Apache Spark batches) and a ``gs://`` folder for the job files. :class:`DataprocPlacement` reads and
checks it; :func:`pyspark_job` and :func:`pyspark_batch` build the resources the google provider's
``DataprocSubmitJobOperator`` and ``DataprocCreateBatchOperator`` submit; :func:`workload_id` and
:func:`workload_labels` name one run of one window's step, so that a later try can find what an
earlier one left running.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The connection type of a Spark connection that sends the jobs to Dataproc.
DATAPROC_CONNECTION_TYPE = "dataproc"
#: What :func:`workload_labels` sets, besides Airflow's own labels.
STEP_LABEL = "cdc-step"
WINDOW_LABEL = "cdc-window"
_REGION = re.compile(r"^[a-z]+(-[a-z0-9]+)+$|^global$")
_PROJECT = re.compile(r"^(?:[a-z][a-z0-9.:-]{4,61}[a-z0-9])$")
_CLUSTER = re.compile(r"^[a-z](?:[a-z0-9-]{0,49}[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"[^a-z0-9-]")  # as the google provider writes Airflow's ids in labels


class DataprocConnectionError(ValueError):
    """A ``dataproc`` connection whose fields cannot place a job (the message names connection and field)."""


@dataclass(frozen=True)
class DataprocPlacement:
    """A ``dataproc`` connection's fields.

    :param project_id: the project the jobs run in.
    :param region: the Dataproc region (``us-central1``).
    :param staging_uri: ``gs://bucket/folder`` where the job files and the job archive are staged.
    :param cluster_name: the cluster the jobs are submitted to; ``None``: Serverless batches.
    :param properties: Spark properties of every job (a task's ``conf`` adds to them).
    :param runtime_version: Serverless runtime version (``2.2``); default the service's.
    :param container_image: Serverless: a custom container image (with ``deltalake`` and ``pyarrow``).
    :param service_account: Serverless: the service account the batch runs as.
    :param subnetwork_uri: Serverless: the subnetwork the batch runs in.
    :param labels: labels of every job or batch.
    :param gcp_conn_id: the Google Cloud connection the Dataproc API is called with.
    :param impersonation_chain: service account(s) to impersonate with ``gcp_conn_id``.
    :param wait_timeout_seconds: fail a job that has not finished after this long (``None``: wait).
    """

    project_id: str
    region: str
    staging_uri: str
    cluster_name: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    runtime_version: str | None = None
    container_image: str | None = None
    service_account: str | None = None
    subnetwork_uri: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    gcp_conn_id: str = "google_cloud_default"
    impersonation_chain: str | tuple[str, ...] | None = None
    wait_timeout_seconds: int | None = None

    @property
    def serverless(self) -> bool:
        """Whether jobs run as Serverless batches (no cluster named)."""
        return self.cluster_name is None

    @property
    def where(self) -> str:
        """The cluster or the batches' location, for logs."""
        base = f"projects/{self.project_id}/regions/{self.region}"
        return f"{base}/clusters/{self.cluster_name}" if self.cluster_name else f"{base} (Serverless batches)"

    def staged(self, digest: str, name: str) -> str:
        """The ``gs://`` URI of a staged file: one folder per content (``digest``), so files are never
        overwritten and a staged version stays valid while an older job still reads it."""
        return f"{self.staging_uri.rstrip('/')}/cdc-jobs/{digest}/{name}"

    @classmethod
    def from_connection(cls, conn_id: str, extras: Mapping[str, Any]) -> DataprocPlacement:
        """Read and check a ``dataproc`` connection's extras (errors name the connection and field)."""

        def text(name: str, required: bool = False) -> str | None:
            value = extras.get(name)
            if value in (None, ""):
                if required:
                    raise DataprocConnectionError(
                        f"connection {conn_id!r} (dataproc) needs the extra {name!r}"
                    )
                return None
            if not isinstance(value, str):
                raise DataprocConnectionError(f"connection {conn_id!r}: {name!r} must be text, got {value!r}")
            return value.strip()

        def mapping(name: str) -> dict[str, str]:
            value = extras.get(name) or {}
            if isinstance(value, str):  # the connection form's text: key=value; key=value (or JSON)
                try:
                    value = key_values(value)
                except ValueError as error:
                    raise DataprocConnectionError(f"connection {conn_id!r}: {name!r}: {error}") from None
            if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
                raise DataprocConnectionError(
                    f"connection {conn_id!r}: {name!r} must be an object, got {value!r}"
                )
            return {key: str(item) for key, item in value.items()}

        project, region = text("project_id", True), text("region", True)
        staging = text("staging_uri", True)
        cluster = text("cluster_name")
        assert project and region and staging
        if not _PROJECT.match(project):
            raise DataprocConnectionError(f"connection {conn_id!r}: invalid project_id {project!r}")
        if not _REGION.match(region):
            raise DataprocConnectionError(f"connection {conn_id!r}: invalid region {region!r}")
        if not staging.startswith("gs://") or len(staging.rstrip("/")) <= len("gs://"):
            raise DataprocConnectionError(
                f"connection {conn_id!r}: staging_uri must be a gs:// folder the jobs can read, "
                f"got {staging!r}"
            )
        if cluster is not None and not _CLUSTER.match(cluster):
            raise DataprocConnectionError(f"connection {conn_id!r}: invalid cluster_name {cluster!r}")
        chain = extras.get("impersonation_chain") or None
        if isinstance(chain, str) and "," in chain:  # a delegation chain as the form's text
            chain = tuple(item.strip() for item in chain.split(",") if item.strip())
        elif chain is not None and not isinstance(chain, str):
            chain = tuple(str(item) for item in chain)
        timeout = extras.get("wait_timeout_seconds")
        if timeout not in (None, ""):
            try:
                timeout = int(timeout)
            except (TypeError, ValueError):
                timeout = 0
            if timeout <= 0:
                raise DataprocConnectionError(
                    f"connection {conn_id!r}: wait_timeout_seconds must be a positive number of seconds"
                )
        else:
            timeout = None
        return cls(
            project_id=project,
            region=region,
            staging_uri=staging.rstrip("/"),
            cluster_name=cluster,
            properties=mapping("properties"),
            runtime_version=text("runtime_version"),
            container_image=text("container_image"),
            service_account=text("service_account"),
            subnetwork_uri=text("subnetwork_uri"),
            labels=mapping("labels"),
            gcp_conn_id=text("gcp_conn_id") or "google_cloud_default",
            impersonation_chain=chain,
            wait_timeout_seconds=timeout,
        )


def key_values(text: str) -> dict[str, str]:
    """``key=value`` pairs separated by semicolons, or a JSON object, as a mapping (empty text: none)."""
    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"not a JSON object: {error.msg}") from None
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
        return {str(key): str(item) for key, item in value.items()}
    pairs: dict[str, str] = {}
    for part in filter(None, (piece.strip() for piece in text.split(";"))):
        key, sep, item = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected key=value pairs separated by ';', got {part!r}")
        pairs[key.strip()] = item.strip()
    return pairs


def content_digest(parts: Sequence[bytes]) -> str:
    """A short digest of the staged files' contents (their folder under ``cdc-jobs/``)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:20]


def window_label(pipeline: str, window_id: str) -> str:
    """The ``cdc-window`` label of a pipeline's window (a digest: label values are short)."""
    return hashlib.sha256(f"{pipeline}\0{window_id}".encode()).hexdigest()[:32]


def workload_labels(
    placement: DataprocPlacement, step: str, pipeline: str, window_id: str, dag_id: str, task_id: str
) -> dict[str, str]:
    """The labels of one window's step: the connection's, Airflow's DAG and task (as the provider
    labels batches), the step and the window."""
    labels = dict(placement.labels)
    for key, value in (("airflow-dag-id", dag_id), ("airflow-task-id", task_id)):
        cleaned = _LABEL_VALUE.sub("-", value.lower())[:63]
        if cleaned:
            labels[key] = cleaned
    labels[STEP_LABEL] = step
    labels[WINDOW_LABEL] = window_label(pipeline, window_id)
    return labels


def workload_id(step: str, window_end_micros: int, try_number: int | None = None) -> str:
    """An id for one run of a step, valid as a job id, a batch id and a request id (``[a-z0-9-]``, at
    most 40): the step, the window's end, the try and a random part, so a retry never collides with an
    earlier try."""
    attempt = f"-t{try_number}" if try_number else ""
    return f"cdc-{step}-{window_end_micros}{attempt}-{uuid.uuid4().hex[:6]}"[:40]


def pyspark_job(
    placement: DataprocPlacement,
    *,
    job_id: str,
    main_uri: str,
    file_uris: Sequence[str],
    args: Sequence[str],
    properties: Mapping[str, str],
    labels: Mapping[str, str],
) -> dict[str, Any]:
    """The ``Job`` resource of a PySpark job on the placement's cluster."""
    if placement.cluster_name is None:
        raise ValueError("a Serverless placement runs batches, not cluster jobs")
    return {
        "reference": {"project_id": placement.project_id, "job_id": job_id},
        "placement": {"cluster_name": placement.cluster_name},
        "labels": dict(labels),
        "pyspark_job": {
            **_pyspark(main_uri, file_uris, args),
            "properties": _properties(placement, properties),
        },
    }


def pyspark_batch(
    placement: DataprocPlacement,
    *,
    main_uri: str,
    file_uris: Sequence[str],
    args: Sequence[str],
    properties: Mapping[str, str],
    labels: Mapping[str, str],
) -> dict[str, Any]:
    """The ``Batch`` resource of a PySpark batch (Serverless for Apache Spark)."""
    runtime: dict[str, Any] = {"properties": _properties(placement, properties)}
    if placement.runtime_version:
        runtime["version"] = placement.runtime_version
    if placement.container_image:
        runtime["container_image"] = placement.container_image
    batch: dict[str, Any] = {
        "pyspark_batch": _pyspark(main_uri, file_uris, args),
        "runtime_config": runtime,
        "labels": dict(labels),
    }
    execution = {
        key: value
        for key, value in (
            ("service_account", placement.service_account),
            ("subnetwork_uri", placement.subnetwork_uri),
        )
        if value
    }
    if execution:
        batch["environment_config"] = {"execution_config": execution}
    return batch


def _pyspark(main_uri: str, file_uris: Sequence[str], args: Sequence[str]) -> dict[str, Any]:
    """What a PySpark job and a PySpark batch both name: the main file, the Python files, the arguments."""
    return {
        "main_python_file_uri": main_uri,
        "python_file_uris": list(file_uris),
        "args": [str(arg) for arg in args],
    }


def _properties(placement: DataprocPlacement, properties: Mapping[str, Any]) -> dict[str, str]:
    """The connection's Spark properties with the task's own over them, as text."""
    return {**placement.properties, **{key: str(value) for key, value in properties.items()}}
