"""The emulator at the wire: Table Store calls as signed protobuf POSTs on 127.0.0.1."""

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
    response_signing_key,
    verify_request,
)

from .calls import CALLS
from .clock import SystemClock
from .model import OtsError, StreamModel, parameter_invalid

OPERATIONS = tuple(CALLS)


class TablestoreEmulator:
    """A Table Store instance with streams: tables and rows written by tests (the methods below) or by
    clients (the official SDK included) over HTTP, and the stream calls that read the writes back.

    Requests must be signed (V2, or V4 for ``region`` when it is given, else for any region) with one
    of ``access_keys`` for ``instance``; their date is checked against ``clock`` (µs since the epoch;
    by default real time, :class:`~.clock.SystemClock`; pass a :class:`~.clock.ManualClock` to move
    time by hand), which also stamps every record and cell version and drives retention.
    """

    def __init__(
        self,
        clock: Callable[[], int] | None = None,
        *,
        instance: str = "demo",
        access_keys: Mapping[str, str] | None = None,
        region: str | None = None,
        shards: int = 1,
        seed: int = 0,
    ) -> None:
        self.clock: Any = clock if clock is not None else SystemClock()
        self.instance = instance
        self.region = region
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
                key_id = verify_request(
                    path, headers, body, secrets=self.access_keys, now=now, region=self.region
                )
            except SignatureError as error:
                raise OtsError("OTSAuthFailed", str(error), 403) from None
            instance = lowered.get("x-ots-instancename", "").strip()
            if instance != self.instance:
                raise OtsError("OTSAuthFailed", f"instance {instance!r} does not exist here", 403)
            if operation not in CALLS:
                raise OtsError("OTSUnsupportOperation", f"Unsupported operation: '{operation}'.", 400)
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
                access_key_secret=response_signing_key(headers, self.access_keys[key_id]),
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
        return CALLS[operation](self._model, request)


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
