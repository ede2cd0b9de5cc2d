"""Reading the planned batches of a table source's window into staging, batch by batch.

Readers share a window as they share a change-stream window: each claims a batch (a window
partition of the source in the metastore) under a lease and a claim id, stages its rows under
``partition=<key>/claim=<id>/`` and completes the batch with a compare-and-set on that claim, so a
reader that lost its lease is never read. Rows are read undecoded (``lazy_decode=True``) and turned
into staged change rows column-wise, a chunk of rows at a time (bounded memory): each column of a
chunk is converted by its type at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc

from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.sources.claimed_reader import UnitReadSummary, WindowReadError, read_summary
from airflow_provider_cdc.sources.spanner.claimed_reader import SpannerClaimedReader, describe_error
from airflow_provider_cdc.sources.spanner.garbage_collection import (
    FULL_COLLECTION_FACTOR,
    fewer_full_collections,
)
from airflow_provider_cdc.sources.spanner.table_batches import (
    SNAPSHOT,
    BatchPlan,
    BatchPlanError,
    PlannedTable,
    TableBatch,
    plan_id_of,
    quoted,
    read_plan,
)
from airflow_provider_cdc.sources.spanner.table_rows import ChangeRowEncoder, ColumnChunk
from airflow_provider_cdc.sources.spanner.wire_values import wire_column_chunks
from airflow_provider_cdc.staging.parquet import StagingWriter, window_location

#: Rows turned into staged rows at once (a reader holds at most this many undecoded rows).
CHUNK_ROWS = 1024


class TableReadError(WindowReadError):
    """A batch of a window could not be read; the message names the window, the batch and the cause."""

    partition_noun = "batch"


@dataclass
class BatchResult:
    """One batch as one reader read it."""

    token: str
    table: str
    rows: int = 0
    retries: int = 0
    seconds: float = 0.0


class TableReadSummary(UnitReadSummary):
    """What one reader did for a window (small enough for XCom): its units are the batches it read."""

    @property
    def batches(self) -> list[BatchResult]:
        return self.units  # type: ignore[return-value]

    def to_dict(self) -> dict[str, Any]:
        tables: dict[str, int] = {}
        for batch in self.batches:
            tables[batch.table] = tables.get(batch.table, 0) + batch.rows
        rows = self.rows  # every table row is a transaction of its own
        summary = read_summary(self.window_id, self.staging_uri, self.batches, self.seconds, rows)
        batches = len(self.batches)
        return {**summary, "data_records": rows, "batches": batches, "tables": dict(sorted(tables.items()))}


def page_query(table: PlannedTable, after: list[Any] | None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The next page of a commit-timestamp table in ``(timestamp, primary key)`` order after the
    row ``after`` (values in ``select`` order; ``None``: the first page); window parameters apart."""
    from google.cloud.spanner_v1 import param_types

    assert table.config is not None and table.page_rows is not None
    order = [table.config.timestamp_column, *table.primary_key]
    types = {c.name: c.logical_type.code for c in table.columns}
    text = table.sql()
    params: dict[str, Any] = {}
    kinds: dict[str, Any] = {}
    if after is not None:
        # (ts, k1, k2) > (@p0, @p1, @p2), spelled out: Spanner has no row-value comparison.
        condition = ""
        for index in reversed(range(len(order))):
            column, name = quoted(order[index]), f"p{index}"
            value = after[table.select.index(order[index])]
            if value is None:
                raise BatchPlanError(
                    f"table {table.table!r}: column {order[index]!r} is NULL in a row; paging needs "
                    "non-null timestamps and keys (read the table without page_rows)"
                )
            params[name] = value  # encoded values are the wire form the parameter takes
            code = "TIMESTAMP" if index == 0 else types.get(order[index], "STRING")
            kinds[name] = getattr(param_types, code if code != "FLOAT32" else "FLOAT64")
            condition = (
                f"{column} > @{name}"
                if not condition
                else f"{column} > @{name} OR ({column} = @{name} AND ({condition}))"
            )
        text += f" AND ({condition})"
    text += f" ORDER BY {', '.join(quoted(c) for c in order)} LIMIT {int(table.page_rows)}"
    return text, params, kinds


