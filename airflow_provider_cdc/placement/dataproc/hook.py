"""``DataprocJobsHook``: run a window's merge or upsert job on Dataproc, a cluster job or a Serverless
batch, with the google provider's own operators.

The connection (type ``dataproc``,
:class:`~airflow_provider_cdc.placement.dataproc.resources.DataprocPlacement`) places the job. The job
file and the job archive (the modules the jobs import, without Airflow) are staged to
``{staging_uri}/cdc-jobs/<content digest>/`` with the step's storage credentials; the job is labelled
with its step and window, and any job or batch an earlier try of the same step and window left running
(a task killed without cleanup: Dataproc runs it on) is cancelled and waited for before the new one is
submitted, so two tries never write one window's output at once. The job itself is submitted and awaited
by ``DataprocSubmitJobOperator`` (a cluster) or ``DataprocCreateBatchOperator`` (Serverless), run inside
the calling task; the driver's output is copied to the task log when the job ends. The job runs as the
cluster's (or batch's) service account: no credentials are sent with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow_provider_cdc._compat import BaseHook
from airflow_provider_cdc.placement.dataproc.resources import (
    DATAPROC_CONNECTION_TYPE,
    STEP_LABEL,
    WINDOW_LABEL,
    DataprocPlacement,
    content_digest,
    pyspark_batch,
    pyspark_job,
    workload_id,
)

#: Lines of a job's driver output copied to the task log.
DRIVER_OUTPUT_LINES = 60
_ACTIVE_BATCH_STATES = ("PENDING", "RUNNING", "CANCELLING")
_FENCE_POLL_SECONDS = 2.0
_FENCE_TIMEOUT_SECONDS = 600.0


class DataprocJobError(RuntimeError):
    """A job or batch that failed or was cancelled (the message has the driver output's last lines)."""


class DataprocJobsHook(BaseHook):
    """Runs the provider's jobs on the Dataproc placement of a ``dataproc`` connection.

    Its connection form is declared in :mod:`~airflow_provider_cdc.connection_forms`.

    :param dataproc_conn_id: the connection: extras ``project_id``, ``region``, ``staging_uri``
        (``gs://``), and ``cluster_name`` (omit it for Serverless batches), optionally ``properties``,
        ``runtime_version``, ``container_image``, ``service_account``, ``subnetwork_uri``, ``labels``,
        ``gcp_conn_id``, ``impersonation_chain``, ``wait_timeout_seconds``.
    """

    conn_name_attr = "dataproc_conn_id"
    default_conn_name = "spark_default"
    conn_type = DATAPROC_CONNECTION_TYPE
    hook_name = "Dataproc (CDC merge and upsert jobs)"

    def __init__(self, dataproc_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dataproc_conn_id = dataproc_conn_id

    @cached_property
    def placement(self) -> DataprocPlacement:
        connection = self.get_connection(self.dataproc_conn_id)
        return DataprocPlacement.from_connection(self.dataproc_conn_id, connection.extra_dejson)

    # --- staging ----------------------------------------------------------------------------------

    def stage(self, files: Sequence[str], storage_options: Mapping[str, str] | None) -> list[str]:
        """Copy local ``files`` to the staging folder of their content; return their ``gs://`` URIs
        (in order). A folder already there is reused: its name is its content."""
        from airflow_provider_cdc.filesystems import join, resolve

        contents = [Path(path).read_bytes() for path in files]
        digest = content_digest(contents)
        uris = [self.placement.staged(digest, Path(path).name) for path in files]
        filesystem, folder = resolve(uris[0].rsplit("/", 1)[0], storage_options)
        for path, content in zip(files, contents, strict=True):
            target = join(folder, Path(path).name)
            if filesystem.get_file_info(target).size == len(content):
                continue
            with filesystem.open_output_stream(target) as sink:
                sink.write(content)
        self.log.info("Staged %d job file(s) in %s", len(uris), uris[0].rsplit("/", 1)[0])
        return uris

    def driver_output(
        self, prefix: str, storage_options: Mapping[str, str] | None, lines: int = DRIVER_OUTPUT_LINES
    ) -> list[str]:
        """The last ``lines`` lines of a job's driver output (``…/driveroutput.*`` objects), or none
        when it cannot be read."""
        from pyarrow import fs as pafs

        from airflow_provider_cdc.filesystems import resolve

        try:
            folder, stem = prefix.rsplit("/", 1)
            filesystem, path = resolve(folder, storage_options)
            infos = filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True))
            parts = sorted(info.path for info in infos if info.base_name.startswith(stem + "."))
            text = b"".join(filesystem.open_input_stream(part).read() for part in parts)
        except (OSError, ValueError) as error:
            self.log.info("The driver output in %s could not be read: %s", prefix, error)
            return []
        return text.decode(errors="replace").splitlines()[-lines:]

    # --- fencing ----------------------------------------------------------------------------------

    def _google_hook(self) -> Any:
        from airflow.providers.google.cloud.hooks.dataproc import DataprocHook

        return DataprocHook(
            gcp_conn_id=self.placement.gcp_conn_id, impersonation_chain=self.placement.impersonation_chain
        )

    def fence(self, labels: Mapping[str, str]) -> int:
        """Cancel the jobs or batches of this step and window still running (an earlier try's) and wait
        until they have ended; return how many there were."""
        placement, hook = self.placement, self._google_hook()
        clauses = (
            f"labels.{STEP_LABEL} = {labels[STEP_LABEL]} AND labels.{WINDOW_LABEL} = {labels[WINDOW_LABEL]}"
        )
        if placement.serverless:
            active = [
                batch
                for batch in hook.list_batches(
                    region=placement.region, project_id=placement.project_id, filter=clauses
                )
                if batch.state.name in _ACTIVE_BATCH_STATES
            ]
            operations = hook.get_operations_client(placement.region)
            for batch in active:
                self.log.info("Cancelling batch %s, left running by an earlier try", batch.name)
                if batch.state.name != "CANCELLING":
                    operations.cancel_operation(name=batch.operation)
            names = [batch.name for batch in active]

            def running() -> list[str]:
                return [
                    name
                    for name in names
                    if hook.get_batch(
                        batch_id=name.rsplit("/", 1)[-1],
                        region=placement.region,
                        project_id=placement.project_id,
                    ).state.name
                    in _ACTIVE_BATCH_STATES
                ]
        else:
            client = hook.get_job_client(region=placement.region)
            jobs = client.list_jobs(
                request={
                    "project_id": placement.project_id,
                    "region": placement.region,
                    "filter": f"status.state = ACTIVE AND {clauses}",
                }
            )
            names = [job.reference.job_id for job in jobs]
            for job_id in names:
                self.log.info("Cancelling job %s, left running by an earlier try", job_id)
                try:
                    hook.cancel_job(job_id=job_id, project_id=placement.project_id, region=placement.region)
                except Exception as error:  # it may have ended meanwhile
                    self.log.info("Job %s: %s", job_id, error)

            def running() -> list[str]:
                return [
                    job_id
                    for job_id in names
                    if not hook.get_job(
                        job_id=job_id, project_id=placement.project_id, region=placement.region
                    ).done
                ]

        deadline = time.monotonic() + _FENCE_TIMEOUT_SECONDS
        left = running() if names else []
        while left:
            if time.monotonic() > deadline:
                raise DataprocJobError(
                    f"{len(left)} workload(s) of an earlier try are still running after being "
                    f"cancelled: {left}"
                )
            time.sleep(_FENCE_POLL_SECONDS)
            left = running()
        return len(names)

    # --- running ----------------------------------------------------------------------------------

    def run(
        self,
        context: Any,
        *,
        task_id: str,
        step: str,
        window_end_micros: int,
        main: str,
        py_files: Sequence[str],
        args: Sequence[str],
        properties: Mapping[str, str],
        labels: Mapping[str, str],
        storage_options: Mapping[str, str] | None,
        log: logging.Logger | Any,
        dag_id: str = "",
    ) -> None:
        """Stage ``main`` and ``py_files``, fence earlier tries, run the job to its end; raise
        :class:`DataprocJobError` (with the driver output's tail) unless it succeeded."""
        from airflow.providers.google.cloud.operators.dataproc import (
            DataprocCreateBatchOperator,
            DataprocSubmitJobOperator,
        )

        placement = self.placement
        main_uri, *file_uris = self.stage([main, *py_files], storage_options)
        fenced = self.fence(labels)
        if fenced:
            log.info("Cancelled %d Dataproc workload(s) an earlier try of this step left running", fenced)
        ti = context.get("ti") if hasattr(context, "get") else None
        identifier = workload_id(step, window_end_micros, getattr(ti, "try_number", None))
        common: dict[str, Any] = {
            "task_id": task_id,
            "project_id": placement.project_id,
            "region": placement.region,
            "request_id": identifier,
            "gcp_conn_id": placement.gcp_conn_id,
            "impersonation_chain": placement.impersonation_chain,
            "deferrable": False,
        }
        resource = dict(
            main_uri=main_uri, file_uris=file_uris, args=args, properties=properties, labels=labels
        )
        log.info("Running %s on Dataproc %s as %s", Path(main).name, placement.where, identifier)
        hook = self._google_hook()
        if placement.serverless:
            operator = _in_this_task(DataprocCreateBatchOperator, dag_id)(
                batch=pyspark_batch(placement, **resource), batch_id=identifier, timeout=None, **common
            )
        else:
            operator = _in_this_task(DataprocSubmitJobOperator, dag_id)(
                job=pyspark_job(placement, job_id=identifier, **resource),
                wait_timeout=placement.wait_timeout_seconds,
                **common,
            )
        try:
            self._running = operator
            operator.execute(context)
            output = self._output_uri(hook, identifier)
        except Exception as error:
            try:
                failed = self._output_uri(hook, identifier)
            except Exception:  # never submitted, or not reachable: nothing to show
                failed = None
            tail = self.driver_output(failed, storage_options, lines=20) if failed else []
            raise DataprocJobError(
                f"Dataproc {'batch' if placement.serverless else 'job'} {identifier} ({Path(main).name}) "
                f"did not succeed: {_first_line(error)}"
                + ("\nLast lines of its driver output:\n" + "\n".join(tail) if tail else "")
            ) from error
        finally:
            self._running = None
        for line in self.driver_output(output, storage_options):
            log.info("%s", line)
        log.info("Dataproc %s %s succeeded", "batch" if placement.serverless else "job", identifier)

    def _output_uri(self, hook: Any, identifier: str) -> str:
        """Where the batch or job ``identifier`` writes its driver output (the service says)."""
        placement = self.placement
        if placement.serverless:
            return str(
                hook.get_batch(
                    batch_id=identifier, region=placement.region, project_id=placement.project_id
                ).runtime_info.output_uri
            )
        return str(
            hook.get_job(
                job_id=identifier, project_id=placement.project_id, region=placement.region
            ).driver_output_resource_uri
        )

    _running: Any = None

    def kill(self) -> None:
        """Cancel the running job or batch (the task is being killed)."""
        operator = self._running
        if operator is not None:
            operator.on_kill()


def _in_this_task(operator_class: type, dag_id: str) -> Any:
    """``operator_class`` run inside the calling task: it reports the task's DAG as its own (the
    provider labels a batch with it), not Airflow's ``adhoc_<owner>`` of an operator without a DAG."""

    class InThisTask(operator_class):  # type: ignore[misc,valid-type]
        @property
        def dag_id(self) -> str:
            return dag_id or super().dag_id

    InThisTask.__name__ = InThisTask.__qualname__ = operator_class.__name__
    return InThisTask


def _first_line(error: BaseException) -> str:
    """The error's first line; its type too unless it is one of Airflow's, whose message says it all."""
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    if type(error).__name__ == "AirflowException" and first:
        return first
    return f"{type(error).__name__}: {first}" if first else type(error).__name__
