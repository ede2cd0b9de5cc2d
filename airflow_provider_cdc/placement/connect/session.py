"""Sessions on a Spark Connect server named by an Airflow connection of type ``spark_connect``.

The Apache Spark provider's ``spark_connect`` connection (host ``sc://host``, port, optional user
id, token and ``use_ssl`` extra) gives the server's URI through its ``SparkConnectHook``. Jobs
with the same uploaded code share one session, kept on the server so its Python workers stay warm
(``remote_session(..., shared=True)``); others get a session of their own, released when they end.
The client retries a server that does not answer for a short while only
(:data:`RETRY_POLICY`), so that a server that is down or dies mid-window fails the task within
seconds with :class:`SparkConnectUnavailableError`, and Airflow's retry heals it once the server
is back. URIs are logged without their token.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import sys
import threading
import uuid
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from airflow_provider_cdc.hooks.connections import defined_connection

CONNECTION_TYPE = "spark_connect"
#: The client's retries of an unavailable server: 5 tries over about 5 s (pyspark's default
#: waits up to 10 minutes, holding a worker slot while the task could be retried instead).
RETRY_POLICY = {"max_retries": 4, "initial_backoff": 200, "max_backoff": 4000, "backoff_multiplier": 3.0}
_SECRET_PARAMETER = re.compile(r"(?i)(token=)[^;/]*")


class SparkConnectUnavailableError(RuntimeError):
    """The Spark Connect server did not answer, or went away while a job ran on it."""


def redacted(url: str) -> str:
    """``url`` without its token (safe to log)."""
    return _SECRET_PARAMETER.sub(r"\1***", url)


#: The Spark connection the jobs use unless given another; when it is missing they run ``local[*]``.
DEFAULT_SPARK_CONN_ID = "spark_default"


def connect_url(conn_id: str) -> str | None:
    """The ``sc://`` URI of ``conn_id`` when it is a ``spark_connect`` connection, else ``None`` (a
    missing ``spark_default`` too: Spark ``local[*]``); another connection that is not defined
    fails (``ConnectionNotDefinedError``, naming ``conn_id``)."""
    connection = defined_connection(
        conn_id, "conn_id", default=DEFAULT_SPARK_CONN_ID, default_means="Spark runs local[*] on the worker"
    )
    if connection is None or connection.conn_type != CONNECTION_TYPE:
        return None
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    return SparkConnectHook(conn_id).get_connection_url()


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the server could not be reached or dropped the connection (as
    opposed to a job that failed on a running server)."""
    import grpc

    code = (
        error.code()
        if isinstance(error, grpc.RpcError) and hasattr(error, "code")
        else getattr(error, "_grpc_status_code", None)
    )
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED):
        return True
    if isinstance(error, grpc.RpcError):
        return True
    cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return cause is not None and cause is not error and is_unavailable(cause)


@contextmanager
def remote_session(
    url: str, *, artifacts: Sequence[str] = (), what: str = "a job", shared: bool = False
) -> Iterator[Any]:
    """A session on the server at ``url`` with ``artifacts`` (zip or .py files) on its Python path.

    ``shared=False``: a new session, released at the end. ``shared=True``: the session every job with
    the same artifacts shares (its id derives from their content, :func:`shared_session_id`), kept
    on the server at the end: its Python workers, with the artifacts imported, serve the next job at
    once (a new session boots new workers, about 3-5 s). A shared session the server has closed
    (idle timeout) is followed by the next id of the sequence. An unreachable or vanished server
    raises :class:`SparkConnectUnavailableError` naming the server (without its token) and ``what``.
    """
    with _connect_mode(), _open_session(url, artifacts, what, shared) as spark:
        yield spark


@contextmanager
def _open_session(url: str, artifacts: Sequence[str], what: str, shared: bool) -> Iterator[Any]:
    spark = None
    try:
        for attempt in range(SHARED_SESSION_ATTEMPTS if shared else 1):
            session_url = _with_session_id(url, shared_session_id(artifacts, attempt)) if shared else url
            spark = _session(session_url)
            try:
                for path in artifacts:
                    _add_pyfile(spark, path)
                break
            except Exception as error:
                if not (shared and _session_closed(error)):
                    raise
                spark.release_session_on_close = False
                spark.stop()
                spark = None
        if spark is None:
            raise SparkConnectUnavailableError(
                f"Spark Connect server {redacted(url)} closed every shared session of these artifacts"
            )
        yield spark
    except SparkConnectUnavailableError:
        raise
    except Exception as error:
        if is_unavailable(error):
            raise SparkConnectUnavailableError(
                f"Spark Connect server {redacted(url)} is unreachable or went away during {what}: "
                f"{_first_line(error)}. Nothing of it was published; a retry runs it again once the "
                "server answers"
            ) from None
        raise
    finally:
        if spark is not None:
            spark.release_session_on_close = not shared
            spark.stop()  # releases a session of its own; best effort when the server is gone


