"""A window step's job on Dataproc: what the merge and upsert operators share when their Spark
connection is of type ``dataproc``."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

from airflow_provider_cdc.filesystems import is_local
from airflow_provider_cdc.placement.dataproc.hook import DataprocJobError, DataprocJobsHook
from airflow_provider_cdc.placement.dataproc.resources import workload_labels
from airflow_provider_cdc.placement.job_archive import build_job_archive
from airflow_provider_cdc.placement.spark_submit import SparkJobError, job_credentials


def run_on_dataproc(
    operator: Any,
    context: Any,
    *,
    step: str,
    master: str,
    application: str,
    arguments: Sequence[str],
    locations: Iterable[str],
    pipeline: str,
    window: Any,
) -> None:
    """Run ``application`` with ``arguments`` for ``operator``'s window on the Dataproc placement of its
    Spark connection (``operator.spark_conn_id``). Every location must be one the cluster can read
    (not this worker's disk); the job gets no credentials (it runs as the cluster's service account).
    A job that did not succeed raises :class:`SparkJobError` with its driver output's last lines."""
    local = [location for location in locations if location and is_local(str(location))]
    if local:
        raise ValueError(
            f"window {window}: a Dataproc job ({operator.spark_conn_id!r}) cannot read this worker's disk; "
            f"put {local} on gs://"
        )
    job_credentials(master, operator.storage_environment(), operator.gcp_conn_id, operator.log)
    options = operator.storage_options()
    hook = DataprocJobsHook(operator.spark_conn_id)
    labels = workload_labels(
        hook.placement,
        step,
        pipeline,
        window.window_id,
        getattr(operator, "dag_id", "") or "",
        operator.task_id,
    )
    operator._dataproc = hook
    with tempfile.TemporaryDirectory(prefix=f"cdc-{step}-") as workdir:
        py_files = [build_job_archive(workdir), *filter(None, (operator.py_files or "").split(","))]
        try:
            hook.run(
                context,
                task_id=operator.task_id,
                step=step,
                window_end_micros=window.end_micros,
                main=application,
                py_files=py_files,
                args=arguments,
                properties=dict(operator.conf or {}),
                labels=labels,
                storage_options=options,
                log=operator.log,
                dag_id=getattr(operator, "dag_id", "") or "",
            )
        except DataprocJobError as error:
            raise SparkJobError(f"window {window}: {error}") from None
        finally:
            operator._dataproc = None
