"""Durations as people read them: ``850 ms``, ``2.5 s``, ``13 s``, ``2 min 13 s``, ``4 h 5 min``,
``3 d 4 h``, ``331 d``.

:func:`human_duration` is the one formatting rule the command line uses wherever it prints a duration
(a step's time, a lag, an age, a lease's expiry); any other view of the same numbers should use it too.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from datetime import timedelta

__all__ = ["human_duration"]

_MINUTE, _HOUR, _DAY = 60, 3_600, 86_400
_EPSILON = 1e-9  # 2.3 s is 22.999… tenths in binary floating point


def human_duration(value: timedelta | float | int | None) -> str:
    """``value`` (a ``timedelta`` or seconds) in at most its two largest units, rounded down; ``-`` for
    ``None``.

    Below one second in milliseconds (``850 ms``; a fraction of one, ``0.4 ms``), below ten seconds with
    one decimal (``2.5 s``), from ten days on in days only (``331 d``). A negative duration (a clock
    ahead of another) keeps its sign: ``-13 s``.
    """
    if value is None:
        return "-"
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds != seconds:  # NaN
        return "-"
    if seconds < 0:
        return "-" + human_duration(-seconds)
    if seconds == 0:
        return "0 s"
    if seconds < 1:
        millis = seconds * 1000 + _EPSILON
        if millis < 1:
            return f"{max(millis, 0.1):.1f} ms"
        return f"{int(millis)} ms"
    if seconds < 10:
        tenths = int(seconds * 10 + _EPSILON) / 10
        return f"{tenths:.1f} s" if tenths % 1 else f"{int(tenths)} s"
    whole = int(seconds + _EPSILON)
    if whole < _MINUTE:
        return f"{whole} s"
    if whole < _HOUR:
        return _two(whole // _MINUTE, "min", whole % _MINUTE, "s")
    if whole < _DAY:
        return _two(whole // _HOUR, "h", whole % _HOUR // _MINUTE, "min")
    if whole < 10 * _DAY:
        return _two(whole // _DAY, "d", whole % _DAY // _HOUR, "h")
    return f"{whole // _DAY} d"


def _two(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big} {big_unit}" if small == 0 else f"{big} {big_unit} {small} {small_unit}"
