"""Asking Prometheus for a canary round: one slice of traffic's requests, outcomes and latencies.

A *slice* is one task type served by one backend for a set of tenants (the canary tenants) or for
every tenant but those. The numbers come from the business-signal contract
(``gates.canary.contract``) through Prometheus' HTTP API (``/api/v1/query``, an instant query at
the round's end), over a look-back window:

* outcomes: ``sum by (outcome) (increase(optgate_outcome_total{…}[W]))``;
* latency quantiles: ``histogram_quantile(q, sum by (le) (rate(optgate_request_duration_seconds_bucket{…}[W])))``,
  and the bucket counts behind them, ``sum by (le) (increase(…_bucket{…}[W]))``, which give the
  quantile an interval (``gates.judge.stats.quantile_bounds``).

Every query and what it returned is kept for the round's ledger entry. A transport failure, a
non-JSON answer or an answer with ``status: error`` raises ``PrometheusError``: the round is an
error, never a pass.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from core import http
from gates.canary.contract import DURATION_METRIC, HUMAN_RETURN, OUTCOME_METRIC, REQUEST_OUTCOMES


class PrometheusError(Exception):
    """Prometheus could not answer a query (unreachable, timed out, or an error answer)."""


@dataclass(frozen=True)
class Slice:
    """One task on one backend, for the given tenants (or, with ``exclude``, for all others)."""

    task: str
    backend: str
    tenants: tuple[str, ...]
    exclude: bool = False

    def selector(self, **extra: str) -> str:
        tenants = "|".join(re.escape(tenant) for tenant in self.tenants)
        matchers = [f'task="{_quote(self.task)}"', f'backend="{_quote(self.backend)}"']
        if self.tenants:
            matchers.append(f'tenant{"!~" if self.exclude else "=~"}"{_quote(tenants)}"')
        matchers += [f'{name}="{_quote(value)}"' for name, value in extra.items()]
        return ",".join(matchers)


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


@dataclass
class SliceNumbers:
    """What a slice saw over the window: requests (human returns excluded), outcome counts, and
    latency quantiles in ms (None where the histogram had no observations), with each phase's
    cumulative bucket counts ``[(upper bound in ms, count), ...]`` (kept in the round's query log,
    not in its summary)."""

    requests: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    latency_ms: dict[str, float | None] = field(default_factory=dict)
    latency_buckets: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "outcomes": dict(self.outcomes), "latency_ms": dict(self.latency_ms)}


@dataclass
class Prometheus:
    """An instant-query client for one Prometheus server; remembers every query it sent."""

    url: str
    timeout_s: float = 10.0
    log: list[dict[str, Any]] = field(default_factory=list)

    def query(self, promql: str, *, at: datetime, purpose: str) -> list[dict[str, Any]]:
        """The result vector of ``promql`` evaluated at ``at``."""
        try:
            body = http.get_json(
                f"{self.url}/api/v1/query",
                params={"query": promql, "time": f"{at.timestamp():.3f}"},
                timeout_s=self.timeout_s,
            )
        except httpx.HTTPError as exc:
            self.log.append({"purpose": purpose, "query": promql, "error": str(exc) or type(exc).__name__})
            raise PrometheusError(
                f"Prometheus at {self.url} could not be reached: {exc or type(exc).__name__}"
            ) from exc
        except ValueError as exc:
            self.log.append({"purpose": purpose, "query": promql, "error": "not JSON"})
            raise PrometheusError(f"Prometheus at {self.url} answered something other than JSON") from exc
        if not isinstance(body, dict) or body.get("status") != "success":
            problem = body.get("error", "no status") if isinstance(body, dict) else "not an object"
            self.log.append({"purpose": purpose, "query": promql, "error": str(problem)})
            raise PrometheusError(f"Prometheus refused the query {promql!r}: {problem}")
        data = body.get("data") or {}
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list):
            self.log.append({"purpose": purpose, "query": promql, "error": "no result vector"})
            raise PrometheusError(f"Prometheus answered {promql!r} without a result vector")
        self.log.append(
            {
                "purpose": purpose,
                "query": promql,
                "result": [{"metric": item.get("metric", {}), "value": _value(item)} for item in result],
            }
        )
        return result


def _value(item: dict[str, Any]) -> float | None:
    try:
        value = float(item["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _window(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def slice_numbers(
    prometheus: Prometheus, part: Slice, *, at: datetime, window_s: float, quantiles: Sequence[tuple[str, str, float]]
) -> SliceNumbers:
    """Requests, outcomes and the asked latency quantiles (name, phase, q) of one slice."""
    name = f"{part.task} on {part.backend} ({'other tenants' if part.exclude else 'canary tenants'})"
    window = _window(window_s)
    rows = prometheus.query(
        f"sum by (outcome) (increase({OUTCOME_METRIC}{{{part.selector()}}}[{window}]))",
        at=at,
        purpose=f"outcomes: {name}",
    )
    outcomes: dict[str, int] = {}
    for row in rows:
        outcome = str(row.get("metric", {}).get("outcome", ""))
        value = _value(row)
        if outcome and value is not None:
            # increase() extrapolates to the window's edges; counts are whole requests.
            outcomes[outcome] = round(value)
    numbers = SliceNumbers(
        requests=sum(count for outcome, count in outcomes.items() if outcome in REQUEST_OUTCOMES),
        outcomes=outcomes,
    )
    for metric, phase, q in quantiles:
        rows = prometheus.query(
            f"histogram_quantile({q:g}, sum by (le) (rate({DURATION_METRIC}_bucket{{{part.selector(phase=phase)}}}"
            f"[{window}])))",
            at=at,
            purpose=f"{metric}: {name}",
        )
        seconds = _value(rows[0]) if rows else None
        numbers.latency_ms[metric] = seconds * 1000 if seconds is not None else None
        if phase in numbers.latency_buckets:
            continue  # one phase's buckets serve every quantile of it (e2e_p50 and e2e_p95)
        rows = prometheus.query(
            f"sum by (le) (increase({DURATION_METRIC}_bucket{{{part.selector(phase=phase)}}}[{window}]))",
            at=at,
            purpose=f"{phase} buckets: {name}",
        )
        numbers.latency_buckets[phase] = sorted(
            (float(row["metric"]["le"]) * 1000, count)
            for row in rows
            if "le" in row.get("metric", {}) and (count := _value(row)) is not None
        )
    return numbers


def requests_since(prometheus: Prometheus, part: Slice, *, at: datetime, since: datetime) -> int:
    """The slice's requests from ``since`` to ``at``: the traffic a canary has seen so far."""
    window = _window((at - since).total_seconds())
    rows = prometheus.query(
        f'sum(increase({OUTCOME_METRIC}{{{part.selector()},outcome!="{HUMAN_RETURN}"}}[{window}]))',
        at=at,
        purpose=f"traffic since the canary started: {part.task} on {part.backend}",
    )
    value = _value(rows[0]) if rows else None
    return round(value) if value is not None else 0


