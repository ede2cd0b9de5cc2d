"""Reading a Datastream window: each claimed file staged as change rows, one claim folder per file.

The files of a window are its units (recorded when it was opened, see
:mod:`~airflow_provider_cdc.sources.datastream.hook`); readers claim them with leases through
:class:`~airflow_provider_cdc.sources.claimed_reader.ClaimedWindowReader`, which retries a file from its
start after a transient storage error and records the claim that completed it. A file is read
streaming (Avro with its own writer schema, JSONL with optional gzip, parsed columnar a chunk of lines
at a time) and staged as Arrow record batches, so memory stays flat in the file's and the window's
size.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.claimed_reader import (
    ClaimedWindowReader,
    UnitRead,
    WindowReadError,
    collector_paused,
)
from airflow_provider_cdc.sources.datastream import jsonl_arrow  # noqa: F401 - imported with the reader
from airflow_provider_cdc.sources.datastream.file_batches import read_file_change_batches
from airflow_provider_cdc.sources.datastream.listing import StreamFiles, split_token
from airflow_provider_cdc.sources.datastream.names import parse_file_name
from airflow_provider_cdc.sources.datastream.settings import DatastreamSettings
from airflow_provider_cdc.staging.parquet import StagingWriter

__all__ = ["DatastreamReadError", "DatastreamWindowReader", "retryable_storage_errors"]


class DatastreamReadError(WindowReadError):
    """A Datastream window could not be read; the message names the window, the file and the cause."""

    partition_noun: ClassVar[str] = "file"


def retryable_storage_errors() -> tuple[type[BaseException], ...]:
    """Cloud Storage errors worth retrying: throttling, server errors, broken connections."""
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        from google.api_core import exceptions as api

        errors += [
            api.TooManyRequests,
            api.InternalServerError,
            api.BadGateway,
            api.ServiceUnavailable,
            api.GatewayTimeout,
        ]
    except ImportError:  # pragma: no cover - the google provider brings api_core
        pass
    try:
        import requests

        errors += [requests.ConnectionError, requests.Timeout]
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


class DatastreamWindowReader(ClaimedWindowReader):
    """Claims and stages the files of Datastream windows (see the module)."""

    read_error: ClassVar[type[WindowReadError]] = DatastreamReadError

    def __init__(self, files: StreamFiles, settings: DatastreamSettings, *args: Any, **kwargs: Any) -> None:
        self._retryable: tuple[type[BaseException], ...] | None = None
        super().__init__(*args, **kwargs)
        self.files = files
        self.settings = settings

    @property  # type: ignore[override]
    def retryable(self) -> tuple[type[BaseException], ...]:
        """The errors worth retrying (default :func:`retryable_storage_errors`, found when first
        asked: after a failure, so that a read that does not fail does not import the client
        libraries' exception modules)."""
        if self._retryable is None:
            self._retryable = retryable_storage_errors()
        return self._retryable

    @retryable.setter
    def retryable(self, errors: tuple[type[BaseException], ...]) -> None:
        self._retryable = tuple(errors)

    def read_unit(self, window: Window, token: str, writer: StagingWriter, read: UnitRead) -> None:
        """Stage the events of file ``token`` (nothing for the empty unit of a window without files)."""
        from airflow_provider_cdc.sources.datastream.names import EMPTY_WINDOW_TOKEN

        if token.startswith(EMPTY_WINDOW_TOKEN):
            return
        name, _ = split_token(token)
        file = parse_file_name(name)
        started, logged = time.monotonic(), time.monotonic()
        with collector_paused(), self.files.open(token) as stream:
            for batch in read_file_change_batches(stream, file, token, self.settings):
                read.rows += writer.write_batch(batch)
                if time.monotonic() - logged >= self.progress_seconds:
                    logged = time.monotonic()
                    self.renew(window, token)
                    self.log.info(
                        "File %s: %d events staged (%.0f events/s)",
                        name,
                        read.rows,
                        read.rows / max(logged - started, 1e-9),
                    )
        self.log.info("File %s: %d events staged in %.2fs", name, read.rows, time.monotonic() - started)
