"""A whole Datastream stream planned over consecutive arrival windows, with its truth per window.

:class:`DatastreamScenario` runs a seeded :mod:`history <.history>` and delivers it the way Datastream
does: CDC files a few seconds behind the source; backfill files in the backfill-start minute folder
arriving over several windows while CDC runs; a block of CDC events delivered windows late into their
old minute folders (a backlog after a pause); events re-delivered in later files with their ``uuid``
(at-least-once); a column added to ``shop_customers`` mid-window (a new file); primary-key changes,
deletes and re-inserts. Windows are ``[start + i*window_seconds, start + (i+1)*window_seconds)`` of
file arrival (Cloud Storage ``timeCreated``)::

    scenario = DatastreamScenario("mysql", "avro", seed=7, windows=3)
    for i, (start, end) in enumerate(scenario.windows):
        written = scenario.write_window(i, LocalFolderSink(root))
        expected = scenario.truth_after(i)
"""

from __future__ import annotations

import dataclasses
import random
from datetime import datetime, timedelta, timezone
from typing import Any

from .history import (
    ADDED_COLUMN,
    CDC_READ_METHODS,
    CUSTOMERS,
    DEFAULT_STREAM_NAME,
    ORDERS,
    DatastreamEvent,
    SourceHistory,
    Truth,
    generate_history,
    truth,
)
from .writer import FORMATS, DatastreamFile, Sink, WrittenFile, plan_files, write_file

DEFAULT_START = datetime(2024, 5, 9, 6, 0, tzinfo=timezone.utc)
LATE_TASK = 1  # the writer task that delivers the backlog
REDELIVERY_TASK = 2  # the writer task that re-delivers events after a restart


