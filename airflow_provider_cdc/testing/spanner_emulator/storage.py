"""Row versions: every committed image of every row, by commit timestamp, in primary-key order.

A table keeps its current rows (what transactions read and write) and, per key, the versions its
commits left: ``(commit µs, row or None for deleted)``. A read at a timestamp sees each key's last
version at or before it. Versions no read can see any more (older than the version retention
period, and followed by another version that is too) are dropped when the key is written again.
"""

from __future__ import annotations

import functools
import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from .values import SpannerType, sort_key

Row = dict[str, Any]
Version = tuple[int, Row | None]
_TIMESTAMP = itemgetter(0)
_RUN = 4096  # keys sorted at once when ordering new keys


@functools.total_ordering
class Descending:
    """A key part of a ``DESC`` key column: orders in reverse."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Descending) and self.value == other.value

    def __lt__(self, other: Descending) -> bool:
        return other.value < self.value

    def __hash__(self) -> int:
        return hash(self.value)


class RowHistory:
    """The versions of one table's rows, and its keys in index order (cached until a new key appears)."""

    def __init__(self, key_types: Sequence[SpannerType], key_desc: Sequence[bool]) -> None:
        self.key_types = list(key_types)
        self.key_desc = list(key_desc) + [False] * (len(key_types) - len(key_desc))
        self.versions: dict[tuple, list[Version]] = {}
        self._keys: list[tuple] = []
        self._new_keys: list[tuple] = []

    # ----- order ----------------------------------------------------------------------------------
    def order(self, key: Sequence[Any]) -> tuple:
        """The position of a (possibly partial) key in index order: two entries per key part, NULL
        first (``DESC`` parts reversed, NULL last), so a prefix of ``n`` parts is ``order[: 2 * n]``."""
        parts: list[Any] = []
        for value, type_, desc in zip(key, self.key_types, self.key_desc, strict=False):
            pair = (0, None) if value is None else sort_key(value, type_)
            parts.extend((Descending(pair[0]), Descending(pair[1])) if desc else pair)
        return tuple(parts)

    # ----- writes ---------------------------------------------------------------------------------
    def write(self, key: tuple, row: Row | None, commit_us: int, oldest_readable_us: int) -> None:
        """Record ``key``'s image (``None``: deleted) at ``commit_us``; forget versions older than
        ``oldest_readable_us`` that a later version hides."""
        history = self.versions.get(key)
        if history is None:
            if row is None:
                return
            self.versions[key] = [(commit_us, row)]
            self._new_keys.append(key)
            return
        hidden = 0
        while hidden + 1 < len(history) and history[hidden + 1][0] <= oldest_readable_us:
            hidden += 1
        if hidden:  # a new list: readers may be bisecting the old one
            self.versions[key] = [*history[hidden:], (commit_us, row)]
        else:
            history.append((commit_us, row))

    def rewrite(
        self,
        row_of: Callable[[Row | None], Row | None],
        key_of: Callable[[tuple], tuple],
    ) -> None:
        """Replace every version's row by ``row_of(row)`` and every key by ``key_of(key)``, which must
        keep the keys' order (a schema change: a dropped column, a re-encoded type)."""
        self.versions = {
            key_of(key): [(at, row_of(row)) for at, row in history] for key, history in self.versions.items()
        }
        self._keys = [key_of(key) for key in self._keys]
        self._new_keys = [key_of(key) for key in self._new_keys]

    # ----- reads ----------------------------------------------------------------------------------
    def at(self, key: tuple, read_us: int) -> Row | None:
        """The row ``key`` as of ``read_us`` (``None``: absent)."""
        history = self.versions.get(key)
        if not history:
            return None
        if history[-1][0] <= read_us:
            return history[-1][1]
        index = bisect_right(history, read_us, key=_TIMESTAMP)
        return history[index - 1][1] if index else None

    def keys(self) -> list[tuple]:
        """Every key ever written, in index order (call under the database lock).

        Keys new since the last call are sorted in runs and merged in, computing orders as they go, so
        ordering many keys never holds all their orders at once.
        """
        if self._new_keys:
            new, self._new_keys = self._new_keys, []
            runs = [sorted(new[i : i + _RUN], key=self.order) for i in range(0, len(new), _RUN)]
            self._keys = list(heapq.merge(self._keys, *runs, key=self.order))
        return self._keys

    def split_points(self, count: int) -> list[tuple]:
        """Up to ``count - 1`` keys that cut the key space into ``count`` parts of about equal rows."""
        keys = self.keys()
        if count <= 1 or not keys:
            return []
        count = min(count, len(keys))
        return [keys[len(keys) * i // count] for i in range(1, count)]


class Scan:
    """The rows of a table as of ``read_us``, in index order, within ``[low, high)`` (orders)."""

    def __init__(
        self, history: RowHistory, read_us: int, low: tuple | None = None, high: tuple | None = None
    ) -> None:
        keys = history.keys()  # the caller holds the database lock
        start = 0 if low is None else bisect_left(keys, low, key=history.order)
        stop = len(keys) if high is None else bisect_left(keys, high, key=history.order)
        self._history = history
        self.keys = keys[start:stop] if (start, stop) != (0, len(keys)) else keys
        self.read_us = read_us

    def __iter__(self) -> Iterator[Row]:
        at, read_us = self._history.at, self.read_us
        for key in self.keys:
            row = at(key, read_us)
            if row is not None:
                yield row


def in_bounds(order: tuple, low: tuple | None, high: tuple | None) -> bool:
    """Whether ``order`` lies in ``[low, high)`` (``None``: unbounded)."""
    return (low is None or order >= low) and (high is None or order < high)
