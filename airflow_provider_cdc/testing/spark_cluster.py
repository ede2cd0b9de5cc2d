"""A Spark standalone cluster on loopback, from the ``pyspark`` distribution: one master, one worker.

The master and the worker are the real daemons (``spark-class org.apache.spark.deploy.master.Master``
and ``…deploy.worker.Worker``), each on ports of its own, so a pipeline's ``spark_default`` can name
``spark://127.0.0.1:PORT`` and its merges run there with executors on the worker. The master's JSON
endpoint tells which applications ran, and the worker's which executors it started for them.

    python -m airflow_provider_cdc.testing.spark_cluster      # start; prints the master URL; Ctrl-C stops
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_cdc.placement.connect.server import free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class ClusterStartError(RuntimeError):
    """The master or the worker did not come up (the message has the end of its log)."""


def spark_home() -> Path:
    """The Spark distribution the ``pyspark`` package ships (``bin/spark-class``, ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class StandaloneCluster:
    """One master and one worker on ``127.0.0.1``; :meth:`start` and :meth:`stop`, or a ``with`` block.

    :param work_dir: logs and the worker's application folders.
    :param cores: the worker's cores; ``memory``: what the worker offers executors.
    :param clock: monotonic seconds; start-up is bounded by ``start_timeout`` on it.
    """

    work_dir: Path
    cores: int = 2
    memory: str = "2g"
    start_timeout: float = 120.0
    clock: Callable[[], float] = time.monotonic
    pause: Callable[[float], None] = time.sleep
    master_port: int = field(default_factory=free_port)
    master_ui_port: int = field(default_factory=free_port)
    worker_port: int = field(default_factory=free_port)
    worker_ui_port: int = field(default_factory=free_port)
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def connection(self) -> str:
        """An Airflow connection (``AIRFLOW_CONN_*`` JSON) of type ``spark`` naming this master."""
        return json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": self.master_port})

    def environment(self) -> dict[str, str]:
        """What a driver on this machine needs to reach the cluster: loopback addresses."""
        return {"SPARK_LOCAL_IP": "127.0.0.1"}

    def _daemon_environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.work_dir / "logs"),
            SPARK_DAEMON_MEMORY="512m",
            PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
        )
        return env

    def _spawn(self, name: str, *arguments: str) -> None:
        log = (self.work_dir / f"{name}.log").open("wb")
        command = [str(spark_home() / "bin" / "spark-class"), *arguments]
        self._processes.append(subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=self._daemon_environment(),
            start_new_session=True,
        ))
        log.close()

    def start(self) -> StandaloneCluster:
        """Start the master, then the worker, and return once the master lists the worker ``ALIVE``."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._spawn("master", MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.master_port),
                    "--webui-port", str(self.master_ui_port))
        self._spawn("worker", WORKER_CLASS, self.master_url, "--host", "127.0.0.1",
                    "--port", str(self.worker_port), "--webui-port", str(self.worker_ui_port),
                    "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", str(self.work_dir / "work"))
        deadline = self.clock() + self.start_timeout
        while self.clock() < deadline:
            for process, name in zip(self._processes, ("master", "worker"), strict=True):
                if process.poll() is not None:
                    self.stop()
                    raise ClusterStartError(f"the {name} exited with {process.returncode}:\n{self.log(name)}")
            try:
                workers = self.master_state().get("workers", [])
            except OSError:
                workers = []
            if any(worker.get("state") == "ALIVE" for worker in workers):
                return self
            self.pause(0.5)
        self.stop()
        raise ClusterStartError(
            f"no worker registered with {self.master_url} within {self.start_timeout:.0f} s:\n"
            f"{self.log('master')}\n{self.log('worker')}"
        )

    def log(self, name: str, lines: int = 30) -> str:
        """The last ``lines`` of the master's or the worker's log."""
        try:
            text = (self.work_dir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    @staticmethod
    def _json(port: int) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=10) as response:
            return dict(json.loads(response.read()))

    def master_state(self) -> dict[str, Any]:
        """The master's JSON endpoint: ``workers``, ``activeapps``, ``completedapps`` …"""
        return self._json(self.master_ui_port)

    def worker_state(self) -> dict[str, Any]:
        """The worker's JSON endpoint: ``executors`` and ``finishedexecutors`` (each with its ``appid``)."""
        return self._json(self.worker_ui_port)

    def applications(self) -> list[dict[str, Any]]:
        """Every application the master has run or runs, oldest first."""
        state = self.master_state()
        apps = [*state.get("completedapps", []), *state.get("activeapps", [])]
        return sorted(apps, key=lambda app: app.get("starttime", 0))

    def executor_applications(self) -> list[str]:
        """The application id of every executor the worker started (running or finished)."""
        state = self.worker_state()
        executors = [*state.get("executors", []), *state.get("finishedexecutors", [])]
        return [str(executor.get("appid")) for executor in executors]

    def stop(self) -> None:
        """Stop the worker and the master (their process groups)."""
        for process in reversed(self._processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        self._processes.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run(environ: Mapping[str, str] = os.environ) -> int:
    """Start a cluster, print how to use it, and stop it on Ctrl-C."""
    work_dir = Path(environ.get("CDC_SPARK_CLUSTER_DIR") or tempfile.mkdtemp(prefix="cdc-spark-cluster-"))
    with StandaloneCluster(work_dir) as cluster:
        print(f"Spark master {cluster.master_url} (web UI http://127.0.0.1:{cluster.master_ui_port}), "
              f"one worker; logs in {work_dir}", flush=True)
        print(f"export AIRFLOW_CONN_SPARK_DEFAULT='{cluster.connection()}' SPARK_LOCAL_IP=127.0.0.1",
              flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
    if "CDC_SPARK_CLUSTER_DIR" not in environ:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(run())
