"""What a metric verdict checks, and the steps every metric judge shares.

A ``Rule`` says whether a metric must not regress (guardrail), must improve (objective,
mechanism) or is reported only (tradeable). The family judges (``quality``, ``performance``)
compute their test and hand the numbers to ``finish``, which applies the minimum sample count and
the samples-needed estimate the same way for every family.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gates.judge import stats
from gates.judge.records import Kind, MetricVerdict, unmeasured_verdict
from gates.judge.wording import moved, pct, points_ci, signed, size
from gates.policy.metrics import is_quality
from gates.policy.rules import TaskPolicy


@dataclass(frozen=True)
class Rule:
    """What a verdict checks: non-inferiority (guardrail), improvement, or report only."""

    metric: str
    kind: Kind
    label: str
    confidence: float = 0.95
    margin: float = 0.0
    min_improvement: float = 0.0
    critical: bool = False
    min_n: int = 1
    source: str = "policy"
    note: str = ""  # why the rule applies, e.g. "critical under weight_quantization"
    slack_ms: float = 0.0  # latency guardrails: a slowdown of up to this many ms is within the margin

    @property
    def check(self) -> str:
        if self.kind == "guardrail":
            return "noninferiority"
        if self.kind == "tradeable":
            return "report"
        return "improvement"


def min_samples_for(task_policy: TaskPolicy, metric: str) -> int:
    """The policy's minimum sample count for ``metric``: quality and latency minimums differ."""
    return task_policy.min_samples.quality if is_quality(metric) else task_policy.min_samples.latency


def metric_seed(base_seed: int, task: str, metric: str, source: str) -> int:
    # A stable per-metric stream: reproducible, and metrics do not share random draws.
    return (base_seed + zlib.crc32(f"{task}/{metric}/{source}".encode())) % (2**32)


def _threshold(rule: Rule, effect: float) -> float:
    """The boundary an inconclusive effect must be shown to clear (for samples-needed)."""
    if rule.check == "noninferiority":
        return -rule.margin
    return 0.0 if effect >= rule.min_improvement else rule.min_improvement


def classify(rule: Rule, effect: float, interval: tuple[float, float], significant_regression: bool) -> str:
    if rule.check == "noninferiority":
        return stats.classify_noninferiority(effect, interval, rule.margin, significant_regression)
    if rule.check == "improvement":
        return stats.classify_improvement(effect, interval, rule.min_improvement)
    return "pass"


def tail(rule: Rule, status: str, unit_word: str) -> str:
    """The clause that says why, relative to the margin or minimum."""
    if rule.check == "noninferiority":
        bound = f"the {size(rule.margin, unit_word)} margin"
        return {
            "pass": f"within {bound}",
            "fail": f"beyond {bound}",
            "inconclusive": f"so a regression beyond {bound} can be neither ruled out nor confirmed",
        }[status]
    if rule.check == "improvement":
        bound = f"the {size(rule.min_improvement, unit_word)} minimum improvement"
        return {
            "pass": f"meeting {bound}",
            "fail": f"short of {bound}",
            "inconclusive": f"so whether it meets {bound} is not yet clear",
        }[status]
    return "a tradeable metric, reported only"


def rate_sentence(
    rule: Rule,
    status: str,
    *,
    baseline: float,
    candidate: float,
    effect: float,
    interval: tuple[float, float],
    counts: str,
) -> str:
    """The sentence of a rate judged in points (pass rates, SLO attainment)."""
    return (
        f"{rule.label} {moved(candidate - baseline)} from {pct(baseline)} to {pct(candidate)} "
        f"({signed(effect * 100)} points, {points_ci(interval, rule.confidence)}) {counts}, "
        f"{tail(rule, status, 'point')}"
    )


def finish(
    rule: Rule,
    task: str,
    *,
    status: str,
    n: int,
    baseline: float | None,
    candidate: float | None,
    effect: float | None,
    interval: tuple[float, float] | None,
    test: str,
    sentence: str,
    good_effect: float,
    std_error: float,
    p_value: float | None = None,
    details: Mapping[str, Any] | None = None,
) -> MetricVerdict:
    """Apply the minimum sample count and the samples-needed estimate, then build the verdict."""
    needed = None
    if status != "fail" and n < rule.min_n and rule.check != "report":
        status = "inconclusive"
        sentence += f"; that is fewer than the {rule.min_n} the policy requires"
    if status == "inconclusive":
        estimate = stats.samples_needed(
            n=max(n, 1),
            effect=good_effect,
            threshold=_threshold(rule, good_effect),
            std_error=std_error,
            confidence=rule.confidence,
        )
        needed = max(estimate, rule.min_n - n)
        sentence += f"; about {needed} more samples would likely settle it"
    return MetricVerdict(
        task=task,
        metric=rule.metric,
        kind=rule.kind,
        status=status,  # type: ignore[arg-type]
        n=n,
        baseline=baseline,
        candidate=candidate,
        effect=effect,
        interval=interval,
        test=test,
        reason=sentence[0].upper() + sentence[1:] + ".",
        samples_needed=needed,
        critical=rule.critical,
        p_value=p_value,
        source=rule.source,
        details={**(details or {}), **({"note": rule.note} if rule.note else {})},
    )


def finish_bootstrap(
    rule: Rule,
    task: str,
    result: stats.BootstrapResult,
    status: str,
    sentence: str,
    *,
    good_effect: float,
    details: Mapping[str, Any] | None = None,
) -> MetricVerdict:
    """``finish`` for a bootstrap result, whose numbers and test are the verdict's own."""
    return finish(
        rule,
        task,
        status=status,
        n=min(result.n_base, result.n_cand),
        baseline=result.baseline,
        candidate=result.candidate,
        effect=result.effect,
        interval=result.interval,
        test=result.test,
        sentence=sentence,
        good_effect=good_effect,
        std_error=result.std_error,
        p_value=result.p_value,
        details=details,
    )


def missing(rule: Rule, task: str, what: str) -> MetricVerdict:
    """No evidence for a metric: inconclusive (more evidence needed), never a failure."""
    return unmeasured_verdict(
        task=task,
        metric=rule.metric,
        kind=rule.kind,
        status="inconclusive",
        test="none (no evidence)",
        reason=f"No {what} was recorded for {rule.label} in one or both runs, so it could not be judged.",
        samples_needed=rule.min_n,
        critical=rule.critical,
        source=rule.source,
    )
