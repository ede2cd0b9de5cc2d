"""Durations as the command line prints them: two units at most, rounded down, milliseconds below a
second."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_cdc.core.durations import human_duration


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        (float("nan"), "-"),
        (0, "0 s"),
        (0.00004, "0.1 ms"),
        (0.0004, "0.4 ms"),
        (0.85, "850 ms"),
        (0.29, "290 ms"),
        (0.9999, "999 ms"),
        (1, "1 s"),
        (2.3, "2.3 s"),
        (2.5, "2.5 s"),
        (9.99, "9.9 s"),
        (10, "10 s"),
        (13.9, "13 s"),
        (59.99, "59 s"),
        (60, "1 min"),
        (133, "2 min 13 s"),
        (timedelta(minutes=59, seconds=59, milliseconds=999), "59 min 59 s"),
        (timedelta(hours=4, minutes=5, seconds=59), "4 h 5 min"),
        (timedelta(hours=5), "5 h"),
        (timedelta(hours=24), "1 d"),
        (timedelta(days=3, hours=4, minutes=10), "3 d 4 h"),
        (timedelta(days=9, hours=23), "9 d 23 h"),
        (timedelta(days=10, hours=23), "10 d"),
        (timedelta(days=331, hours=18), "331 d"),
        (-133, "-2 min 13 s"),
        (timedelta(milliseconds=-850), "-850 ms"),
    ],
)
def test_durations_read_as_people_read_them(value: object, text: str) -> None:
    assert human_duration(value) == text  # type: ignore[arg-type]


def test_a_timedelta_and_its_seconds_read_the_same() -> None:
    for seconds in (0.5, 7.25, 61, 3_700, 90_000, 10**7):
        assert human_duration(timedelta(seconds=seconds)) == human_duration(seconds)
