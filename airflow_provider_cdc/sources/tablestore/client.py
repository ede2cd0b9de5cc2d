"""A Table Store (OTS) stream client: the four stream calls over signed HTTP POST.

``ListStream``, ``DescribeStream`` (every page), ``GetShardIterator`` (following ``next_token``) and
``GetStreamRecord`` (records decoded from PlainBuffer) with the request signature and the response
checks of :mod:`~airflow_provider_cdc.sources.tablestore.protocol.signing`. Errors the service calls
transient (busy, partition unavailable, quota, internal error, timeout, 5xx, a broken connection) are
retried with exponential back-off; the others (trimmed data, an invalid parameter, an unknown object,
a refused signature) fail at once. Every error is a :class:`TablestoreError` with the service's
``code`` that names the call, the stream, the shard and the iterator. The access key secret is held
privately and never appears in an error, a log line or a ``repr``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import urllib3

from airflow_provider_cdc.sources.tablestore.protocol import messages, plainbuffer, signing

__all__ = [
    "NOT_RETRYABLE_CODES",
    "RETRYABLE_CODES",
    "RecordBatch",
    "ShardInfo",
    "StreamDescription",
    "StreamInfo",
    "StreamRecord",
    "TablestoreError",
    "TablestoreStreamClient",
]

log = logging.getLogger(__name__)

#: Error codes worth retrying: the service is busy or briefly unavailable.
RETRYABLE_CODES = frozenset(
    {
        "OTSServerBusy",
        "OTSPartitionUnavailable",
        "OTSQuotaExhausted",
        "OTSInternalServerError",
        "OTSTimeout",
        "OTSServerUnavailable",
        "OTSRowOperationConflict",
    }
)
#: Error codes never retried, whatever the HTTP status (a 5xx with one of them fails at once).
NOT_RETRYABLE_CODES = frozenset(
    {"OTSTrimmedDataAccess", "OTSParameterInvalid", "OTSObjectNotExist", "OTSAuthFailed"}
)
#: The code of a failure that never reached the service (connection refused, reset, timed out).
CONNECTION_ERROR = "ConnectionError"
#: The code of a response the client refuses (bad signature, undecodable body or record).
RESPONSE_ERROR = "OTSClientResponseError"
_ITERATOR_SHOWN = 64
_ACTIONS = {messages.PUT_ROW: "PUT_ROW", messages.UPDATE_ROW: "UPDATE_ROW", messages.DELETE_ROW: "DELETE_ROW"}


def _shown_iterator(iterator: str | None) -> str | None:
    if iterator is None or len(iterator) <= _ITERATOR_SHOWN:
        return iterator
    return f"{iterator[:_ITERATOR_SHOWN]}…({len(iterator)} chars)"


class TablestoreError(RuntimeError):
    """A stream call failed: ``code`` is the service's error code (or :data:`CONNECTION_ERROR`,
    :data:`RESPONSE_ERROR`), ``retryable`` whether trying again may help; the message names the call,
    the endpoint and instance, the stream, the shard and the iterator (shortened) it concerned."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        operation: str,
        instance: str = "",
        status: int | None = None,
        stream_id: str | None = None,
        shard_id: str | None = None,
        iterator: str | None = None,
        request_id: str | None = None,
        retryable: bool = False,
    ) -> None:
        self.code = code
        self.status = status
        self.operation = operation
        self.stream_id = stream_id
        self.shard_id = shard_id
        self.iterator = iterator
        self.request_id = request_id
        self.retryable = retryable
        self.detail = message
        where = [f"instance {instance!r}"] if instance else []
        if stream_id:
            where.append(f"stream {stream_id!r}")
        if shard_id:
            where.append(f"shard {shard_id!r}")
        if iterator:
            where.append(f"iterator {_shown_iterator(iterator)!r}")
        status_text = f" (HTTP {status})" if status is not None else ""
        request_text = f", request {request_id}" if request_id else ""
        super().__init__(
            f"Table Store {operation} failed{status_text}: {code}: {message}"
            + (f" [{', '.join(where)}{request_text}]" if where or request_text else "")
        )

    @property
    def permanent(self) -> bool:
        """Whether a retry of the task cannot help: an unknown object, an invalid parameter, a refused
        key, trimmed data (:data:`NOT_RETRYABLE_CODES`)."""
        return self.code in NOT_RETRYABLE_CODES


