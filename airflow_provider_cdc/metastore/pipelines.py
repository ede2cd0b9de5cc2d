"""The pipeline ledger: each pipeline's first window and what each applied window did to each
table of each target (by its registered name), keyed by (pipeline, target, table).

Part of :class:`~airflow_provider_cdc.metastore.store.Metastore`. It answers the two questions
that keep applies exactly once (``domain.apply_order``): may this window apply now (is the window
before it applied?), and does each target table hold what the metastore says it holds?
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from airflow_provider_cdc.core.apply_order import TableVersions, future_window_problem, predecessor_problem
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore.engine import MetastoreEngine
from airflow_provider_cdc.metastore.errors import MetastoreError
from airflow_provider_cdc.metastore.model import (
    WindowState,
    timestamp_micros,
    validate_count,
    validate_pipeline,
    validate_target,
)
from airflow_provider_cdc.metastore.schema import pipelines as PL
from airflow_provider_cdc.metastore.schema import window_tables as WT
from airflow_provider_cdc.metastore.schema import windows as W
from airflow_provider_cdc.metastore.windows import window_key


class WindowOrderError(MetastoreError):
    """A window cannot apply before the pipeline's previous window is applied."""

    def __init__(self, message: str, *, never_run: bool) -> None:
        super().__init__(message)
        #: no window ends where this one starts (it was never run, or this one starts too early)
        self.never_run = never_run


@dataclass(frozen=True)
class PipelineRecord:
    pipeline: str
    first_window_start: datetime
    tables_recorded_from: datetime | None


@dataclass(frozen=True)
class WindowTableRecord:
    """What one applied window did to one target table."""

    table: str
    window_start: datetime
    window_end: datetime
    target_version: int | None
    rows: int | None


