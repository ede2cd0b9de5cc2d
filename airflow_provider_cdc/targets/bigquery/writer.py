"""Appending serialized CDC rows to a table's default stream with ``BigQueryWriteClient.append_rows``.

Rows are packed into requests of about 2 MB (never above the 10 MB request limit), at most ``max_in_flight``
requests wait for their response, and a retryable failure (UNAVAILABLE, INTERNAL, ABORTED,
RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, on the stream or in a response) reopens the stream and
sends the unacknowledged requests again: UPSERT and DELETE rows carry their sequence numbers, so
a row that arrives twice changes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud.bigquery_storage_v1 import types
from google.protobuf import descriptor_pb2
from google.rpc import code_pb2

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 10 * 1024 * 1024
#: Requests are packed to about this size, so that encoding the next overlaps sending this one.
TARGET_REQUEST_BYTES = 2 * 1024 * 1024
#: Room left in a request for its stream name, writer schema and framing.
REQUEST_HEADROOM = 64 * 1024
RETRYABLE_EXCEPTIONS = (
    api_exceptions.ServiceUnavailable,
    api_exceptions.InternalServerError,
    api_exceptions.Aborted,
    api_exceptions.TooManyRequests,
    api_exceptions.DeadlineExceeded,
)
RETRYABLE_CODES = frozenset(
    {
        code_pb2.UNAVAILABLE,
        code_pb2.INTERNAL,
        code_pb2.ABORTED,
        code_pb2.RESOURCE_EXHAUSTED,
        code_pb2.DEADLINE_EXCEEDED,
    }
)
_REQUEST = types.AppendRowsRequest.pb()


class AppendError(RuntimeError):
    """BigQuery refused rows (names the table and, for row errors, the row)."""


class _Retry(Exception):
    pass


@dataclass
class AppendStats:
    rows: int = 0
    requests: int = 0
    bytes: int = 0
    retries: int = 0
    seconds: float = 0.0

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def default_stream(project: str, dataset: str, table: str) -> str:
    return f"projects/{project}/datasets/{dataset}/tables/{table}/streams/_default"


def pack_rows(rows: Iterable[bytes], max_bytes: int) -> Iterator[list[bytes]]:
    """Group serialized rows into lists whose ``ProtoRows`` encoding stays under ``max_bytes``."""
    batch: list[bytes] = []
    size = 0
    for row in rows:
        cost = len(row) + 6  # tag and length prefix
        if batch and size + cost > max_bytes:
            yield batch
            batch, size = [], 0
        batch.append(row)
        size += cost
    if batch:
        yield batch


class DefaultStreamWriter:
    """Sends rows of one table through its ``_default`` stream (see the module docstring)."""

    def __init__(
        self,
        client: Any,
        stream: str,
        descriptor: descriptor_pb2.DescriptorProto,
        *,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        target_request_bytes: int = TARGET_REQUEST_BYTES,
        max_in_flight: int = 8,
        max_attempts: int = 5,
        backoff_seconds: float = 0.5,
        timeout: float = 3600.0,
        describe_row: Callable[[bytes], str] | None = None,
        schema_wait_seconds: float = 0.0,
        progress_every: float = 10.0,
    ) -> None:
        self.client = client
        self.stream = stream
        self.schema = types.ProtoSchema.pb()(proto_descriptor=descriptor)
        self.max_request_bytes = max_request_bytes
        self.max_in_flight = max_in_flight
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.timeout = timeout
        self.describe_row = describe_row
        self.progress_every = progress_every
        self.schema_wait_seconds = schema_wait_seconds
        header = _REQUEST(write_stream=stream)
        header.proto_rows.writer_schema.CopyFrom(self.schema)
        self.row_budget = max_request_bytes - header.ByteSize() - REQUEST_HEADROOM
        if self.row_budget <= 0:
            raise ValueError(f"max_request_bytes={max_request_bytes} leaves no room for rows")
        self.pack_bytes = max(1, min(self.row_budget, target_request_bytes))

    def _request(self, rows: list[bytes], first: bool) -> Any:
        request = _REQUEST()
        if first:
            request.write_stream = self.stream
            request.proto_rows.writer_schema.CopyFrom(self.schema)
        request.proto_rows.rows.serialized_rows.extend(rows)
        return types.AppendRowsRequest.wrap(request)

    def append(self, rows: Iterable[bytes], total: int | None = None) -> AppendStats:
        """Send every row; returns counts. Raises :class:`AppendError` for refused rows."""
        stats = AppendStats()
        started = time.monotonic()
        source = pack_rows(rows, self.pack_bytes)
        pending: deque[list[bytes]] = deque()
        lock = threading.Lock()
        attempt = 0
        last_log = started
        failure: list[BaseException] = []  # raised by ``rows`` inside gRPC's request thread
        while True:
            closed = threading.Event()
            slots = threading.Semaphore(self.max_in_flight)
            with lock:
                resend = list(pending)

            def requests(
                resend: list[bytes] = resend,
                closed: threading.Event = closed,
                slots: threading.Semaphore = slots,
            ) -> Iterator[Any]:
                first = True
                for rows_ in resend:
                    while not slots.acquire(timeout=0.2):
                        if closed.is_set():
                            return
                    yield self._request(rows_, first)
                    first = False
                while True:
                    while not slots.acquire(timeout=0.2):
                        if closed.is_set():
                            return
                    with lock:
                        if closed.is_set():
                            return
                        try:
                            batch = next(source, None)
                        except BaseException as exc:  # re-raised by append() in the caller's thread
                            failure.append(exc)
                            batch = None
                        if batch is None:
                            return
                        pending.append(batch)
                    yield self._request(batch, first)
                    first = False

            responses = None
            try:
                # The client fetches the first response here: errors can surface already.
                responses = self.client.append_rows(requests=requests(), retry=None, timeout=self.timeout)
                for response in responses:
                    with lock:
                        batch = pending.popleft()
                    slots.release()
                    self._check(response, batch)
                    stats.rows += len(batch)
                    stats.requests += 1
                    stats.bytes += sum(len(r) for r in batch)
                    now = time.monotonic()
                    if now - last_log >= self.progress_every:
                        last_log = now
                        rate = stats.rows / max(now - started, 1e-9)
                        done = f"{stats.rows}/{total}" if total is not None else str(stats.rows)
                        log.info("%s: %s rows appended (%.0f rows/s)", self.stream, done, rate)
                closed.set()
                if failure:
                    raise failure[0]
                break
            except (_Retry, *RETRYABLE_EXCEPTIONS) as exc:
                closed.set()
                _cancel(responses)
                attempt += 1
                stats.retries += 1
                if attempt >= self.max_attempts:
                    raise AppendError(
                        f"{self.stream}: appending failed {attempt} times, last with {exc}; giving up"
                    ) from exc
                delay = self.backoff_seconds * (2 ** (attempt - 1))
                log.warning(
                    "%s: retryable append failure (%s); retry %d in %.1fs with %d unacknowledged request(s)",
                    self.stream,
                    exc,
                    attempt,
                    delay,
                    len(pending),
                )
                time.sleep(delay)
            except (api_exceptions.NotFound, api_exceptions.InvalidArgument) as exc:
                closed.set()
                _cancel(responses)
                # A table just created or widened can take a while to reach the Storage Write API.
                waited = time.monotonic() - started
                if waited >= self.schema_wait_seconds or not _schema_not_yet_visible(exc):
                    raise
                stats.retries += 1
                delay = min(10.0, max(self.backoff_seconds, 0.1) * 2 ** min(stats.retries, 6))
                log.warning(
                    "%s: the table's new schema is not visible yet (%s); retry in %.1fs",
                    self.stream,
                    exc,
                    delay,
                )
                time.sleep(delay)
            except BaseException:
                closed.set()
                _cancel(responses)
                raise
        stats.seconds = time.monotonic() - started
        return stats

    def _check(self, response: Any, batch: list[bytes]) -> None:
        raw = type(response).pb(response)
        if raw.row_errors:
            first = raw.row_errors[0]
            where = ""
            if self.describe_row is not None and 0 <= first.index < len(batch):
                where = f" ({self.describe_row(batch[first.index])})"
            raise AppendError(
                f"{self.stream}: BigQuery refused {len(raw.row_errors)} row(s) of a request; "
                f"row {first.index}{where}: {first.message}"
            )
        if raw.HasField("error") and raw.error.code != code_pb2.OK:
            if raw.error.code in RETRYABLE_CODES:
                raise _Retry(f"code {raw.error.code}: {raw.error.message}")
            raise AppendError(f"{self.stream}: BigQuery refused a request: {raw.error.message}")


def _schema_not_yet_visible(exc: Exception) -> bool:
    text = str(exc)
    return isinstance(exc, api_exceptions.NotFound) or "extra fields" in text or "more fields" in text


def _cancel(responses: Any) -> None:
    cancel = getattr(responses, "cancel", None)
    if callable(cancel):
        try:
            cancel()
        except Exception:
            log.debug("cancelling the append stream failed", exc_info=True)
