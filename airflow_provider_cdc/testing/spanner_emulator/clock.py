"""Clocks for the emulator: wall time, or a simulated clock that tests and demos move by hand."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

from airflow_provider_cdc.core.timestamps import from_micros, to_micros


class Clock:
    """Monotonic microsecond clock; a commit moves it to the commit timestamp."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._floor_us = 0

    @property
    def condition(self) -> threading.Condition:
        """Notified whenever the clock moves or a commit lands (readers wait on it)."""
        return self._cond

    def now_us(self) -> int:
        raise NotImplementedError

    def now(self) -> datetime:
        return from_micros(self.now_us())

    def next_commit_us(self, last_commit_us: int) -> int:
        """A commit timestamp: strictly after the current time and after the previous commit.

        Everything at or before ``now`` is therefore final: a read bounded by ``now`` can complete.
        """
        with self._cond:
            ts = max(self.now_us() + 1, last_commit_us + 1)
            self._floor_us = max(self._floor_us, ts)
            self._cond.notify_all()
            return ts

    def wait(self, timeout: float) -> None:
        """Block until the clock moves, a commit lands, or ``timeout`` seconds of wall time pass."""
        with self._cond:
            self._cond.wait(timeout)

    def notify(self) -> None:
        with self._cond:
            self._cond.notify_all()


class WallClock(Clock):
    """Real time (UTC); commit timestamps are wall-clock microseconds."""

    def now_us(self) -> int:
        return max(time.time_ns() // 1000, self._floor_us)

    def wait(self, timeout: float) -> None:
        with self._cond:
            self._cond.wait(min(timeout, 0.05))


class ManualClock(Clock):
    """Simulated time that moves only when told (``advance``/``set``) or when a commit lands."""

    def __init__(self, start: datetime) -> None:
        super().__init__()
        self._now_us = to_micros(start)

    def now_us(self) -> int:
        return max(self._now_us, self._floor_us)

    def advance(self, delta: timedelta) -> datetime:
        with self._cond:
            self._now_us = self.now_us() + int(delta / timedelta(microseconds=1))
            self._cond.notify_all()
            return from_micros(self._now_us)

    def set(self, value: datetime) -> datetime:
        """Move the clock forward to ``value`` (a clock never goes backwards)."""
        with self._cond:
            target = to_micros(value)
            if target < self.now_us():
                raise ValueError(f"the clock cannot move backwards to {value.isoformat()}")
            self._now_us = target
            self._cond.notify_all()
            return from_micros(self._now_us)
