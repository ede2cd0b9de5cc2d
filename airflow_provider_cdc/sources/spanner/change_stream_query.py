"""Change-stream queries over ``google-cloud-spanner``: the ``READ_<stream>`` TVF, one partition at a time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from google.cloud.spanner_v1 import param_types

from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.sources.spanner.record_parser import parse_change_record_row
from airflow_provider_cdc.sources.spanner.records import ChangeStreamRecord
from airflow_provider_cdc.sources.spanner.result_batches import RowBatch, row_batches

MIN_HEARTBEAT_MS, MAX_HEARTBEAT_MS = 1000, 300_000

_PARAM_TYPES = {
    "start": param_types.TIMESTAMP,
    "end": param_types.TIMESTAMP,
    "token": param_types.STRING,
    "heartbeat": param_types.INT64,
}


def change_stream_sql(stream: str) -> str:
    """The TVF query for ``stream`` with bound parameters; the name is validated, never trusted."""
    name = validate_identifier(stream, "change stream")
    return (
        f"SELECT ChangeRecord FROM READ_{name}("  # noqa: S608 - name validated as a plain identifier
        "start_timestamp => @start, end_timestamp => @end, "
        "partition_token => @token, heartbeat_milliseconds => @heartbeat)"
    )


class ChangeStreamQuery:
    """Runs change-stream queries of one stream on one ``google.cloud.spanner_v1.database.Database``."""

    def __init__(self, database: Any, stream: str, heartbeat_ms: int = 10_000) -> None:
        if not MIN_HEARTBEAT_MS <= heartbeat_ms <= MAX_HEARTBEAT_MS:
            raise ValueError(
                f"heartbeat_ms must be between {MIN_HEARTBEAT_MS} and {MAX_HEARTBEAT_MS}, got {heartbeat_ms}"
            )
        self.database = database
        self.stream = validate_identifier(stream, "change stream")
        self.heartbeat_ms = heartbeat_ms
        self.sql = change_stream_sql(stream)

    def rows(
        self, token: str | None, start: datetime, end: datetime | None, timeout: float | None = None
    ) -> Iterator[list[Any]]:
        """Raw rows of one query (a strong single-use read-only snapshot, as Spanner requires)."""
        params = {"start": start, "end": end, "token": token, "heartbeat": self.heartbeat_ms}
        with self.database.snapshot() as snapshot:
            kwargs: dict[str, Any] = {"params": params, "param_types": _PARAM_TYPES}
            if timeout is not None:
                kwargs["timeout"] = timeout
            yield from snapshot.execute_sql(self.sql, **kwargs)

    def lazy_rows(
        self, token: str | None, start: datetime, end: datetime | None, timeout: float | None = None
    ) -> Iterator[tuple[list[Any], Any]]:
        """Undecoded rows (protobuf values) of one query, each with the result set's ``decode_row``."""
        params = {"start": start, "end": end, "token": token, "heartbeat": self.heartbeat_ms}
        with self.database.snapshot() as snapshot:
            kwargs: dict[str, Any] = {"params": params, "param_types": _PARAM_TYPES, "lazy_decode": True}
            if timeout is not None:
                kwargs["timeout"] = timeout
            results = snapshot.execute_sql(self.sql, **kwargs)
            decode_row = results.decode_row
            for row in results:
                yield row, decode_row

    def row_batches(
        self, token: str | None, start: datetime, end: datetime | None, timeout: float | None = None
    ) -> Iterator[RowBatch]:
        """Undecoded rows of one query a ``PartialResultSet`` at a time, as they arrive
        (:func:`~airflow_provider_cdc.sources.spanner.result_batches.row_batches`)."""
        params = {"start": start, "end": end, "token": token, "heartbeat": self.heartbeat_ms}
        with self.database.snapshot() as snapshot:
            kwargs: dict[str, Any] = {"params": params, "param_types": _PARAM_TYPES, "lazy_decode": True}
            if timeout is not None:
                kwargs["timeout"] = timeout
            yield from row_batches(snapshot.execute_sql(self.sql, **kwargs))

    def records(
        self, token: str | None, start: datetime, end: datetime | None, timeout: float | None = None
    ) -> Iterator[ChangeStreamRecord]:
        """Typed records of one query, in the order the partition returns them."""
        for row in self.rows(token, start, end, timeout):
            yield from parse_change_record_row(row)