def _add_pyfile(spark: Any, path: str) -> None:
    """Ship ``path`` to the session's Python workers, leaving this process's ``sys.path`` as it was.

    The client also puts a zip on the local ``sys.path`` (at position 1). The task already imports the
    installed package; the domain zip there would shadow it for every process this one spawns (their
    ``airflow_provider_cdc`` would be the zip's, without the provider's entry point).
    """
    before = list(sys.path)
    try:
        spark.addArtifacts(path, pyfile=True)
    finally:
        if sys.path != before:
            sys.path[:] = before
            importlib.invalidate_caches()


def _session_closed(error: BaseException) -> bool:
    """Whether the server refused a session id because that session was closed (released or timed out)."""
    condition = getattr(error, "getCondition", lambda: None)()
    return condition == "INVALID_HANDLE.SESSION_CLOSED"


#: Ids tried in turn for a shared session the server closed (an idle timeout ends a session for good).
SHARED_SESSION_ATTEMPTS = 4


def shared_session_id(artifacts: Sequence[str], attempt: int = 0) -> str:
    """The session id of the jobs with these artifacts (a UUID from their content and ``attempt``)."""
    digest = hashlib.sha256(f"cdc-shared-session:{attempt}".encode())
    for path in artifacts:
        with open(path, "rb") as artifact:
            digest.update(hashlib.sha256(artifact.read()).digest())
    return str(uuid.UUID(bytes=digest.digest()[:16], version=4))


def _with_session_id(url: str, session_id: str) -> str:
    """``url`` with its ``session_id`` parameter set (``sc://host:port/;name=value;…``)."""
    base, _, parameters = url.partition("/;")
    kept = [item for item in parameters.split(";") if item and not item.startswith("session_id=")]
    return f"{base.rstrip('/')}/;" + ";".join([*kept, f"session_id={session_id}"])


#: What marks this process as a Spark Connect client: pyspark's ``functions`` build Connect columns
#: only while it is set, so it is set for the job's duration, and taken away after it (left there, a
#: later ``spark-submit`` from this worker would start in Connect mode and fail).
_CONNECT_MODE_VARIABLES = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


_connect_mode_lock = threading.Lock()
_connect_mode_users = 0
_connect_mode_saved: dict[str, str | None] = {}


@contextmanager
def _connect_mode() -> Iterator[None]:
    """Connect mode while any thread of this process runs a job: the first to enter saves the
    variables, the last to leave restores them (overlapping jobs in threads leave nothing behind)."""
    global _connect_mode_users, _connect_mode_saved
    with _connect_mode_lock:
        if _connect_mode_users == 0:
            _connect_mode_saved = {name: os.environ.get(name) for name in _CONNECT_MODE_VARIABLES}
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        _connect_mode_users += 1
    try:
        yield
    finally:
        with _connect_mode_lock:
            _connect_mode_users -= 1
            if _connect_mode_users == 0:
                for name, value in _connect_mode_saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value


def _session(url: str) -> Any:
    with warnings.catch_warnings():
        # pyspark's notice about pandas 3 when it loads its Connect client; the jobs exchange
        # Arrow, not pandas
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
        from pyspark.sql.connect.session import SparkSession

        spark = SparkSession.builder.remote(url).create()  # no call to the server yet
    spark.client.set_retry_policies([_retry_policy()])
    return spark


def _retry_policy() -> Any:
    from pyspark.sql.connect.client.retries import DefaultPolicy

    return DefaultPolicy(**RETRY_POLICY)


def _first_line(error: BaseException) -> str:
    """The gist of a client error: gRPC's status and details when it carries them, else its first line."""
    text = str(error).strip()
    status = re.search(r"status = StatusCode\.(\w+)", text)
    details = re.search(r'details = "([^"]*)"', text)
    if status:
        return redacted(status.group(1) + (f" ({details.group(1)})" if details else ""))
    lines = text.splitlines()
    return redacted(lines[0] if lines else type(error).__name__)
