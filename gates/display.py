"""Numbers as people read them: one place that knows each metric's unit and precision.

The ticket page (through ``gates.templatetags.display``), the API's ``display`` fields and so the
CLI's table all format through here, so a latency reads "298 ms" and a pass-rate interval reads
"−14.9 to −6.6 pts" wherever it is shown. Stored verdicts keep the raw floats; only what people
read is rounded.
"""

from __future__ import annotations

import math
from typing import Any

from gates.policy.metrics import METRIC_SPECS

MISSING = "—"

# Units: "ms", "%" (a fraction shown as a percentage), "count", "tok/s", "req/s", "score" (0–1
# graded), "h", "tokens" (a mean length) and "" (no known unit: three significant digits).
_ENGINE_UNITS = {
    "max_concurrency": "count",
    "request_throughput": "req/s",
    "output_throughput": "tok/s",
    "gpu_hours": "h",
    "spec_decode_mean_accepted_length": "tokens",
}
# How a verdict's effect compares the two sides: a difference of rates in points, a difference of
# scores, or the ratio candidate/baseline shown as a relative change.
_POINTS_FAMILIES = ("pass_fail", "goodput")

# Words people write in capitals (or exactly so) when a snake_case key becomes a label.
_WORDS = {
    "kv": "KV",
    "ttft": "TTFT",
    "tpot": "TPOT",
    "itl": "ITL",
    "e2e": "E2E",
    "gpu": "GPU",
    "cpu": "CPU",
    "json": "JSON",
    "sql": "SQL",
    "nl2sql": "NL2SQL",
    "qa": "QA",
    "slo": "SLO",
    "slos": "SLOs",
    "api": "API",
    "id": "ID",
    "p50": "P50",
    "p90": "P90",
    "p95": "P95",
    "p99": "P99",
}
_UNIT_SUFFIXES = ("_ms", "_s")


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def signed(value: float, digits: int = 1) -> str:
    """+1.5 / −1.5 with a real minus sign; a value that rounds to zero is "+0.0"."""
    text = f"{abs(value):,.{digits}f}"
    return f"−{text}" if value < 0 and float(text.replace(",", "")) != 0 else f"+{text}"


def human(name: str) -> str:
    """A snake_case key as a label: ``kv_memory`` → "KV memory", ``engine_ttft_mean_ms`` → "Engine TTFT mean"."""
    if not name:
        return ""
    for suffix in _UNIT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    words = [_WORDS.get(word, word) for word in name.split("_") if word]
    if words and words[0] == words[0].lower():
        words[0] = words[0][:1].upper() + words[0][1:]
    return " ".join(words)


def metric_label(metric: str) -> str:
    """The policy's label of a judged metric ("TTFT P50", "Pass rate"); other keys humanised."""
    spec = METRIC_SPECS.get(metric)
    if spec is None:
        return human(metric)
    return spec.label[:1].upper() + spec.label[1:]


def metric_unit(metric: str) -> str:
    """The unit a judged metric or an engine counter is shown in."""
    spec = METRIC_SPECS.get(metric)
    if spec is not None:
        if spec.family in _POINTS_FAMILIES:
            return "%"
        if spec.family == "score":
            return "score"
        if spec.family == "latency":
            return "ms"
        if spec.family == "throughput":
            return "tok/s"
    if metric in _ENGINE_UNITS:
        return _ENGINE_UNITS[metric]
    if metric.endswith("_ms"):
        return "ms"
    if metric.endswith("_rate") or "usage" in metric:
        return "%"
    # Preemptions and the engine's counters (tokens, hits, queries, drafts, requests) are counts.
    return "count"


def number(value: Any, unit: str) -> str:
    """One value in ``unit``: ms with 0–1 decimals, rates as %, counts as integers, tok/s."""
    if isinstance(value, str):
        return value
    v = _finite(value)
    if v is None:
        return MISSING
    if unit == "ms":
        return f"{v:,.1f} ms" if abs(v) < 100 else f"{v:,.0f} ms"
    if unit == "%":
        return f"{v * 100:.1f}%"
    if unit == "count":
        return f"{round(v):,}"
    if unit == "tok/s":
        return f"{v:,.1f} tok/s" if abs(v) < 100 else f"{v:,.0f} tok/s"
    if unit == "req/s":
        return f"{v:,.2f} req/s" if abs(v) < 10 else f"{v:,.1f} req/s"
    if unit == "score":
        return f"{v:.3f}"
    if unit == "h":
        return f"{v:,.2f} h"
    if unit == "tokens":
        return f"{v:.2f} tokens"
    return f"{v:.3g}"


