"""Read-only views of pipelines for people (the provider's pages in the Airflow UI).

Every query here is bounded whatever the number of windows a pipeline has: a page of windows is a
keyset on the window's key ``(pipeline, start, end)`` (the primary key), a pipeline's last applied
and oldest reading windows are one seek each on the index ``(pipeline, state, start)``, and the
units in flight are those of the windows still reading. Nothing here writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa

from airflow_provider_cdc.core.timestamps import from_micros, to_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore.engine import MetastoreEngine, chunks
from airflow_provider_cdc.metastore.mappers import to_window, to_window_partition
from airflow_provider_cdc.metastore.model import (
    WindowPartitionRecord,
    WindowPartitionState,
    WindowRecord,
    WindowState,
    validate_pipeline,
)
from airflow_provider_cdc.metastore.schema import pipelines as PL
from airflow_provider_cdc.metastore.schema import table_watermarks as TW
from airflow_provider_cdc.metastore.schema import window_partitions as WP
from airflow_provider_cdc.metastore.schema import windows as W

#: Windows on one page unless asked for another number; at most ``MAX_PAGE``.
DEFAULT_PAGE = 50
MAX_PAGE = 500


@dataclass(frozen=True)
class PipelineSummary:
    """Where a pipeline stands: its newest window, the last one applied and the first still reading."""

    pipeline: str
    first_window_start: datetime | None
    newest: WindowRecord | None
    last_applied: WindowRecord | None
    #: the reading window that starts first: the one the pipeline waits for
    oldest_reading: WindowRecord | None
    reading: int
    #: the targets (their registered names) that hold apply watermarks of the pipeline
    targets: tuple[str, ...]


@dataclass(frozen=True)
class WindowPage:
    """Windows of a pipeline, newest first, with the cursors (window ids) of the pages beside it."""

    windows: tuple[WindowRecord, ...]
    #: the cursor of the page of newer windows (``None``: this is the newest page)
    newer: str | None
    #: the cursor of the page of older windows (``None``: no window is older)
    older: str | None


@dataclass(frozen=True)
class TableApply:
    """One table's apply watermark in one target: changes committed before it are applied."""

    target: str
    table: str
    watermark: datetime
    updated_at: datetime


@dataclass(frozen=True)
class UnitsInFlight:
    """The units (partitions, shards, files) of the pipeline's reading windows that are not done."""

    units: tuple[WindowPartitionRecord, ...]
    #: more units than ``units`` are not done
    more: bool
    #: per reading window (its window id): how many of its units are in each state
    states: dict[str, dict[str, int]] = field(default_factory=dict)


def cursor_bounds(cursor: str) -> tuple[int, int]:
    """The window start and end (µs) a page cursor (a window id) names; ``ValueError`` otherwise."""
    window = Window.from_window_id(cursor)
    return to_micros(window.start), to_micros(window.end)


def _window_id(record: WindowRecord) -> str:
    return record.window_id


def _given(pipelines: list[str]) -> sa.Subquery:
    """The pipelines as rows of a subquery ``given(pipeline)``, each a bound parameter."""
    names = sa.union_all(*(sa.select(sa.literal(name, sa.String()).label("pipeline")) for name in pipelines))
    return names.subquery("given")


def _edges(pipelines: list[str]) -> sa.Select:
    """Per pipeline (one row each): the start of its newest window, of its last applied one and of
    its oldest reading one, each a scalar subquery the index answers with one seek."""
    given = _given(pipelines)

    def edge(function: sa.sql.functions.Function, state: WindowState | None) -> sa.ScalarSelect:
        cond = W.c.pipeline == given.c.pipeline
        if state is not None:
            cond = cond & (W.c.state == state.value)
        return sa.select(function).where(cond).scalar_subquery()

    return sa.select(
        given.c.pipeline,
        edge(sa.func.max(W.c.start_us), None),
        edge(sa.func.max(W.c.start_us), WindowState.APPLIED),
        edge(sa.func.min(W.c.start_us), WindowState.READING),
    )


