"""Dataproc's ``JobController``, ``BatchController`` and their long-running ``Operations`` over gRPC.

What it enforces, answered as Dataproc answers it (gRPC status and message):

- the request: ``project_id`` and ``region`` (``INVALID_ARGUMENT``); a job's cluster must exist
  (``NOT_FOUND``); exactly one PySpark workload (the fake runs no other kind; ``INVALID_ARGUMENT``
  names the kind); ``main_python_file_uri`` a ``.py`` file and every ``python_file_uris`` entry a
  ``.py``, ``.egg`` or ``.zip`` file; ids: a job id of letters, digits, ``_`` and ``-`` (at most
  100), a batch id of 4-63 characters ``[a-z0-9-]`` starting with a letter or digit and ending with one;
  labels: at most 32, keys ``[a-z][a-z0-9_-]{0,62}``, values ``[a-z0-9_-]{0,63}``;
- idempotency: a ``request_id`` of at most 40 letters, digits, ``_`` and ``-``; a repeated
  ``request_id`` answers with the first request's job or operation; an id
  taken answers ``ALREADY_EXISTS``;
- cancelling: only an active job (``FAILED_PRECONDITION`` otherwise); a batch is cancelled through
  its operation; only a finished batch can be deleted;
- listing: ``job_state_matcher`` (``ACTIVE``/``NON_ACTIVE``), and filters of ``AND``-joined
  ``status.state = ACTIVE|NON_ACTIVE`` / ``labels.KEY = VALUE`` clauses (jobs) or ``state = STATE`` /
  ``labels.KEY = VALUE`` clauses (batches).

A job moves ``PENDING`` → ``SETUP_DONE`` → ``RUNNING`` → ``DONE``, ``ERROR`` or ``CANCELLED``; a batch
``PENDING`` → ``RUNNING`` → ``SUCCEEDED``, ``FAILED`` or ``CANCELLED``; each with its history. The
operation of a batch is done when the batch ends, with the batch as its response or, when it failed,
an error with its state message.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import grpc
from google.cloud.dataproc_v1 import types
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2
from google.rpc import code_pb2, status_pb2

from .workloads import Workload, WorkloadRunner, start_thread

JOBS = "google.cloud.dataproc.v1.JobController"
BATCHES = "google.cloud.dataproc.v1.BatchController"
OPERATIONS = "google.longrunning.Operations"

_REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_BATCH_ID = re.compile(r"^[a-z0-9][a-z0-9-]{2,61}[a-z0-9]$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_PYTHON_FILES = (".py", ".egg", ".zip")
_ACTIVE_JOB = {"PENDING", "SETUP_DONE", "RUNNING", "CANCEL_PENDING", "CANCEL_STARTED"}
_ENDED_BATCH = {"SUCCEEDED", "FAILED", "CANCELLED"}
_CLAUSE = re.compile(r'^\s*([a-zA-Z_.][\w.-]*)\s*=\s*"?([^"]*?)"?\s*$')


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _check_labels(labels: Any) -> None:
    if len(labels) > 32:
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Too many labels: {len(labels)} (at most 32)")
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid label key {key!r}")
        if not _LABEL_VALUE.match(value):
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid value {value!r} of label {key!r}")


_JOB_KINDS = (
    "hadoop_job", "spark_job", "pyspark_job", "hive_job", "pig_job", "spark_r_job", "spark_sql_job",
    "presto_job", "trino_job", "flink_job",
)  # fmt: skip
_BATCH_KINDS = ("pyspark_batch", "spark_batch", "spark_r_batch", "spark_sql_batch", "pyspark_notebook_batch")


def _only_pyspark(message: Any, kinds: tuple[str, ...], pyspark: str, what: str) -> None:
    """``INVALID_ARGUMENT`` unless ``message`` (a job or a batch) sets exactly its PySpark workload."""
    found = [kind for kind in kinds if kind in message]
    if found != [pyspark]:
        message_text = f"The fake runs exactly one {what}, got {found or 'none'}"
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, message_text)


def _check_pyspark(workload: Any, what: str) -> None:
    main = workload.main_python_file_uri
    if not main:
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"{what}.mainPythonFileUri is required")
    if not main.endswith(".py"):
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"{what}.mainPythonFileUri must be a .py file: {main}")
    for uri in workload.python_file_uris:
        if not uri.endswith(_PYTHON_FILES):
            raise _Abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{what}.pythonFileUris must be .py, .egg or .zip files: {uri}",
            )


def _check_request_id(request_id: str) -> None:
    if request_id and not _REQUEST_ID.match(request_id):
        raise _Abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"requestId {request_id!r} must be at most 40 letters, digits, '_' or '-'",
        )


def _batch_parent(parent: str) -> str:
    """A batch parent as the service names it, ``projects/P/locations/R`` (it takes ``regions`` too,
    which the google provider sends when it creates and lists batches)."""
    match = re.match(r"^projects/([^/]+)/(?:locations|regions)/([^/]+)$", parent)
    if match is None:
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid parent {parent!r}")
    return f"projects/{match.group(1)}/locations/{match.group(2)}"


def _clauses(text: str) -> list[tuple[str, str]]:
    clauses = []
    for part in filter(None, re.split(r"\s+AND\s+", text.strip(), flags=re.IGNORECASE)):
        match = _CLAUSE.match(part)
        if match is None:
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid filter: {text!r}")
        clauses.append((match.group(1), match.group(2)))
    return clauses


class DataprocState:
    """Clusters, jobs, batches and operations, under one lock."""

    def __init__(self, runner: WorkloadRunner, output_bucket: str) -> None:
        self.runner = runner
        self.output_bucket = output_bucket
        self.lock = threading.RLock()
        self.clusters: dict[tuple[str, str, str], str] = {}  # → cluster uuid
        self.jobs: dict[tuple[str, str, str], types.Job] = {}
        self.batches: dict[str, types.Batch] = {}
        self.operations: dict[str, operations_pb2.Operation] = {}
        self.workloads: dict[str, Workload] = {}  # resource name → its run
        self._requests: dict[tuple[str, str], str] = {}  # (kind, request id) → resource name
        self.submitted: list[str] = []  # every workload created, in order
        self._threads: list[threading.Thread] = []

    # --- clusters -----------------------------------------------------------------------------

    def create_cluster(self, project: str, region: str, name: str) -> None:
        with self.lock:
            self.clusters[(project, region, name)] = str(uuid.uuid4())

    # --- jobs ---------------------------------------------------------------------------------

    def submit_job(self, request: types.SubmitJobRequest) -> types.Job:
        project, region = request.project_id, request.region
        if not project or not region:
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, "projectId and region are required")
        _check_request_id(request.request_id)
        job = types.Job(request.job)
        _only_pyspark(job, _JOB_KINDS, "pyspark_job", "pysparkJob per job")
        _check_pyspark(job.pyspark_job, "job.pysparkJob")
        _check_labels(job.labels)
        with self.lock:
            if request.request_id and ("job", request.request_id) in self._requests:
                return self.jobs[self._key(self._requests[("job", request.request_id)])]
            cluster = job.placement.cluster_name
            cluster_uuid = self.clusters.get((project, region, cluster))
            if cluster_uuid is None:
                raise _Abort(
                    grpc.StatusCode.NOT_FOUND,
                    f"Not found: Cluster projects/{project}/regions/{region}/clusters/{cluster}",
                )
            job_id = job.reference.job_id or uuid.uuid4().hex
            if not _JOB_ID.match(job_id):
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid job id {job_id!r}")
            if (project, region, job_id) in self.jobs:
                raise _Abort(
                    grpc.StatusCode.ALREADY_EXISTS,
                    "Already exists: Failed to submit job: Job "
                    f"projects/{project}/regions/{region}/jobs/{job_id}",
                )
            job.reference = types.JobReference(project_id=project, job_id=job_id)
            job.placement.cluster_uuid = cluster_uuid
            job.job_uuid = str(uuid.uuid4())
            prefix = f"gs://{self.output_bucket}/google-cloud-dataproc-metainfo/{cluster_uuid}/jobs/{job_id}"
            job.driver_control_files_uri = prefix + "/"
            job.driver_output_resource_uri = prefix + "/driveroutput"
            self._set_job_state(job, "PENDING")
            name = f"projects/{project}/regions/{region}/jobs/{job_id}"
            self.jobs[(project, region, job_id)] = job
            if request.request_id:
                self._requests[("job", request.request_id)] = name
            workload = Workload(
                "job",
                name,
                job.pyspark_job.main_python_file_uri,
                list(job.pyspark_job.python_file_uris),
                list(job.pyspark_job.args),
                dict(job.pyspark_job.properties),
                job.driver_output_resource_uri,
            )
            self.workloads[name] = workload
            self.submitted.append(name)
        self._threads.append(start_thread(self._run_job, (project, region, job_id), workload))
        return job

    def _run_job(self, key: tuple[str, str, str], workload: Workload) -> None:
        def started() -> None:
            with self.lock:
                job = self.jobs[key]
                if job.status.state.name in ("PENDING",):
                    self._set_job_state(job, "SETUP_DONE")
                    self._set_job_state(job, "RUNNING")

        def ended() -> None:
            with self.lock:
                job = self.jobs[key]
                if workload.cancelled:
                    self._set_job_state(job, "CANCELLED")
                elif workload.succeeded:
                    self._set_job_state(job, "DONE")
                else:
                    self._set_job_state(job, "ERROR", workload.message)
                job.done = True

        self.runner.run(workload, started, ended)

    @staticmethod
    def _set_job_state(job: types.Job, state: str, details: str = "") -> None:
        if job.status.state:
            job.status_history.append(types.JobStatus(job.status))
        job.status = types.JobStatus(
            state=types.JobStatus.State[state], details=details, state_start_time=_now()
        )

    def _key(self, name: str) -> tuple[str, str, str]:
        parts = name.split("/")
        return parts[1], parts[3], parts[5]

    def get_job(self, request: types.GetJobRequest) -> types.Job:
        with self.lock:
            job = self.jobs.get((request.project_id, request.region, request.job_id))
            if job is None:
                raise _Abort(
                    grpc.StatusCode.NOT_FOUND,
                    f"Not found: Job projects/{request.project_id}/regions/{request.region}/jobs/"
                    f"{request.job_id}",
                )
            return types.Job(job)

    def cancel_job(self, request: types.CancelJobRequest) -> types.Job:
        with self.lock:
            job = self.jobs.get((request.project_id, request.region, request.job_id))
            if job is None:
                raise _Abort(grpc.StatusCode.NOT_FOUND, f"Not found: Job {request.job_id}")
            if job.status.state.name not in _ACTIVE_JOB:
                raise _Abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Cannot cancel jobId '{request.job_id}' in projectId '{request.project_id}': "
                    f"job is in state {job.status.state.name}",
                )
            self._set_job_state(job, "CANCEL_PENDING")
            workload = self.workloads[
                f"projects/{request.project_id}/regions/{request.region}/jobs/{request.job_id}"
            ]
            self.runner.cancel(workload)
            return types.Job(job)

    def list_jobs(self, request: types.ListJobsRequest) -> types.ListJobsResponse:
        matcher = request.job_state_matcher.name
        clauses = _clauses(request.filter) if request.filter else []
        with self.lock:
            found = []
            for (project, region, _), job in self.jobs.items():
                if (project, region) != (request.project_id, request.region):
                    continue
                if request.cluster_name and job.placement.cluster_name != request.cluster_name:
                    continue
                active = job.status.state.name in _ACTIVE_JOB
                if (matcher == "ACTIVE" and not active) or (matcher == "NON_ACTIVE" and active):
                    continue
                if all(self._job_matches(job, active, field, value) for field, value in clauses):
                    found.append(types.Job(job))
        return types.ListJobsResponse(jobs=found)

    @staticmethod
    def _job_matches(job: types.Job, active: bool, field: str, value: str) -> bool:
        if field == "status.state":
            if value not in ("ACTIVE", "NON_ACTIVE"):
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid status.state {value!r}")
            return active == (value == "ACTIVE")
        if field.startswith("labels."):
            key = field[len("labels.") :]
            return value == "*" and key in job.labels or job.labels.get(key) == value
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid filter field {field!r}")

    # --- batches ------------------------------------------------------------------------------

    def create_batch(self, request: types.CreateBatchRequest) -> operations_pb2.Operation:
        parent = _batch_parent(request.parent)
        match = re.match(r"^projects/([^/]+)/locations/([^/]+)$", parent)
        assert match is not None
        _check_request_id(request.request_id)
        batch = types.Batch(request.batch)
        _only_pyspark(batch, _BATCH_KINDS, "pyspark_batch", "pysparkBatch per batch")
        _check_pyspark(batch.pyspark_batch, "batch.pysparkBatch")
        _check_labels(batch.labels)
        with self.lock:
            if request.request_id and ("batch", request.request_id) in self._requests:
                return self.operations[self.batches[self._requests[("batch", request.request_id)]].operation]
            batch_id = request.batch_id or f"b{uuid.uuid4().hex[:20]}"
            if not _BATCH_ID.match(batch_id):
                raise _Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Batch id {batch_id!r} must be 4-63 characters of [a-z0-9-], "
                    "starting and ending with a letter or digit",
                )
            name = f"{parent}/batches/{batch_id}"
            if name in self.batches:
                raise _Abort(grpc.StatusCode.ALREADY_EXISTS, f"Batch {name} already exists")
            batch.name = name
            batch.uuid = str(uuid.uuid4())
            batch.create_time = _now()
            batch.creator = "airflow@dataproc-fake"
            operation_name = f"projects/{match.group(1)}/regions/{match.group(2)}/operations/{uuid.uuid4()}"
            batch.operation = operation_name
            output = f"gs://{self.output_bucket}/google-cloud-dataproc-metainfo/{batch.uuid}/jobs/srvls-batch-{batch.uuid}/driveroutput"
            batch.runtime_info = types.RuntimeInfo(output_uri=output)
            self._set_batch_state(batch, "PENDING")
            self.batches[name] = batch
            metadata = types.BatchOperationMetadata(
                batch=name,
                batch_uuid=batch.uuid,
                create_time=batch.create_time,
                operation_type=types.BatchOperationMetadata.BatchOperationType.BATCH,
                description=f"Batch {batch_id}",
                labels=dict(batch.labels),
            )
            operation = operations_pb2.Operation(name=operation_name, done=False)
            operation.metadata.Pack(types.BatchOperationMetadata.pb(metadata))
            self.operations[operation_name] = operation
            if request.request_id:
                self._requests[("batch", request.request_id)] = name
            workload = Workload(
                "batch",
                name,
                batch.pyspark_batch.main_python_file_uri,
                list(batch.pyspark_batch.python_file_uris),
                list(batch.pyspark_batch.args),
                dict(batch.runtime_config.properties),
                output,
            )
            self.workloads[name] = workload
            self.submitted.append(name)
        self._threads.append(start_thread(self._run_batch, name, workload))
        return operation

    def _run_batch(self, name: str, workload: Workload) -> None:
        def started() -> None:
            with self.lock:
                batch = self.batches[name]
                if batch.state.name == "PENDING":
                    self._set_batch_state(batch, "RUNNING")

        def ended() -> None:
            with self.lock:
                batch = self.batches[name]
                operation = self.operations[batch.operation]
                if workload.cancelled:
                    self._set_batch_state(batch, "CANCELLED", "Batch was cancelled")
                    operation.error.CopyFrom(
                        status_pb2.Status(code=code_pb2.CANCELLED, message="Batch was cancelled")
                    )
                elif workload.succeeded:
                    self._set_batch_state(batch, "SUCCEEDED")
                    operation.response.Pack(types.Batch.pb(batch))
                else:
                    self._set_batch_state(batch, "FAILED", workload.message)
                    operation.error.CopyFrom(
                        status_pb2.Status(code=code_pb2.FAILED_PRECONDITION, message=workload.message)
                    )
                operation.done = True

        self.runner.run(workload, started, ended)

    @staticmethod
    def _set_batch_state(batch: types.Batch, state: str, message: str = "") -> None:
        if batch.state:
            batch.state_history.append(
                types.Batch.StateHistory(
                    state=batch.state, state_message=batch.state_message, state_start_time=batch.state_time
                )
            )
        batch.state = types.Batch.State[state]
        batch.state_message = message
        batch.state_time = _now()

    def get_batch(self, request: types.GetBatchRequest) -> types.Batch:
        with self.lock:
            batch = self.batches.get(request.name)
            if batch is None:
                raise _Abort(grpc.StatusCode.NOT_FOUND, f"Not found: Batch {request.name}")
            return types.Batch(batch)

    def list_batches(self, request: types.ListBatchesRequest) -> types.ListBatchesResponse:
        clauses = _clauses(request.filter) if request.filter else []
        with self.lock:
            parent = _batch_parent(request.parent)
            found = [
                types.Batch(batch)
                for name, batch in self.batches.items()
                if name.startswith(parent + "/batches/")
                and all(self._batch_matches(batch, field, value) for field, value in clauses)
            ]
        return types.ListBatchesResponse(batches=found)

    @staticmethod
    def _batch_matches(batch: types.Batch, field: str, value: str) -> bool:
        if field == "state":
            if value not in types.Batch.State.__members__:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid state {value!r}")
            return batch.state.name == value
        if field.startswith("labels."):
            return batch.labels.get(field[len("labels.") :]) == value
        if field == "batch_id":
            return batch.name.rsplit("/", 1)[-1] == value
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid filter field {field!r}")

    def delete_batch(self, request: types.DeleteBatchRequest) -> empty_pb2.Empty:
        with self.lock:
            batch = self.batches.get(request.name)
            if batch is None:
                raise _Abort(grpc.StatusCode.NOT_FOUND, f"Not found: Batch {request.name}")
            if batch.state.name not in _ENDED_BATCH:
                raise _Abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"Batch {request.name} is in state {batch.state.name} and cannot be deleted",
                )
            del self.batches[request.name]
        return empty_pb2.Empty()

    # --- operations ---------------------------------------------------------------------------

    def get_operation(self, request: operations_pb2.GetOperationRequest) -> operations_pb2.Operation:
        with self.lock:
            operation = self.operations.get(request.name)
            if operation is None:
                raise _Abort(grpc.StatusCode.NOT_FOUND, f"Not found: Operation {request.name}")
            copy = operations_pb2.Operation()
            copy.CopyFrom(operation)
            return copy

    def cancel_operation(self, request: operations_pb2.CancelOperationRequest) -> empty_pb2.Empty:
        with self.lock:
            operation = self.operations.get(request.name)
            if operation is None:
                raise _Abort(grpc.StatusCode.NOT_FOUND, f"Not found: Operation {request.name}")
            if not operation.done:
                batch = next(b for b in self.batches.values() if b.operation == request.name)
                self._set_batch_state(batch, "CANCELLING")
                self.runner.cancel(self.workloads[batch.name])
        return empty_pb2.Empty()

    def join(self, timeout: float | None = None) -> None:
        """Wait for every workload's thread (tests: nothing left running)."""
        for thread in list(self._threads):
            thread.join(timeout)


