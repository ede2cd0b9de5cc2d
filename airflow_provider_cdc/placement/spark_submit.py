"""Defaults shared by the provider's Spark operators: with no Spark connection, run ``local[*]`` here."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from airflow_provider_cdc._compat import AirflowFailException, AirflowNotFoundException, BaseHook
from airflow_provider_cdc.hooks.storage import DEFAULT_GCP_CONN_ID
from airflow_provider_cdc.placement.dataproc.resources import DATAPROC_CONNECTION_TYPE

LOCAL_MASTER = "local[*]"
#: The Spark connection a step uses when none is named; the only one that may be undefined.
DEFAULT_SPARK_CONN_ID = "spark_default"
#: The Apache Spark provider's connection type for a Spark Connect server.
CONNECT_CONNECTION_TYPE = "spark_connect"
#: Spark settings for a local master that the operator's own ``conf`` has not set. A window's merge
#: is a short job, so start-up dominates it: no web UI, and a driver JVM that compiles with C1 only
#: and collects with the serial collector, which halves the CPU time of a cold job (the C2
#: compiler and parallel GC threads compete with the job for the worker's cores and never pay back
#: within a few seconds). Clusters (yarn, k8s, spark://) get none of these.
LOCAL_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}
LOCAL_OUTPUT_LINES_KEPT = 40


class SparkJobError(RuntimeError):
    """A job run with the worker's Python exited with an error (the message has its last output)."""


def connection_master(conn_id: str) -> str | None:
    """The Spark master a connection names, resolved as the Apache Spark provider's ``spark-submit``
    hook resolves it (host, or type and host, with the port); ``sc://…`` for a Spark Connect server.

    ``None`` only for the default ``spark_default`` when it is not defined: the job then runs on
    ``local[*]`` here, and the caller says so. Any other connection id must exist: a missing one fails
    the task at once (no retry), naming it, instead of running somewhere the user did not choose.
    """
    try:
        connection = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        if conn_id == DEFAULT_SPARK_CONN_ID:
            return None
        raise AirflowFailException(
            f"Spark connection {conn_id!r} (the step's conn_id, the example DAGs' param spark_conn_id) is "
            f"not defined. Define it (a 'spark' connection whose host is the master: spark://HOST:7077, "
            f"yarn, k8s://…; or type {CONNECT_CONNECTION_TYPE!r} or {DATAPROC_CONNECTION_TYPE!r}), or use "
            f"{DEFAULT_SPARK_CONN_ID!r}, which runs Spark on this worker (local[*]) while it is undefined"
        ) from None
    host = connection.host or ""
    if connection.conn_type == CONNECT_CONNECTION_TYPE:
        return host if host.startswith("sc://") else f"sc://{host}"
    if connection.conn_type == "spark" and host and ("://" in host or not connection.port):
        master = host
    else:
        master = f"{connection.conn_type}://{host}"
    return f"{master}:{connection.port}" if connection.port else master


def connection_deploy_mode(conn_id: str, deploy_mode: str | None = None) -> str:
    """Where ``spark-submit`` puts the driver: the operator's ``deploy_mode``, else the connection's
    ``deploy-mode`` extra, else ``client`` (on the worker that submits)."""
    if deploy_mode:
        return str(deploy_mode)
    try:
        extra = BaseHook.get_connection(conn_id).extra_dejson
    except AirflowNotFoundException:
        return "client"
    return str(extra.get("deploy-mode") or "client")


def is_dataproc(master: str | None) -> bool:
    """Whether a master from :func:`connection_master` is a ``dataproc`` connection (jobs on Dataproc)."""
    return bool(master) and str(master).startswith(f"{DATAPROC_CONNECTION_TYPE}://")


def is_connect(master: str | None) -> bool:
    """Whether a master from :func:`connection_master` is a Spark Connect server (``sc://``)."""
    return bool(master) and str(master).startswith("sc://")


@contextmanager
def local_spark_connection(conn_id: str) -> Iterator[None]:
    """Define ``conn_id`` as a local Spark master (``AIRFLOW_CONN_*``) while the hook resolves it."""
    variable = f"AIRFLOW_CONN_{conn_id.upper()}"
    previous = os.environ.get(variable)
    os.environ[variable] = json.dumps({"conn_type": "spark", "host": LOCAL_MASTER})
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = previous


def local_environment(env: dict[str, str] | None) -> dict[str, str]:
    """``env`` plus what a local ``spark-submit`` needs from this worker: this Python for PySpark and,
    when ``spark-submit`` is not on ``PATH``, the one the ``pyspark`` package ships."""
    result = dict(env or {})
    if "PYSPARK_PYTHON" not in result and "PYSPARK_PYTHON" not in os.environ:
        result["PYSPARK_PYTHON"] = sys.executable
    if "PATH" not in result and shutil.which("spark-submit") is None:
        import pyspark

        shipped = Path(pyspark.__file__).parent / "bin"
        if (shipped / "spark-submit").exists():
            result["PATH"] = os.pathsep.join([str(shipped), os.environ.get("PATH", "")])
    return result


