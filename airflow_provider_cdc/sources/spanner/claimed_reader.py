"""What every reader of a window shares: claiming its partitions through the metastore, one staging
folder per claim, leases renewed while reading, completion by compare-and-set on the claim, retries.

A window's **partitions** are change-stream partitions or table batches; several readers (mapped tasks)
share a window by claiming them with leases. Each claim writes a folder of its own and only the claim
that completes the partition counts, so a reader that lost its lease and wakes up later changes nothing.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import ClassVar

from google.api_core import exceptions as gexc

from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.staging.parquet import DEFAULT_ROWS_PER_FILE, StagingWriter

# Errors worth retrying from where the read got to (the client already resumes UNAVAILABLE
# transparently with resume tokens; these are what reach us).
RETRYABLE = (
    gexc.Aborted,
    gexc.ServiceUnavailable,
    gexc.InternalServerError,
    gexc.DeadlineExceeded,
    gexc.ResourceExhausted,
    gexc.Cancelled,
)


class WindowReadError(RuntimeError):
    """A window could not be read; the message names the window, the partition and the cause."""

    #: What the window's partitions are called in messages.
    partition_noun: ClassVar[str] = "partition"
    #: Where a failure that concerns no partition happened ("": the message names no place).
    without_partition: ClassVar[str] = ""

    def __init__(self, window: Window, token: str | None, cause: BaseException | str) -> None:
        where = self.without_partition if token is None else f"{self.partition_noun} {token}"
        super().__init__(f"reading window {window} failed{f' at {where}' if where else ''}: {cause}")
        self.window = window
        self.token = token
        self.cause = cause


def describe_error(exc: gexc.GoogleAPICallError) -> str:
    """``CODE: message`` of a Spanner error."""
    code = getattr(exc, "grpc_status_code", None)
    return f"{code.name if code is not None else type(exc).__name__}: {exc.message}"


class ClaimedWindowReader:
    """Claims, stages and completes the partitions of windows of one metastore ``key`` (a change stream's
    or a table source's) under the staging folder ``folder``.

    Subclasses set :attr:`read_error` (the :class:`WindowReadError` they raise) and read each claimed
    partition. The staging root is
    opened with ``storage_options`` (delta-rs object-store options, such as those of a Google
    connection) unless an explicit ``filesystem`` is given.
    """

    read_error: ClassVar[type[WindowReadError]] = WindowReadError

    def __init__(
        self,
        metastore: Metastore,
        key: str,
        folder: str,
        staging_root: str,
        *,
        owner: str,
        lease_seconds: float = 300.0,
        retries: int = 5,
        backoff_seconds: float = 1.0,
        poll_seconds: float = 1.0,
        rows_per_file: int = DEFAULT_ROWS_PER_FILE,
        filesystem: object | None = None,
        storage_options: Mapping[str, str] | None = None,
        log: logging.Logger | None = None,
        progress_seconds: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.metastore = metastore
        self.key = key
        self.folder = folder
        self.staging_root = staging_root
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.retries = retries
        self.backoff_seconds = backoff_seconds
        self.poll_seconds = poll_seconds
        self.rows_per_file = rows_per_file
        self.filesystem = filesystem
        self.storage_options = storage_options
        self.log = log or logging.getLogger(type(self).__module__)
        self.progress_seconds = progress_seconds
        self._sleep = sleep

    def claims(self, window: Window) -> Iterator[tuple[str, str]]:
        """``(token, claim_id)`` of each partition of ``window`` this reader claims, until every partition
        of the window is done (waiting while others hold the rest)."""
        while True:
            claim_id = uuid.uuid4().hex
            token = self.metastore.claim_window_partition(
                self.key, window.start, window.end, self.owner, self.lease_seconds, claim_id=claim_id
            )
            if token is not None:
                yield token, claim_id
                continue
            items = self.metastore.window_partitions(self.key, window.start, window.end)
            if all(item.state == "done" for item in items):
                return
            self._sleep(self.poll_seconds)

    def staging_writer(self, window: Window, token: str, claim_id: str) -> StagingWriter:
        """The writer of claim ``claim_id`` of partition ``token``: a folder of its own."""
        return StagingWriter(
            self.staging_root,
            self.folder,
            window,
            token,
            rows_per_file=self.rows_per_file,
            filesystem=self.filesystem,
            claim_id=claim_id,
            storage_options=self.storage_options,  # type: ignore[arg-type]
        )

    def complete(
        self,
        window: Window,
        token: str,
        claim_id: str,
        *,
        rows: int,
        transactions: float,
        output_files: int,
        partition_rows: bool = False,
    ) -> None:
        """Record the claim as the partition's output (compare-and-set on the claim id and the lease);
        ``partition_rows``: ``rows`` is also the partition's record count (a table batch)."""
        done = self.metastore.complete_window_partition(
            self.key,
            window.start,
            window.end,
            token,
            self.owner,
            rows=rows,
            transactions=transactions,
            claim_id=claim_id,
            output_files=output_files,
            partition_rows=partition_rows,
        )
        if not done:
            raise self.read_error(
                window,
                token,
                f"the lease of reader {self.owner} expired and another reader took the "
                f"{self.read_error.partition_noun}",
            )

    def renew(self, window: Window, token: str) -> None:
        """Extend this reader's lease on the partition, or fail naming the loss."""
        if not self.metastore.renew_window_partition_lease(
            self.key, window.start, window.end, token, self.owner, self.lease_seconds
        ):
            raise self.read_error(
                window, token, f"reader {self.owner} lost its lease on the {self.read_error.partition_noun}"
            )

    def back_off(self, window: Window, token: str, exc: gexc.GoogleAPICallError, retries: int) -> float:
        """After the ``retries``-th failure of a read: the error when it is not worth retrying or retries
        are used up; else the lease renewed and the delay to wait before the next try."""
        if not isinstance(exc, RETRYABLE):
            raise self.read_error(window, token, describe_error(exc)) from exc
        if retries > self.retries:
            raise self.read_error(
                window, token, f"{describe_error(exc)} (gave up after {self.retries} retries)"
            ) from exc
        self.renew(window, token)
        return self.backoff_seconds * (2 ** (retries - 1))
