"""Rules a beneficiary task answers to because of its mechanism or its targeted bottleneck.

Speculative decoding must keep its draft acceptance rate above a floor and shorten E2E latency;
a prefix cache must hit and cut TTFT; a targeted bottleneck must show the promised improvement on
the first of its metrics both runs measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gates.judge.metric_judge import has_evidence, judge_metric
from gates.judge.noise import LOAD_POINT
from gates.judge.records import MetricVerdict, TaskEvidence, unmeasured_verdict
from gates.judge.rules import Rule, min_samples_for
from gates.judge.wording import pct
from gates.policy.metrics import metric_spec
from gates.policy.rules import Policy, TaskPolicy


def _floor_verdict(
    ev: TaskEvidence,
    *,
    metric: str,
    source: str,
    floor: float,
    baseline: float | None,
    label: str,
    unscraped: str,
    below: str,
) -> MetricVerdict:
    """A mechanism's engine counter on the candidate against its floor (inconclusive if unscraped)."""
    rate = ev.cand.engine.get(metric)
    common: dict[str, Any] = {
        "task": ev.task,
        "metric": metric,
        "kind": "mechanism",
        "n": 1,
        "baseline": baseline,
        "effect": None,
        "interval": None,
        "test": "floor check on the candidate's engine counters",
        "source": source,
    }
    if rate is None:
        return MetricVerdict(**common, status="inconclusive", candidate=None, reason=unscraped)
    ok = rate >= floor
    why = "" if ok else below
    return MetricVerdict(
        **common,
        status="pass" if ok else "fail",
        candidate=rate,
        reason=f"{label} is {pct(rate)}, {'at or above' if ok else 'below'} the {pct(floor)} floor{why}.",
    )


def _acceptance_verdict(ev: TaskEvidence, floor: float) -> MetricVerdict:
    return _floor_verdict(
        ev,
        metric="spec_decode_acceptance_rate",
        source="speculative_decoding",
        floor=floor,
        baseline=None,
        label="Draft acceptance rate",
        unscraped="No speculative-decoding acceptance counters were scraped from the candidate, so the "
        "draft acceptance rate could not be checked.",
        below=", so drafting wastes target-model compute on this task",
    )


def _hit_rate_verdict(ev: TaskEvidence, floor: float) -> MetricVerdict:
    return _floor_verdict(
        ev,
        metric="prefix_cache_hit_rate",
        source="prefix_cache",
        floor=floor,
        baseline=ev.base.engine.get("prefix_cache_hit_rate"),
        label="Prefix-cache hit rate",
        unscraped="No prefix-cache counters were scraped from the candidate, so the hit rate could not be checked.",
        below="; a per-request prefix (such as a trace id at the front of the prompt) or a changing system "
        "prompt keeps the cache from hitting",
    )


def _explain_prefix_ttft(verdict: MetricVerdict, hit: MetricVerdict) -> MetricVerdict:
    """A cache that hits without a TTFT gain means prefill was not the bottleneck: say so."""
    if hit.status != "pass" or verdict.status != "fail" or hit.candidate is None:
        return verdict
    reason = (
        verdict.reason[:-1] + f", although the prefix cache hits {pct(hit.candidate)} of the time, so the "
        "bottleneck is elsewhere (queueing or decode), not prefill."
    )
    return replace(verdict, reason=reason)


def _improvement_rule(
    metric: str, label: str, confidence: float, min_improvement: float, task_policy: TaskPolicy, source: str
) -> Rule:
    """A mechanism or bottleneck promise: ``metric`` must improve by at least ``min_improvement``."""
    return Rule(
        metric,
        "mechanism",
        label,
        confidence,
        min_improvement=min_improvement,
        min_n=min_samples_for(task_policy, metric),
        source=source,
    )


def mechanism_verdicts(
    policy: Policy, ev: TaskEvidence, task_policy: TaskPolicy, mechanisms: Sequence[str], seed: int
) -> list[MetricVerdict]:
    """The verdicts of the speculative-decoding and prefix-cache rules, for the active mechanisms."""
    verdicts: list[MetricVerdict] = []
    if "speculative_decoding" in mechanisms:
        rule = policy.speculative_decoding
        verdicts.append(_acceptance_verdict(ev, rule.min_acceptance_rate))
        for metric in ("e2e_p50", "e2e_p95"):
            r = _improvement_rule(
                metric,
                metric_spec(metric).label,
                rule.confidence,
                rule.min_e2e_improvement,
                task_policy,
                "speculative_decoding",
            )
            verdicts.append(judge_metric(r, ev, task_policy, seed=seed, n_boot=policy.n_boot))
    if "prefix_cache" in mechanisms:
        rule_pc = policy.prefix_cache
        hit = _hit_rate_verdict(ev, rule_pc.min_hit_rate)
        r = _improvement_rule(
            "ttft_p50",
            "TTFT P50 on the shared-prefix workload",
            rule_pc.confidence,
            rule_pc.min_ttft_improvement,
            task_policy,
            "prefix_cache",
        )
        ttft = judge_metric(r, ev, task_policy, seed=seed, n_boot=policy.n_boot)
        verdicts += [hit, _explain_prefix_ttft(ttft, hit)]
    return verdicts