def metric_value(metric: str, value: Any) -> str:
    """A judged metric's or engine counter's value in its unit."""
    return number(value, metric_unit(metric))


def _comparison(metric: str) -> str:
    spec = METRIC_SPECS.get(metric)
    if spec is None:
        return "ratio"
    if spec.family in _POINTS_FAMILIES:
        return "points"
    if spec.family == "score":
        return "difference"
    return "ratio"


def _change_number(comparison: str, value: float) -> str:
    if comparison == "points":
        return signed(value * 100)
    if comparison == "difference":
        return signed(value, 3)
    return signed((value - 1) * 100)


def _change_unit(comparison: str) -> str:
    return {"points": " pts", "difference": "", "ratio": "%"}[comparison]


def change(metric: str, effect: Any) -> str:
    """A verdict's effect: "−10.0 pts" (rates), "−30.0%" (latency, throughput), "−0.100" (scores)."""
    v = _finite(effect)
    if v is None:
        return MISSING
    comparison = _comparison(metric)
    return _change_number(comparison, v) + _change_unit(comparison)


def interval(metric: str, bounds: Any) -> str:
    """A verdict's interval in the same unit as its change: "−14.9 to −6.6 pts", "−39.1% to −19.3%"."""
    if not bounds or len(bounds) != 2:
        return MISSING
    low, high = _finite(bounds[0]), _finite(bounds[1])
    if low is None or high is None:
        return MISSING
    comparison = _comparison(metric)
    unit = _change_unit(comparison)
    if comparison == "ratio":
        return f"{_change_number(comparison, low)}% to {_change_number(comparison, high)}%"
    return f"{_change_number(comparison, low)} to {_change_number(comparison, high)}{unit}"


def noise_floor(metric: str, floor: Any) -> str:
    """An A/A noise floor in the unit of the metric's change: "±3.1%" (ratios), "±2.0 pts" (rates)."""
    v = _finite(floor)
    if v is None:
        return MISSING
    comparison = _comparison(metric.removeprefix("open_loop:"))
    if comparison == "difference":
        return f"±{v:.3f}"
    return f"±{v * 100:.1f}" + ("%" if comparison == "ratio" else " pts")


def metric_display(metric: dict[str, Any]) -> dict[str, str]:
    """What people read of one stored metric verdict (``MetricVerdict.to_dict()``)."""
    name = str(metric.get("metric", ""))
    return {
        "label": metric_label(name),
        "baseline": metric_value(name, metric.get("baseline")),
        "candidate": metric_value(name, metric.get("candidate")),
        "change": change(name, metric.get("effect")),
        "interval": interval(name, metric.get("interval")),
        "samples": f"{metric['n']:,}" if isinstance(metric.get("n"), int) else MISSING,
        # The backend's A/A calibration: how far two identical engines already differ on it.
        "noise_floor": noise_floor(name, (metric.get("details") or {}).get("noise_floor")),
    }


# The A/A floors a calibration's table shows (every floor is stored; the API lists them all).
FLOOR_COLUMNS = ("ttft_p50", "ttft_p95", "tpot_p50", "e2e_p50", "e2e_p95", "output_throughput", "goodput")


def calibration_rows(
    tasks: list[str], floors: dict[str, Any], discordance: dict[str, Any], task_errors: dict[str, str]
) -> list[dict[str, Any]]:
    """Per task of a calibration: the share of samples its two sides disagreed on and the floors of
    ``FLOOR_COLUMNS`` as people read them, or why the task has none."""
    rows = []
    for task in tasks:
        counted = discordance.get(task) or {}
        rate = _finite(counted.get("rate"))
        share = MISSING if rate is None else f"{rate:.1%} ({counted.get('discordant')}/{counted.get('paired')})"
        by_metric = floors.get(task) or {}
        rows.append(
            {
                "task": task,
                "error": task_errors.get(task, ""),
                "discordance": share,
                "floors": [noise_floor(m, by_metric.get(m)) for m in FLOOR_COLUMNS],
            }
        )
    return rows


def duration(seconds: Any) -> str:
    """Engine time, rounded to what a plan can promise: "45 s", "16 min", "2.5 h"."""
    s = _finite(seconds)
    if s is None:
        return MISSING
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"
