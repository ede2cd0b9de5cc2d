"""Reading one window ``[start, end)`` of a change stream into staging, partition by partition.

The metastore records the stream's partition lineage (created from the initial query and from
child-partition records) and, per window, which partitions the window must read and who reads
them. Several readers share a window by claiming partitions with leases; a partition is claimed
only once every parent that overlaps the window has been read for it (lineage order).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress
from typing import Any

from google.api_core import exceptions as gexc

from airflow_provider_cdc.core.contract.locations import staging_folder
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore, PartitionSpec
from airflow_provider_cdc.sources.claimed_reader import WindowReadError
from airflow_provider_cdc.sources.spanner.change_row import StagedDataChange
from airflow_provider_cdc.sources.spanner.change_stream_query import ChangeStreamQuery
from airflow_provider_cdc.sources.spanner.claimed_reader import (
    RETRYABLE,
    SpannerClaimedReader,
    describe_error,
)
from airflow_provider_cdc.sources.spanner.record_decoder import ChangeRecordDecoder, DataRecordRun
from airflow_provider_cdc.sources.spanner.records import (
    ChildPartition,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
)
from airflow_provider_cdc.sources.spanner.table_schema import ColumnNullability
from airflow_provider_cdc.staging.parquet import StagingWriter, window_location

__all__ = ["RETRYABLE", "ChangeStreamReadError", "PartitionResult", "ReadSummary", "WindowReader"]


class ChangeStreamReadError(WindowReadError):
    """A window could not be read; the message names the window, the partition token and the cause."""

    without_partition = "the initial query"


@dataclass
class PartitionResult:
    """One partition's part of a window as one reader read it (timings are ``time.monotonic``)."""

    token: str
    started: float = 0.0
    finished: float = 0.0
    rows: int = 0
    data_records: int = 0
    transactions: float = 0.0
    children: list[ChildPartition] = field(default_factory=list)
    end: datetime | None = None
    retries: int = 0