def local_conf(conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """``conf`` plus the :data:`LOCAL_SPARK_CONF` settings it does not set itself."""
    return {**LOCAL_SPARK_CONF, **(conf or {})}


def is_local(master: str | None) -> bool:
    """Whether a master from :func:`connection_master` runs Spark on this worker (``None``: no connection)."""
    return master is None or master.startswith("local")


_LOOK_UP = object()


@contextmanager
def spark_defaults(
    operator: Any,
    conn_id: str,
    master: Any = _LOOK_UP,
    *,
    application_args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """While a SparkSubmitOperator submits one window's job: its ``application_args``, ``env``
    added to its environment, and a local ``[*]`` master, environment and settings
    (:data:`LOCAL_SPARK_CONF`) when ``conn_id`` is missing or local. Yields the master used; the
    operator's own (rendered) ``application_args``, ``env_vars`` and ``conf`` are restored after, so
    nothing of one run, credentials included, stays on the operator. ``master``: the connection's,
    when the caller has looked it up already (:func:`connection_master`)."""
    if master is _LOOK_UP:
        master = connection_master(conn_id)
    user_args, user_env, user_conf = operator.application_args, operator.env_vars, operator.conf
    if application_args is not None:
        operator.application_args = list(application_args)
    if env:
        operator.env_vars = {**(user_env or {}), **env}
    if is_local(master):
        operator.env_vars = local_environment(operator.env_vars)
        operator.conf = local_conf(user_conf)
    try:
        with local_spark_connection(conn_id) if master is None else nullcontext():
            yield master or f"{LOCAL_MASTER} (no connection {conn_id!r})"
    finally:
        operator.application_args, operator.env_vars, operator.conf = user_args, user_env, user_conf


def puts_environment_on_command_line(master: str | None) -> bool:
    """Whether a job on ``master`` would carry its environment where others can read it: ``--conf``
    values on ``spark-submit``'s command line (YARN, Kubernetes), or a Dataproc job's resource.
    Credentials must not reach such a job that way."""
    return bool(master) and ("yarn" in str(master) or "k8s" in str(master) or is_dataproc(master))


def job_credentials(
    master: str | None, env: Mapping[str, str], gcp_conn_id: str | None, log: Any = None
) -> Mapping[str, str]:
    """The storage environment ``env`` (built for ``gcp_conn_id``) a job on ``master`` gets.

    ``env`` is empty unless credentials would be used (a location on an object store, or a
    connection named explicitly). A master that would put it on the command line gets none of the
    default connection's credentials (the cluster uses its own identity) and refuses any other's
    (:func:`refuse_remote_credentials`).
    """
    if env and puts_environment_on_command_line(master) and gcp_conn_id == DEFAULT_GCP_CONN_ID:
        if log is not None:
            log.info(
                "Spark master %s gets no credentials of %s: the cluster opens the locations with its own "
                "Google identity",
                master,
                gcp_conn_id,
            )
        return {}
    refuse_remote_credentials(master, env)
    return env


def refuse_remote_credentials(master: str | None, env: Mapping[str, str]) -> None:
    """Credentials in a job's environment only reach a driver this worker starts: on YARN or
    Kubernetes spark-submit would carry them as ``--conf`` values on its command line, and a Dataproc
    job in its resource."""
    if env and puts_environment_on_command_line(master):
        where = "the Dataproc job's resource" if is_dataproc(master) else "the spark-submit command line"
        raise ValueError(
            f"gcp_conn_id credentials can only reach a driver started by this worker; master {master!r} "
            f"would put them in {where}. Drop gcp_conn_id and give the cluster "
            "its own Google credentials (e.g. workload identity)"
        )


class LocalPythonJob:
    """Runs a job file that starts no SparkSession with this worker's Python instead of ``spark-submit``.

    On a local master ``spark-submit`` of such a file only starts a JVM (10-20 s) that then starts
    the same Python: the job runs as it would there, with ``PYSPARK_DRIVER_PYTHON`` or
    ``PYSPARK_PYTHON`` (``env``, then this process's environment; default this Python) and the
    ``py_files`` on ``PYTHONPATH``. Output goes to ``log`` line by line; a non-zero exit raises with
    the last lines.
    """

    def __init__(
        self,
        application: str,
        arguments: Sequence[str],
        env: Mapping[str, str] | None = None,
        py_files: str | None = None,
    ) -> None:
        self.application = application
        self.arguments = [str(argument) for argument in arguments]
        self.env = {**os.environ, **{key: str(value) for key, value in (env or {}).items()}}
        paths = [path for path in (py_files or "").split(",") if path.strip()]
        if paths:
            self.env["PYTHONPATH"] = os.pathsep.join(
                [*(path.strip() for path in paths), *filter(None, [self.env.get("PYTHONPATH")])]
            )
        self.python = (
            self.env.get("PYSPARK_DRIVER_PYTHON") or self.env.get("PYSPARK_PYTHON") or sys.executable
        )
        self._process: subprocess.Popen[str] | None = None

    @property
    def command(self) -> list[str]:
        return [self.python, self.application, *self.arguments]

    def run(self, log: logging.Logger | Any) -> None:
        """Run to completion, logging the output; raise :class:`SparkJobError` on a non-zero exit."""
        log.info(
            "Running %s with %s (no spark-submit: the job starts no Spark)", self.application, self.python
        )
        kept: deque[str] = deque(maxlen=LOCAL_OUTPUT_LINES_KEPT)
        self._process = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env
        )
        assert self._process.stdout is not None
        for line in self._process.stdout:
            kept.append(line.rstrip())
            log.info("%s", kept[-1])
        status = self._process.wait()
        if status:
            raise SparkJobError(
                f"{self.application} exited with status {status}; last output:\n" + "\n".join(kept)
            )

    def kill(self) -> None:
        """Terminate the job if it is still running."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
