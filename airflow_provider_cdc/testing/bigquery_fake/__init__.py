"""A loopback BigQuery for tests: the Storage Write API (gRPC) and the table REST endpoints.

``FakeBigQuery().start()`` serves both on ``127.0.0.1``; point the real clients at
``rest_endpoint`` (``client_options={"api_endpoint": ...}`` with anonymous credentials) and at
``write_endpoint`` (an insecure gRPC channel). ``rows(project, dataset, table)`` returns the
table as a query would see it, with every row modification applied.

The fake has a clock of its own (``clock``: a callable returning an aware UTC datetime, real
time by default); :meth:`FakeBigQuery.advance_clock` moves it forward, which is how a test passes
BigQuery's :data:`DELETE_RETENTION` (after it, a DELETE is forgotten and an older UPSERT inserts
the row again). What each side enforces is described in :mod:`.rest_server`, :mod:`.state`,
:mod:`.write_server` and :mod:`.rows`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from datetime import datetime, timedelta
from typing import Any

import grpc

from .rest_server import RestServer
from .state import DELETE_RETENTION, FakeError, FakeState, FakeTable
from .write_server import MAX_REQUEST_BYTES, BigQueryWriteServicer

__all__ = ["DELETE_RETENTION", "FakeBigQuery", "FakeError", "FakeTable", "MAX_REQUEST_BYTES"]


class FakeBigQuery:
    """Both sides of the fake over one shared state."""

    def __init__(
        self,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        schema_delay_seconds: float = 0.0,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.state = FakeState(clock)
        self.write = BigQueryWriteServicer(self.state, max_request_bytes, schema_delay_seconds)
        self.rest = RestServer(self.state)
        self._grpc: grpc.Server | None = None
        self.write_endpoint = ""
        self.rest_endpoint = ""

    def start(self, host: str = "127.0.0.1") -> FakeBigQuery:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=8),
            options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)],
        )
        server.add_generic_rpc_handlers((self.write.handlers(),))
        port = server.add_insecure_port(f"{host}:0")
        server.start()
        self._grpc = server
        self.write_endpoint = f"{host}:{port}"
        self.rest_endpoint = self.rest.start(host)
        return self

    def stop(self) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace=None)
            self._grpc = None
        self.rest.stop()

    def __enter__(self) -> FakeBigQuery:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def now(self) -> datetime:
        """The fake's current time (aware UTC)."""
        return self.state.now()

    def advance_clock(self, delta: timedelta) -> datetime:
        """Move the fake's clock forward by ``delta`` and return the new time. Without a ``clock``
        the fake's time stops at the current time plus ``delta`` and moves only when advanced."""
        with self.state.lock:
            return self.state.clock.advance(delta)

    def create_dataset(self, project: str, dataset: str) -> None:
        self.state.create_dataset(project, dataset)

    def table(self, project: str, dataset: str, table: str) -> FakeTable:
        return self.state.table(project, dataset, table)

    def rows(self, project: str, dataset: str, table: str) -> list[dict[str, Any]]:
        with self.state.lock:
            return self.state.table(project, dataset, table).rows()
