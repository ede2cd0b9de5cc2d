"""The pipeline pages' inline SVG plots (durations on their axes as people read them)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser

import pytest

from airflow_provider_cdc.core.durations import human_duration
from airflow_provider_cdc.ui.charts import Point, bar_chart, line_chart


class _Svg(HTMLParser):
    """The elements of an SVG document (tag, attributes) and its text."""

    def __init__(self, markup: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(markup)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def points(self) -> list[dict[str, str | None]]:
        return [attrs for _tag, attrs in self.elements if "point" in (attrs.get("class") or "").split()]


T = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_a_line_has_a_point_per_value_with_its_values_and_its_text() -> None:
    points = [Point(T + timedelta(minutes=10 * i), 133.0 + 30 * i, f"window {i} <late>") for i in (2, 0, 1)]
    svg = _Svg(line_chart(points, title="Lag", y_text=human_duration, empty="none"))
    assert svg.elements[0][0] == "svg"
    drawn = svg.points()
    assert [p["data-y"] for p in drawn] == ["133.0", "163.0", "193.0"]  # in time order
    assert [p["data-x"] for p in drawn] == [
        "2026-01-01T00:00:00.000000Z", "2026-01-01T00:10:00.000000Z", "2026-01-01T00:20:00.000000Z"
    ]  # fmt: skip
    heights = [float(p["cy"] or 0) for p in drawn]
    assert heights[0] > heights[1] > heights[2]  # a larger value is drawn higher
    text = "".join(svg.text)
    assert "window 0 <late>" in text and "3 min 13 s" in text  # escaped in the markup, read back as text
    assert "<late>" not in line_chart(points, title="Lag", y_text=human_duration, empty="none")


def test_bars_are_as_high_as_their_values_and_an_empty_plot_says_so() -> None:
    points = [Point(T + timedelta(minutes=10 * i), value, f"{i}") for i, value in enumerate((100.0, 50.0, 0))]
    drawn = _Svg(bar_chart(points, title="Rows", y_text=str, empty="none")).points()
    heights = [float(p["height"] or 0) for p in drawn]
    assert heights[0] == pytest.approx(2 * heights[1]) and heights[2] == 0
    empty = _Svg(bar_chart([], title="Rows", y_text=str, empty="No window has counted its rows yet"))
    assert empty.points() == [] and "No window has counted its rows yet" in "".join(empty.text)
