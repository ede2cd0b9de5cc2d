"""A seeded Table Store workload written through the emulator's own calls, window by window, with the
table's state after each window as its truth.

Each window of ``window_seconds`` (on the emulator's manual clock) holds ``changes_per_window`` writes
to the table ``orders`` (key ``region`` STRING + ``order_id`` INTEGER): full puts, partial updates that
set some columns and delete others (``DELETE_ALL_VERSION``), row deletes, re-puts of deleted keys and
several writes of one key within a window. The shards split in the second window and two of them merge
in the third, so lineage is part of every stream the workload writes. :meth:`TablestoreWorkload.truth`
is the emulator's table state at a window's end (``TablestoreEmulator.rows``), which is what the target
must equal after the window.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

TABLE = "orders"
PRIMARY_KEY = (("region", "STRING"), ("order_id", "INTEGER"))
#: The attribute columns and their Table Store types (declared to the source: a deleted column has no
#: value to tell its type).
COLUMN_TYPES = {
    "amount": "DOUBLE",
    "quantity": "INTEGER",
    "status": "STRING",
    "paid": "BOOLEAN",
    "note": "STRING",
}
_REGIONS = ("amer", "emea", "apac")
_STATUSES = ("new", "paid", "shipped", "returned")


@dataclass
class TablestoreWorkload:
    """Writes a seeded history into ``emulator`` window by window (see the module)."""

    emulator: Any
    start: datetime
    window_seconds: int = 60
    changes_per_window: int = 120
    seed: int = 0
    truths: list[dict[tuple, dict[str, Any]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"tablestore-workload:{self.seed}")
        self.live: set[tuple[str, int]] = set()
        self.next_id = 1

    @property
    def stream_table(self) -> str:
        return TABLE

    def window(self, index: int) -> tuple[datetime, datetime]:
        width = timedelta(seconds=self.window_seconds)
        return self.start + index * width, self.start + (index + 1) * width

    def create(self) -> str:
        """Create the table with its stream at the workload's start; returns the stream id."""
        now_us = self.emulator.clock()
        start_us = int(self.start.timestamp() * 1_000_000)
        if now_us > start_us:
            raise ValueError("the emulator's clock is already past the workload's start")
        self.emulator.clock.advance((start_us - now_us) / 1_000_000)
        return self.emulator.create_table(TABLE, PRIMARY_KEY, expiration_hours=24)

    def write_window(self, index: int) -> dict[tuple, dict[str, Any]]:
        """Write window ``index`` (its changes spread over it, a split or merge in it), move the clock
        to its end and return the table's state then."""
        start, end = self.window(index)
        step = self.window_seconds / (self.changes_per_window + 2)
        clock = self.emulator.clock
        if clock() < int(start.timestamp() * 1_000_000):
            clock.advance((int(start.timestamp() * 1_000_000) - clock()) / 1_000_000)
        for change in range(self.changes_per_window):
            clock.advance(step)
            self._change()
            if change == self.changes_per_window // 2:
                self._reshard(index)
        end_us = int(end.timestamp() * 1_000_000)
        clock.advance(max(end_us - clock(), 0) / 1_000_000)
        truth = self.emulator.rows(TABLE)
        self.truths.append(truth)
        return truth

    def _reshard(self, index: int) -> None:
        open_shards = [s for s in self.emulator.shards(TABLE) if not s.get("closed")]
        if index == 1 and open_shards:
            self.emulator.split_shard(TABLE, open_shards[0]["shard_id"])
        elif index == 2 and len(open_shards) >= 2:
            ids = sorted(s["shard_id"] for s in open_shards)
            try:
                self.emulator.merge_shards(TABLE, ids[0], ids[1])
            except Exception:  # shards that are not adjacent: merge the other pair
                self.emulator.merge_shards(TABLE, ids[-2], ids[-1])

    def _columns(self) -> dict[str, Any]:
        rng = self.rng
        return {
            "amount": round(rng.uniform(1, 5000), 2),
            "quantity": rng.randint(1, 40),
            "status": rng.choice(_STATUSES),
            "paid": rng.random() < 0.5,
            "note": f"note {rng.randint(0, 999)}",
        }

    def _change(self) -> None:
        rng = self.rng
        roll = rng.random()
        if not self.live or roll < 0.35:
            key = (rng.choice(_REGIONS), self.next_id)
            self.next_id += 1
            self.emulator.put_row(TABLE, dict(zip(("region", "order_id"), key, strict=True)), self._columns())
            self.live.add(key)
            return
        key = rng.choice(sorted(self.live))
        pk = dict(zip(("region", "order_id"), key, strict=True))
        if roll < 0.75:  # a partial update: some columns set, maybe one deleted
            columns = self._columns()
            put = {name: columns[name] for name in rng.sample(sorted(columns), rng.randint(1, 3))}
            deleted = [name for name in ("note", "paid") if name not in put and rng.random() < 0.3]
            self.emulator.update_row(TABLE, pk, put=put, delete_all=deleted)
        elif roll < 0.85:  # the whole row again
            self.emulator.put_row(TABLE, pk, self._columns())
        else:
            self.emulator.delete_row(TABLE, pk)
            self.live.discard(key)


def workload_start(
    windows: int, window_seconds: int, settle: timedelta, now: datetime | None = None
) -> datetime:
    """A start so that ``windows`` windows end before ``now - settle`` (whole minutes, UTC)."""
    now = now or datetime.now(timezone.utc)
    start = now - settle - timedelta(seconds=windows * window_seconds) - timedelta(minutes=2)
    return start.replace(second=0, microsecond=0)