class OverviewAccess(MetastoreEngine):
    """Pages, summaries and series of pipelines for people; bounded queries only (see the module)."""

    def known_pipelines(self, candidates: Iterable[str]) -> set[str]:
        """Those of ``candidates`` the metastore knows: recorded, or with a recorded window."""
        names = sorted({validate_pipeline(name) for name in candidates})
        known: set[str] = set()
        with self._tx() as conn:
            for part in chunks(names):
                given = _given(part)
                recorded = sa.exists().where(PL.c.pipeline == given.c.pipeline)
                windowed = sa.exists().where(W.c.pipeline == given.c.pipeline)  # one index seek each
                known.update(conn.execute(sa.select(given.c.pipeline).where(recorded | windowed)).scalars())
        return known

    def pipeline_summaries(self, pipelines: Iterable[str]) -> dict[str, PipelineSummary]:
        """Per pipeline: its first window, newest, last applied and oldest reading windows, how many
        windows are reading, its targets. Five statements per 500 pipelines, each an index seek or
        range per pipeline."""
        names = sorted({validate_pipeline(name) for name in pipelines})
        firsts: dict[str, datetime] = {}
        edges: dict[str, tuple[int | None, int | None, int | None]] = {}
        windows: dict[tuple[str, int], WindowRecord] = {}
        reading: Counter[str] = Counter()
        targets: dict[str, set[str]] = {}
        with self._tx() as conn:
            for part in chunks(names):
                for row in conn.execute(
                    sa.select(PL.c.pipeline, PL.c.first_window_start_us).where(PL.c.pipeline.in_(part))
                ):
                    firsts[row[0]] = from_micros(row[1])
                for name, newest, applied, oldest_reading in conn.execute(_edges(part)):
                    edges[name] = (newest, applied, oldest_reading)
                keys = {(name, at) for name, bounds in edges.items() for at in bounds if at is not None}
                if keys:
                    for row in conn.execute(
                        sa.select(W).where(sa.tuple_(W.c.pipeline, W.c.start_us).in_(sorted(keys)))
                    ):
                        record = to_window(row._mapping)
                        held = windows.get((record.pipeline, row.start_us))
                        if held is None or held.end < record.end:  # two windows of one start: the longer
                            windows[(record.pipeline, row.start_us)] = record
                for name, number in conn.execute(
                    sa.select(W.c.pipeline, sa.func.count())
                    .where(W.c.pipeline.in_(part) & (W.c.state == WindowState.READING.value))
                    .group_by(W.c.pipeline)
                ):
                    reading[name] = int(number)
                for name, target in conn.execute(
                    sa.select(TW.c.pipeline, TW.c.target).where(TW.c.pipeline.in_(part)).distinct()
                ):
                    targets.setdefault(name, set()).add(target)

        def window(name: str, which: int) -> WindowRecord | None:
            start = edges.get(name, (None, None, None))[which]
            return None if start is None else windows.get((name, start))

        return {
            name: PipelineSummary(
                pipeline=name,
                first_window_start=firsts.get(name),
                newest=window(name, 0),
                last_applied=window(name, 1),
                oldest_reading=window(name, 2),
                reading=reading[name],
                targets=tuple(sorted(targets.get(name, ()))),
            )
            for name in names
        }

    def window_page(
        self,
        pipeline: str,
        *,
        older_than: str | None = None,
        newer_than: str | None = None,
        limit: int = DEFAULT_PAGE,
    ) -> WindowPage:
        """A page of the pipeline's windows, newest first: the newest ``limit``, those just older than
        the window ``older_than`` names, or those just newer than ``newer_than`` (cursors are window
        ids, as :class:`WindowPage` gives them)."""
        pipeline = validate_pipeline(pipeline)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"invalid page size {limit!r}: expected 1 to {MAX_PAGE} windows")
        if older_than is not None and newer_than is not None:
            raise ValueError("a page is older than one window or newer than one, not both")
        key = sa.tuple_(W.c.start_us, W.c.end_us)
        query = sa.select(W).where(W.c.pipeline == pipeline)
        with self._tx() as conn:
            if newer_than is not None:
                rows = conn.execute(
                    query.where(key > sa.tuple_(*cursor_bounds(newer_than)))
                    .order_by(W.c.start_us, W.c.end_us)
                    .limit(limit + 1)
                ).all()
                if len(rows) > limit:  # newer windows remain beyond this page
                    page = [to_window(r._mapping) for r in reversed(rows[:limit])]
                    return WindowPage(tuple(page), _window_id(page[0]), _window_id(page[-1]))
                older_than = None  # the newest windows: the first page
            if older_than is not None:
                query = query.where(key < sa.tuple_(*cursor_bounds(older_than)))
            rows = conn.execute(
                query.order_by(W.c.start_us.desc(), W.c.end_us.desc()).limit(limit + 1)
            ).all()
        page = [to_window(r._mapping) for r in rows[:limit]]
        newer = _window_id(page[0]) if older_than is not None and page else None
        older = _window_id(page[-1]) if len(rows) > limit else None
        return WindowPage(tuple(page), newer, older)

    def recent_windows(self, pipeline: str, limit: int = 200) -> list[WindowRecord]:
        """The pipeline's ``limit`` newest windows, oldest first (the series of its plots)."""
        pipeline = validate_pipeline(pipeline)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10 * MAX_PAGE:
            raise ValueError(f"invalid number of windows {limit!r}")
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(W)
                .where(W.c.pipeline == pipeline)
                .order_by(W.c.start_us.desc(), W.c.end_us.desc())
                .limit(limit)
            ).all()
        return [to_window(r._mapping) for r in reversed(rows)]

    def units_in_flight(self, pipeline: str, *, windows: int = 20, limit: int = 200) -> UnitsInFlight:
        """The units not done of the pipeline's newest ``windows`` reading windows (at most ``limit``,
        oldest window first), and how many units of each of those windows are in each state."""
        pipeline = validate_pipeline(pipeline)
        with self._tx() as conn:
            reading = conn.execute(
                sa.select(W.c.stream, W.c.start_us, W.c.end_us)
                .where((W.c.pipeline == pipeline) & (W.c.state == WindowState.READING.value))
                .order_by(W.c.start_us.desc())
                .limit(windows)
            ).all()
            if not reading:
                return UnitsInFlight((), False, {})
            keys = [tuple(row) for row in reading]
            of_windows = sa.tuple_(WP.c.stream, WP.c.window_start_us, WP.c.window_end_us).in_(keys)
            states: dict[str, dict[str, int]] = {}
            for _stream, start_us, end_us, state, count in conn.execute(
                sa.select(WP.c.stream, WP.c.window_start_us, WP.c.window_end_us, WP.c.state, sa.func.count())
                .where(of_windows)
                .group_by(WP.c.stream, WP.c.window_start_us, WP.c.window_end_us, WP.c.state)
            ):
                states.setdefault(f"{start_us}-{end_us}", {})[state] = int(count)
            rows = conn.execute(
                sa.select(WP)
                .where(of_windows & (WP.c.state != WindowPartitionState.DONE.value))
                .order_by(WP.c.window_start_us, WP.c.stream, WP.c.token)
                .limit(limit + 1)
            ).all()
        units = tuple(to_window_partition(r._mapping) for r in rows[:limit])
        return UnitsInFlight(units, len(rows) > limit, states)

    def apply_watermarks(self, pipeline: str) -> list[TableApply]:
        """Every table's apply watermark in every target of the pipeline, by target and table."""
        pipeline = validate_pipeline(pipeline)
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(TW.c.target, TW.c.table_name, TW.c.watermark_us, TW.c.updated_us)
                .where(TW.c.pipeline == pipeline)
                .order_by(TW.c.target, TW.c.table_name)
            ).all()
        return [TableApply(target, table, from_micros(mark), from_micros(updated))
                for target, table, mark, updated in rows]  # fmt: skip
