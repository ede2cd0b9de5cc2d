"""Windows of a pipeline: ``[start, end)`` of one change stream, ``reading`` → ``applied``.

A window moves forward only, by compare-and-set on its state (and, after ``reopen_window``, on
its attempt number, which fences a stale run out).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.expression import ColumnElement

from airflow_provider_cdc.metastore.engine import MetastoreEngine
from airflow_provider_cdc.metastore.errors import WindowConflictError, WindowNotFoundError
from airflow_provider_cdc.metastore.mappers import to_window, window_bounds
from airflow_provider_cdc.metastore.model import (
    WindowRecord,
    WindowState,
    is_forward_window_transition,
    validate_count,
    validate_pipeline,
    validate_stream,
    window_state,
)
from airflow_provider_cdc.metastore.schema import windows as W


def window_key(pipeline: str, start: datetime | str, end: datetime | str) -> tuple[str, int, int]:
    """The validated pipeline id and the window's start and end in microseconds."""
    pipeline = validate_pipeline(pipeline)
    return pipeline, *window_bounds(start, end, f"pipeline {pipeline!r}")


def window_cond(pipeline: str, start_us: int, end_us: int) -> ColumnElement:
    """The window's row."""
    return (W.c.pipeline == pipeline) & (W.c.start_us == start_us) & (W.c.end_us == end_us)


def window_row(conn: Connection, pipeline: str, start_us: int, end_us: int) -> Mapping[str, Any]:
    """The window's row (``WindowNotFoundError`` if unknown)."""
    row = conn.execute(sa.select(W).where(window_cond(pipeline, start_us, end_us))).first()
    if row is None:
        raise WindowNotFoundError(pipeline, f"{start_us}-{end_us}")
    return row._mapping


def reopened_values(now: Any) -> dict[str, Any]:
    """A window opened again: back to ``reading`` in the next epoch (attempt), the previous epoch's
    counts, change set and applied time cleared."""
    return {
        "state": WindowState.READING.value,
        "attempt": W.c.attempt + 1,
        "opened_us": now,
        "updated_us": now,
        "applied_us": None,
        "change_set_uri": None,
        "record_count": None,
        "transaction_count": None,
        "key_count": None,
        **NO_ERROR,
    }


#: A window's recorded failure cleared (it was applied, opened again, or the task that failed succeeded).
NO_ERROR: dict[str, Any] = dict.fromkeys(("last_error", "last_error_task", "last_error_try", "last_error_us"))

#: The most of an error's text a window keeps (its first lines).
MAX_ERROR_LENGTH = 4_000