def is_retryable(code: str, status: int | None) -> bool:
    """Whether an error with ``code`` and HTTP ``status`` is worth retrying."""
    if code in NOT_RETRYABLE_CODES:
        return False
    if code in RETRYABLE_CODES or code == CONNECTION_ERROR:
        return True
    return status is not None and status >= 500


@dataclass(frozen=True)
class StreamInfo:
    """A table's stream as ``ListStream`` returns it."""

    stream_id: str
    table_name: str
    creation_time_us: int


@dataclass(frozen=True)
class ShardInfo:
    """A shard with its lineage: ``parent_id`` (split or merge), ``parent_sibling_id`` (merge only)."""

    shard_id: str
    parent_id: str | None = None
    parent_sibling_id: str | None = None

    @property
    def parents(self) -> tuple[str, ...]:
        """The shards whose records precede this shard's (parent, then merge sibling)."""
        return tuple(p for p in (self.parent_id, self.parent_sibling_id) if p)


@dataclass(frozen=True)
class StreamDescription:
    """``DescribeStream`` over all pages: the stream, its retention (hours), status and shards."""

    stream_id: str
    table_name: str
    expiration_hours: int
    creation_time_us: int
    status: str
    shards: tuple[ShardInfo, ...]


@dataclass(frozen=True)
class StreamRecord:
    """One decoded stream record: ``action`` (``PUT_ROW``, ``UPDATE_ROW``, ``DELETE_ROW``), the row
    (key, cells, sequence info) and, when the stream keeps them, the old values (``origin``)."""

    action: str
    row: plainbuffer.PlainBufferRow
    origin: plainbuffer.PlainBufferRow | None = None

    @property
    def key(self) -> tuple[tuple[str, Any], ...]:
        return self.row.primary_key

    @property
    def cells(self) -> tuple[plainbuffer.Cell, ...]:
        return self.row.cells

    @property
    def sequence(self) -> plainbuffer.SequenceInfo | None:
        return self.row.sequence