@dataclass(frozen=True)
class PeakReading:
    """A task's traffic now (over the round) against its busiest period in the look-back, per second."""

    rate: float
    busiest: float | None
    fraction: float

    @property
    def at_peak(self) -> bool:
        """The round carried at least ``fraction`` of the busiest period's rate (the busiest so far
        when the look-back holds no earlier traffic)."""
        if self.rate <= 0:
            return False
        return not self.busiest or self.rate >= self.fraction * self.busiest

    def to_dict(self) -> dict[str, Any]:
        return {"rate": self.rate, "busiest": self.busiest, "fraction": self.fraction, "at_peak": self.at_peak}


def peak_reading(
    prometheus: Prometheus,
    task: str,
    *,
    at: datetime,
    window_s: float,
    period_s: float,
    lookback_s: float,
    fraction: float,
) -> PeakReading:
    """The task's request rate over the round and its busiest ``period_s`` rate over ``lookback_s``,
    on every backend and tenant (the task's whole traffic, whatever the canary routes)."""
    selector = f'task="{_quote(task)}",outcome!="{HUMAN_RETURN}"'
    period = _window(period_s)
    # Overlapping periods (a step of a quarter period): with steps of a whole period, an increase
    # between the last scrape of one window and the first of the next would fall in neither.
    step = _window(period_s / 4)
    now_rows = prometheus.query(
        f"sum(rate({OUTCOME_METRIC}{{{selector}}}[{_window(window_s)}]))", at=at, purpose=f"traffic this round: {task}"
    )
    busiest_rows = prometheus.query(
        f"max_over_time(sum(rate({OUTCOME_METRIC}{{{selector}}}[{period}]))[{_window(lookback_s)}:{step}])",
        at=at,
        purpose=f"busiest {period} of traffic in the look-back: {task}",
    )
    rate = (_value(now_rows[0]) if now_rows else None) or 0.0
    busiest = _value(busiest_rows[0]) if busiest_rows else None
    return PeakReading(rate=rate, busiest=busiest, fraction=fraction)
