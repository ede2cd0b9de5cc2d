"""The merge job run on a Spark Connect server: the same plan as ``spark-submit merge/job.py``.

The job's command line is parsed by the job itself (:func:`airflow_provider_cdc.merge.job.parse_arguments`)
and its plan (:func:`~airflow_provider_cdc.merge.job.merge_window`) runs against a session on the
server, with the domain zip uploaded as the session's Python code (the executors unpickle the
collapse kernel from it). The driver side runs here, in the task: file operations around Spark's
reads and writes go through pyarrow filesystems, and the job's progress lines go to the task log.
"""

from __future__ import annotations

import hashlib
import io
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import redirect_stdout
from typing import Any
from urllib.parse import urlparse

from airflow_provider_cdc.placement.connect.session import remote_session

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


class SparkConnectJobError(RuntimeError):
    """The job failed on a running server (bad input, a failed check); its reason is the message."""


class _LogLines(io.TextIOBase):
    """A text stream that sends each complete line to ``log.info``, to stand in for ``sys.stdout``.

    While it logs a line, ``sys.stdout`` is the stream it replaced: a logger that itself writes to
    ``sys.stdout`` (Airflow's, outside a supervised task) must not write back into it.
    """

    def __init__(self, log: logging.Logger | Any) -> None:
        self._log = log
        self._pending = ""
        self._replaced = sys.stdout

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        for line in lines:
            self._emit(line)
        return len(text)

    def flush(self) -> None:
        self._emit(self._pending)
        self._pending = ""

    def _emit(self, line: str) -> None:
        if not line.strip():
            return
        current, sys.stdout = sys.stdout, self._replaced
        try:
            self._log.info("%s", line)
        finally:
            sys.stdout = current


def on_this_machine(url: str) -> bool:
    """Whether the server of an ``sc://`` URI runs on this machine (loopback), sharing its disk."""
    return (urlparse(url.replace("sc://", "http://", 1)).hostname or "") in LOOPBACK_HOSTS


def merge_tag(changeset: str) -> str:
    """The tag of a window's merge operations on the server: one per change-set folder, whatever the
    try or the opening of the window."""
    return f"cdc-merge-{hashlib.sha256(changeset.encode()).hexdigest()[:32]}"


def run_merge(
    url: str,
    arguments: Sequence[str],
    *,
    artifacts: Sequence[str],
    storage_options: Mapping[str, str] | None,
    log: logging.Logger | Any,
    on_interruptible: Callable[[Callable[[], Any] | None], None] | None = None,
) -> dict[str, Any]:
    """Run the merge job with ``arguments`` on the server at ``url``; return its manifest.

    Raises :class:`SparkConnectJobError` when the window cannot be merged (the job's own reason)
    and :class:`~airflow_provider_cdc.placement.connect.session.SparkConnectUnavailableError` when the
    server is unreachable or goes away; nothing is published in either case, and the change set is
    rewritten whole when the task runs again. ``on_interruptible`` gets a function that interrupts this
    merge's operations on the server once they can run (and ``None`` when they are over), for a caller
    that may have to stop the merge; other jobs in the shared session go on.
    """
    from airflow_provider_cdc.merge.errors import MergeJobError
    from airflow_provider_cdc.merge.files import ArrowFiles
    from airflow_provider_cdc.merge.job import configure_session, merge_window, parse_arguments

    args = parse_arguments(list(arguments))
    files = ArrowFiles(dict(storage_options) if storage_options else None, shares_disk=on_this_machine(url))
    lines = _LogLines(log)
    what = f"the merge of window {args.window}"
    tag = merge_tag(args.changeset)
    with remote_session(url, artifacts=artifacts, what=what, shared=True) as spark:
        try:
            _fence_earlier_tries(spark, tag, what, log)
            spark.addTag(tag)
            if on_interruptible is not None:
                on_interruptible(lambda: spark.interruptTag(tag))
            with redirect_stdout(lines):
                configure_session(spark)
                return merge_window(spark, args, files, dict(storage_options) if storage_options else None)
        except MergeJobError as error:
            raise SparkConnectJobError(f"merge_job: error: {error}") from None
        finally:
            lines.flush()
            spark.clearTags()
            if on_interruptible is not None:
                on_interruptible(None)


def _fence_earlier_tries(spark: Any, tag: str, what: str, log: logging.Logger | Any) -> None:
    """Interrupt what an earlier try of this window's merge still runs on the server.

    A task killed without cleanup (SIGKILL, a lost worker) leaves its operations running on the
    server, writing the change set the retry is about to write. They share the retry's session (its
    id comes from the artifacts) and tag, so the retry stops them before it starts. A try of an
    earlier opening of the window is stopped too: its manifest would be refused (its epoch is
    stale), and its writes would race this one's. A stale try never gets this far: the merge
    operator checks the epoch before it merges.
    """
    interrupted = spark.interruptTag(tag)
    if interrupted:
        log.info(
            "Interrupted %d operation(s) an earlier try of %s left running on the server: %s",
            len(interrupted),
            what,
            ", ".join(interrupted),
        )
