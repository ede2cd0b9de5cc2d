"""The fake's jobs and batches, and how it runs them: ``spark-submit`` on this machine.

A workload (a cluster's job or a Serverless batch) is run as Dataproc runs a PySpark driver: its
``main_python_file_uri`` and ``python_file_uris`` are fetched from Cloud Storage (the Cloud Storage
fake, or any endpoint speaking its JSON API), then ``spark-submit`` runs the main file with the files
on ``--py-files``, the workload's properties as ``--conf`` and its arguments, in the "cluster's"
environment (``cluster_env``: the identity and settings a cluster's nodes would have). As on Dataproc,
the master comes from the cluster's ``spark-defaults.conf`` (``spark.master``; Dataproc's is ``yarn``,
the fake's ``cluster_master``, default ``local[2]``), not from the command line; every Spark application
the driver starts is then checked, from its event log, to have run on that master: a workload that
chose another master itself fails, naming both. The driver's output is written back to Cloud Storage
as Dataproc writes it
(``…/driveroutput.000000000``); a failure's message names it, as Dataproc's does (a batch's also
quotes the output's last line), and holds no more of it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Spark settings of the fake's "cluster" (a short job on two cores; a job's properties win).
CLUSTER_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}
OUTPUT_LINES_KEPT = 30
#: The fake cluster's own master (a real cluster's ``spark-defaults.conf`` says ``yarn``).
DEFAULT_CLUSTER_MASTER = "local[2]"


@dataclass
class Workload:
    """One job or batch as the fake runs it."""

    kind: str  # "job" or "batch"
    name: str  # its resource name
    main_uri: str
    file_uris: list[str]
    args: list[str]
    properties: dict[str, str]
    output_uri: str  # the gs:// prefix of its driver output
    #: set when it ends: True on exit status 0; the last lines of its output
    succeeded: bool | None = None
    cancelled: bool = False
    message: str = ""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)


def split_gs(uri: str) -> tuple[str, str]:
    """``gs://bucket/name`` → ``(bucket, name)``; anything else raises ``ValueError``."""
    if not uri.startswith("gs://") or "/" not in uri[5:]:
        raise ValueError(f"not a Cloud Storage object URI: {uri!r}")
    bucket, name = uri[5:].split("/", 1)
    return bucket, name