@dataclass
class ReadSummary:
    """What one reader did for a window (small enough for XCom)."""

    window_id: str
    staging_uri: str
    rows: int = 0
    data_records: int = 0
    transactions: float = 0.0
    spans: list[PartitionResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def partitions(self) -> list[str]:
        return [span.token for span in self.spans]

    def to_dict(self) -> dict:
        return {
            "window_id": self.window_id,
            "staging_uri": self.staging_uri,
            "rows": self.rows,
            "data_records": self.data_records,
            "transactions": round(self.transactions, 6),
            "partitions": len(self.spans),
            "retries": sum(span.retries for span in self.spans),
            "seconds": round(self.seconds, 3),
            "rows_per_second": round(self.rows / self.seconds, 1) if self.seconds > 0 else None,
        }


class WindowReader(SpannerClaimedReader):
    """Reads windows of one change stream into Parquet staging, recording lineage in the metastore.

    The staging root is opened with ``storage_options`` (delta-rs object-store options, such as
    those of a Google connection) unless an explicit ``filesystem`` is given. Staged column types
    carry each column's nullability, which data change records lack: a window's read asks
    ``INFORMATION_SCHEMA.COLUMNS`` once per table it meets (:class:`ColumnNullability`).
    """

    read_error = ChangeStreamReadError

    def __init__(
        self,
        query: ChangeStreamQuery,
        metastore: Metastore,
        stream_key: str,
        staging_root: str,
        *,
        owner: str,
        query_timeout: float | None = 3600.0,
        **options: Any,
    ) -> None:
        """``options``: those of :class:`~airflow_provider_cdc.sources.claimed_reader.ClaimedWindowReader`
        (leases, retries, staging, logging); the staging folder is the stream key's
        (:func:`~airflow_provider_cdc.core.contract.locations.staging_folder`)."""
        folder = staging_folder(stream_key)
        super().__init__(metastore, stream_key, folder, staging_root, owner=owner, **options)
        self.query = query
        self.query_timeout = query_timeout

    @property
    def stream_key(self) -> str:
        return self.key

    # ----- lineage --------------------------------------------------------------------------------
    def prepare(self, window: Window) -> list[str]:
        """Make sure the lineage covers the window and list the partitions it must read.

        The first window of a stream (or a window older than every recorded partition) issues the
        initial query (``partition_token => NULL``) at the window start; later windows continue from
        the recorded lineage. Idempotent; safe to call from several readers.
        """
        if not self.metastore.is_known_stream(self.stream_key) or not self.metastore.partitions_alive_at(
            self.stream_key, window.start
        ):
            self._initial_query(window)
        overlapping = self.metastore.partitions_overlapping(self.stream_key, window.start, window.end)
        tokens = [p.token for p in overlapping]
        self.metastore.add_window_partitions(self.stream_key, window.start, window.end, tokens)
        return tokens

    def _initial_query(self, window: Window) -> None:
        children: list[PartitionSpec] = []
        try:
            for record in self.query.records(None, window.start, window.query_end, self.query_timeout):
                if isinstance(record, ChildPartitionsRecord):
                    children.extend(
                        PartitionSpec(
                            token=c.token,
                            start_timestamp=record.start_timestamp,
                            parent_tokens=(),
                            heartbeat_ms=self.query.heartbeat_ms,
                        )
                        for c in record.child_partitions
                    )
        except gexc.GoogleAPICallError as exc:
            raise ChangeStreamReadError(window, None, describe_error(exc)) from exc
        if not children:
            raise ChangeStreamReadError(window, None, "the initial query returned no partitions")
        self.metastore.add_partitions(self.stream_key, children)
        # A window older than the recorded lineage: its initial partitions start earlier.
        self.metastore.lower_initial_starts(self.stream_key, [c.token for c in children], window.start)
        self.log.info(
            "Initial query at %s found %d partition(s) of %s",
            format_timestamp(window.start),
            len(children),
            self.stream_key,
        )

    # ----- reading --------------------------------------------------------------------------------
    def read(self, window: Window) -> ReadSummary:
        """Claim and read partitions of the window until every partition of it has been read."""
        started = time.monotonic()
        summary = ReadSummary(window.window_id, window_location(self.staging_root, self.folder, window))
        if not self.metastore.window_partitions(self.stream_key, window.start, window.end):
            self.prepare(window)
        nullability = ColumnNullability(self.query.database)
        for token, claim_id in self.claims(window):
            # The partition's own lease shows who reads it (status, stalled-partition checks); a
            # finished partition re-read for a past window cannot be leased and needs no lease.
            leased = self.metastore.claim_partition(self.stream_key, token, self.owner, self.lease_seconds)
            try:
                result = self._read_partition(window, token, claim_id, nullability)
            finally:
                if leased is not None:
                    self.metastore.release(self.stream_key, token, self.owner)
            summary.rows += result.rows
            summary.data_records += result.data_records
            summary.transactions += result.transactions
            summary.spans.append(result)
        summary.seconds = time.monotonic() - started
        if not summary.partitions:  # the window's partitions were all claimed by the other readers
            self.log.info(
                "Window %s: this reader found no partition left to read (the other readers took them all)",
                window,
            )
            return summary
        self.log.info(
            "Window %s: read %d change rows (%d records, %.0f transactions) from %d partition(s) in %.1fs",
            window,
            summary.rows,
            summary.data_records,
            summary.transactions,
            len(summary.partitions),
            summary.seconds,
        )
        return summary

    def _read_partition(
        self, window: Window, token: str, claim_id: str, nullability: ColumnNullability
    ) -> PartitionResult:
        partition = self.metastore.get_partition(self.stream_key, token)
        start = max(window.start, partition.start_timestamp)
        result = PartitionResult(token, started=time.monotonic())
        if start > window.query_end:
            self._complete(window, token, result, claim_id, output_files=0)
            return result
        writer = self.staging_writer(window, token, claim_id)
        with writer:
            self._drain(window, token, start, writer, result, nullability)
        if result.children:
            assert result.end is not None
            specs = [
                PartitionSpec(
                    token=c.token,
                    start_timestamp=result.end,
                    parent_tokens=tuple(c.parent_partition_tokens),
                    heartbeat_ms=self.query.heartbeat_ms,
                )
                for c in result.children
            ]
            self.metastore.finish_partition(self.stream_key, token, result.end, specs)
            in_window = [c.token for c in result.children if result.end < window.end]
            if in_window:
                self.metastore.add_window_partitions(self.stream_key, window.start, window.end, in_window)
        else:
            self.metastore.advance_watermark(self.stream_key, token, window.end, records=result.rows)
        self._complete(window, token, result, claim_id, output_files=len(writer.files))
        self.discard_other_claims(writer, token)
        return result

    def _complete(
        self, window: Window, token: str, result: PartitionResult, claim_id: str, *, output_files: int
    ) -> None:
        result.finished = time.monotonic()
        self.complete(
            window,
            token,
            claim_id,
            rows=result.rows,
            transactions=result.transactions,
            output_files=output_files,
        )

    def _drain(
        self,
        window: Window,
        token: str,
        start: datetime,
        writer: StagingWriter,
        result: PartitionResult,
        nullability: ColumnNullability,
    ) -> None:
        """Run the partition's query, resuming after retryable errors from the last record received."""
        resume_at = start
        seen_at_resume: set[tuple[str, str]] = set()
        last_ts: datetime | None = None
        seen_at_last: set[tuple[str, str]] = set()
        last_log = time.monotonic()
        began = last_log
        decoder = ChangeRecordDecoder(token, nullability.of)
        while True:
            try:
                batches = self.query.row_batches(token, resume_at, window.query_end, self.query_timeout)
                for batch in batches:
                    at: datetime | None = None
                    for record in decoder.decode_batch(batch):
                        if type(record) is DataRecordRun:
                            record = _after_resume(record, resume_at, seen_at_resume)
                            timestamps = record.commit_timestamps
                            if not timestamps:
                                continue
                            result.rows += writer.write_columns(record.columns)
                            result.data_records += len(timestamps)
                            result.transactions += sum(
                                1.0 / count
                                for count in compress(
                                    record.number_of_partitions_in_transaction,
                                    record.is_last_record_in_transaction_in_partition,
                                )
                            )
                            at = timestamps[-1]
                            first = len(timestamps) - 1
                            while first and timestamps[first - 1] == at:
                                first -= 1
                            if first or at != last_ts:
                                last_ts, seen_at_last = at, set()
                            seen_at_last.update(
                                zip(
                                    record.server_transaction_ids[first:],
                                    record.record_sequences[first:],
                                    strict=True,
                                )
                            )
                        elif isinstance(record, DataChangeRecord):
                            ts = record.commit_timestamp
                            ident = (record.server_transaction_id, record.record_sequence)
                            if ts < resume_at or (ts == resume_at and ident in seen_at_resume):
                                continue  # delivered before the resume
                            result.rows += writer.write_record(StagedDataChange(record))
                            result.data_records += 1
                            if record.is_last_record_in_transaction_in_partition:
                                result.transactions += 1.0 / record.number_of_partitions_in_transaction
                            if ts != last_ts:
                                last_ts, seen_at_last = ts, set()
                            seen_at_last.add(ident)
                            at = ts
                        elif isinstance(record, ChildPartitionsRecord):
                            result.children.extend(record.child_partitions)
                            result.end = at = record.start_timestamp
                        elif isinstance(record, HeartbeatRecord):
                            at = record.timestamp
                        else:  # pragma: no cover - closed union
                            raise ChangeStreamReadError(window, token, f"unexpected record {record!r}")
                    now = time.monotonic()
                    if at is not None and now - last_log >= self.progress_seconds:
                        last_log = now
                        self._progress(window, token, at, result, now - began)
                return
            except gexc.GoogleAPICallError as exc:
                result.retries += 1
                delay = self.back_off(window, token, exc, result.retries)
                if last_ts is not None:
                    resume_at, seen_at_resume = last_ts, set(seen_at_last)
                self.log.warning(
                    "Partition %s of window %s: %s; retry %d/%d from %s in %.1fs",
                    token,
                    window,
                    describe_error(exc),
                    result.retries,
                    self.retries,
                    format_timestamp(resume_at),
                    delay,
                )
                self._sleep(delay)

    def _progress(
        self, window: Window, token: str, at: datetime, result: PartitionResult, seconds: float
    ) -> None:
        self.renew(window, token)
        lag = (window.end - at).total_seconds()
        self.log.info(
            "Partition %s of window %s: %d change rows (%.0f/s), at %s, %.1fs behind the window end",
            token,
            window,
            result.rows,
            result.rows / seconds if seconds else 0.0,
            format_timestamp(at),
            max(lag, 0.0),
        )


def _after_resume(run: DataRecordRun, resume_at: datetime, seen: set[tuple[str, str]]) -> DataRecordRun:
    """The records of ``run`` not delivered before a resume at ``resume_at`` (those committed
    earlier, or then and among ``seen``)."""
    earliest = min(run.commit_timestamps)
    if earliest > resume_at or (earliest == resume_at and not seen):
        return run
    idents = zip(run.server_transaction_ids, run.record_sequences, strict=True)
    return run.select(
        [
            not (ts < resume_at or (ts == resume_at and ident in seen))
            for ts, ident in zip(run.commit_timestamps, idents, strict=True)
        ]
    )
