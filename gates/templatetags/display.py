"""Template filters over :mod:`gates.display`, so templates never print a raw float."""

from __future__ import annotations

from typing import Any

from django import template

from gates import display

register = template.Library()


@register.filter
def human(name: str) -> str:
    """``{{ ticket.bottleneck|human }}`` → "KV memory"."""
    return display.human(str(name or ""))


@register.filter
def metric_label(name: str) -> str:
    return display.metric_label(str(name or ""))


@register.filter
def metric_value(value: Any, metric: str) -> str:
    """``{{ value|metric_value:"ttft_p50" }}``: the value in the metric's (or engine counter's) unit."""
    return display.metric_value(str(metric), value)


@register.filter
def ms(value: Any) -> str:
    """A latency in milliseconds, without the unit (table columns say "(ms)")."""
    return display.number(value, "ms").removesuffix(" ms")


@register.filter
def count(value: Any) -> str:
    return display.number(value, "count")


@register.filter
def humans(names: list[str]) -> str:
    """A list of keys as labels, comma-separated."""
    return ", ".join(display.human(str(name)) for name in names or [])


@register.filter
def metric_labels(names: list[str]) -> str:
    return ", ".join(display.metric_label(str(name)) for name in names or [])


@register.filter
def duration(seconds: Any) -> str:
    """``{{ plan.max_engine_s|duration }}`` → "23 min"."""
    return display.duration(seconds)


@register.filter
def points(margin: Any) -> str:
    """An absolute margin on a rate as points: 0.02 → "2"."""
    return f"{float(margin) * 100:g}"