class WorkloadRunner:
    """Runs workloads with ``spark-submit`` against a Cloud Storage endpoint (JSON API)."""

    def __init__(
        self,
        gcs_endpoint: str,
        cluster_env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        cluster_master: str = DEFAULT_CLUSTER_MASTER,
    ) -> None:
        self.gcs_endpoint = gcs_endpoint
        self.cluster_env = dict(cluster_env or {})
        self.workdir = workdir
        self.cluster_master = cluster_master
        self._storage: Any = None

    def storage(self) -> Any:
        if self._storage is None:
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage

            self._storage = storage.Client(
                project="dataproc-fake",
                credentials=AnonymousCredentials(),
                client_options={"api_endpoint": self.gcs_endpoint},
            )
        return self._storage

    def exists(self, uri: str) -> bool:
        bucket, name = split_gs(uri)
        return self.storage().bucket(bucket).blob(name).exists()

    def environment(self) -> dict[str, str]:
        """The driver's environment: this machine's, without the client side's proxy and roots, plus
        ``cluster_env``, this Python for PySpark and ``spark-submit`` on ``PATH``."""
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("grpc_proxy", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH")
        }
        env.update(self.cluster_env)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        if shutil.which("spark-submit", path=env.get("PATH")) is None:
            import pyspark

            env["PATH"] = os.pathsep.join([str(Path(pyspark.__file__).parent / "bin"), env.get("PATH", "")])
        return env

    def run(self, workload: Workload, on_start: Callable[[], None], on_end: Callable[[], None]) -> None:
        """Run ``workload`` to its end in this thread; ``on_start``/``on_end`` move its state (a workload
        cancelled before it started only ends)."""
        if workload.cancelled:
            on_end()
            return
        with tempfile.TemporaryDirectory(prefix="dataproc-fake-", dir=self.workdir) as directory:
            try:
                main = self._download(workload.main_uri, directory)
                files = [self._download(uri, directory) for uri in workload.file_uris]
            except Exception as error:  # the workload fails, as Dataproc's would
                workload.succeeded, workload.message = False, f"Failed to fetch the workload's files: {error}"
                on_end()
                return
            events = Path(directory) / "events"
            env = {**self.environment(), "SPARK_CONF_DIR": str(self._cluster_conf(Path(directory), events))}
            command = [
                "spark-submit",
                "--name",
                workload.name.rsplit("/", 1)[-1],
                *_conf_arguments(workload.properties),
            ]
            if files:
                command += ["--py-files", ",".join(files)]
            command += [main, *workload.args]
            output = Path(directory) / "driveroutput"
            with output.open("wb") as sink:
                workload.process = subprocess.Popen(
                    command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=directory
                )
                on_start()
                status = workload.process.wait()
            wrong = [master for master in application_masters(events) if master != self.cluster_master]
            if wrong and status == 0:
                with output.open("ab") as sink:
                    sink.write(
                        f"ERROR: the driver ran Spark on master {wrong[0]}, not the cluster's "
                        f"{self.cluster_master}\n".encode()
                    )
                status = 1
            data = output.read_bytes()
            kept = data.decode(errors="replace").splitlines()[-OUTPUT_LINES_KEPT:]
            self._upload(workload.output_uri + ".000000000", data)
        workload.succeeded = status == 0 and not workload.cancelled
        if not workload.succeeded:
            # What Dataproc says: the output itself is only in Cloud Storage.
            if workload.kind == "job":
                workload.message = (
                    "Google Cloud Dataproc Agent reports job failure. If logs are available, they can be "
                    f"found at: {workload.output_uri}"
                )
            else:
                last = kept[-1] if kept else f"exit status {status}"
                workload.message = (
                    f"Job failed with message [{last}]. Additional details can be found at: "
                    f"{workload.output_uri}"
                )
        on_end()

    def _cluster_conf(self, directory: Path, events: Path) -> Path:
        """The cluster's ``spark-defaults.conf``: its master, its settings, and an event log per
        application (the master each one ran on is read back from it)."""
        conf_dir = directory / "conf"
        conf_dir.mkdir()
        events.mkdir()
        defaults = {
            "spark.master": self.cluster_master,
            **CLUSTER_SPARK_CONF,
            "spark.eventLog.enabled": "true",
            "spark.eventLog.compress": "false",
            "spark.eventLog.dir": events.as_uri(),
        }
        (conf_dir / "spark-defaults.conf").write_text(
            "".join(f"{key} {value}\n" for key, value in defaults.items())
        )
        return conf_dir

    def cancel(self, workload: Workload) -> None:
        """Stop a running workload's driver (it ends cancelled)."""
        workload.cancelled = True
        process = workload.process
        if process is not None and process.poll() is None:
            process.terminate()

    def _download(self, uri: str, directory: str) -> str:
        bucket, name = split_gs(uri)
        target = Path(directory) / f"{uuid.uuid4().hex[:8]}-{Path(name).name}"
        self.storage().bucket(bucket).blob(name).download_to_filename(str(target))
        return str(target)

    def _upload(self, uri: str, data: bytes) -> None:
        bucket, name = split_gs(uri)
        self.storage().bucket(bucket).blob(name).upload_from_string(data)


def application_masters(events: Path) -> list[str]:
    """The master of every Spark application whose event log is in ``events`` (its environment update)."""
    masters: list[str] = []
    # one file per application, or (rolling event logs) a folder per application of numbered files
    logs = [path for path in sorted(events.rglob("*")) if path.is_file() and not path.name.startswith(".")]
    applications = {path.parent if path.parent != events else path for path in logs}
    for application in sorted(applications):
        log = min(application.glob("events_*")) if application.is_dir() else application
        with log.open(errors="replace") as lines:
            for line in lines:
                if '"SparkListenerEnvironmentUpdate"' not in line:
                    continue
                properties = json.loads(line).get("Spark Properties", {})
                if isinstance(properties, list):
                    properties = dict(properties)
                masters.append(str(properties.get("spark.master", "")))
                break
    return masters


def _conf_arguments(properties: Mapping[str, str]) -> list[str]:
    arguments: list[str] = []
    for key, value in properties.items():
        arguments += ["--conf", f"{key}={value}"]
    return arguments


def start_thread(target: Callable[..., None], *args: Sequence[Any]) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread
