"""The emulator at the wire: Tablestore Stream calls as signed protobuf POSTs on 127.0.0.1."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import DecodeError, EncodeError

from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.sources.tablestore.protocol import messages
from airflow_provider_cdc.sources.tablestore.protocol.signing import (
    SignatureError,
    content_md5,
    format_date,
    response_headers,
    verify_request,
)

from .clock import ManualClock
from .model import OtsError, StreamModel, parameter_invalid

OPERATIONS = ("ListStream", "DescribeStream", "GetShardIterator", "GetStreamRecord")


class TablestoreEmulator:
    """A Tablestore instance with streams: the tests write rows, clients read the stream over HTTP.

    Requests must be signed with one of ``access_keys`` for ``instance``; their date is checked
    against ``clock`` (µs since the epoch; by default a ``ManualClock`` at the current time), which
    also stamps every record and drives retention.
    """

    def __init__(
        self,
        clock: Callable[[], int] | None = None,
        *,
        instance: str = "demo",
        access_keys: Mapping[str, str] | None = None,
        shards: int = 1,
        seed: int = 0,
    ) -> None:
        self.clock: Any = clock if clock is not None else ManualClock()
        self.instance = instance
        self.access_keys = dict(access_keys if access_keys is not None else {"test-key": "test-secret"})
        self._model = StreamModel(self.clock, shards=shards, seed=seed)
        self._faults: dict[str, list[list[Any]]] = {}
        self._faults_lock = threading.Lock()
        self._request_ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> str:
        """Serve on a free port of 127.0.0.1; return the endpoint ``http://127.0.0.1:PORT``."""
        if self._server is None:
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
            self._server.daemon_threads = True
            self._server.emulator = self  # type: ignore[attr-defined]
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="tablestore-emulator", daemon=True
            )
            self._thread.start()
        return self.endpoint

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the Tablestore emulator is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join()
            self._server = self._thread = None

    def __enter__(self) -> TablestoreEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the tables ---------------------------------------------------------------------------------

    def create_table(
        self, table: str, primary_key: Sequence[tuple[str, str]], *, expiration_hours: int = 24
    ) -> str:
        """Create a table with its stream (key types INTEGER, STRING, BINARY); return the stream id."""
        return self._model.create_table(table, primary_key, expiration_hours=expiration_hours)

    def put_row(self, table: str, key: Mapping[str, Any], columns: Mapping[str, Any]) -> None:
        """Replace the row (a PUT_ROW record with every column)."""
        self._model.put_row(table, key, columns)

    def update_row(
        self,
        table: str,
        key: Mapping[str, Any],
        *,
        put: Mapping[str, Any] | None = None,
        delete_all: Sequence[str] = (),
        delete_one: Mapping[str, int] | None = None,
    ) -> None:
        """Change some columns (an UPDATE_ROW record with just those cells); creates a missing row.

        ``delete_one`` maps a column to the version (timestamp in ms) to delete; the column goes only
        if that is its current version.
        """
        self._model.update_row(table, key, put=put or {}, delete_all=delete_all, delete_one=delete_one or {})

    def delete_row(self, table: str, key: Mapping[str, Any]) -> None:
        """Delete the row (a DELETE_ROW record: the key and the delete marker)."""
        self._model.delete_row(table, key)

    def split_shard(self, table: str, shard_id: str) -> tuple[str, str]:
        """Close an open shard and open two children over the halves of its range."""
        return self._model.split_shard(table, shard_id)

    def merge_shards(self, table: str, shard_id: str, sibling_id: str) -> str:
        """Close two adjacent open shards and open one child (parent ``shard_id``, sibling ``sibling_id``)."""
        return self._model.merge_shards(table, shard_id, sibling_id)

    def shards(self, table: str) -> list[dict[str, Any]]:
        """Every shard ever opened, parents first: ``shard_id, parent_id, parent_sibling_id, closed``."""
        return self._model.shards(table)

    def rows(self, table: str) -> dict[tuple, dict[str, Any]]:
        """The table's rows now (key values in key order → columns): the truth a reader must reach."""
        return self._model.rows(table)

    def inject(self, operation: str, code: str, *, status: int = 503, times: int = 1) -> None:
        """Fail the next ``times`` calls of ``operation`` with an ``Error`` of ``code`` and ``status``."""
        if operation not in OPERATIONS:
            raise ValueError(f"cannot inject into {operation!r}: operations are {', '.join(OPERATIONS)}")
        if times < 1:
            raise ValueError(f"times must be at least 1, not {times}")
        with self._faults_lock:
            self._faults.setdefault(operation, []).append([code, status, times])

    def _take_fault(self, operation: str) -> OtsError | None:
        with self._faults_lock:
            queue = self._faults.get(operation)
            if not queue:
                return None
            fault = queue[0]
            fault[2] -= 1
            if fault[2] == 0:
                queue.pop(0)
            return OtsError(fault[0], f"injected fault in {operation}", fault[1])

    # --- the calls ----------------------------------------------------------------------------------

    def handle(self, path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        """Serve one call: (status, headers, body)."""
        now = from_micros(self.clock())
        request_id = f"{next(self._request_ids):08x}-emulator"
        operation = path.lstrip("/")
        key_id: str | None = None
        try:
            lowered = {name.lower(): value for name, value in headers.items()}
            try:
                key_id = verify_request(path, headers, body, secrets=self.access_keys, now=now)
            except SignatureError as error:
                raise OtsError("OTSAuthFailed", str(error), 403) from None
            instance = lowered.get("x-ots-instancename", "").strip()
            if instance != self.instance:
                raise OtsError("OTSAuthFailed", f"instance {instance!r} does not exist here", 403)
            if operation not in OPERATIONS:
                raise OtsError("OTSUnsupportOperation", f"operation {operation!r} is not supported", 400)
            fault = self._take_fault(operation)
            if fault is not None:
                raise fault
            status, payload = 200, self._dispatch(operation, body).SerializeToString()
        except OtsError as error:
            status = error.status
            payload = messages.Error(code=error.code, message=error.message).SerializeToString()
        if key_id is None:
            out = {
                "x-ots-contentmd5": content_md5(payload),
                "x-ots-requestid": request_id,
                "x-ots-date": format_date(now),
                "x-ots-contenttype": "protocol buffer",
            }
        else:
            out = response_headers(
                path,
                payload,
                access_key_id=key_id,
                access_key_secret=self.access_keys[key_id],
                request_id=request_id,
                now=now,
            )
        return status, out, payload

    def _dispatch(self, operation: str, body: bytes) -> Any:
        request_class = getattr(messages, f"{operation}Request")
        try:
            request = request_class.FromString(body)
        except (DecodeError, EncodeError) as error:
            raise parameter_invalid(f"{operation}Request does not parse: {error}") from None
        missing = request.FindInitializationErrors()
        if missing:
            raise parameter_invalid(f"{operation}Request lacks the required field(s) {', '.join(missing)}")
        if operation == "ListStream":
            tables = self._model.list_streams(request.table_name if request.HasField("table_name") else None)
            response = messages.ListStreamResponse()
            for table in tables:
                response.streams.add(
                    stream_id=table.stream_id, table_name=table.name, creation_time=table.creation_us
                )
            return response
        if operation == "DescribeStream":
            table, shards, next_id = self._model.describe(
                request.stream_id,
                request.inclusive_start_shard_id if request.HasField("inclusive_start_shard_id") else None,
                request.shard_limit if request.HasField("shard_limit") else None,
            )
            response = messages.DescribeStreamResponse(
                stream_id=table.stream_id,
                expiration_time=table.expiration_hours,
                table_name=table.name,
                creation_time=table.creation_us,
                stream_status=messages.STREAM_ACTIVE,
            )
            for shard in shards:
                entry = response.shards.add(shard_id=shard.shard_id)
                if shard.parent_id is not None:
                    entry.parent_id = shard.parent_id
                if shard.parent_sibling_id is not None:
                    entry.parent_sibling_id = shard.parent_sibling_id
            if next_id is not None:
                response.next_shard_id = next_id
            return response
        if operation == "GetShardIterator":
            iterator = self._model.shard_iterator(
                request.stream_id,
                request.shard_id,
                request.timestamp if request.HasField("timestamp") else None,
            )
            return messages.GetShardIteratorResponse(shard_iterator=iterator)
        records, next_iterator, more = self._model.read(
            request.shard_iterator, request.limit if request.HasField("limit") else None
        )
        response = messages.GetStreamRecordResponse(may_more_record=more)
        for record in records:
            response.stream_records.add(action_type=record.action, record=record.record)
        if next_iterator is not None:
            response.next_shard_iterator = next_iterator
        response.consumed.capacity_unit.read = max(1, len(records))
        response.consumed.capacity_unit.write = 0
        return response


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "TablestoreEmulator"
    # Headers and body go out as separate writes: without TCP_NODELAY, Nagle's algorithm and delayed
    # ACKs hold each answer ~40 ms on loopback.
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        emulator: TablestoreEmulator = self.server.emulator  # type: ignore[attr-defined]
        status, headers, payload = emulator.handle(self.path, dict(self.headers.items()), body)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read errors from the responses."""
