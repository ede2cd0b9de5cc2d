"""Read-only questions people ask about a pipeline: where it stands, and which window a name means.

Part of :class:`~airflow_provider_cdc.metastore.store.Metastore`; the ``pipelines`` and ``explain``
commands ask them. Nothing here writes; every query is bounded by the windows index (``pipeline``,
``state``, ``start``) or the primary key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.metastore.engine import MetastoreEngine
from airflow_provider_cdc.metastore.mappers import to_window
from airflow_provider_cdc.metastore.model import (
    WindowRecord,
    WindowState,
    timestamp_micros,
    validate_pipeline,
)
from airflow_provider_cdc.metastore.schema import pipelines as PL
from airflow_provider_cdc.metastore.schema import table_watermarks as TW
from airflow_provider_cdc.metastore.schema import windows as W


@dataclass(frozen=True)
class PipelineStanding:
    """Where a pipeline stands: its windows by outcome, its edges, its targets and apply watermarks."""

    pipeline: str
    first_window_start: datetime | None
    applied: int
    #: windows not applied whose current epoch recorded a failure
    failed: int
    #: windows not applied without a recorded failure (reading, or waiting for their turn)
    in_flight: int
    last_applied: WindowRecord | None
    newest: WindowRecord | None
    #: the window not applied that starts first: the one the pipeline waits for
    oldest_unapplied: WindowRecord | None
    #: target → the oldest apply watermark of its tables
    oldest_watermarks: dict[str, datetime]

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(sorted(self.oldest_watermarks))


class DiagnosisAccess(MetastoreEngine):
    """Where pipelines stand and which window a person means (see the module)."""

    def pipeline_standing(self, pipeline: str) -> PipelineStanding:
        """The pipeline's windows counted by outcome, its last applied, newest and oldest unapplied
        windows, and per target its oldest apply watermark."""
        pipeline = validate_pipeline(pipeline)
        of_pipeline = W.c.pipeline == pipeline
        reading = of_pipeline & (W.c.state == WindowState.READING.value)
        failed = W.c.last_error.is_not(None)
        with self._tx() as conn:
            first = conn.execute(
                sa.select(PL.c.first_window_start_us).where(PL.c.pipeline == pipeline)
            ).scalar()
            counts = {WindowState.APPLIED.value: 0, "failed": 0, WindowState.READING.value: 0}
            outcome = sa.case((failed & (W.c.state != WindowState.APPLIED.value), "failed"), else_=W.c.state)
            for name, number in conn.execute(
                sa.select(outcome, sa.func.count()).where(of_pipeline).group_by(outcome)
            ):
                counts[str(name)] = int(number)

            def edge(cond: sa.ColumnElement, *order: sa.ColumnElement) -> WindowRecord | None:
                row = conn.execute(sa.select(W).where(cond).order_by(*order).limit(1)).first()
                return None if row is None else to_window(row._mapping)

            applied_cond = of_pipeline & (W.c.state == WindowState.APPLIED.value)
            last_applied = edge(applied_cond, W.c.start_us.desc(), W.c.end_us.desc())
            newest = edge(of_pipeline, W.c.start_us.desc(), W.c.end_us.desc())
            oldest = edge(reading, W.c.start_us, W.c.end_us)
            marks = {
                target: from_micros(mark)
                for target, mark in conn.execute(
                    sa.select(TW.c.target, sa.func.min(TW.c.watermark_us))
                    .where(TW.c.pipeline == pipeline)
                    .group_by(TW.c.target)
                )
            }
        return PipelineStanding(
            pipeline=pipeline,
            first_window_start=None if first is None else from_micros(first),
            applied=counts[WindowState.APPLIED.value],
            failed=counts["failed"],
            in_flight=counts[WindowState.READING.value],
            last_applied=last_applied,
            newest=newest,
            oldest_unapplied=oldest,
            oldest_watermarks=marks,
        )

    def windows_starting_at(self, pipeline: str, start: datetime | str) -> list[WindowRecord]:
        """The pipeline's windows that start at ``start`` (shortest first; mostly one)."""
        pipeline = validate_pipeline(pipeline)
        start_us = timestamp_micros(start, "window start")
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(W)
                .where((W.c.pipeline == pipeline) & (W.c.start_us == start_us))
                .order_by(W.c.end_us)
            )
            return [to_window(row._mapping) for row in rows]

    def windows_ending_at(self, pipeline: str, end: datetime | str) -> list[WindowRecord]:
        """The pipeline's windows that end at ``end`` (its windows just before one starting there)."""
        pipeline = validate_pipeline(pipeline)
        end_us = timestamp_micros(end, "window end")
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(W).where((W.c.pipeline == pipeline) & (W.c.end_us == end_us)).order_by(W.c.start_us)
            )
            return [to_window(row._mapping) for row in rows]

    def target_watermarks(self, pipeline: str) -> dict[str, dict[str, datetime]]:
        """Target → table → apply watermark, for every target the pipeline records watermarks of."""
        pipeline = validate_pipeline(pipeline)
        marks: dict[str, dict[str, datetime]] = {}
        with self._tx() as conn:
            for target, table, mark in conn.execute(
                sa.select(TW.c.target, TW.c.table_name, TW.c.watermark_us).where(TW.c.pipeline == pipeline)
            ):
                marks.setdefault(target, {})[table] = from_micros(mark)
        return marks

    def newest_window(self, pipeline: str) -> WindowRecord | None:
        """The pipeline's window that starts last (``None``: it recorded none)."""
        pipeline = validate_pipeline(pipeline)
        with self._tx() as conn:
            row = conn.execute(
                sa.select(W)
                .where(W.c.pipeline == pipeline)
                .order_by(W.c.start_us.desc(), W.c.end_us.desc())
                .limit(1)
            ).first()
        return None if row is None else to_window(row._mapping)

    def database_now(self) -> datetime:
        """The metastore's clock (the one leases and window times are recorded by)."""
        with self._tx() as conn:
            return from_micros(self._now(conn))
