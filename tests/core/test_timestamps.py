"""RFC 3339 text of timestamps: four-digit years, six fractional digits, UTC."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_cdc.core.timestamps import (
    coerce_timestamp,
    format_timestamp,
    from_micros,
    parse_timestamp,
    to_micros,
)


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(1, 1, 1, tzinfo=timezone.utc), "0001-01-01T00:00:00.000000Z"),
        (datetime(42, 3, 4, 5, 6, 7, 8, tzinfo=timezone.utc), "0042-03-04T05:06:07.000008Z"),
        (datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc), "0999-12-31T23:59:59.999999Z"),
        (datetime(1000, 1, 1, tzinfo=timezone.utc), "1000-01-01T00:00:00.000000Z"),
        (datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=timezone.utc), "2026-01-02T03:04:05.600000Z"),
        (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc), "9999-12-31T23:59:59.999999Z"),
    ],
)
def test_years_are_always_four_digits_and_text_parses_back(moment: datetime, text: str) -> None:
    assert format_timestamp(moment) == text
    assert parse_timestamp(text) == moment
    assert from_micros(to_micros(moment)) == moment
    assert coerce_timestamp(text) == moment


def test_offsets_and_naive_values_are_written_in_utc() -> None:
    east = timezone(timedelta(hours=5, minutes=30))
    assert format_timestamp(datetime(500, 1, 1, 5, 30, tzinfo=east)) == "0500-01-01T00:00:00.000000Z"
    assert format_timestamp(datetime(700, 6, 1, 12)) == "0700-06-01T12:00:00.000000Z"
    assert parse_timestamp("0700-06-01 12:00:00.1234567+00:00") == datetime(
        700, 6, 1, 12, 0, 0, 123456, tzinfo=timezone.utc
    )


def test_years_without_four_digits_are_refused() -> None:
    with pytest.raises(ValueError, match="not an RFC 3339 timestamp"):
        parse_timestamp("999-01-01T00:00:00Z")