def handlers(state: DataprocState) -> list[grpc.GenericRpcHandler]:
    """The three services' handlers over ``state``."""

    def unary(fn: Callable[[Any], Any], request: Any, response: Any) -> grpc.RpcMethodHandler:
        """A handler for proto-plus (``deserialize``) or protobuf (``FromString``) messages."""
        return grpc.unary_unary_rpc_method_handler(
            _guarded(fn),
            request_deserializer=getattr(request, "deserialize", None) or request.FromString,
            response_serializer=getattr(response, "serialize", None) or response.SerializeToString,
        )

    jobs = {
        "SubmitJob": unary(state.submit_job, types.SubmitJobRequest, types.Job),
        "GetJob": unary(state.get_job, types.GetJobRequest, types.Job),
        "CancelJob": unary(state.cancel_job, types.CancelJobRequest, types.Job),
        "ListJobs": unary(state.list_jobs, types.ListJobsRequest, types.ListJobsResponse),
    }
    batches = {
        "CreateBatch": unary(state.create_batch, types.CreateBatchRequest, operations_pb2.Operation),
        "GetBatch": unary(state.get_batch, types.GetBatchRequest, types.Batch),
        "ListBatches": unary(state.list_batches, types.ListBatchesRequest, types.ListBatchesResponse),
        "DeleteBatch": unary(state.delete_batch, types.DeleteBatchRequest, empty_pb2.Empty),
    }
    operations = {
        "GetOperation": unary(
            state.get_operation, operations_pb2.GetOperationRequest, operations_pb2.Operation
        ),
        "CancelOperation": unary(
            state.cancel_operation, operations_pb2.CancelOperationRequest, empty_pb2.Empty
        ),
    }
    return [
        grpc.method_handlers_generic_handler(JOBS, jobs),
        grpc.method_handlers_generic_handler(BATCHES, batches),
        grpc.method_handlers_generic_handler(OPERATIONS, operations),
    ]


def _guarded(fn: Callable[[Any], Any]) -> Callable[[Any, grpc.ServicerContext], Any]:
    def call(message: Any, context: grpc.ServicerContext) -> Any:
        try:
            return fn(message)
        except _Abort as abort:
            context.abort(abort.code, abort.message)

    return call