@dataclass(frozen=True)
class RecordBatch:
    """One ``GetStreamRecord`` answer: records in stream order, the iterator after them (``None``:
    the shard is closed and drained) and ``may_more_record`` (``None`` when the service omits it)."""

    records: tuple[StreamRecord, ...]
    next_iterator: str | None
    may_more_record: bool | None = None


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class TablestoreStreamClient:
    """The stream calls of one Table Store instance.

    :param endpoint: ``https://<instance>.<region>.ots.aliyuncs.com`` (or an emulator's ``http://…``).
    :param instance: the instance name (header ``x-ots-instancename``).
    :param access_key_id: the access key id.
    :param access_key_secret: its secret (kept private: never shown).
    :param sts_token: an STS security token, when the key is temporary.
    :param retries: how many times a retryable failure is tried again.
    :param backoff_seconds: the first back-off; it doubles with every retry.
    :param timeout: seconds for connecting and for reading one answer.
    :param sleep: waits between tries (a test passes a recorder).
    :param clock: the current UTC time, for the request date and the response's date check.
    """

    def __init__(
        self,
        endpoint: str,
        instance: str,
        access_key_id: str,
        access_key_secret: str,
        *,
        sts_token: str | None = None,
        retries: int = 5,
        backoff_seconds: float = 0.5,
        timeout: float = 30,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        if not endpoint or not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"Table Store endpoint {endpoint!r} must be an http:// or https:// URL")
        if not instance:
            raise ValueError("a Table Store instance name is required")
        if not access_key_id or not access_key_secret:
            raise ValueError(f"Table Store instance {instance!r}: an access key id and secret are required")
        if retries < 0 or backoff_seconds < 0 or timeout <= 0:
            raise ValueError("retries and backoff_seconds must be non-negative and timeout positive")
        self.endpoint = endpoint.rstrip("/")
        self.instance = instance
        self.access_key_id = access_key_id
        self.__secret = access_key_secret
        self.__sts_token = sts_token
        self.retries = retries
        self.backoff_seconds = backoff_seconds
        self.timeout = timeout
        self._sleep = sleep
        self._clock = clock
        self._http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=timeout, read=timeout), retries=False
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(endpoint={self.endpoint!r}, instance={self.instance!r}, "
            f"access_key_id={self.access_key_id!r})"
        )

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.clear()

    # ----- the four calls -------------------------------------------------------------------------
    def list_streams(self, table: str | None = None) -> list[StreamInfo]:
        """The streams of ``table`` (every table's when ``None``)."""
        request = messages.ListStreamRequest()
        if table is not None:
            request.table_name = table
        response = self._call("ListStream", request, messages.ListStreamResponse)
        return [StreamInfo(s.stream_id, s.table_name, s.creation_time) for s in response.streams]

    def describe_stream(self, stream_id: str, *, shard_limit: int | None = None) -> StreamDescription:
        """The stream and all its shards (every page, ``inclusive_start_shard_id`` = ``next_shard_id``)."""
        shards: list[ShardInfo] = []
        start: str | None = None
        seen: set[str] = set()
        while True:
            request = messages.DescribeStreamRequest(stream_id=stream_id)
            if start is not None:
                request.inclusive_start_shard_id = start
            if shard_limit is not None:
                request.shard_limit = shard_limit
            response = self._call(
                "DescribeStream", request, messages.DescribeStreamResponse, stream_id=stream_id
            )
            for shard in response.shards:
                if shard.shard_id in seen:
                    continue
                seen.add(shard.shard_id)
                shards.append(
                    ShardInfo(
                        shard.shard_id,
                        shard.parent_id if shard.HasField("parent_id") and shard.parent_id else None,
                        shard.parent_sibling_id
                        if shard.HasField("parent_sibling_id") and shard.parent_sibling_id
                        else None,
                    )
                )
            following = response.next_shard_id if response.HasField("next_shard_id") else ""
            if not following:
                break
            if following == start:
                raise TablestoreError(
                    RESPONSE_ERROR,
                    f"the shard listing does not advance past shard {following!r}",
                    operation="DescribeStream",
                    instance=self.instance,
                    stream_id=stream_id,
                )
            start = following
        status = {messages.STREAM_ENABLING: "ENABLING", messages.STREAM_ACTIVE: "ACTIVE"}.get(
            response.stream_status, str(response.stream_status)
        )
        return StreamDescription(
            response.stream_id,
            response.table_name,
            response.expiration_time,
            response.creation_time,
            status,
            tuple(shards),
        )

    def get_shard_iterator(self, stream_id: str, shard_id: str, timestamp_us: int | None = None) -> str:
        """An iterator at the shard's oldest retained record, or (``timestamp_us``) at its first record
        written at or after that time (following ``next_token`` until the service returns none)."""
        token: str | None = None
        while True:
            request = messages.GetShardIteratorRequest(stream_id=stream_id, shard_id=shard_id)
            if timestamp_us is not None:
                request.timestamp = timestamp_us
            if token is not None:
                request.token = token
            response = self._call(
                "GetShardIterator",
                request,
                messages.GetShardIteratorResponse,
                stream_id=stream_id,
                shard_id=shard_id,
            )
            following = response.next_token if response.HasField("next_token") else ""
            if not following:
                return response.shard_iterator
            token = following

    def get_stream_records(
        self,
        iterator: str,
        limit: int | None = None,
        *,
        stream_id: str | None = None,
        shard_id: str | None = None,
    ) -> RecordBatch:
        """Up to ``limit`` records from ``iterator`` (``stream_id`` and ``shard_id`` only name the
        place in errors)."""
        request = messages.GetStreamRecordRequest(shard_iterator=iterator)
        if limit is not None:
            request.limit = limit
        where = {"stream_id": stream_id, "shard_id": shard_id, "iterator": iterator}
        response = self._call("GetStreamRecord", request, messages.GetStreamRecordResponse, **where)
        records = []
        for index, item in enumerate(response.stream_records):
            try:
                row = plainbuffer.decode_row(item.record)
                origin = (
                    plainbuffer.decode_row(item.origin_record) if item.HasField("origin_record") else None
                )
            except plainbuffer.PlainBufferError as exc:
                raise TablestoreError(
                    RESPONSE_ERROR,
                    f"record {index} of the answer cannot be decoded: {exc}",
                    operation="GetStreamRecord",
                    instance=self.instance,
                    **where,
                ) from exc
            action = _ACTIONS.get(item.action_type)
            if action is None:
                raise TablestoreError(
                    RESPONSE_ERROR,
                    f"record {index} has the unknown action type {item.action_type}",
                    operation="GetStreamRecord",
                    instance=self.instance,
                    **where,
                )
            records.append(StreamRecord(action, row, origin))
        following = response.next_shard_iterator if response.HasField("next_shard_iterator") else ""
        more = response.may_more_record if response.HasField("may_more_record") else None
        return RecordBatch(tuple(records), following or None, more)

    # ----- transport ------------------------------------------------------------------------------
    def _call(self, operation: str, request: Any, response_type: type, **where: str | None) -> Any:
        """POST ``request`` to ``/<operation>``, retrying what is worth it; the parsed answer."""
        attempt = 0
        while True:
            try:
                return self._call_once(operation, request, response_type, **where)
            except TablestoreError as exc:
                if not exc.retryable or attempt >= self.retries:
                    if exc.retryable:
                        exc.args = (f"{exc.args[0]} (gave up after {self.retries} retries)",)
                    raise
                attempt += 1
                delay = self.backoff_seconds * 2 ** (attempt - 1)
                log.warning("%s; retry %d/%d in %.2fs", exc, attempt, self.retries, delay)
                self._sleep(delay)

    def _call_once(self, operation: str, request: Any, response_type: type, **where: str | None) -> Any:
        path = f"/{operation}"
        body = request.SerializeToString()
        headers = signing.request_headers(
            path,
            body,
            access_key_id=self.access_key_id,
            access_key_secret=self.__secret,
            instance=self.instance,
            now=self._clock(),
            sts_token=self.__sts_token,
        )
        headers["Content-Type"] = "application/x-protobuf"
        context = {"operation": operation, "instance": self.instance, **where}
        try:
            answer = self._http.request("POST", self.endpoint + path, body=body, headers=headers)
        except urllib3.exceptions.HTTPError as exc:
            raise TablestoreError(
                CONNECTION_ERROR,
                f"{self.endpoint}: {type(exc).__name__}: {exc}",
                retryable=True,
                **context,
            ) from exc
        received = {name.lower(): value for name, value in answer.headers.items()}
        request_id = received.get("x-ots-requestid")
        if not 200 <= answer.status < 300:
            code, message = _error_of(answer.data, answer.status)
            raise TablestoreError(
                code,
                message,
                status=answer.status,
                request_id=request_id,
                retryable=is_retryable(code, answer.status),
                **context,
            )
        try:
            signing.verify_response(
                path,
                received,
                answer.data,
                access_key_id=self.access_key_id,
                access_key_secret=self.__secret,
                now=self._clock(),
            )
        except signing.SignatureError as exc:
            raise TablestoreError(
                RESPONSE_ERROR, f"the answer fails its checks: {exc}", request_id=request_id, **context
            ) from exc
        message = response_type()
        try:
            message.ParseFromString(answer.data)
        except Exception as exc:  # google.protobuf.message.DecodeError and missing required fields
            raise TablestoreError(
                RESPONSE_ERROR,
                f"the answer is not a {response_type.__name__}: {exc}",
                request_id=request_id,
                **context,
            ) from exc
        return message


def _error_of(body: bytes, status: int) -> tuple[str, str]:
    """``(code, message)`` of an error answer (its ``Error`` message, else the HTTP status)."""
    error = messages.Error()
    try:
        error.ParseFromString(body)
        if error.code:
            return error.code, error.message
    except Exception:  # not an Error message: a proxy's page, an empty body
        pass
    text = body[:200].decode("utf-8", "replace").strip()
    return f"HTTP{status}", text or "no error body"
