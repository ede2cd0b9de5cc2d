"""A bulk workload for benchmarks: many rows per commit, compact ground truth."""

from __future__ import annotations

import logging
import random
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from google.cloud.spanner_v1 import KeySet

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, coerce_timestamp, to_micros

from .schema import BULK_TABLE
from .truth import EmulatorControl, PartitionEvent, WorkloadSummary

log = logging.getLogger(__name__)

_BULK_KINDS = ("debit", "credit", "fee", "refund")
_BULK_SHARDS = 64


@dataclass(frozen=True)
class BulkCommit:
    """One bulk commit: its timestamp and how many rows it inserted, updated and deleted."""

    commit_timestamp: datetime
    inserts: int
    updates: int
    deletes: int

    @property
    def changes(self) -> int:
        return self.inserts + self.updates + self.deletes


class BulkWorkload:
    """Many rows per commit into :data:`BULK_TABLE`, for benchmarks (millions of changes).

    Row ``n`` at revision ``r`` has values derived from ``(n, r)`` (:meth:`row`), so the ground
    truth is one revision number per entry; inserts write every column, updates write ``Amount``,
    ``Kind``, ``Revision`` and ``Memo`` (all of which change with the revision), deletes remove rows.
    """

    def __init__(
        self,
        database: Any,
        emulator: EmulatorControl | None = None,
        seed: int = 0,
        *,
        update_share: float = 0.25,
        delete_share: float = 0.05,
        progress_every: int = 100_000,
    ) -> None:
        if update_share < 0 or delete_share < 0 or update_share + delete_share >= 1:
            raise ValueError("update_share and delete_share must be non-negative and sum to less than 1")
        self.database = database
        self.emulator = emulator
        self.seed = seed
        self.update_share = update_share
        self.delete_share = delete_share
        self.progress_every = progress_every
        self._rng = random.Random(seed)
        self._revisions = array("q")  # per entry: revision, or -1 once deleted
        self._live = 0
        self.commits: list[BulkCommit] = []
        self.partition_events: list[PartitionEvent] = []
        self.change_count = 0

    @staticmethod
    def key(entry: int) -> tuple[int, int]:
        return (entry % _BULK_SHARDS, entry)

    @staticmethod
    def row(entry: int, revision: int) -> dict[str, Any]:
        """The full row of entry ``entry`` at ``revision``."""
        cents = entry * 7 + revision * 13 + 1
        return {
            "Shard": entry % _BULK_SHARDS,
            "EntryId": entry,
            "Amount": Decimal(cents).scaleb(-2),
            "Kind": _BULK_KINDS[(entry + revision) % len(_BULK_KINDS)],
            "Revision": revision,
            "Memo": f"entry {entry} revision {revision}",
        }

    @property
    def row_count(self) -> int:
        return self._live

    def rows(self) -> Iterator[dict[str, Any]]:
        """Current rows, in entry order (generated lazily)."""
        for entry, revision in enumerate(self._revisions):
            if revision >= 0:
                yield self.row(entry, revision)

    def changes_between(self, start: datetime, end: datetime) -> int:
        """Number of mods committed in ``[start, end)``."""
        low, high = to_micros(coerce_timestamp(start)), to_micros(coerce_timestamp(end))
        return sum(c.changes for c in self.commits if low <= to_micros(c.commit_timestamp) < high)

    def run(
        self,
        changes: int,
        rows_per_commit: int = 1_000,
        step: timedelta = timedelta(seconds=1),
        split_every: int | None = None,
        merge_every: int | None = None,
    ) -> WorkloadSummary:
        """Commit ``changes`` mods, ``rows_per_commit`` per commit; splits/merges as in :class:`Workload`."""
        if changes < 1 or rows_per_commit < 1:
            raise ValueError("changes and rows_per_commit must be at least 1")
        for name, value in (("split_every", split_every), ("merge_every", merge_every)):
            if value is not None and (value < 1 or self.emulator is None):
                raise ValueError(f"{name} must be at least 1 and needs an emulator")
        started = time.monotonic()
        base = self.change_count
        target = base + changes
        first_index = len(self.commits)
        next_split = base + split_every if split_every else None
        next_merge = base + merge_every + merge_every // 2 if merge_every else None
        next_progress = base + self.progress_every
        events_before = len(self.partition_events)
        clock = getattr(self.emulator, "clock", None)
        while self.change_count < target:
            if clock is not None and hasattr(clock, "advance"):
                clock.advance(step)
            self._commit_bulk(min(rows_per_commit, target - self.change_count))
            while next_split is not None and self.change_count >= next_split:
                self._partition_event("split")
                next_split += split_every or 0
            while next_merge is not None and self.change_count >= next_merge:
                self._partition_event("merge")
                next_merge += merge_every or 0
            if self.change_count >= next_progress:
                next_progress += self.progress_every
                elapsed = max(time.monotonic() - started, 1e-9)
                done = self.change_count - base
                log.info("bulk workload: %d/%d changes, %.0f changes/s", done, changes, done / elapsed)
        new = self.commits[first_index:]
        events = self.partition_events[events_before:]
        return WorkloadSummary(
            changes=self.change_count - base,
            transactions=len(new),
            splits=sum(1 for event in events if event.kind == "split"),
            merges=sum(1 for event in events if event.kind == "merge"),
            first_commit=new[0].commit_timestamp if new else None,
            last_commit=new[-1].commit_timestamp if new else None,
            elapsed_seconds=time.monotonic() - started,
        )

    def _partition_event(self, kind: str) -> None:
        assert self.emulator is not None
        clock = self.emulator.clock
        if hasattr(clock, "advance"):
            clock.advance(ONE_MICROSECOND)
        if kind == "split":
            self.emulator.split_partition(self.database.name)
        else:
            self.emulator.merge_partitions(self.database.name)
        self.partition_events.append(PartitionEvent(kind, coerce_timestamp(clock.now())))

    def _pick_live(self, taken: set[int]) -> int | None:
        total = len(self._revisions)
        for _ in range(8):
            entry = self._rng.randrange(total)
            if self._revisions[entry] >= 0 and entry not in taken:
                return entry
        return None

    def _commit_bulk(self, size: int) -> None:
        rng = self._rng
        inserts: list[int] = []
        updates: list[int] = []
        deletes: list[int] = []
        taken: set[int] = set()
        next_entry = len(self._revisions)
        for _ in range(size):
            roll = rng.random()
            entry = None
            if self._live > len(taken) + 1 and roll < self.update_share + self.delete_share:
                entry = self._pick_live(taken)
            if entry is None:
                inserts.append(next_entry)
                next_entry += 1
                continue
            taken.add(entry)
            (updates if roll < self.update_share else deletes).append(entry)
        table = BULK_TABLE
        with self.database.batch() as batch:
            if inserts:
                rows = [self.row(entry, 0) for entry in inserts]
                batch.insert(
                    table.name, columns=list(table.column_names), values=[list(r.values()) for r in rows]
                )
            if updates:
                columns = ["Shard", "EntryId", "Amount", "Kind", "Revision", "Memo"]
                values = []
                for entry in updates:
                    row = self.row(entry, self._revisions[entry] + 1)
                    values.append([row[name] for name in columns])
                batch.update(table.name, columns=columns, values=values)
            if deletes:
                batch.delete(table.name, KeySet(keys=[list(self.key(entry)) for entry in deletes]))
        if batch.committed is None:
            raise RuntimeError("the bulk commit returned no commit timestamp")
        for _ in inserts:
            self._revisions.append(0)
        for entry in updates:
            self._revisions[entry] += 1
        for entry in deletes:
            self._revisions[entry] = -1
        self._live += len(inserts) - len(deletes)
        commit = BulkCommit(coerce_timestamp(batch.committed), len(inserts), len(updates), len(deletes))
        self.commits.append(commit)
        self.change_count += commit.changes
