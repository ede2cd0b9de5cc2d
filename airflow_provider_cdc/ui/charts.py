"""Small inline SVG plots drawn on the server: a line of points over time and bars per window.

Pure functions of their data: every point is an SVG element of class ``point`` with its values in
``data-x`` (RFC 3339) and ``data-y`` and a ``<title>`` a pointer shows; all text is escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape

from airflow_provider_cdc.core.timestamps import format_timestamp

WIDTH, HEIGHT = 600, 200
_LEFT, _RIGHT, _TOP, _BOTTOM = 78, 16, 24, 40


@dataclass(frozen=True)
class Point:
    """One value at one time (a window's end), with the text its pointer shows."""

    x: datetime
    y: float
    label: str


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


def _minute(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M")


class _Frame:
    """Data → pixel scales of one plot (times across, values up from zero)."""

    def __init__(self, points: Sequence[Point]) -> None:
        self.x0 = min(p.x for p in points).timestamp()
        self.x1 = max(p.x for p in points).timestamp()
        self.top = max(max(p.y for p in points), 0.0) or 1.0
        self.inner_w = WIDTH - _LEFT - _RIGHT
        self.inner_h = HEIGHT - _TOP - _BOTTOM

    def px(self, when: datetime) -> float:
        if self.x1 == self.x0:
            return _LEFT + self.inner_w / 2
        return _LEFT + (when.timestamp() - self.x0) / (self.x1 - self.x0) * self.inner_w

    def py(self, value: float) -> float:
        return _TOP + self.inner_h - max(value, 0.0) / self.top * self.inner_h


def _frame_svg(kind: str, title: str, frame: _Frame, points: Sequence[Point],
               y_text: Callable[[float], str], body: list[str]) -> str:  # fmt: skip
    axis_y = HEIGHT - _BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {kind}" role="img" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" aria-label="{_attr(title)}">',
        f"<title>{escape(title)}</title>",
        f'<line class="axis" x1="{_LEFT}" y1="{axis_y}" x2="{WIDTH - _RIGHT}" y2="{axis_y}"/>',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{axis_y}"/>',
        f'<text class="tick" x="{_LEFT - 6}" y="{_TOP + 4}" text-anchor="end">'
        f"{escape(y_text(frame.top))}</text>",
        f'<text class="tick" x="{_LEFT - 6}" y="{axis_y}" text-anchor="end">{escape(y_text(0))}</text>',
        f'<text class="tick" x="{_LEFT}" y="{axis_y + 16}">{escape(_minute(points[0].x))}</text>',
        f'<text class="tick" x="{WIDTH - _RIGHT}" y="{axis_y + 16}" text-anchor="end">'
        f"{escape(_minute(points[-1].x))}</text>",
        f'<text class="caption" x="{_LEFT + (WIDTH - _LEFT - _RIGHT) / 2:.0f}" y="{HEIGHT - 6}" '
        'text-anchor="middle">window end (UTC)</text>',
        *body,
        "</svg>",
    ]
    return "".join(parts)


def _empty(kind: str, title: str, message: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {kind} empty" role="img" '
        f'viewBox="0 0 {WIDTH} 60" width="{WIDTH}" height="60" aria-label="{_attr(title)}">'
        f'<title>{escape(title)}</title><text x="{_LEFT}" y="34">{escape(message)}</text></svg>'
    )


def _point_attrs(point: Point) -> str:
    return f'data-x="{_attr(format_timestamp(point.x))}" data-y="{_attr(point.y)}"'


def line_chart(points: Sequence[Point], *, title: str, y_text: Callable[[float], str], empty: str) -> str:
    """A line through ``points`` (in time order) with a circle at each; ``empty`` when there are none."""
    if not points:
        return _empty("line", title, empty)
    points = sorted(points, key=lambda p: p.x)
    frame = _Frame(points)
    path = " ".join(f"{frame.px(p.x):.1f},{frame.py(p.y):.1f}" for p in points)
    body = [f'<polyline class="series" fill="none" points="{path}"/>']
    body += [
        f'<circle class="point" cx="{frame.px(p.x):.1f}" cy="{frame.py(p.y):.1f}" r="3.5" {_point_attrs(p)}>'
        f"<title>{escape(p.label)}</title></circle>"
        for p in points
    ]
    return _frame_svg("line", title, frame, points, y_text, body)


def bar_chart(points: Sequence[Point], *, title: str, y_text: Callable[[float], str], empty: str) -> str:
    """A bar per point (in time order), as high as its value; ``empty`` when there are none."""
    if not points:
        return _empty("bars", title, empty)
    points = sorted(points, key=lambda p: p.x)
    frame = _Frame(points)
    step = frame.inner_w / max(len(points), 1)
    bar = max(min(step * 0.7, 24.0), 1.5)
    base = HEIGHT - _BOTTOM
    body = []
    for p in points:
        top = frame.py(p.y)
        left = min(max(frame.px(p.x) - bar / 2, _LEFT), WIDTH - _RIGHT - bar)
        body.append(
            f'<rect class="point" x="{left:.1f}" y="{top:.1f}" width="{bar:.1f}" height="{base - top:.1f}" '
            f"{_point_attrs(p)}><title>{escape(p.label)}</title></rect>"
        )
    return _frame_svg("bars", title, frame, points, y_text, body)
