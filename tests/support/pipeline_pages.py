"""Pipelines recorded through the Metastore API for the pipeline pages' tests: applied windows with
their counts and apply watermarks, and a last window still reading (its second attempt) with one unit
done and one held by a reader's lease."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.metastore import Metastore, PartitionSpec

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=10)
#: How long after its end a window opens, and applies (the first: 2 min 13 s; each next 30 s later).
OPENS_AFTER = timedelta(seconds=5)
FIRST_APPLIED_AFTER = timedelta(minutes=2, seconds=13)
READER = "reader-1@worker-b"


@dataclass(frozen=True)
class RecordedPipeline:
    pipeline: str
    stream: str
    windows: list[tuple[datetime, datetime]]
    applied: int
    #: rows of each applied window
    rows: list[int]
    tables: dict[str, list[str]]

    @property
    def reading(self) -> tuple[datetime, datetime] | None:
        """The last window when it is still reading."""
        return self.windows[-1] if len(self.windows) > self.applied else None


def applied_after(index: int) -> timedelta:
    return FIRST_APPLIED_AFTER + index * timedelta(seconds=30)


def window_rows(index: int) -> int:
    return 120 + 35 * index


def record_pipeline(
    store: Metastore,
    clock: object,
    pipeline: str,
    *,
    windows: int = 4,
    last_reading: bool = True,
    tables: dict[str, list[str]] | None = None,
    stream: str | None = None,
) -> RecordedPipeline:
    """Record ``pipeline``'s windows from ``T0`` on ``store``, whose clock (a ``ManualClock``) each step
    moves forward to when it happens (a clock already later stays where it is)."""
    stream = stream or f"projects/p/instances/i/databases/shop/{pipeline.title().replace('_', '')}Stream"
    tables = tables if tables is not None else {"delta": ["Customers", "Orders"], "bigquery": ["Orders"]}

    def at(when: datetime) -> None:
        clock.advance(max(0, to_micros(when) - clock()) / 1_000_000)  # type: ignore[operator, attr-defined]

    store.record_pipeline(pipeline, T0)
    store.add_partitions(stream, [PartitionSpec("token-a", T0), PartitionSpec("token-b", T0)])
    bounds, rows = [], []
    for index in range(windows):
        start, end = T0 + index * WINDOW, T0 + (index + 1) * WINDOW
        bounds.append((start, end))
        at(end + OPENS_AFTER)
        store.open_window(pipeline, stream, start, end, staging_uri=f"file:///staging/{pipeline}")
        store.add_window_partitions(stream, start, end, ["token-a", "token-b"])
        if last_reading and index == windows - 1:
            # the first attempt failed; the second is reading: one unit done, one held by a reader
            at(end + OPENS_AFTER + timedelta(minutes=1))
            store.open_window(pipeline, stream, start, end, reopen=True)
            owner = "reader-0@worker-a"
            token = store.claim_window_partition(stream, start, end, owner, 300)
            store.complete_window_partition(stream, start, end, token, owner, rows=40, transactions=4)
            store.claim_window_partition(stream, start, end, READER, 600)
            break
        for owner in ("reader-0@worker-a", "reader-1@worker-b"):
            token = store.claim_window_partition(stream, start, end, owner, 300)
            store.complete_window_partition(stream, start, end, token, owner, rows=10, transactions=1)
        at(end + applied_after(index))
        rows.append(window_rows(index))
        store.transition_window(
            pipeline, start, end, "reading", "applied",
            record_count=rows[-1], transaction_count=rows[-1] // 4, key_count=rows[-1] // 2,
        )  # fmt: skip
        for target, names in tables.items():
            for table in names:
                store.advance_table_watermark(pipeline, table, end, target=target)
    return RecordedPipeline(pipeline, stream, bounds, len(rows), rows, tables)
