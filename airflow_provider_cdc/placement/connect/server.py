"""A local Spark Connect server: one warm Spark that every window's merge runs in.

A cold ``spark-submit`` spends 10-25 s starting and warming a JVM before a window's merge does any
work; a Spark Connect server started once answers the same job in a few seconds. This module
starts the server pyspark ships (``org.apache.spark.sql.connect.service.SparkConnectServer``, the
class ``sbin/start-connect-server.sh`` runs) on loopback with the local settings of the provider's
Spark operators, waits until it answers, and stops it. Its state (process id, port, log) lives in
a folder of its own, so ``start``, ``status`` and ``stop`` may come from different processes::

    python -m airflow_provider_cdc spark-connect start --port 15002   # prints the connection URI
    python -m airflow_provider_cdc spark-connect stop

Point the Spark connection at it (``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark_connect",
"host": "sc://127.0.0.1", "port": 15002}'``) and the merge runs there.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
DEFAULT_STATE_DIR = Path(
    os.environ.get("CDC_SPARK_CONNECT_HOME", Path.home() / ".cache" / "cdc-spark-connect")
)
STATE_FILE = "server.json"
LOG_FILE = "server.log"
#: Settings of the local server: those of a local ``spark-submit`` (no web UI, serial GC), and a
#: driver heap for windows of millions of changes.
SERVER_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
    "spark.sql.session.timeZone": "UTC",
}


class SparkConnectServerError(RuntimeError):
    """The local Spark Connect server could not be started, or is not the one recorded."""


@dataclass(frozen=True)
class ServerState:
    """A started server as its state file records it."""

    pid: int
    port: int
    log: str

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"


def _spark_submit() -> str:
    import pyspark

    shipped = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    return str(shipped) if shipped.exists() else "spark-submit"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def answers(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Whether something accepts connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalSparkConnectServer:
    """Start, inspect and stop a Spark Connect server on this machine (``local[*]``, loopback only).

    :param state_dir: where the process id, port and log are kept.
    :param clock: monotonic seconds (tests drive it; waiting is bounded by ``start_timeout``).
    """

    def __init__(
        self,
        state_dir: str | os.PathLike[str] = DEFAULT_STATE_DIR,
        *,
        clock: Callable[[], float] = time.monotonic,
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        self.state_dir = Path(state_dir)
        self._clock = clock
        self._pause = pause

    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    def state(self) -> ServerState | None:
        """The recorded server when its process is alive, else ``None`` (a stale record is removed)."""
        try:
            recorded = json.loads(self.state_file.read_text())
            state = ServerState(int(recorded["pid"]), int(recorded["port"]), str(recorded["log"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not _alive(state.pid):
            self.state_file.unlink(missing_ok=True)
            return None
        return state

    def start(
        self,
        port: int = DEFAULT_PORT,
        *,
        master: str = "local[*]",
        conf: Mapping[str, Any] | None = None,
        python: str | None = None,
        start_timeout: float = 180.0,
    ) -> ServerState:
        """Start the server (or return the running one on the same port) and wait until it answers.

        The server's Python workers run ``python`` (default this one): Spark Connect needs the same
        Python minor version on client and workers. Raises :class:`SparkConnectServerError` with the
        end of the server's log when it exits or does not answer within ``start_timeout`` seconds.
        """
        running = self.state()
        if running is not None:
            if running.port != port:
                raise SparkConnectServerError(
                    f"a Spark Connect server (pid {running.pid}) already runs on port {running.port}; "
                    "stop it first"
                )
            return running
        if answers(port):
            raise SparkConnectServerError(f"port {port} is taken by another process")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.state_dir / LOG_FILE
        settings = {
            **SERVER_CONF,
            **(conf or {}),
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
        }
        command = [
            _spark_submit(),
            "--class",
            SERVER_CLASS,
            "--name",
            "Spark Connect server",
            "--master",
            master,
        ]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        env = {**os.environ, "PYSPARK_PYTHON": python or sys.executable, "SPARK_CONNECT_MODE": "0"}
        env.pop("SPARK_REMOTE", None)
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        state = ServerState(process.pid, port, str(log_path))
        self.state_file.write_text(json.dumps({"pid": state.pid, "port": port, "log": state.log}))
        deadline = self._clock() + start_timeout
        while not answers(port):
            if process.poll() is not None or self._clock() >= deadline:
                self.stop()
                reason = (
                    f"exited with status {process.returncode}"
                    if process.returncode is not None
                    else f"did not answer on port {port} within {start_timeout:.0f} s"
                )
                raise SparkConnectServerError(
                    f"the Spark Connect server {reason}; end of {log_path}:\n" + _tail(log_path)
                )
            self._pause(0.5)
        return state

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the recorded server (its whole process group); whether one was running."""
        state = self.state()
        self.state_file.unlink(missing_ok=True)
        if state is None:
            return False
        try:
            os.killpg(state.pid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        deadline = self._clock() + timeout
        while _alive(state.pid) and self._clock() < deadline:
            _reap(state.pid)
            self._pause(0.2)
        if _alive(state.pid):
            os.killpg(state.pid, signal.SIGKILL)
        _reap(state.pid)
        return True


def warm_up(url: str, scratch: str | os.PathLike[str]) -> float:
    """Run a small job of the merge's shape on the server (Parquet written and read back, a shuffle,
    a sort and a Python Arrow stage that imports the collapse kernels) in the session the merges share
    (:func:`~airflow_provider_cdc.placement.connect.session.remote_session`, ``shared=True``), so that the
    first window finds the JVM warm and the session's Python workers started. Returns its seconds."""
    from airflow_provider_cdc.placement.connect.session import remote_session
    from airflow_provider_cdc.placement.job_archive import build_domain_zip

    began = time.monotonic()
    folder = Path(scratch) / "warm-up"
    folder.mkdir(parents=True, exist_ok=True)
    artifacts = [build_domain_zip(folder)]
    with remote_session(url, artifacts=artifacts, what="the warm-up", shared=True) as spark:
        from pyspark.sql import functions as F

        def kernels_loaded(batches: Any) -> Any:  # nested: shipped by value
            import airflow_provider_cdc.merge.kernels  # noqa: F401  (from the session's artifact)

            yield from batches

        text = F.sha2(F.col("id").cast("string"), 256).alias("text")
        rows = spark.range(20_000).select(F.col("id"), (F.col("id") % 97).alias("key"), text)
        rows.write.mode("overwrite").parquet(str(folder / "rows"))
        read = spark.read.parquet(str(folder / "rows"))
        read = read.repartition(2, "key").sortWithinPartitions("key", "id")
        total = read.mapInArrow(kernels_loaded, read.schema).agg(F.count("*")).collect()[0][0]
    if total != 20_000:
        raise SparkConnectServerError(f"the warm-up job counted {total} rows, not 20000")
    return time.monotonic() - began


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status when it is this process's child (so it does not linger)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
