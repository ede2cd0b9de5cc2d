"""Google's Cloud Spanner emulator (``emulator_main``) as a child process on a free loopback port.

The emulator ships with the Google Cloud CLI (Debian package ``google-cloud-cli-spanner-emulator``).
It serves change streams on the real clock; its partitions split and merge about every 20 s. The
binary is found through ``CDC_SPANNER_EMULATOR_BIN``, then the CLI's install path, then ``PATH``::

    with GoogleSpannerEmulator() as emulator:
        os.environ["SPANNER_EMULATOR_HOST"] = emulator.host
        ...
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from airflow_provider_cdc.testing.emulator_client import INSTANCE_CONFIG

__all__ = ["INSTANCE_CONFIG", "GoogleEmulatorUnavailable", "GoogleSpannerEmulator", "find_binary"]

BINARY_ENV = "CDC_SPANNER_EMULATOR_BIN"
DEFAULT_BINARY = "/usr/lib/google-cloud-sdk/bin/cloud_spanner_emulator/emulator_main"


class GoogleEmulatorUnavailable(RuntimeError):
    """The emulator binary is not installed here, or it did not start."""


def find_binary() -> str | None:
    """Path of ``emulator_main``: ``$CDC_SPANNER_EMULATOR_BIN``, the CLI's install path, or ``PATH``."""
    configured = os.environ.get(BINARY_ENV, "").strip()
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    if os.access(DEFAULT_BINARY, os.X_OK):
        return DEFAULT_BINARY
    return shutil.which("emulator_main")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class GoogleSpannerEmulator:
    """One ``emulator_main`` process; :meth:`stop` ends it by its PID."""

    def __init__(self, binary: str | None = None, extra_args: tuple[str, ...] = ()) -> None:
        found = binary or find_binary()
        configured = os.environ.get(BINARY_ENV, "").strip()
        if not found and configured:
            raise GoogleEmulatorUnavailable(
                f"Google's Cloud Spanner emulator is not available: {BINARY_ENV}={configured} is not an "
                "executable file"
            )
        if not found:
            raise GoogleEmulatorUnavailable(
                f"Google's Cloud Spanner emulator is not installed (set {BINARY_ENV}, install "
                f"google-cloud-cli-spanner-emulator for {DEFAULT_BINARY}, or put emulator_main on PATH)"
            )
        self.binary = found
        self.extra_args = extra_args
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``, the value for ``SPANNER_EMULATOR_HOST``."""
        if self.port is None:
            raise GoogleEmulatorUnavailable("the emulator is not started")
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> str:
        """Start on a free loopback port and wait until it accepts connections; returns the host."""
        tail = ""
        for _attempt in range(3):  # another process may take the port between probe and bind
            self.port = _free_port()
            handle, name = tempfile.mkstemp(prefix="spanner-emulator-", suffix=".log")
            self.log_path = Path(name)
            with os.fdopen(handle, "wb") as log:
                self.process = subprocess.Popen(
                    [self.binary, "--host_port", self.host, *self.extra_args],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.process.poll() is None:
                if _accepts(self.port):
                    return self.host
                time.sleep(0.1)
            tail = self.log_tail()
            self.stop()
        raise GoogleEmulatorUnavailable(f"{self.binary} did not start: {tail}")

    def log_tail(self, lines: int = 20) -> str:
        """The last lines the running emulator wrote."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """End the process by its PID (SIGTERM, then SIGKILL) and remove its log."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout)
        if self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path = None

    def __enter__(self) -> GoogleSpannerEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
