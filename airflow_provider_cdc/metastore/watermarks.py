"""Watermarks: how far each partition has been read, and how far each table of each target
(by its registered name) has been applied.

Both only move forward: every write is ``UPDATE … WHERE watermark < :new``.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.metastore.engine import MetastoreEngine
from airflow_provider_cdc.metastore.errors import LeaseLostError
from airflow_provider_cdc.metastore.model import (
    timestamp_micros,
    validate_count,
    validate_owner,
    validate_pipeline,
    validate_stream,
    validate_target,
    validate_token,
)
from airflow_provider_cdc.metastore.partitions import partition_cond, partition_row
from airflow_provider_cdc.metastore.schema import partitions as P
from airflow_provider_cdc.metastore.schema import table_watermarks as TW


class WatermarkAccess(MetastoreEngine):
    """Partition watermarks (read up to) and per-table apply watermarks of each pipeline."""

    def advance_watermark(
        self,
        stream: str,
        token: str,
        timestamp: datetime | str,
        *,
        owner: str | None = None,
        records: int = 0,
    ) -> bool:
        """Raise the partition's drained-up-to watermark to ``timestamp`` if that moves it forward.

        The watermark is exclusive: every change the partition holds that was committed before it
        has been read (after a heartbeat at ``t`` or a window read up to ``end - 1µs`` it is
        ``t + 1µs`` or ``end``). A new partition starts with its watermark at its start timestamp.
        The watermark never moves backwards (``WHERE watermark < :ts``); ``records`` read since the
        last advance are added to the partition's record count only when it moves. With ``owner``
        the caller must still hold the lease (else ``LeaseLostError``). Returns True if it moved.
        """
        stream, token = validate_stream(stream), validate_token(token, stream)
        owner = validate_owner(owner) if owner is not None else None
        ts_us = timestamp_micros(timestamp, f"watermark of partition token {token!r}")
        records = validate_count("records", records) or 0
        cond = partition_cond(stream, token, unfinished=True, holder=owner) & (P.c.watermark_us < ts_us)
        with self._tx(write=True) as conn:
            now = self._clock_now()
            moved = self._update_one(
                conn,
                P,
                cond,
                watermark_us=ts_us,
                record_count=P.c.record_count + records,
                progress_us=now,
                updated_us=now,
            )
            if not moved:
                row = partition_row(conn, stream, token)
                if owner is not None and row["lease_owner"] != owner:
                    raise LeaseLostError(stream, token, owner, row["lease_owner"])
            return moved

    # Per-table apply watermarks of each pipeline and target (a window end, or the watermark a target
    # reports).

    def advance_table_watermark(
        self, pipeline: str, table: str, timestamp: datetime | str, *, target: str
    ) -> bool:
        """Raise the apply watermark of ``target``'s table to ``timestamp`` if that moves it forward;
        True if it moved."""
        pipeline, table = validate_pipeline(pipeline), validate_identifier(table, "table")
        target = validate_target(target)
        ts_us = timestamp_micros(timestamp, f"apply watermark of {target} table {table!r}")
        with self._tx(write=True) as conn:
            now = self._clock_now()
            key = {"pipeline": pipeline, "target": target, "table_name": table}
            if self._insert_if_absent(conn, TW, {**key, "watermark_us": ts_us, "updated_us": now}):
                return True
            return self._update_one(
                conn,
                TW,
                (TW.c.pipeline == pipeline)
                & (TW.c.target == target)
                & (TW.c.table_name == table)
                & (TW.c.watermark_us < ts_us),
                watermark_us=ts_us,
                updated_us=now,
            )

    def table_watermarks(self, pipeline: str, *, target: str) -> dict[str, datetime]:
        """Apply watermark of each table of the pipeline's ``target``: changes committed before it
        are applied."""
        pipeline, target = validate_pipeline(pipeline), validate_target(target)
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(TW.c.table_name, TW.c.watermark_us)
                .where((TW.c.pipeline == pipeline) & (TW.c.target == target))
                .order_by(TW.c.table_name)
            )
            return {name: from_micros(us) for name, us in rows}
