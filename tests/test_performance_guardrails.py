"""Performance guardrails on every task (policy version 3): goodput against the task's SLOs and
P95/P99 latency may not regress beyond their margins, on risk tasks as much as beneficiary ones."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import yaml

from gates.judge.performance import judge_ratio
from gates.judge.records import RequestTiming
from gates.judge.rules import Rule
from gates.judge.verdicts import MetricVerdict, RunTaskEvidence, TaskEvidence, TaskVerdict, judge_task
from gates.policy.metrics import metric_spec
from gates.policy.parse import load_policy, policy_from_dict
from gates.policy.rules import POLICY_DIR, PolicyError

DEFAULT = load_policy("default")
PERFORMANCE_GUARDRAILS = {"goodput", "ttft_p95", "e2e_p95"}


def _lognormal(n: int, seed: int, median: float) -> list[float]:
    return [float(x) for x in np.random.default_rng(seed).lognormal(np.log(median), 0.25, n)]


def evidence(
    n: int = 100, *, ttft: float = 300.0, tpot: float = 20.0, e2e: float = 2000.0, refused: int = 0, seed: int = 0
) -> RunTaskEvidence:
    """A run's load: ``n`` answered requests around the given medians (ms) and ``refused`` failures."""
    ttft_ms, tpot_ms, e2e_ms = _lognormal(n, seed, ttft), _lognormal(n, seed + 1, tpot), _lognormal(n, seed + 2, e2e)
    requests = [RequestTiming(True, a, b, c) for a, b, c in zip(ttft_ms, tpot_ms, e2e_ms, strict=True)]
    requests += [RequestTiming(False)] * refused
    return RunTaskEvidence(
        run_id=f"r{seed}",
        passed=[True] * 200,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        e2e_ms=e2e_ms,
        requests=requests,
        output_throughput=100.0,
    )


def metric(verdict: TaskVerdict, name: str) -> MetricVerdict:
    return next(m for m in verdict.metrics if m.metric == name and m.source == "policy")


def test_every_task_carries_goodput_and_tail_latency_guardrails() -> None:
    for task in DEFAULT.tasks:
        guarded = {rule.metric for rule in DEFAULT.task(task).guardrails}  # type: ignore[union-attr]
        assert guarded >= PERFORMANCE_GUARDRAILS, task
        # P99 over a task's 100 requests is one or two of them: reported, not yet deciding.
        assert "e2e_p99" in {rule.metric for rule in DEFAULT.task(task).tradeable}, task  # type: ignore[union-attr]
    assert DEFAULT.version_label == "default@7"


def test_an_unchanged_risk_task_passes_its_performance_guardrails() -> None:
    verdict = judge_task(DEFAULT, TaskEvidence("code_assistant", evidence(seed=1), evidence(seed=1)), role="risk")
    for name in PERFORMANCE_GUARDRAILS:
        assert metric(verdict, name).status == "pass" and metric(verdict, name).kind == "guardrail", name
    assert verdict.status == "pass"


def test_a_starved_risk_task_fails_its_guardrails_though_its_answers_are_the_same() -> None:
    # max_num_seqs: 1 at concurrency 4: requests queue behind each other (TTFT ×4, E2E ×2).
    base = evidence(seed=2)
    starved = evidence(ttft=1200.0, e2e=4000.0, seed=3)
    verdict = judge_task(DEFAULT, TaskEvidence("code_assistant", base, starved), role="risk")

    assert metric(verdict, "pass_rate").status == "pass"
    assert metric(verdict, "ttft_p95").status == "fail"
    assert metric(verdict, "goodput").status == "fail"  # the 1,000 ms TTFT SLO is missed
    assert verdict.status == "fail"
    assert "goodput" in verdict.reason or "TTFT" in verdict.reason


def test_refused_requests_are_goodput_misses() -> None:
    base = evidence(seed=4)
    refusing = evidence(n=70, refused=30, seed=4)
    verdict = judge_task(DEFAULT, TaskEvidence("compliance_qa", base, refusing), role="risk")
    goodput = metric(verdict, "goodput")
    assert goodput.candidate is not None and goodput.candidate <= 0.70
    assert goodput.baseline is not None and goodput.baseline > 0.95
    assert goodput.status == "fail"


# --- the targeted bottleneck must be exercised before it can be judged --------------------------


def _engine(run: RunTaskEvidence, **engine: float) -> RunTaskEvidence:
    return replace(run, engine=engine)


def test_a_kv_memory_claim_on_a_workload_without_memory_pressure_is_inconclusive_naming_the_profile() -> None:
    base = _engine(evidence(seed=5), preemptions=0.0, kv_cache_usage_peak=0.12)
    cand = _engine(evidence(seed=5), preemptions=0.0, kv_cache_usage_peak=0.10)
    verdict = judge_task(DEFAULT, TaskEvidence("cs_summary", base, cand), role="beneficiary", bottleneck="kv_memory")
    claim = next(m for m in verdict.metrics if m.source == "bottleneck:kv_memory")
    assert claim.status == "inconclusive"  # never "went from 0 to 0" as a failure
    assert "not exercised by this workload" in claim.reason and "peaked at 12%" in claim.reason
    assert "long contexts at high concurrency" in claim.reason


