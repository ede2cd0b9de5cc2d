"""Windows [start, end) of commit timestamps."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_cdc.core.identifiers import InvalidIdentifierError, validate_pipeline_id
from airflow_provider_cdc.core.window import Window

UTC = timezone.utc
START = datetime(2022, 9, 27, 12, 0, tzinfo=UTC)
END = datetime(2022, 9, 27, 13, 0, tzinfo=UTC)


def test_query_end_is_one_microsecond_before_end():
    window = Window(START, END)
    assert window.query_end == datetime(2022, 9, 27, 12, 59, 59, 999999, tzinfo=UTC)


def test_window_id_round_trip():
    window = Window(START, END)
    assert window.window_id == "1664280000000000-1664283600000000"
    assert Window.from_window_id(window.window_id) == window
    assert str(window) == "[2022-09-27T12:00:00.000000Z, 2022-09-27T13:00:00.000000Z)"


@pytest.mark.parametrize("text", ["", "12", "1-2-3", "a-b", "1664280000000000-1664283600000000\n", None])
def test_from_window_id_rejects_other_text(text):
    with pytest.raises(ValueError, match="not a window id"):
        Window.from_window_id(text)


def test_contains_is_half_open():
    window = Window(START, END)
    assert window.contains(START)
    assert window.contains(END - timedelta(microseconds=1))
    assert not window.contains(END)
    assert not window.contains(START - timedelta(microseconds=1))


def test_overlaps_partition_lifetimes():
    window = Window(START, END)
    assert window.overlaps(START - timedelta(hours=5), None)  # still open, began earlier
    assert window.overlaps(START - timedelta(hours=5), START + timedelta(microseconds=1))
    assert not window.overlaps(START - timedelta(hours=5), START)  # ended (children start) at window start
    assert window.overlaps(END - timedelta(microseconds=1), None)
    assert not window.overlaps(END, None)  # begins when the window ends
    assert window.overlaps(START + timedelta(minutes=10), START + timedelta(minutes=20))


def test_other_time_zones_are_converted_to_utc():
    plus_two = timezone(timedelta(hours=2))
    window = Window(
        datetime(2022, 9, 27, 14, 0, tzinfo=plus_two), datetime(2022, 9, 27, 15, 0, tzinfo=plus_two)
    )
    assert window == Window(START, END)
    assert window.start.tzinfo is UTC


def test_invalid_windows_are_refused():
    with pytest.raises(ValueError, match="start must be before its end"):
        Window(END, START)
    with pytest.raises(ValueError, match="start must be before its end"):
        Window(START, START)
    with pytest.raises(ValueError, match="window start must be timezone-aware"):
        Window(datetime(2022, 9, 27, 12, 0), END)
    with pytest.raises(TypeError, match="window end must be a datetime, got str"):
        Window(START, "2022-09-27T13:00:00Z")
    with pytest.raises(ValueError, match="timestamp must be timezone-aware"):
        Window(START, END).contains(datetime(2022, 9, 27, 12, 30))


def test_window_is_immutable():
    window = Window(START, END)
    with pytest.raises(AttributeError):
        window.start = END  # type: ignore[misc]


@pytest.mark.parametrize("pipeline_id", ["spanner_change_stream_to_lake", "orders.v2", "7-eleven", "a" * 250])
def test_one_pipeline_id_rule_for_the_metastore_and_the_lake(pipeline_id: str) -> None:
    from airflow_provider_cdc.metastore.model import validate_pipeline
    from airflow_provider_cdc.targets.delta.target import app_id_for

    assert validate_pipeline_id(pipeline_id) == validate_pipeline(pipeline_id) == pipeline_id
    assert app_id_for(pipeline_id).endswith(":" + pipeline_id)


@pytest.mark.parametrize("pipeline_id", ["", "a b", "-lead", "x/y", "a:b", "a" * 251, None])
def test_a_bad_pipeline_id_is_refused_by_the_metastore_and_the_lake_alike(pipeline_id: object) -> None:
    from airflow_provider_cdc.metastore.model import validate_pipeline
    from airflow_provider_cdc.targets.delta.target import app_id_for

    named = f"invalid pipeline id {re.escape(repr(pipeline_id))}"
    for check in (validate_pipeline_id, validate_pipeline, app_id_for):
        with pytest.raises(InvalidIdentifierError, match=named):
            check(pipeline_id)
