"""A clock that stands still until a test moves it: microseconds since the epoch."""

from __future__ import annotations

import threading
import time


class ManualClock:
    """Microseconds since the epoch that move only by ``advance`` (thread-safe)."""

    def __init__(self, start_us: int | None = None) -> None:
        self._now_us = time.time_ns() // 1000 if start_us is None else int(start_us)
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self._now_us

    def advance(self, seconds: float) -> int:
        """Move the clock forward by ``seconds``; return the new time in microseconds."""
        if seconds < 0:
            raise ValueError(f"the clock only moves forward, not by {seconds} s")
        with self._lock:
            self._now_us += round(seconds * 1_000_000)
            return self._now_us
