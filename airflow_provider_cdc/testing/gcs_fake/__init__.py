"""A loopback Cloud Storage for tests, speaking both the JSON and the XML API on one port.

``FakeGcs().start()`` serves on ``127.0.0.1``. Point the real clients at ``endpoint``:

* ``google-cloud-storage``: ``STORAGE_EMULATOR_HOST=<endpoint>`` (see :meth:`FakeGcs.environ`);
* pyarrow: ``GcsFileSystem(anonymous=True, scheme="http", endpoint_override=<host:port>)``
  (:meth:`FakeGcs.pyarrow_options`);
* delta-rs / ``object_store``: :func:`delta_storage_options` (an inline service-account key whose
  ``gcs_base_url`` is the fake and which sets ``disable_oauth``, plus ``allow_http``); the crate then
  sends its XML API requests here without fetching a token.

A client that holds the GIL while it waits on the network (pyarrow's ``GcsFileSystem`` when it
opens a file for reading) needs the fake in another process: :class:`FakeGcsProcess`, which runs
``python -m airflow_provider_cdc.testing.gcs_fake``.

Objects carry generations and metagenerations; preconditions, listing and ranges behave as
:mod:`.state` and :mod:`.server` describe. ``requests`` records what the clients sent (method,
path, query, the ``x-goog-if-*`` headers and the answer's status; never credentials), and
``state.rendezvous(bucket, name, parties)`` holds that many writes of one object until all have
arrived, so a test can make writers race for the same Delta commit.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .process import FakeGcsProcess
from .server import GcsServer, Request
from .state import FakeState, GcsError, Preconditions, StoredObject

__all__ = [
    "FakeGcs",
    "FakeGcsProcess",
    "GcsError",
    "Preconditions",
    "Request",
    "StoredObject",
    "delta_storage_options",
]


class FakeGcs:
    """The HTTP server over one in-memory state."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.state = FakeState(clock)
        self.server = GcsServer(self.state)
        self.endpoint = ""

    def start(self, host: str = "127.0.0.1", port: int = 0) -> FakeGcs:
        self.endpoint = self.server.start(host, port)
        return self

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> FakeGcs:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def host_port(self) -> str:
        return self.endpoint.removeprefix("http://")

    @property
    def requests(self) -> list[Request]:
        return self.server.requests

    def create_bucket(self, name: str, *, versioning: bool = False) -> None:
        self.state.create_bucket(name, versioning=versioning, exist_ok=True)

    def put(self, bucket: str, name: str, data: bytes) -> StoredObject:
        return self.state.put(bucket, name, data)

    def get(self, bucket: str, name: str) -> bytes:
        return self.state.get(bucket, name).data

    def names(self, bucket: str, prefix: str = "") -> list[str]:
        with self.state.lock:
            return [n for n in self.state.bucket(bucket)._sorted if n.startswith(prefix)]

    def environ(self) -> dict[str, str]:
        """Environment for ``google-cloud-storage`` (anonymous credentials, the fake's endpoint)."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def pyarrow_options(self) -> dict[str, Any]:
        """Keyword arguments for ``pyarrow.fs.GcsFileSystem``."""
        return {"anonymous": True, "scheme": "http", "endpoint_override": self.host_port}

    def delta_storage_options(self) -> dict[str, str]:
        """``storage_options`` for delta-rs on ``gs://`` URLs served by this fake."""
        return delta_storage_options(self.endpoint)


def delta_storage_options(endpoint: str) -> dict[str, str]:
    """``storage_options`` that send delta-rs' ``object_store`` to the fake at ``endpoint``.

    ``object_store`` takes its base URL from the service-account key (``gcs_base_url``) and skips
    fetching an OAuth token when the key sets ``disable_oauth``; ``allow_http`` lets it use plain
    HTTP. No key material is needed: nothing is signed.
    """
    key = {
        "gcs_base_url": endpoint,
        "disable_oauth": True,
        "client_email": "",
        "private_key": "",
        "private_key_id": "",
    }
    return {"google_service_account_key": json.dumps(key), "allow_http": "true"}