class PipelineLedger(MetastoreEngine):
    """Ledger methods of the metastore (see the module docstring)."""

    def record_pipeline(self, pipeline: str, first_window_start: datetime | str) -> PipelineRecord:
        """Record the pipeline's first window start unless recorded; return the recorded pipeline."""
        pipeline = validate_pipeline(pipeline)
        first_us = timestamp_micros(first_window_start, f"first window start of pipeline {pipeline!r}")
        with self._tx(write=True) as conn:
            self._insert_if_absent(
                conn,
                PL,
                {"pipeline": pipeline, "first_window_start_us": first_us, "tables_recorded_from_us": None,
                 "created_us": self._clock_now()},
            )
            return self._pipeline_row(conn, pipeline)  # type: ignore[return-value]

    def get_pipeline(self, pipeline: str) -> PipelineRecord | None:
        pipeline = validate_pipeline(pipeline)
        with self._tx() as conn:
            return self._pipeline_row(conn, pipeline)

    @staticmethod
    def _pipeline_row(conn: Connection, pipeline: str) -> PipelineRecord | None:
        row = conn.execute(sa.select(PL).where(PL.c.pipeline == pipeline)).first()
        if row is None:
            return None
        recorded = row._mapping["tables_recorded_from_us"]
        return PipelineRecord(
            pipeline, from_micros(row._mapping["first_window_start_us"]),
            None if recorded is None else from_micros(recorded),
        )

    def predecessor_error(
        self, pipeline: str, start: datetime | str, end: datetime | str
    ) -> WindowOrderError | None:
        """Why the window may not apply yet (``domain.apply_order.predecessor_problem``), or None."""
        pipeline, start_us, end_us = window_key(pipeline, start, end)
        window = Window(from_micros(start_us), from_micros(end_us))
        with self._tx() as conn:
            recorded = self._pipeline_row(conn, pipeline)
            before = conn.execute(
                sa.select(W).where((W.c.pipeline == pipeline) & (W.c.end_us == start_us))
                .order_by(W.c.start_us.desc()).limit(1)
            ).first()
            now_us = self._now(conn) if before is None else None
            last_applied = self._last_applied(conn, pipeline) if before is None else None
        first_us = None if recorded is None else timestamp_micros(recorded.first_window_start, "first window")
        if before is None:
            problem = predecessor_problem(
                pipeline, window, first_us, None, None, now_us=now_us, last_applied=last_applied
            )
        else:
            row = before._mapping
            problem = predecessor_problem(
                pipeline, window, first_us, Window(from_micros(row["start_us"]), from_micros(row["end_us"])),
                row["state"], row["attempt"],
            )
        return None if problem is None else WindowOrderError(problem, never_run=before is None)

    def last_applied_window(self, pipeline: str) -> Window | None:
        """The pipeline's applied window that ends last (None: none is applied)."""
        pipeline = validate_pipeline(pipeline)
        with self._tx() as conn:
            return self._last_applied(conn, pipeline)

    @staticmethod
    def _last_applied(conn: Connection, pipeline: str) -> Window | None:
        row = conn.execute(
            sa.select(W.c.start_us, W.c.end_us)
            .where((W.c.pipeline == pipeline) & (W.c.state == WindowState.APPLIED.value))
            .order_by(W.c.end_us.desc()).limit(1)
        ).first()
        return None if row is None else Window(from_micros(row[0]), from_micros(row[1]))

    def window_time_problem(self, pipeline: str, window: Window) -> str | None:
        """Why ``window`` cannot run now because it ends in the future (by the metastore's clock),
        naming the pipeline's last applied window and the next one to run; None when it is over."""
        pipeline = validate_pipeline(pipeline)
        with self._tx() as conn:
            now_us = self._now(conn)
            if window.end_micros <= now_us:
                return None
            recorded = self._pipeline_row(conn, pipeline)
            last_applied = self._last_applied(conn, pipeline)
        first_us = None if recorded is None else timestamp_micros(recorded.first_window_start, "first window")
        return future_window_problem(pipeline, window, now_us, last_applied, first_us)

    def pipeline_ids(self) -> list[str]:
        """Every pipeline the metastore knows: recorded, or with a recorded window."""
        with self._tx() as conn:
            recorded = {row[0] for row in conn.execute(sa.select(PL.c.pipeline))}
            windowed = {row[0] for row in conn.execute(sa.select(W.c.pipeline).distinct())}
        return sorted(recorded | windowed)

    def require_predecessor_applied(self, pipeline: str, start: datetime | str, end: datetime | str) -> None:
        """Raise :class:`WindowOrderError` unless the window may apply now."""
        error = self.predecessor_error(pipeline, start, end)
        if error is not None:
            raise error

    def record_window_tables(
        self,
        pipeline: str,
        start: datetime | str,
        end: datetime | str,
        tables: Mapping[str, tuple[int | None, int | None]],
        *,
        target: str,
        replace: bool = False,
    ) -> None:
        """Record, per table of ``target``, the target version the window committed and its change
        rows (``{table: (target_version, rows)}``); a table already recorded for the window keeps its
        record unless ``replace`` (a repair that applied the window again)."""
        pipeline, start_us, end_us = window_key(pipeline, start, end)
        target = validate_target(target)
        with self._tx(write=True) as conn:
            now = self._clock_now()
            for table, (version, rows) in sorted(tables.items()):
                key = {"pipeline": pipeline, "target": target, "window_start_us": start_us,
                       "window_end_us": end_us, "table_name": validate_identifier(table, "table")}
                values = {"target_version": validate_count("target_version", version),
                          "rows": validate_count("rows", rows), "recorded_us": now}
                if not self._insert_if_absent(conn, WT, {**key, **values}) and replace:
                    conn.execute(
                        sa.update(WT).where(sa.and_(*(WT.c[name] == value for name, value in key.items())))
                        .values(**values)
                    )

    def window_tables(
        self,
        pipeline: str,
        *,
        target: str,
        table: str | None = None,
        window: tuple[datetime | str, datetime | str] | None = None,
        starting_from: datetime | str | None = None,
    ) -> list[WindowTableRecord]:
        """The recorded window tables of the pipeline's ``target`` (of one table; of one window
        ``(start, end)``; of the windows starting at or after ``starting_from``), in window order."""
        pipeline, target = validate_pipeline(pipeline), validate_target(target)
        query = sa.select(WT).where((WT.c.pipeline == pipeline) & (WT.c.target == target))
        if table is not None:
            query = query.where(WT.c.table_name == validate_identifier(table, "table"))
        if window is not None:
            _pipeline, start_us, end_us = window_key(pipeline, *window)
            query = query.where((WT.c.window_start_us == start_us) & (WT.c.window_end_us == end_us))
        if starting_from is not None:
            query = query.where(WT.c.window_start_us >= timestamp_micros(starting_from, "starting_from"))
        with self._tx() as conn:
            rows = conn.execute(query.order_by(WT.c.window_end_us, WT.c.table_name))
            return [
                WindowTableRecord(r.table_name, from_micros(r.window_start_us), from_micros(r.window_end_us),
                                  r.target_version, r.rows)
                for r in rows
            ]

    def table_versions(
        self, pipeline: str, *, target: str | None, before: datetime | str | None = None
    ) -> TableVersions:
        """Per table of ``target``, the version (window end in µs) of the last applied window
        recorded for it; with ``before``, of the last one ending at or before that time (what a
        window starting there finds in the tables once every window before it is applied). With
        ``target`` ``None``, of the last applied window any target recorded for the table (every target
        of a pipeline applies each window)."""
        pipeline = validate_pipeline(pipeline)
        target = None if target is None else validate_target(target)
        applied = (
            (W.c.pipeline == WT.c.pipeline)
            & (W.c.start_us == WT.c.window_start_us)
            & (W.c.end_us == WT.c.window_end_us)
            & (W.c.state == WindowState.APPLIED.value)
        )
        cond = (WT.c.pipeline == pipeline) & sa.exists().where(applied)
        if target is not None:
            cond = cond & (WT.c.target == target)
        if before is not None:
            cond = cond & (WT.c.window_end_us <= timestamp_micros(before, f"pipeline {pipeline!r}: before"))
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(WT.c.table_name, sa.func.max(WT.c.window_end_us))
                .where(cond)
                .group_by(WT.c.table_name)
            )
            tables = {name: int(version) for name, version in rows}
            recorded = self._pipeline_row(conn, pipeline)
        recorded_from = None
        if recorded is not None and recorded.tables_recorded_from is not None:
            recorded_from = timestamp_micros(recorded.tables_recorded_from, "tables recorded from")
        return TableVersions(tables, recorded_from)
