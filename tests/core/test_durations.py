"""Spanner duration text: read as retention periods, written back in the largest whole unit."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_cdc.sources.spanner.durations import format_duration, parse_duration, spanner_duration


@pytest.mark.parametrize(
    ("text", "period"),
    [("7d", timedelta(days=7)), (" 36H ", timedelta(hours=36)), ("90 m", timedelta(minutes=90)),
     ("3600s", timedelta(hours=1)), ("0d", timedelta(0))],
)  # fmt: skip
def test_duration_text_names_its_period(text: str, period: timedelta) -> None:
    assert spanner_duration(text) == period


@pytest.mark.parametrize("text", ["", "7", "7w", "1.5h", "-1d", "d7"])
def test_other_text_is_no_duration(text: str) -> None:
    assert spanner_duration(text) is None
    with pytest.raises(ValueError, match="not a Spanner duration"):
        parse_duration(text)


def test_a_retention_must_be_positive() -> None:
    with pytest.raises(ValueError, match="not a Spanner duration: '0h'"):
        parse_duration("0h")


@pytest.mark.parametrize(
    ("period", "text"),
    [(timedelta(days=7), "7d"), (timedelta(hours=36), "36h"), (timedelta(seconds=90), "90s"),
     (timedelta(minutes=90), "90m"), (timedelta(seconds=1.5), "1.5s")],
)  # fmt: skip
def test_a_period_is_written_in_its_largest_whole_unit(period: timedelta, text: str) -> None:
    assert format_duration(period) == text
    if "." not in text:
        assert parse_duration(text) == period