def test_a_kv_memory_claim_is_judged_where_the_baseline_preempts() -> None:
    base = _engine(evidence(seed=6), preemptions=40.0, kv_cache_usage_peak=1.0)
    cand = _engine(evidence(seed=6), preemptions=0.0, kv_cache_usage_peak=0.7)
    verdict = judge_task(DEFAULT, TaskEvidence("cs_summary", base, cand), role="beneficiary", bottleneck="kv_memory")
    claim = next(m for m in verdict.metrics if m.source == "bottleneck:kv_memory")
    assert claim.metric == "preemptions" and claim.status == "pass", claim.reason


def test_a_queueing_claim_without_queueing_is_inconclusive_naming_open_loop_arrivals() -> None:
    base = _engine(evidence(seed=7), engine_queue_mean_ms=0.4)
    cand = _engine(evidence(seed=7), engine_queue_mean_ms=0.3)
    verdict = judge_task(DEFAULT, TaskEvidence("code_assistant", base, cand), role="beneficiary", bottleneck="queueing")
    claim = next(m for m in verdict.metrics if m.source == "bottleneck:queueing")
    assert claim.status == "inconclusive" and "open-loop (Poisson) arrivals" in claim.reason


def test_throughput_sentences_read_as_numbers() -> None:
    from gates.judge.wording import amount

    assert amount(1000.0, " tok/s") == "1,000 tok/s"
    assert amount(187.4, " tok/s") == "187 tok/s"
    assert amount(12.34, " tok/s") == "12.3 tok/s"


def _chunked(values: list[float]) -> dict[str, float]:
    return {f"s{i}": v for i, v in enumerate(values)}


def test_a_fast_tail_that_moves_by_a_few_tens_of_milliseconds_is_within_the_slack() -> None:
    """A 30 ms TTFT P95 that grows by 20 ms in every block, about +65 %: past the 50 % margin,
    within 50 ms."""
    rule = next(r for r in DEFAULT.task("compliance_qa").guardrails if r.metric == "ttft_p95")  # type: ignore[union-attr]
    assert (rule.margin, rule.slack_ms) == (0.5, 50)
    spec = metric_spec("ttft_p95")
    rng = np.random.default_rng(3)
    base = [float(x) for x in rng.normal(22, 4, 200)]
    cand = [value + 20.0 + float(x) for value, x in zip(base, rng.normal(0, 1, 200), strict=True)]
    chunks = {f"s{i}": i // 12 for i in range(200)}
    slack = judge_ratio(judge_rule(rule), spec, "compliance_qa", _chunked(base), _chunked(cand), 0, 2000, "ms", chunks)
    assert slack.status == "pass", slack.reason
    assert slack.interval is not None and slack.interval[1] > 1.5  # the relative margin alone would not do
    assert "50 ms slack" in slack.reason and slack.details["stated_margin"] == 0.5
    without = judge_ratio(
        replace(judge_rule(rule), slack_ms=0),
        spec,
        "compliance_qa",
        _chunked(base),
        _chunked(cand),
        0,
        2000,
        "ms",
        chunks,
    )
    assert without.status != "pass"


def test_the_slack_never_hides_a_slowdown_beyond_it_or_loosens_a_slow_tail() -> None:
    rule = judge_rule(next(r for r in DEFAULT.task("compliance_qa").guardrails if r.metric == "ttft_p95"))  # type: ignore[union-attr]
    spec = metric_spec("ttft_p95")
    rng = np.random.default_rng(4)
    chunks = {f"s{i}": i // 12 for i in range(200)}
    fast = [float(x) for x in rng.normal(25, 3, 200)]
    slower = [v + 120.0 for v in fast]  # +120 ms on a 30 ms tail: beyond 50 ms and beyond 50 %
    assert (
        judge_ratio(rule, spec, "compliance_qa", _chunked(fast), _chunked(slower), 0, 2000, "ms", chunks).status
        == "fail"
    )
    # On a 400 ms tail 50 ms is 12.5 %: the 50 % margin is the larger and stays the margin.
    slow = [float(x) for x in rng.normal(300, 40, 200)]
    doubled = [v * 2 for v in slow]
    verdict = judge_ratio(rule, spec, "compliance_qa", _chunked(slow), _chunked(doubled), 0, 2000, "ms", chunks)
    assert verdict.status == "fail" and "slack" not in verdict.reason


def test_slack_applies_to_latency_guardrails_only() -> None:
    document = yaml.safe_load((POLICY_DIR / "default.yaml").read_text())
    document["tasks"]["cs_summary"]["guardrails"][0]["slack_ms"] = 10  # the fact-pass rate
    with pytest.raises(PolicyError) as raised:
        policy_from_dict(document)
    assert raised.value.errors == [
        ("tasks.cs_summary.guardrails[0].slack_ms", "applies to latency guardrails only, not pass_rate")
    ]


def judge_rule(rule: Any) -> Rule:
    return Rule(
        rule.metric, "guardrail", rule.label, rule.confidence, margin=rule.margin, slack_ms=rule.slack_ms or 0.0
    )
