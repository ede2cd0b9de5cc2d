"""Rules that keep a pipeline's applies in order and its target in agreement with its ledger.

Pure functions over what the metastore and the target report; the metastore and the operators
raise with the messages they return.

* **Contiguity**: a window applies only when the pipeline's previous window (the one ending at its
  start) is applied, or when it is the pipeline's first window. A failed window is never skipped.
  A window that ends in the future is not run yet (:func:`future_window_problem` names the
  pipeline's last applied window and the next one to run).
* **Agreement**: before a window is applied, each target table must hold exactly the windows the
  metastore says were applied to it: its last applied window version (window end in µs) must be
  the one the metastore recorded. A table restored, rolled back or written by another pipeline
  with the same id stops the run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_cdc.core.timestamps import format_timestamp, from_micros
from airflow_provider_cdc.core.window import Window


def describe_window(window: Window) -> str:
    return f"[{format_timestamp(window.start)}, {format_timestamp(window.end)})"


def future_window_problem(
    pipeline: str,
    window: Window,
    now_us: int,
    last_applied: Window | None,
    first_window_start_us: int | None,
) -> str | None:
    """Why ``window`` cannot run now because it ends after ``now_us``, naming the pipeline's last
    applied window and the next one to run (windows of this one's length); None when it is over."""
    if window.end_micros <= now_us:
        return None
    length = window.end - window.start
    if last_applied is not None:
        following = Window(last_applied.end, last_applied.end + length)
        where = (
            f"its last applied window is {describe_window(last_applied)} and the next one to run is "
            f"{describe_window(following)}"
        )
    elif first_window_start_us is not None:
        first = Window(from_micros(first_window_start_us), from_micros(first_window_start_us) + length)
        where = f"no window of it is applied yet; the first one to run is {describe_window(first)}"
    else:
        where = "no window of it was run yet"
    return (
        f"window {describe_window(window)} of pipeline {pipeline!r} ends in the future (it is "
        f"{format_timestamp(from_micros(now_us))}): a window is read once it is over; {where}. Run the "
        f"windows in order up to now, or run this one after {format_timestamp(window.end)}"
    )


def predecessor_problem(
    pipeline: str,
    window: Window,
    first_window_start_us: int | None,
    predecessor: Window | None,
    predecessor_state: str | None,
    predecessor_attempt: int | None = None,
    *,
    now_us: int | None = None,
    last_applied: Window | None = None,
) -> str | None:
    """Why ``window`` may not apply yet, or None when it may.

    ``first_window_start_us`` is the pipeline's recorded first window start (None: no window of the
    pipeline recorded yet, so this one is the first); ``predecessor`` the recorded window ending at
    ``window.start`` with its state (None when no such window was ever opened). With ``now_us``, a
    window whose predecessor was never run because it lies in the future is told so
    (:func:`future_window_problem`, with ``last_applied``), not sent to run a window that cannot run.
    """
    start_us = window.start_micros
    if first_window_start_us is None or start_us == first_window_start_us:
        return None
    if start_us < first_window_start_us:
        return (
            f"window {describe_window(window)} of pipeline {pipeline!r} starts before the pipeline's first "
            f"window, which starts at {format_timestamp(from_micros(first_window_start_us))}; a pipeline's "
            "start does not move (use a new pipeline id to start earlier)"
        )
    if predecessor is not None and predecessor_state == "applied":
        return None
    if predecessor is None and now_us is not None:
        future = future_window_problem(pipeline, window, now_us, last_applied, first_window_start_us)
        if future is not None:
            return future
    if predecessor is None:
        waits = f"the window ending at {format_timestamp(window.start)}, which was never run"
    else:
        attempt = f", attempt {predecessor_attempt}" if predecessor_attempt else ""
        waits = f"window {describe_window(predecessor)}, which is {predecessor_state}{attempt}"
    return (
        f"window {describe_window(window)} of pipeline {pipeline!r} waits for {waits}: windows apply in "
        "order and none is skipped; run that window (it lets this one and the later ones go on), then "
        "this one again"
    )


@dataclass(frozen=True)
class TableVersions:
    """What the metastore says each target table of a pipeline holds.

    ``tables`` maps a table to the version (window end in µs) of the last applied window that
    changed it; ``recorded_from_us``: windows ending at or before it may have changed tables
    without being recorded (windows applied before the ledger existed).
    """

    tables: Mapping[str, int] = field(default_factory=dict)
    recorded_from_us: int | None = None

    def to_json(self) -> str:
        value = {"tables": dict(sorted(self.tables.items())), "recorded_from_us": self.recorded_from_us}
        return json.dumps(value, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> TableVersions:
        try:
            value: Any = json.loads(text)
            tables = {str(name): int(version) for name, version in dict(value["tables"]).items()}
            recorded = value.get("recorded_from_us")
            return cls(tables, None if recorded is None else int(recorded))
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise ValueError(f"expected table versions are not valid: {error}") from None


def version_problem(
    pipeline: str, table: str, found: int | None, window_version: int, expected: TableVersions
) -> str | None:
    """Why ``table`` may not receive window ``window_version``, or None.

    ``found`` is the table's last applied window version of the pipeline (its app transaction
    version), None when it holds none.
    """
    if found is not None and found == window_version:
        return None  # this very window is in the table already (its commit step did not run)
    recorded = expected.tables.get(table)
    if recorded is not None:
        if found == recorded:
            return None
        what = "no window of the pipeline" if found is None else f"window version {found}"
        return (
            f"table {table!r} holds {what} but the metastore's last window applied to it is version "
            f"{recorded} (pipeline {pipeline!r}): the table was restored, rolled back or written by "
            "someone else"
        )
    if found is None:
        return None
    if expected.recorded_from_us is not None and found <= expected.recorded_from_us:
        return None  # applied before windows were recorded per table
    return (
        f"table {table!r} holds window version {found} of pipeline {pipeline!r}, which the metastore never "
        "recorded for it: the table was written by another pipeline with the same id or another metastore"
    )


def previous_window_problem(
    pipeline: str,
    table: str,
    found: int | None,
    window_version: int,
    previous: int | None,
    recorded_from_us: int | None = None,
) -> str | None:
    """Why ``table`` may not receive window ``window_version`` when ``previous`` is the end of the last
    earlier window that changed it (``None``: none did), or None.

    A window that does not change a table leaves the table at an older window, so the table must
    hold exactly ``previous``: less means a window before this one was not applied to it. A table
    holding this window or a later one has it already (the apply skips it). ``recorded_from_us``:
    windows ending at or before it may have changed tables without being recorded.
    """
    if found is not None and found >= window_version:
        return None
    if found == previous:
        return None
    if previous is None and found is not None and recorded_from_us is not None and found <= recorded_from_us:
        return None
    held = "no window of the pipeline" if found is None else f"window version {found}"
    needs = (
        "no earlier window of the pipeline (none changed it)"
        if previous is None
        else f"window version {previous}, the last earlier window that changed it"
    )
    return (
        f"table {table!r} holds {held} of pipeline {pipeline!r} but window version {window_version} needs it "
        f"to hold {needs}: the windows before this one are not all applied to it"
    )
