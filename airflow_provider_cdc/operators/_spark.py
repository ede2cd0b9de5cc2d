"""Defaults shared by the provider's Spark operators: with no Spark connection, run ``local[*]`` here."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

try:
    from airflow.providers.common.compat.sdk import AirflowException, BaseHook
except ImportError:  # older common-compat providers (Airflow 2.11)
    from airflow.exceptions import AirflowException  # type: ignore[no-redef]
    from airflow.hooks.base import BaseHook  # type: ignore[no-redef]

LOCAL_MASTER = "local[*]"


def connection_master(conn_id: str) -> str | None:
    """The Spark master a connection names, or ``None`` when the connection does not exist."""
    try:
        connection = BaseHook.get_connection(conn_id)
    except AirflowException:
        return None
    host = connection.host or ""
    return host if connection.conn_type == "spark" and host else f"{connection.conn_type}://{host}"


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


@contextmanager
def spark_defaults(operator: Any, conn_id: str) -> Iterator[str]:
    """While a SparkSubmitOperator runs: local ``[*]`` master and environment when ``conn_id`` is
    missing or local. Yields the master used; the operator's own ``env_vars`` are restored after."""
    master = connection_master(conn_id)
    user_env = operator.env_vars
    if master is None or master.startswith("local"):
        operator.env_vars = local_environment(user_env)
    try:
        with local_spark_connection(conn_id) if master is None else nullcontext():
            yield master or f"{LOCAL_MASTER} (no connection {conn_id!r})"
    finally:
        operator.env_vars = user_env
