"""Server-rendered SVG charts of latency distributions, baseline versus candidate.

Two shapes: an empirical CDF (step lines) and horizontal box plots (P5–P95 whiskers, IQR box,
median). Everything is drawn on the server, so the ticket page needs no charting library and no
JavaScript. Every label passes through ``escape``; the result is marked safe only after that.
Series are told apart by dash pattern as well as colour, for readers who do not see the colours.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# Baseline first, candidate second; each series gets a colour and a dash pattern.
STYLES = (("#1d3557", ""), ("#d1495b", "6 3"), ("#2a9d8f", "2 2"), ("#6c757d", "8 2 2 2"))
MAX_POINTS = 400  # a CDF with more points than pixels only makes the page heavier


@dataclass(frozen=True)
class Summary:
    """Order statistics a reader compares: count, P50, P90, P95, P99, max."""

    n: int
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    maximum: float | None


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values (``q`` in 0–100)."""
    if not sorted_values:
        raise ValueError("no values")
    position = (len(sorted_values) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    if low == high:
        return float(sorted_values[low])
    weight = position - low
    return float(sorted_values[low] * (1 - weight) + sorted_values[high] * weight)


def summarise(values: Sequence[float]) -> Summary:
    ordered = sorted(v for v in values if math.isfinite(v))
    if not ordered:
        return Summary(0, None, None, None, None, None)
    return Summary(
        len(ordered),
        percentile(ordered, 50),
        percentile(ordered, 90),
        percentile(ordered, 95),
        percentile(ordered, 99),
        ordered[-1],
    )


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 × 10^k steps) covering ``low``–``high``."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    end = math.ceil(high / step) * step
    ticks = []
    value = start
    while value <= end + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _clean(series: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
    return {name: sorted(v for v in values if math.isfinite(v)) for name, values in series.items()}


def _thin(ordered: list[float]) -> list[tuple[float, float]]:
    """(value, cumulative fraction) points, thinned to at most ``MAX_POINTS``."""
    n = len(ordered)
    stride = max(1, math.ceil(n / MAX_POINTS))
    points = [(ordered[i], (i + 1) / n) for i in range(0, n, stride)]
    if points[-1][1] != 1.0:
        points.append((ordered[-1], 1.0))
    return points


class _Frame:
    """Plot-area geometry and the value → pixel mapping of the x axis."""

    def __init__(self, width: int, height: int, low: float, high: float, left: int = 56, bottom: int = 40) -> None:
        self.width, self.height = width, height
        self.left, self.right, self.top, self.bottom = left, width - 16, 30, height - bottom
        self.low, self.high = low, high

    def x(self, value: float) -> float:
        span = (self.high - self.low) or 1.0
        return self.left + (value - self.low) / span * (self.right - self.left)

    def y_fraction(self, fraction: float) -> float:
        return self.bottom - fraction * (self.bottom - self.top)


def _svg_open(width: int, height: int, title: str, desc: str, chart_id: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-labelledby="{chart_id}-title {chart_id}-desc" class="chart">',
        f'<title id="{chart_id}-title">{escape(title)}</title>',
        f'<desc id="{chart_id}-desc">{escape(desc)}</desc>',
        f'<text x="{width / 2:.0f}" y="18" text-anchor="middle" class="chart-title">{escape(title)}</text>',
    ]


def _x_axis(frame: _Frame, ticks: list[float], unit: str) -> list[str]:
    parts = [f'<line x1="{frame.left}" y1="{frame.bottom}" x2="{frame.right}" y2="{frame.bottom}" class="axis"/>']
    for tick in ticks:
        x = frame.x(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{frame.bottom}" x2="{x:.1f}" y2="{frame.bottom + 4}" class="axis"/>')
        parts.append(f'<text x="{x:.1f}" y="{frame.bottom + 16}" text-anchor="middle">{_fmt(tick)}</text>')
    mid = (frame.left + frame.right) / 2
    parts.append(f'<text x="{mid:.0f}" y="{frame.height - 6}" text-anchor="middle">{escape(unit)}</text>')
    return parts


def _legend(frame: _Frame, names: Sequence[str]) -> list[str]:
    parts = []
    for index, name in enumerate(names):
        colour, dash = STYLES[index % len(STYLES)]
        # Bottom right: CDFs rise from the left, so that corner is the one left empty.
        x = frame.right - 150
        y = frame.bottom - 16 * (len(names) - index) - 4
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(
            f'<line x1="{x}" y1="{y}" x2="{x + 24}" y2="{y}" stroke="{colour}" stroke-width="2.5"{dash_attr}/>'
        )
        parts.append(f'<text x="{x + 30}" y="{y + 4}">{escape(name)}</text>')
    return parts


def _empty(width: int, height: int, title: str, chart_id: str) -> SafeString:
    parts = _svg_open(width, height, title, "No measurements recorded.", chart_id)
    parts.append(f'<text x="{width / 2:.0f}" y="{height / 2:.0f}" text-anchor="middle">no measurements</text></svg>')
    return mark_safe("".join(parts))  # safe: every dynamic piece above is escaped or numeric


def cdf_svg(
    series: Mapping[str, Sequence[float]],
    *,
    title: str,
    unit: str = "ms",
    chart_id: str = "cdf",
    width: int = 480,
    height: int = 260,
) -> SafeString:
    """Empirical CDF of each series on a shared x axis (the slowest 0.5% clipped off the axis)."""
    data = {name: values for name, values in _clean(series).items() if values}
    if not data:
        return _empty(width, height, title, chart_id)
    everything = sorted(v for values in data.values() for v in values)
    high = percentile(everything, 99.5)
    ticks = nice_ticks(min(0.0, everything[0]), high)
    frame = _Frame(width, height, ticks[0], ticks[-1])
    desc = "; ".join(
        f"{name}: n={len(values)}, P50 {_fmt(percentile(values, 50))} {unit}, P95 {_fmt(percentile(values, 95))} {unit}"
        for name, values in data.items()
    )
    parts = _svg_open(width, height, title, f"Cumulative distribution. {desc}", chart_id)
    for fraction in (0.0, 0.5, 0.9, 1.0):
        y = frame.y_fraction(fraction)
        parts.append(f'<line x1="{frame.left}" y1="{y:.1f}" x2="{frame.right}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{frame.left - 6}" y="{y + 4:.1f}" text-anchor="end">{fraction:.0%}</text>')
    parts += _x_axis(frame, ticks, unit)
    for index, (_name, values) in enumerate(data.items()):
        colour, dash = STYLES[index % len(STYLES)]
        path = [f"M{frame.x(values[0]):.1f},{frame.y_fraction(0):.1f}"]
        previous = 0.0
        for value, fraction in _thin(values):
            x = frame.x(min(value, frame.high))
            path.append(f"L{x:.1f},{frame.y_fraction(previous):.1f} L{x:.1f},{frame.y_fraction(fraction):.1f}")
            previous = fraction
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<path d="{" ".join(path)}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}/>')
    parts += _legend(frame, list(data))
    parts.append("</svg>")
    return mark_safe("".join(parts))  # safe: names and units are escaped, the rest is numeric


def box_svg(
    series: Mapping[str, Sequence[float]],
    *,
    title: str,
    unit: str = "ms",
    chart_id: str = "box",
    width: int = 480,
    height: int | None = None,
) -> SafeString:
    """One horizontal box per series: P5–P95 whiskers, P25–P75 box, median line."""
    data = {name: values for name, values in _clean(series).items() if values}
    height = height or 70 + 44 * max(1, len(data))
    if not data:
        return _empty(width, height, title, chart_id)
    everything = sorted(v for values in data.values() for v in values)
    ticks = nice_ticks(min(0.0, everything[0]), percentile(everything, 99.5))
    frame = _Frame(width, height, ticks[0], ticks[-1], left=90)
    desc = "; ".join(
        f"{name}: median {_fmt(percentile(v, 50))}, IQR {_fmt(percentile(v, 25))}–{_fmt(percentile(v, 75))} {unit}"
        for name, v in data.items()
    )
    parts = _svg_open(width, height, title, f"Box plot. {desc}", chart_id)
    parts += _x_axis(frame, ticks, unit)
    for index, (name, values) in enumerate(data.items()):
        colour, dash = STYLES[index % len(STYLES)]
        centre = frame.top + 22 + index * 44
        p5, p25, p50, p75, p95 = (min(percentile(values, q), frame.high) for q in (5, 25, 50, 75, 95))
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<text x="{frame.left - 6}" y="{centre + 4}" text-anchor="end">{escape(name)}</text>')
        parts.append(
            f'<line x1="{frame.x(p5):.1f}" y1="{centre}" x2="{frame.x(p95):.1f}" y2="{centre}" '
            f'stroke="{colour}" stroke-width="1.5"{dash_attr}/>'
        )
        for end in (p5, p95):
            parts.append(
                f'<line x1="{frame.x(end):.1f}" y1="{centre - 8}" x2="{frame.x(end):.1f}" y2="{centre + 8}" '
                f'stroke="{colour}" stroke-width="1.5"/>'
            )
        box_width = max(1.0, frame.x(p75) - frame.x(p25))
        parts.append(
            f'<rect x="{frame.x(p25):.1f}" y="{centre - 13}" width="{box_width:.1f}" height="26" '
            f'fill="{colour}" fill-opacity="0.18" stroke="{colour}" stroke-width="1.5"{dash_attr}/>'
        )
        parts.append(
            f'<line x1="{frame.x(p50):.1f}" y1="{centre - 13}" x2="{frame.x(p50):.1f}" y2="{centre + 13}" '
            f'stroke="{colour}" stroke-width="3"/>'
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # safe: names and units are escaped, the rest is numeric


def rounds_svg(
    series: Mapping[str, Sequence[float | None]],
    rounds: Sequence[int],
    *,
    title: str,
    unit: str,
    chart_id: str = "rounds",
    width: int = 480,
    height: int = 220,
) -> SafeString:
    """One line per series over numbered rounds (x: round number, y: the value in ``unit``).

    A ``None`` value (nothing measured in that round) breaks the line instead of drawing a zero.
    """
    values = [v for points in series.values() for v in points if v is not None and math.isfinite(v)]
    if not values or not rounds:
        return _empty(width, height, title, chart_id)
    ticks = nice_ticks(0.0, max(values))
    frame = _Frame(width, height, float(rounds[0]), float(rounds[-1]) if len(rounds) > 1 else rounds[0] + 1.0)
    span = (ticks[-1] - ticks[0]) or 1.0

    def y(value: float) -> float:
        return frame.y_fraction((value - ticks[0]) / span)

    latest = {name: next((v for v in reversed(points) if v is not None), None) for name, points in series.items()}
    desc = "; ".join(
        f"{name}: latest {_fmt(value)} {unit}" if value is not None else f"{name}: not measured"
        for name, value in latest.items()
    )
    parts = _svg_open(width, height, title, f"Per round. {desc}", chart_id)
    for tick in ticks:
        parts.append(f'<line x1="{frame.left}" y1="{y(tick):.1f}" x2="{frame.right}" y2="{y(tick):.1f}" class="grid"/>')
        parts.append(f'<text x="{frame.left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{_fmt(tick)}</text>')
    parts += _x_axis(frame, [float(number) for number in rounds], f"round ({unit} on the left)")
    for index, (_name, points) in enumerate(series.items()):
        colour, dash = STYLES[index % len(STYLES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        path: list[str] = []
        pen_down = False
        for number, value in zip(rounds, points, strict=True):
            if value is None or not math.isfinite(value):
                pen_down = False
                continue
            x = frame.x(float(number))
            path.append(f"{'L' if pen_down else 'M'}{x:.1f},{y(value):.1f}")
            parts.append(f'<circle cx="{x:.1f}" cy="{y(value):.1f}" r="3" fill="{colour}"/>')
            pen_down = True
        if path:
            parts.append(f'<path d="{" ".join(path)}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}/>')
    parts += _legend(frame, list(series))
    parts.append("</svg>")
    return mark_safe("".join(parts))  # safe: names and units are escaped, the rest is numeric