class TableWindowReader(SpannerClaimedReader):
    """Reads the batches of table-source windows into Parquet staging, claims in the metastore.

    ``database`` is a ``google-cloud-spanner`` database; ``source_key`` names the source in the
    metastore (``projects/…/databases/<db>/<source>``) and ``source`` the staging folder.
    ``full_collection_factor``: see :func:`fewer_full_collections` (1: the process's own setting).
    """

    read_error = TableReadError

    def __init__(
        self,
        database: Any,
        metastore: Metastore,
        source_key: str,
        source: str,
        staging_root: str,
        *,
        owner: str,
        chunk_rows: int = CHUNK_ROWS,
        full_collection_factor: int = FULL_COLLECTION_FACTOR,
        **options: Any,
    ) -> None:
        """``options``: those of :class:`~airflow_provider_cdc.sources.claimed_reader.ClaimedWindowReader`
        (leases, retries, staging, logging)."""
        super().__init__(metastore, source_key, source, staging_root, owner=owner, **options)
        self.database = database
        self.chunk_rows = chunk_rows
        self.full_collection_factor = full_collection_factor
        self._plans: dict[str, BatchPlan] = {}

    @property
    def source_key(self) -> str:
        return self.key

    @property
    def source(self) -> str:
        return self.folder

    def plan(self, window: Window, plan_id: str) -> BatchPlan:
        """The window's plan ``plan_id`` (read once per reader)."""
        if plan_id not in self._plans:
            self._plans[plan_id] = read_plan(
                self.staging_root,
                self.source,
                window,
                plan_id,
                filesystem=self.filesystem,
                storage_options=self.storage_options,  # type: ignore[arg-type]
            )
        return self._plans[plan_id]

    def read(self, window: Window) -> TableReadSummary:
        """Claim and read batches of the window until every batch of it has been read."""
        started = time.monotonic()
        summary = TableReadSummary(window.window_id, window_location(self.staging_root, self.source, window))
        if not self.metastore.window_partitions(self.source_key, window.start, window.end):
            raise TableReadError(window, None, f"the window of {self.source_key} has not been opened")
        for token, claim_id in self.claims(window):
            plan = self.plan(window, plan_id_of(token))
            summary.batches.append(self._read_batch(window, plan, plan.batch(token), claim_id))
        summary.seconds = time.monotonic() - started
        self.log.info(
            "Window %s of %s: read %d rows from %d batch(es) in %.1fs",
            window,
            self.source,
            summary.rows,
            len(summary.batches),
            summary.seconds,
        )
        return summary

    def _read_batch(self, window: Window, plan: BatchPlan, batch: TableBatch, claim_id: str) -> BatchResult:
        table = plan.tables[batch.table]
        result = BatchResult(batch.token, table.target)
        began = time.monotonic()
        while True:
            writer = self.staging_writer(window, batch.token, claim_id)
            try:
                with writer, fewer_full_collections(self.full_collection_factor):
                    if batch.partition is None:
                        self._read_pages(window, plan, table, batch, writer, result, began)
                    else:
                        self._read_partition(window, plan, table, batch, writer, result, began)
                break
            except gexc.GoogleAPICallError as exc:
                self._retry_or_raise(window, plan, batch, exc, result)
        result.seconds = time.monotonic() - began
        self.complete(
            window, batch.token, claim_id, rows=result.rows, transactions=float(result.rows),
            output_files=len(writer.files), partition_rows=True,
        )  # fmt: skip
        self.discard_other_claims(writer, batch.token)
        self.log.info(
            "Batch %s of window %s: %d rows of %s in %.1fs",
            batch.token,
            window,
            result.rows,
            table.table,
            result.seconds,
        )
        return result

    def _retry_or_raise(
        self,
        window: Window,
        plan: BatchPlan,
        batch: TableBatch,
        exc: gexc.GoogleAPICallError,
        result: BatchResult,
    ) -> None:
        if isinstance(exc, gexc.FailedPrecondition) and "stale" in str(exc.message).lower():
            raise TableReadError(
                window,
                batch.token,
                f"{describe_error(exc)}: the read timestamp {plan.read_timestamp.isoformat()} is no longer "
                "within the database's version_retention_period; raise it with ALTER DATABASE … SET OPTIONS "
                "(version_retention_period='…') and open the window again",
            ) from exc
        if isinstance(exc, gexc.NotFound) and batch.partition is not None:
            raise TableReadError(
                window,
                batch.token,
                f"{describe_error(exc)}: the read transaction of plan {plan.plan_id} is gone; "
                "open the window again",
            ) from exc
        result.retries += 1
        delay = self.back_off(window, batch.token, exc, result.retries)
        self.log.warning(
            "Batch %s of window %s: %s; retry %d/%d in %.1fs",
            batch.token,
            window,
            describe_error(exc),
            result.retries,
            self.retries,
            delay,
        )
        self._sleep(delay)

    def _encoder(self, plan: BatchPlan, table: PlannedTable, batch: TableBatch) -> ChangeRowEncoder:
        return ChangeRowEncoder(
            table.target,
            table.columns,
            table.select,
            partition_token=batch.token,
            commit_timestamp=plan.window.start if plan.mode == SNAPSHOT else None,
            config=table.config,
        )

    @staticmethod
    def _codes(table: PlannedTable) -> list[str | None]:
        """The type code of each selected column (``None``: not a change column)."""
        codes = {c.name: c.logical_type.code for c in table.columns}
        return [codes.get(name) for name in table.select]

    def _read_partition(
        self,
        window: Window,
        plan: BatchPlan,
        table: PlannedTable,
        batch: TableBatch,
        writer: StagingWriter,
        result: BatchResult,
        began: float,
    ) -> None:
        from google.cloud.spanner_v1.database import BatchSnapshot

        result.rows = 0  # a retry reads the batch again into a cleared folder
        snapshot = BatchSnapshot.from_dict(self.database, plan.snapshot_state())
        params, types = table.params(window)
        query: dict[str, Any] = {"sql": table.sql()}
        if params:
            query.update(params=params, param_types=types)
        rows = snapshot.process_query_batch({"partition": batch.partition, "query": query}, lazy_decode=True)
        encoder, codes, last_log = self._encoder(plan, table, batch), self._codes(table), time.monotonic()
        for chunk in wire_column_chunks(rows, self.chunk_rows, codes):
            result.rows += writer.write_columns(encoder.columns(ColumnChunk(chunk)))
            last_log = self._maybe_progress(window, batch, result, began, last_log)

    def _read_pages(
        self,
        window: Window,
        plan: BatchPlan,
        table: PlannedTable,
        batch: TableBatch,
        writer: StagingWriter,
        result: BatchResult,
        began: float,
    ) -> None:
        assert table.page_rows is not None
        result.rows = 0
        encoder, codes, last_log = self._encoder(plan, table, batch), self._codes(table), time.monotonic()
        window_params, window_types = table.params(window)
        after: list[Any] | None = None
        with self.database.snapshot(read_timestamp=plan.read_timestamp, multi_use=True) as snapshot:
            while True:
                sql, params, types = page_query(table, after)
                found = snapshot.execute_sql(
                    sql,
                    params={**window_params, **params},
                    param_types={**window_types, **types},
                    lazy_decode=True,
                )
                page = 0
                for chunk in wire_column_chunks(found, self.chunk_rows, codes):
                    page += writer.write_columns(encoder.columns(ColumnChunk(chunk)))
                    after = [column[-1] for column in chunk]
                result.rows += page
                last_log = self._maybe_progress(window, batch, result, began, last_log)
                if page < table.page_rows:
                    return

    def _maybe_progress(
        self, window: Window, batch: TableBatch, result: BatchResult, began: float, last_log: float
    ) -> float:
        now = time.monotonic()
        if now - last_log < self.progress_seconds:
            return last_log
        self.renew(window, batch.token)
        seconds = now - began
        self.log.info(
            "Batch %s of window %s: %d rows (%.0f/s)",
            batch.token,
            window,
            result.rows,
            result.rows / seconds if seconds else 0.0,
        )
        return now