class DatastreamScenario:
    """A seeded Datastream stream of one source database over ``windows`` arrival windows."""

    def __init__(
        self,
        database: str,
        file_format: str = "avro",
        seed: int = 0,
        windows: int = 3,
        window_seconds: int = 60,
        events_per_window: int = 200,
        start: datetime = DEFAULT_START,
        *,
        rotation_seconds: float = 15,
        rotation_mb: float = 250,
        duplicate_fraction: float = 0.03,
        stream_name: str = DEFAULT_STREAM_NAME,
        mysql_gtid: bool = False,
        postgres_read_method: str = CDC_READ_METHODS["postgresql"],
        source_timestamps_with_zone: bool = False,
    ) -> None:
        if file_format not in FORMATS:
            raise ValueError(
                f"unknown Datastream file format {file_format!r}; expected one of {', '.join(FORMATS)}"
            )
        if windows < 1 or window_seconds < 30:
            raise ValueError(
                f"a scenario needs at least one window of 30 s or more (got {windows} × {window_seconds} s)"
            )
        if start.tzinfo is None:
            raise ValueError(
                f"scenario start {start.isoformat()} has no time zone; pass an aware UTC datetime"
            )
        self.database = database
        self.file_format = file_format
        self.seed = seed
        self.window_seconds = window_seconds
        self.start = start.astimezone(timezone.utc)
        width = timedelta(seconds=window_seconds)
        self.windows: list[tuple[datetime, datetime]] = [
            (self.start + i * width, self.start + (i + 1) * width) for i in range(windows)
        ]
        self.end = self.windows[-1][1]
        # the last moment an event may be read so that its file (closed after at most one rotation
        # interval, then uploaded within 2 s) still arrives inside the last window
        self._last_read = self.end - timedelta(seconds=rotation_seconds + 3)
        total = windows * window_seconds
        cdc_seconds = total - rotation_seconds - 8
        backfill_at = self.start + timedelta(seconds=min(20, window_seconds / 3))
        backfill_read = min(2.5 * window_seconds, (self._last_read - backfill_at).total_seconds() - 1)
        middle = min(windows // 2, windows - 1)
        schema_change_at = self.start + timedelta(seconds=(middle + 0.5) * window_seconds)
        if schema_change_at <= backfill_at:
            schema_change_at = backfill_at + timedelta(seconds=2)
        initial_rows = max(6, events_per_window // 5)
        self.history: SourceHistory = generate_history(
            database,
            seed,
            start=self.start,
            cdc_seconds=cdc_seconds,
            cdc_events=max(10, events_per_window * windows - initial_rows),
            initial_rows=initial_rows,
            backfill_at=backfill_at,
            backfill_read_seconds=backfill_read,
            schema_change_at=schema_change_at,
            stream_name=stream_name,
            mysql_gtid=mysql_gtid,
            postgres_read_method=postgres_read_method,
        )
        self._rng = random.Random(f"datastream-delivery:{database}:{seed}")
        delivered = self._deliver(self.history.events, duplicate_fraction)
        self.files: list[DatastreamFile] = plan_files(
            database,
            delivered,
            file_format=file_format,
            rotation_seconds=rotation_seconds,
            rotation_mb=rotation_mb,
            upload_delay=self._upload_delay,
            mysql_gtid=mysql_gtid,
            source_timestamps_with_zone=source_timestamps_with_zone,
        )
        for planned in self.files:
            if not self.start <= planned.arrival < self.end:
                raise AssertionError(f"file {planned.path} arrives at {planned.arrival} outside the scenario")

    # --- delivery --------------------------------------------------------------------------------

    def _upload_delay(self, planned: DatastreamFile) -> timedelta:
        return timedelta(milliseconds=self._rng.randint(150, 1800))

    def _deliver(self, events: list[DatastreamEvent], duplicate_fraction: float) -> list[DatastreamEvent]:
        """The history's events as Datastream delivers them: a late backlog and re-deliveries added."""
        rng = self._rng
        width = timedelta(seconds=self.window_seconds)
        delivered = list(events)
        late: set[int] = set()
        if len(self.windows) >= 2:
            # a backlog: shop_orders CDC events read in an 8 s span of window 0 are delivered windows later
            begin = self.start + 0.3 * width
            span_end = begin + timedelta(seconds=8)
            shift = width * (len(self.windows) - 1)
            while shift > timedelta(0) and span_end + shift > self._last_read:
                shift -= width
            if shift > timedelta(0):
                for index, event in enumerate(delivered):
                    if (
                        event.object_name == ORDERS.object_name
                        and not event.is_backfill
                        and begin <= event.read_timestamp < span_end
                    ):
                        delivered[index] = dataclasses.replace(
                            event, read_timestamp=event.read_timestamp + shift, task=LATE_TASK
                        )
                        late.add(index)
        duplicates = []
        for index, event in enumerate(delivered):
            if index in late or event.is_backfill or rng.random() >= duplicate_fraction:
                continue
            again = event.read_timestamp + timedelta(seconds=rng.uniform(20, self.window_seconds))
            if again <= self._last_read:
                duplicates.append(dataclasses.replace(event, read_timestamp=again, task=REDELIVERY_TASK))
        return delivered + duplicates

    # --- the stream ------------------------------------------------------------------------------

    def files_for(self, window: int) -> list[DatastreamFile]:
        """The files planned to arrive in window ``window`` (by arrival time)."""
        start, end = self._window(window)
        return [planned for planned in self.files if start <= planned.arrival < end]

    def write_window(self, window: int, sink: Sink) -> list[WrittenFile]:
        """Write the files of window ``window`` through ``sink`` in arrival order."""
        return [write_file(planned, sink) for planned in self.files_for(window)]

    def events_after(self, window: int) -> list[DatastreamEvent]:
        """Every event in files arriving in windows ``0..window``."""
        end = self._window(window)[1]
        return [event for planned in self.files if planned.arrival < end for event in planned.events]

    def truth_after(self, window: int) -> Truth:
        """Table state from every event in files arriving in windows ``0..window``, backfill events
        below log events (what a consumer of Datastream's ordering rule holds; see :func:`.truth`)."""
        return truth(self.events_after(window), backfill_below_log_events=True)

    def final_truth(self) -> Truth:
        """Table state from every delivered event (equals the source's final state)."""
        return truth(event for planned in self.files for event in planned.events)

    def final_state(self) -> Truth:
        return self.history.final_state()

    def jsonl_column_types(self) -> dict[str, dict[str, str]]:
        """The column types a user declares for JSONL columns whose type JSON cannot carry (decimals,
        timestamps, JSON text, columns that may be all ``null``)."""
        return {
            CUSTOMERS.object_name: {
                "balance": "NUMERIC",
                "updated_at": "TIMESTAMP",
                "notes": "STRING",
                ADDED_COLUMN: "STRING",
            },
            ORDERS.object_name: {"attributes": "JSON"},
        }

    def _window(self, window: int) -> tuple[datetime, datetime]:
        if not 0 <= window < len(self.windows):
            raise IndexError(f"window {window} is outside the scenario's {len(self.windows)} windows")
        return self.windows[window]

    def describe(self) -> dict[str, Any]:
        """Counts per window, for logs and benchmarks."""
        return {
            "database": self.database,
            "format": self.file_format,
            "windows": [
                {"files": len(self.files_for(i)), "events": sum(len(f.events) for f in self.files_for(i))}
                for i in range(len(self.windows))
            ],
        }