class WindowAccess(MetastoreEngine):
    """Open, move forward, re-open and read the windows of a pipeline."""

    def open_window(
        self,
        pipeline: str,
        stream: str,
        start: datetime | str,
        end: datetime | str,
        *,
        staging_uri: str | None = None,
        reopen: bool = False,
    ) -> WindowRecord:
        """Record the window in state ``reading`` unless it exists; return the recorded window.

        An existing window is returned as it is (its state tells a retry what is left to do), or
        with ``reopen`` re-opened in the same transaction (as :meth:`reopen_window`: every opening
        of a window is an epoch of its own); one recorded for another stream raises
        ``WindowConflictError``.
        """
        pipeline, start_us, end_us = window_key(pipeline, start, end)
        stream = validate_stream(stream)
        with self._tx(write=True) as conn:
            now = self._clock_now()
            inserted = self._insert_if_absent(
                conn,
                W,
                {
                    "pipeline": pipeline,
                    "start_us": start_us,
                    "end_us": end_us,
                    "stream": stream,
                    "state": WindowState.READING.value,
                    "attempt": 1,
                    "staging_uri": staging_uri,
                    "opened_us": now,
                    "updated_us": now,
                },
            )
            record = to_window(window_row(conn, pipeline, start_us, end_us))
            if record.stream != stream:
                raise WindowConflictError(
                    pipeline,
                    record.window_id,
                    f"recorded for change stream {record.stream!r}, not {stream!r}",
                )
            if reopen and not inserted:
                self._update_one(conn, W, window_cond(pipeline, start_us, end_us), **reopened_values(now))
                record = to_window(window_row(conn, pipeline, start_us, end_us))
            return record

    def transition_window(
        self,
        pipeline: str,
        start: datetime | str,
        end: datetime | str,
        expected: WindowState | str,
        new: WindowState | str,
        *,
        attempt: int | None = None,
        staging_uri: str | None = None,
        change_set_uri: str | None = None,
        record_count: int | None = None,
        transaction_count: int | None = None,
        key_count: int | None = None,
    ) -> bool:
        """Move the window from ``expected`` forward to ``new``; False if it is not in ``expected``.

        ``attempt`` fences a stale run out after ``reopen_window``. Given fields are stored with the
        transition, and reaching ``applied`` sets the window's applied time.
        """
        pipeline, start_us, end_us = window_key(pipeline, start, end)
        expected, new = window_state(expected, "expected window state"), window_state(new, "new window state")
        if not is_forward_window_transition(expected, new):
            raise WindowConflictError(
                pipeline,
                f"{start_us}-{end_us}",
                f"a window only moves forward (reading → applied), not {expected.value} → {new.value}",
            )
        now = self._clock_now()
        values: dict[str, Any] = {"state": new.value, "updated_us": now}
        if new is WindowState.APPLIED:
            values["applied_us"] = now
            values.update(NO_ERROR)
        for name, value in (
            ("record_count", record_count),
            ("transaction_count", transaction_count),
            ("key_count", key_count),
        ):
            if validate_count(name, value) is not None:
                values[name] = value
        if staging_uri is not None:
            values["staging_uri"] = staging_uri
        if change_set_uri is not None:
            values["change_set_uri"] = change_set_uri
        cond = window_cond(pipeline, start_us, end_us) & (W.c.state == expected.value)
        if attempt is not None:
            cond = cond & (W.c.attempt == validate_count("attempt", attempt))
        with self._tx(write=True) as conn:
            moved = self._update_one(conn, W, cond, **values)
            if not moved:
                window_row(conn, pipeline, start_us, end_us)
            return moved

    def reopen_window(
        self,
        pipeline: str,
        start: datetime | str,
        end: datetime | str,
        *,
        expected: WindowState | str | None = None,
    ) -> WindowRecord:
        """Re-open a window for a re-run: back to ``reading`` with the next attempt number.

        Counts, change set and applied time of the previous attempt are cleared. With
        ``expected`` the window must be in that state (else ``WindowConflictError``).
        """
        pipeline, start_us, end_us = window_key(pipeline, start, end)
        cond = window_cond(pipeline, start_us, end_us)
        if expected is not None:
            expected = window_state(expected, "expected window state")
            cond = cond & (W.c.state == expected.value)
        now = self._clock_now()
        with self._tx(write=True) as conn:
            reopened = self._update_one(conn, W, cond, **reopened_values(now))
            record = to_window(window_row(conn, pipeline, start_us, end_us))
            if not reopened:
                raise WindowConflictError(
                    pipeline,
                    record.window_id,
                    f"is {record.state.value}, not {expected.value if expected else ''}",
                )
            return record

    def get_window(self, pipeline: str, start: datetime | str, end: datetime | str) -> WindowRecord:
        """The recorded window (``WindowNotFoundError`` if unknown)."""
        pipeline, start_us, end_us = window_key(pipeline, start, end)
        with self._tx() as conn:
            return to_window(window_row(conn, pipeline, start_us, end_us))

    def list_windows(self, pipeline: str, *, state: WindowState | str | None = None) -> list[WindowRecord]:
        """The pipeline's windows in start order, optionally only those in ``state``."""
        pipeline = validate_pipeline(pipeline)
        query = sa.select(W).where(W.c.pipeline == pipeline)
        if state is not None:
            query = query.where(W.c.state == window_state(state).value)
        with self._tx() as conn:
            return [to_window(r._mapping) for r in conn.execute(query.order_by(W.c.start_us, W.c.end_us))]

    def record_window_error(
        self,
        pipeline: str,
        start: datetime | str,
        end: datetime | str,
        error: str,
        *,
        task: str | None = None,
        try_number: int | None = None,
        epoch: int | None = None,
    ) -> bool:
        """Record ``error`` (its first lines, as given: redact credentials first) as the last failure of
        the window, met by ``task`` (``dag/run/task/map_index``) in try ``try_number``; with ``epoch``
        only while that is the window's epoch. False: no such window (in that epoch), or it is applied."""
        pipeline, start_us, end_us = window_key(pipeline, start, end)
        if not isinstance(error, str) or not error.strip():
            raise ValueError("a window's error needs its text")
        if task is not None and (not isinstance(task, str) or not task.isprintable()):
            raise ValueError(f"invalid task instance {task!r}: expected printable text")
        cond = window_cond(pipeline, start_us, end_us) & (W.c.state != WindowState.APPLIED.value)
        if epoch is not None:
            cond = cond & (W.c.attempt == validate_count("epoch", epoch))
        values = {
            "last_error": error[:MAX_ERROR_LENGTH],
            "last_error_task": task,
            "last_error_try": validate_count("try number", try_number),
            "last_error_us": self._clock_now(),
        }
        with self._tx(write=True) as conn:
            return self._update_one(conn, W, cond, **values)

    def clear_window_error(
        self, pipeline: str, start: datetime | str, end: datetime | str, task: str
    ) -> bool:
        """Forget the window's recorded failure if ``task`` met it (a later try of that task succeeded);
        True when one was cleared."""
        pipeline, start_us, end_us = window_key(pipeline, start, end)
        cond = window_cond(pipeline, start_us, end_us) & (W.c.last_error_task == task)
        with self._tx(write=True) as conn:
            return self._update_one(conn, W, cond, **NO_ERROR)
