"""A loopback fake of the Dataproc API that runs the submitted PySpark jobs and batches locally.

``FakeDataproc`` serves ``JobController``, ``BatchController`` and ``Operations`` (the gRPC API the
google provider's ``DataprocHook`` speaks) on a TLS port, behind an HTTP ``CONNECT`` proxy, so the
provider's own operators reach it unchanged: a task process needs only :meth:`FakeDataproc.client_environ`
(``grpc_proxy`` and ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``) and a Google connection with anonymous
credentials. Each workload runs with ``spark-submit --master local[*]`` after its files are fetched from
Cloud Storage (``gcs_endpoint``: the Cloud Storage fake), in ``cluster_env`` (the cluster's identity).
``certificate_dir`` keeps its certificate for a process's lifetime (gRPC reads the roots once):
the tests make it at start-up and set ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` before any channel.

    with FakeGcsProcess(["cdc"]) as gcs, FakeDataproc(gcs.endpoint, output_bucket="cdc") as dataproc:
        dataproc.create_cluster("my-project", "us-central1", "cdc")
        os.environ.update(dataproc.client_environ())
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from .server import DataprocState, handlers
from .tls import ConnectProxy, certificate
from .workloads import DEFAULT_CLUSTER_MASTER, WorkloadRunner


class FakeDataproc:
    """The fake, its TLS port and its proxy, in threads of this process (workloads in child processes)."""

    def __init__(
        self,
        gcs_endpoint: str,
        *,
        output_bucket: str,
        cluster_env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        certificate_dir: str | None = None,
        cluster_master: str = DEFAULT_CLUSTER_MASTER,
    ) -> None:
        self._directory = tempfile.TemporaryDirectory(prefix="dataproc-fake-")
        self._certificate_dir = certificate_dir or self._directory.name
        self.runner = WorkloadRunner(gcs_endpoint, cluster_env, workdir, cluster_master)
        self.state = DataprocState(self.runner, output_bucket)
        self._server: grpc.Server | None = None
        self._proxy: ConnectProxy | None = None
        self.roots_file: Path | None = None

    def start(self) -> FakeDataproc:
        self.roots_file, key_pem, cert_pem = certificate(self._certificate_dir)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), handlers=handlers(self.state))
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key_pem, cert_pem)]))
        server.start()
        self._server = server
        self._proxy = ConnectProxy(port).start()
        return self

    def stop(self) -> None:
        for workload in list(self.state.workloads.values()):
            self.runner.cancel(workload)
        self.state.join(timeout=60)
        if self._proxy is not None:
            self._proxy.stop()
        if self._server is not None:
            self._server.stop(grace=None)
        self._directory.cleanup()

    def __enter__(self) -> FakeDataproc:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def proxy(self) -> ConnectProxy:
        assert self._proxy is not None, "start() the fake first"
        return self._proxy

    def client_environ(self) -> dict[str, str]:
        """What a process running the google provider's Dataproc clients needs to reach the fake (set
        before its first TLS channel: gRPC reads the roots once). Channels to loopback (the Spanner
        emulator, a Spark Connect server) bypass the proxy (``no_grpc_proxy``)."""
        return {
            "grpc_proxy": f"http://127.0.0.1:{self.proxy.port}",
            "no_grpc_proxy": "127.0.0.1,localhost",
            "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(self.roots_file),
        }

    def create_cluster(self, project: str, region: str, name: str) -> None:
        """A cluster jobs can be submitted to (``placement.cluster_name``)."""
        self.state.create_cluster(project, region, name)


__all__ = ["FakeDataproc"]
