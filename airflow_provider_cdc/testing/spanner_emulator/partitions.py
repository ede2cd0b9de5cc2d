"""Change-stream partitions: key ranges over a 64-bit key-hash space that split and merge over time."""

from __future__ import annotations

import hashlib
import random
from bisect import bisect_right
from dataclasses import dataclass, field

KEY_SPACE = 1 << 64


def key_hash(table: str, key_json: str) -> int:
    """Position of a row in the key space (stable across runs)."""
    digest = hashlib.blake2b(f"{table}\x00{key_json}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass
class Partition:
    """A key range ``[low, high)`` that owns changes committed in ``[start_us, end_us)``."""

    pid: int
    low: int
    high: int
    start_us: int
    parents: tuple[int, ...] = ()
    end_us: int | None = None
    children: list[int] = field(default_factory=list)

    def alive_at(self, ts_us: int) -> bool:
        return self.start_us <= ts_us and (self.end_us is None or ts_us < self.end_us)


class PartitionMap:
    """Every partition a database ever had, and the current ones ordered by key range."""

    def __init__(self, initial_partitions: int, start_us: int, rng: random.Random) -> None:
        if initial_partitions < 1:
            raise ValueError("initial_partitions must be at least 1")
        self._rng = rng
        self.all: dict[int, Partition] = {}
        self._current: list[Partition] = []
        step = KEY_SPACE // initial_partitions
        for i in range(initial_partitions):
            high = KEY_SPACE if i == initial_partitions - 1 else (i + 1) * step
            self._current.append(self._new(i * step, high, start_us, ()))

    def _new(self, low: int, high: int, start_us: int, parents: tuple[int, ...]) -> Partition:
        partition = Partition(len(self.all), low, high, start_us, parents)
        self.all[partition.pid] = partition
        return partition

    @property
    def current(self) -> list[Partition]:
        return list(self._current)

    def owner(self, position: int) -> Partition:
        """The current partition whose range holds ``position``."""
        lows = [p.low for p in self._current]
        return self._current[bisect_right(lows, position) - 1]

    def alive_at(self, ts_us: int) -> list[Partition]:
        return [p for p in self.all.values() if p.alive_at(ts_us)]

    def split(self, at_us: int, pid: int | None = None) -> tuple[Partition, list[Partition]]:
        """End one current partition at ``at_us`` and hand its range to two children."""
        candidates = [p for p in self._current if p.high - p.low >= 2 and (pid is None or p.pid == pid)]
        if not candidates:
            raise ValueError("no partition can be split")
        parent = self._rng.choice(candidates)
        middle = parent.low + (parent.high - parent.low) // 2
        children = [
            self._new(parent.low, middle, at_us, (parent.pid,)),
            self._new(middle, parent.high, at_us, (parent.pid,)),
        ]
        self._retire([parent], children, at_us)
        return parent, children

    def merge(self, at_us: int) -> tuple[list[Partition], Partition]:
        """End two adjacent current partitions at ``at_us`` and hand both ranges to one child."""
        if len(self._current) < 2:
            raise ValueError("a single partition cannot be merged")
        i = self._rng.randrange(len(self._current) - 1)
        parents = self._current[i : i + 2]
        child = self._new(parents[0].low, parents[1].high, at_us, tuple(p.pid for p in parents))
        self._retire(parents, [child], at_us)
        return parents, child

    def _retire(self, parents: list[Partition], children: list[Partition], at_us: int) -> None:
        for parent in parents:
            parent.end_us = at_us
            parent.children = [c.pid for c in children]
        keep = [p for p in self._current if p not in parents]
        self._current = sorted(keep + children, key=lambda p: p.low)
