"""The A/A noise floor: how far two identical engines measured together already differ.

A calibration measures a backend against itself (two engines, interleaved, the same prompts) and
keeps, per task and metric, the **noise floor**: the farthest the judge's own comparison of the two
identical sides reaches from "no change" — the largest of |effect − neutral| and |bound − neutral|
over the effect and both ends of its confidence interval, where neutral is 1 for a ratio (latency
percentiles paired by prompt, output throughput over block pairs) and 0 for a difference (goodput,
in points). It is a fraction on the judged scale: 0.04 for a latency P95 means two identical
engines were measured up to 4 % apart, at the policy's confidence. For the pass rate the floor is
the **discordance rate**, the share of paired samples whose verdicts differ, which bounds any
pass-rate difference of two identical engines.

The judge never counts an improvement inside the floor as a benefit: a promised improvement whose
effect is within the floor fails when its whole interval is (confidently no benefit beyond noise)
and is inconclusive otherwise. Every verdict with a floor carries it in ``details["noise_floor"]``.
Pure: the floors come in as plain data (``NoiseFloor``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from scipy import stats as sps

from gates.judge import stats
from gates.judge.metric_judge import has_evidence, judge_metric
from gates.judge.pairing import pair_samples
from gates.judge.records import MetricVerdict, RunTaskEvidence, TaskEvidence
from gates.judge.rules import Rule
from gates.policy.metrics import METRIC_SPECS
from gates.policy.rules import TaskPolicy

# Every latency and throughput metric the judge can be asked to find an improvement in.
TIMED_METRICS = tuple(m for m, spec in METRIC_SPECS.items() if spec.family in ("latency", "throughput", "goodput"))
# The open-loop point's metrics are floored under their own names (``open_loop:ttft_p95``).
OPEN_LOOP_PREFIX = "open_loop:"
FLOOR_CONFIDENCE = 0.95
# Where a verdict was measured, when not at the closed-loop point (``details["load_point"]``).
LOAD_POINT = "load_point"


@dataclass(frozen=True)
class NoiseFloor:
    """One task's A/A floors, by metric name, and which calibration measured them."""

    source: str
    floors: Mapping[str, float]


@dataclass(frozen=True)
class Discordance:
    """How often the two identical sides disagreed on a sample's pass/fail."""

    discordant: int
    paired: int

    @property
    def rate(self) -> float | None:
        return self.discordant / self.paired if self.paired else None


def discordance(base: RunTaskEvidence, cand: RunTaskEvidence) -> Discordance:
    """Samples both sides answered, and how many of them one side passed and the other failed."""
    pairing = pair_samples(base.passed, cand.passed)
    differing = sum(bool(b) != bool(c) for b, c in zip(pairing.base, pairing.cand, strict=True))
    return Discordance(discordant=differing, paired=len(pairing.base))


def _neutral(metric: str) -> float:
    return 0.0 if METRIC_SPECS[metric].family == "goodput" else 1.0


def _reach(verdict: MetricVerdict, neutral: float) -> float | None:
    """The farthest the verdict's effect or interval lies from ``neutral`` (None: nothing measured)."""
    values = [verdict.effect, *(verdict.interval or ())]
    finite = [abs(v - neutral) for v in values if v is not None and math.isfinite(v)]
    return max(finite) if finite else None


def aa_floors(
    evidence: TaskEvidence, task_policy: TaskPolicy, *, seed: int = 0, n_boot: int = stats.DEFAULT_N_BOOT
) -> dict[str, float]:
    """The noise floor of every timed metric both identical sides measured, and the pass rate's.

    The A/A pair is judged with each metric's own test (the judge's), as a report-only rule.
    """
    floors: dict[str, float] = {}
    points = [("", evidence)]
    if (open_loop := evidence.open_loop()) is not None:
        points.append((OPEN_LOOP_PREFIX, open_loop))
    for prefix, point in points:
        for metric in TIMED_METRICS:
            if not has_evidence(METRIC_SPECS[metric], point):
                continue
            rule = Rule(metric=metric, kind="tradeable", label=metric, confidence=FLOOR_CONFIDENCE, min_n=0)
            reach = _reach(judge_metric(rule, point, task_policy, seed=seed, n_boot=n_boot), _neutral(metric))
            if reach is not None:
                floors[prefix + metric] = reach
    rate = discordance(evidence.base, evidence.cand).rate
    if rate is not None:
        floors["pass_rate"] = rate
    return floors


def floor_key(verdict: MetricVerdict) -> str:
    """The floor a verdict is read against: its metric, at the load point it was measured at."""
    if verdict.details.get(LOAD_POINT) == "open_loop" and not verdict.metric.startswith(OPEN_LOOP_PREFIX):
        return OPEN_LOOP_PREFIX + verdict.metric
    if verdict.details.get(LOAD_POINT) == "stress":
        return "stress:" + verdict.metric  # never calibrated: the stress profile is not part of A/A
    return verdict.metric


def _good(verdict: MetricVerdict, value: float) -> float:
    """A ratio or difference on the "+ is better" scale the floor is measured on."""
    metric = verdict.metric.removeprefix(OPEN_LOOP_PREFIX)
    spec = METRIC_SPECS[metric]
    if spec.family == "goodput" or spec.family == "pass_fail":
        return value if spec.higher_is_better else -value
    return value - 1 if spec.higher_is_better else 1 - value


def _size(verdict: MetricVerdict, floor: float) -> str:
    metric = verdict.metric.removeprefix(OPEN_LOOP_PREFIX)
    if METRIC_SPECS[metric].family in ("goodput", "pass_fail"):
        return f"±{floor * 100:.1f} points"
    return f"±{floor * 100:.1f}%"


def apply_noise_floor(verdict: MetricVerdict, noise: NoiseFloor | None) -> MetricVerdict:
    """Show ``verdict`` against its A/A floor, and refuse a promised benefit that lies inside it.

    Only a passing improvement (objective, mechanism or bottleneck rule) can change: when its effect
    is within the floor it fails if its whole interval is, and is inconclusive otherwise.
    """
    if noise is None:
        return verdict
    floor = noise.floors.get(floor_key(verdict))
    if floor is None:
        return verdict
    details = {**verdict.details, "noise_floor": floor, "noise_floor_from": noise.source}
    verdict = replace(verdict, details=details)
    promised = verdict.kind in ("objective", "mechanism")
    if not promised or verdict.status != "pass" or verdict.effect is None:
        return verdict
    good = _good(verdict, verdict.effect)
    if good > floor:
        return verdict
    bounds = sorted(_good(verdict, v) for v in verdict.interval) if verdict.interval else [good, good]
    confidently_inside = bounds[1] <= floor
    within = f"within the A/A noise floor of {_size(verdict, floor)} ({noise.source})"
    reason = verdict.reason.rstrip(".") + f"; but that is {within}, so it is not counted as a benefit."
    if confidently_inside:
        return replace(verdict, status="fail", reason=reason)
    # The interval reaches past the floor: more samples could show the benefit clears it.
    z = float(sps.norm.ppf(0.5 + FLOOR_CONFIDENCE / 2))
    std_error = (bounds[1] - bounds[0]) / (2 * z) if bounds[1] > bounds[0] else math.inf
    needed = stats.samples_needed(n=max(verdict.n, 1), effect=good, threshold=floor, std_error=std_error)
    reason = reason.rstrip(".") + f"; about {needed} more samples would likely settle it."
    return replace(verdict, status="inconclusive", reason=reason, samples_needed=needed)
