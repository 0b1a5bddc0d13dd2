"""Judges of live counts: a bad outcome's rate in two unpaired slices of traffic (a canary round).

A canary round sees counters, not samples: ``k`` of ``n`` requests in the candidate slice ended
in, say, a tool-argument error, against ``k'`` of ``n'`` in the baseline slice. The difference of
the two rates gets Newcombe's hybrid score interval (two Wilson intervals combined), which stays
honest at zero events and needs no resampling however many requests a slice saw. The verdict then
goes through the same non-inferiority classification, wording and minimum-count rules as every
other metric of the judge.
"""

from __future__ import annotations

import math

from scipy import stats as sps

from gates.judge.records import MetricVerdict
from gates.judge.rules import Rule, classify, finish, missing, rate_sentence


def wilson_interval(events: int, n: int, confidence: float) -> tuple[float, float]:
    """Wilson score interval of a proportion ``events / n``."""
    if n <= 0:
        return (0.0, 1.0)
    z = float(sps.norm.ppf(0.5 + confidence / 2))
    p = events / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def newcombe_interval(
    base_events: int, base_n: int, cand_events: int, cand_n: int, confidence: float
) -> tuple[float, float]:
    """Newcombe's (1998, method 10) interval for ``cand_rate − base_rate`` of two unpaired proportions."""
    p_base, p_cand = base_events / base_n, cand_events / cand_n
    low_base, high_base = wilson_interval(base_events, base_n, confidence)
    low_cand, high_cand = wilson_interval(cand_events, cand_n, confidence)
    diff = p_cand - p_base
    low = diff - math.sqrt((p_cand - low_cand) ** 2 + (high_base - p_base) ** 2)
    high = diff + math.sqrt((high_cand - p_cand) ** 2 + (p_base - low_base) ** 2)
    return (low, high)


def judge_bad_rate(
    rule: Rule, task: str, *, base_events: int, base_n: int, cand_events: int, cand_n: int
) -> MetricVerdict:
    """Rate of a bad outcome (errors, parse errors, refusals…), lower is better, judged in points.

    A guardrail fails when the candidate's rate exceeds the baseline's by more than the margin
    with confidence; a slice with fewer requests than ``rule.min_n`` is inconclusive.
    """
    if base_n <= 0 or cand_n <= 0:
        return missing(rule, task, "request in the slice")
    base_events, cand_events = min(base_events, base_n), min(cand_events, cand_n)
    base_rate, cand_rate = base_events / base_n, cand_events / cand_n
    low, high = newcombe_interval(base_events, base_n, cand_events, cand_n, rule.confidence)
    # The classification reads a "higher is better" scale: fewer bad outcomes on the candidate.
    good, good_interval = base_rate - cand_rate, (-high, -low)
    status = classify(rule, good, good_interval, significant_regression=good_interval[1] < 0)
    sentence = rate_sentence(
        rule,
        status,
        baseline=base_rate,
        candidate=cand_rate,
        effect=cand_rate - base_rate,
        interval=(low, high),
        counts=f"({cand_events} of {cand_n} candidate requests, {base_events} of {base_n} baseline requests)",
    )
    z = float(sps.norm.ppf(0.5 + rule.confidence / 2))
    return finish(
        rule,
        task,
        status=status,
        n=min(base_n, cand_n),
        baseline=base_rate,
        candidate=cand_rate,
        effect=cand_rate - base_rate,
        interval=(low, high),
        test="Newcombe hybrid score interval of the difference of two unpaired proportions",
        sentence=sentence,
        good_effect=good,
        std_error=(high - low) / (2 * z) if high > low else math.inf,
        details={
            "base_events": base_events,
            "base_requests": base_n,
            "cand_events": cand_events,
            "cand_requests": cand_n,
            "effect_is": "difference cand − base (points; lower is better)",
        },
    )
