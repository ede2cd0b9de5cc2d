"""The fake in a child process, for clients that hold the GIL while they wait on the network.

pyarrow's ``GcsFileSystem`` keeps the GIL during some calls (opening a file for reading), so a
fake served by a thread of the same interpreter would never answer it. :class:`FakeGcsProcess`
runs ``python -m airflow_provider_cdc.testing.gcs_fake`` and stops it on exit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import IO, Any


class FakeGcsProcess:
    """``with FakeGcsProcess(["bucket"]) as fake: fake.endpoint``."""

    def __init__(
        self,
        buckets: list[str],
        versioned_buckets: list[str] | None = None,
        port_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.buckets = list(buckets)
        self.port_file = port_file
        self.versioned_buckets = list(versioned_buckets or [])
        self.endpoint = ""
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> FakeGcsProcess:
        args = [sys.executable, "-m", "airflow_provider_cdc.testing.gcs_fake", "--port", "0"]
        for name in self.buckets:
            args += ["--bucket", name]
        for name in self.versioned_buckets:
            args += ["--versioned-bucket", name]
        if self.port_file is not None:
            args += ["--port-file", os.fspath(self.port_file)]
        self._process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        stdout: IO[bytes] = self._process.stdout  # type: ignore[assignment]
        line = stdout.readline()
        if not line:
            self.stop()
            raise RuntimeError("the Cloud Storage fake exited before serving")
        self.endpoint = json.loads(line)["endpoint"]
        return self

    @property
    def host_port(self) -> str:
        return self.endpoint.removeprefix("http://")

    def pyarrow_options(self) -> dict[str, Any]:
        """Keyword arguments for ``pyarrow.fs.GcsFileSystem``."""
        return {"anonymous": True, "scheme": "http", "endpoint_override": self.host_port}

    def delta_storage_options(self) -> dict[str, str]:
        """``storage_options`` for delta-rs on ``gs://`` URLs served by this process."""
        from . import delta_storage_options

        return delta_storage_options(self.endpoint)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> FakeGcsProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
