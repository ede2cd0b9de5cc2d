"""The emulator's clocks, microseconds since the epoch: real time (the default) or a manual clock."""

from __future__ import annotations

import threading
import time


class SystemClock:
    """Real time in microseconds, never going back (a step back of the system clock holds it still)."""

    def __init__(self) -> None:
        self._last_us = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            self._last_us = max(self._last_us, time.time_ns() // 1000)
            return self._last_us


class ManualClock:
    """Microseconds since the epoch that move only by ``advance`` (thread-safe), until
    :meth:`follow_real_time` lets them run with real time."""

    def __init__(self, start_us: int | None = None) -> None:
        self._now_us = time.time_ns() // 1000 if start_us is None else int(start_us)
        self._lock = threading.Lock()
        self._following = False

    def __call__(self) -> int:
        with self._lock:
            if self._following:
                self._now_us = max(self._now_us, time.time_ns() // 1000)
            return self._now_us

    def advance(self, seconds: float) -> int:
        """Move the clock forward by ``seconds``; return the new time in microseconds."""
        if seconds < 0:
            raise ValueError(f"the clock only moves forward, not by {seconds} s")
        with self._lock:
            if self._following:
                raise RuntimeError("the clock follows real time now; it cannot be advanced by hand")
            self._now_us += round(seconds * 1_000_000)
            return self._now_us

    def follow_real_time(self) -> None:
        """From now on, run with real time (from the later of the clock's time and real time)."""
        with self._lock:
            self._following = True