# Stress profiles that make a bottleneck show, named in the verdict when a workload did not.
STRESS_PROFILES = {
    "kv_memory": "long contexts at high concurrency, so the KV cache fills and requests are preempted",
    "queueing": "open-loop (Poisson) arrivals near the baseline's capacity, so requests wait in the queue",
}
# The test named by a bottleneck verdict whose workload never met the bottleneck: measuring the same
# workload afresh cannot settle it either (gates.services.evaluation stages around it).
NOT_EXERCISED = "none (the bottleneck was not exercised)"
# Below these, neither side met the bottleneck: no preemption and KV-cache use under 90 % at its
# peak, or under 5 ms of mean queue time in the engine.
KV_PRESSURE = 0.9
QUEUE_FLOOR_MS = 5.0


def not_exercised(bottleneck: str, ev: TaskEvidence) -> str | None:
    """Why neither side's workload exercised ``bottleneck`` (None when one did, or it cannot tell)."""
    sides = (ev.base.engine, ev.cand.engine)
    if bottleneck == "kv_memory":
        preempted = [side.get("preemptions") for side in sides]
        peaks = [side.get("kv_cache_usage_peak") for side in sides]
        if None in preempted or any(preempted) or None in peaks:
            return None
        if any(side.get("kv_waiting_peak") for side in sides):
            return None  # requests waited for room in the cache: the bottleneck was met
        peak = max(float(p) for p in peaks if p is not None)
        if peak >= KV_PRESSURE:
            return None
        return f"neither side preempted a request or held one back for KV room, and KV-cache use peaked at {peak:.0%}"
    if bottleneck == "queueing":
        waits = [side.get("engine_queue_mean_ms") for side in sides]
        if None in waits or max(float(w) for w in waits if w is not None) >= QUEUE_FLOOR_MS:
            return None
        return f"requests waited {max(float(w) for w in waits if w is not None):.1f} ms at most on average in the queue"
    return None


def _telling_metric(metrics: Sequence[str], ev: TaskEvidence) -> str:
    """The first of ``metrics`` both sides measured and that moved on either side (an engine count
    that stayed 0 on both, like preemptions vLLM v1 avoids, says nothing); else the first measured."""
    measured = [m for m in metrics if has_evidence(metric_spec(m), ev)]
    for metric in measured:
        spec = metric_spec(metric)
        if spec.family != "engine" or ev.base.engine.get(spec.field) or ev.cand.engine.get(spec.field):
            return metric
    return measured[0] if measured else metrics[0]


def bottleneck_verdict(
    policy: Policy, ev: TaskEvidence, task_policy: TaskPolicy, bottleneck: str, seed: int
) -> MetricVerdict:
    """The targeted bottleneck's promised improvement, judged on its first metric with evidence.

    A workload that did not exercise the bottleneck on either side cannot show it moving: the
    verdict is inconclusive and names the stress profile to measure it with, never a failure.
    """
    rule = policy.bottlenecks.get(bottleneck)
    if rule is None:
        return unmeasured_verdict(
            task=ev.task,
            metric=f"bottleneck:{bottleneck}",
            kind="mechanism",
            status="error",
            test="none",
            reason=f"Policy {policy.version_label} has no rule for the targeted bottleneck {bottleneck!r}.",
            source=f"bottleneck:{bottleneck}",
        )
    stressed = ""
    plan = ev.base.stress_plan
    if bottleneck == "queueing" and (point := ev.open_loop()) is not None:
        ev = point  # the queueing stress profile: open-loop arrivals near the baseline's capacity
        rate = ev.base.offered_rate
        stressed = f"even at the open-loop point ({rate:.2f} req/s offered)" if rate else "even at the open-loop point"
    elif bottleneck == "kv_memory" and (point := ev.stressed()) is not None:
        ev = point  # long contexts at a concurrency that needs twice the baseline's KV cache
        stressed = (
            f"even under the kv_memory stress profile ({plan.get('concurrency')} concurrent requests of "
            f"~{plan.get('context_tokens')} tokens)"
        )
    why = not_exercised(bottleneck, ev)
    if why is not None:
        if stressed:
            where = (
                f"{stressed}; this engine has headroom for it on {ev.task}, so the claim needs a heavier "
                "workload to show"
            )
        elif bottleneck == "kv_memory" and plan.get("skipped"):
            where = f"the {bottleneck} stress profile was not run: {plan['skipped']}"
        else:
            where = f"measure {ev.task} under the {bottleneck} stress profile: {STRESS_PROFILES[bottleneck]}"
        return unmeasured_verdict(
            task=ev.task,
            metric=f"bottleneck:{bottleneck}",
            kind="mechanism",
            status="inconclusive",
            test=NOT_EXERCISED,
            reason=(
                f"The targeted {bottleneck} bottleneck was not exercised by this workload ({why}), so "
                f"whether the change relieves it cannot be seen here; {where}."
            ),
            source=f"bottleneck:{bottleneck}",
        )
    metric = _telling_metric(rule.metrics, ev)
    r = _improvement_rule(
        metric,
        f"{metric_spec(metric).label} (targeted {bottleneck} bottleneck)",
        rule.confidence,
        rule.min_improvement,
        task_policy,
        f"bottleneck:{bottleneck}",
    )
    verdict = judge_metric(r, ev, task_policy, seed=seed, n_boot=policy.n_boot)
    if not stressed:
        return verdict
    # Measured at a stress point, not the closed loop: its A/A noise floor is that point's own.
    measured_at = "open_loop" if bottleneck == "queueing" else "stress"
    return replace(verdict, details={**verdict.details, LOAD_POINT: measured_at})
