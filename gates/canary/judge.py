"""Judging one task in one canary round: the candidate slice against the baseline slice.

Each signal of the policy's ``canary`` section is a guardrail judged by the gate's own judge:
bad-outcome rates with ``gates.judge.counts`` (an interval of the difference, in points), latency
quantiles from the histograms with ``judge_latency_quantile``: the two slices' quantiles against a
relative margin, where a breach counts as one only when the quantiles' intervals from the bucket
counts show it (otherwise the round is inconclusive: the canary goes on, pauses for people past the
policy's run of inconclusive rounds, and never promotes on its own after one). A slice with
fewer requests than the policy's per-round minimum is inconclusive, never a pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gates.canary.queries import PeakReading, SliceNumbers
from gates.judge.counts import judge_bad_rate
from gates.judge.performance import judge_point
from gates.judge.records import MetricVerdict, unmeasured_verdict
from gates.judge.rules import Rule
from gates.judge.stats import quantile_bounds
from gates.judge.wording import signed
from gates.policy.metrics import CANARY_SIGNALS
from gates.policy.rules import CanaryRule

# Worst first: the task's status is its worst verdict.
SEVERITY = ("error", "fail", "inconclusive", "pass")


@dataclass
class TaskRound:
    """A task's result in one round."""

    task: str
    status: str
    verdicts: list[MetricVerdict]
    candidate: SliceNumbers
    baseline: SliceNumbers
    critical_failures: list[str] = field(default_factory=list)
    peak: PeakReading | None = None

    @property
    def reason(self) -> str:
        """The verdict that decided the status, in words (a critical failure before any other)."""
        deciding = [verdict for verdict in self.verdicts if verdict.status == self.status]
        deciding.sort(key=lambda verdict: not verdict.critical)
        if deciding:
            return deciding[0].reason
        return f"{self.task}: every canary signal within its margin."

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "critical_failures": self.critical_failures,
            "reason": self.reason,
            "candidate": self.candidate.to_dict(),
            "baseline": self.baseline.to_dict(),
            "verdicts": [verdict.to_dict() for verdict in self.verdicts],
            "peak": self.peak.to_dict() if self.peak else None,
        }


def latency_quantiles(rule: CanaryRule) -> list[tuple[str, str, float]]:
    """(signal, histogram phase, quantile) of every latency signal the policy judges."""
    specs = [CANARY_SIGNALS[signal.metric] for signal in rule.signals]
    return [(spec.name, spec.phase, spec.quantile) for spec in specs if spec.family == "latency"]


def judge_task_round(task: str, *, candidate: SliceNumbers, baseline: SliceNumbers, rule: CanaryRule) -> TaskRound:
    """Judge every canary signal of ``task``; the task's status is the worst verdict."""
    verdicts: list[MetricVerdict] = []
    for signal in rule.signals:
        spec = CANARY_SIGNALS[signal.metric]
        judged = Rule(
            metric=signal.metric,
            kind="guardrail",
            label=signal.label,
            confidence=signal.confidence,
            margin=signal.margin,
            critical=signal.critical,
            min_n=rule.min_requests_per_round,
            source="canary",
        )
        if spec.family == "rate":
            verdicts.append(
                judge_bad_rate(
                    judged,
                    task,
                    base_events=baseline.outcomes.get(spec.outcome, 0),
                    base_n=baseline.requests,
                    cand_events=candidate.outcomes.get(spec.outcome, 0),
                    cand_n=candidate.requests,
                )
            )
            continue
        fewest = min(candidate.requests, baseline.requests)
        if fewest < rule.min_requests_per_round:
            # One quantile per slice has no interval: the per-round minimum is what makes it evidence.
            verdicts.append(
                unmeasured_verdict(
                    task=task,
                    metric=signal.metric,
                    kind="guardrail",
                    status="inconclusive",
                    test="histogram quantile per slice",
                    reason=f"{signal.label} is not judged on {fewest} requests; the policy asks for "
                    f"{rule.min_requests_per_round} per slice and round.",
                    samples_needed=rule.min_requests_per_round - fewest,
                    critical=signal.critical,
                    source="canary",
                )
            )
            continue
        verdicts.append(
            judge_latency_quantile(
                judged,
                task,
                q=spec.quantile,
                baseline=(baseline.latency_ms.get(signal.metric), baseline.latency_buckets.get(spec.phase, [])),
                candidate=(candidate.latency_ms.get(signal.metric), candidate.latency_buckets.get(spec.phase, [])),
            )
        )
    status = min((verdict.status for verdict in verdicts), key=SEVERITY.index, default="inconclusive")
    critical = [verdict.metric for verdict in verdicts if verdict.status == "fail" and verdict.critical]
    return TaskRound(task, status, verdicts, candidate, baseline, critical)


Reading = tuple[float | None, Sequence[tuple[float, float]]]


def judge_latency_quantile(rule: Rule, task: str, *, q: float, baseline: Reading, candidate: Reading) -> MetricVerdict:
    """A latency quantile of the candidate slice against the baseline slice's, each read as
    Prometheus interpolates it (ms) with its histogram's cumulative bucket counts.

    Within the margin is a pass, as one figure per slice reads it. Beyond it is a failure only when
    the interval of the ratio is beyond it too: each slice's quantile bounded by its order
    statistics (``quantile_bounds``, at half the policy's error rate each, so both hold together at
    its confidence). Otherwise the round is inconclusive: a pause or a rollback never rests on one
    histogram's interpolation over a minute of requests.
    """
    point = judge_point(rule, task, baseline[0], candidate[0], "ms", hib=False)
    if point.status != "fail" or point.effect is None:
        return point
    each = 1 - (1 - rule.confidence) / 2
    base_bounds = quantile_bounds(baseline[1], q, each)
    cand_bounds = quantile_bounds(candidate[1], q, each)
    low, high = 0.0, math.inf
    if base_bounds is not None and cand_bounds is not None:
        (base_low, base_high), (cand_low, cand_high) = base_bounds, cand_bounds
        low = cand_low / base_high if 0 < base_high < math.inf else 0.0
        high = cand_high / base_low if base_low > 0 else math.inf
    shown = f"{signed((low - 1) * 100)}% to " + (f"{signed((high - 1) * 100)}%" if math.isfinite(high) else "unbounded")
    test = f"histogram quantile per slice; order-statistic interval of the ratio from the bucket counts ({shown})"
    if low > 1 + rule.margin:
        return replace(
            point,
            interval=(low, high),
            test=test,
            reason=f"{point.reason} The buckets' interval puts the candidate's {shown} off the baseline's.",
        )
    return replace(
        point,
        status="inconclusive",
        interval=(low, high),
        test=test,
        reason=f"{point.reason.removesuffix('.')}, but the interval the two histograms allow ({shown}) reaches "
        "back inside the margin: this round cannot tell a regression from its own noise.",
    )
