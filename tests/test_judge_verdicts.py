"""Per-task verdicts: each metric judged with its test, its numbers and one sentence."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gates.judge.verdicts import MetricVerdict, RunTaskEvidence, TaskEvidence, TaskVerdict, judge_task
from gates.policy.parse import load_policy, validate_policy_text

DEFAULT = load_policy("default")


def outcomes(n: int, rate: float, seed: int) -> list[bool]:
    return [bool(x) for x in np.random.default_rng(seed).random(n) < rate]


def drop_passes(passed: list[bool], count: int) -> list[bool]:
    """The same outcomes with the first ``count`` passes turned into failures."""
    out, left = list(passed), count
    for i, ok in enumerate(out):
        if ok and left:
            out[i], left = False, left - 1
    return out


def latencies(n: int, seed: int, scale: float = 1.0, median: float = 400.0) -> list[float]:
    return list(np.random.default_rng(seed).lognormal(np.log(median), 0.3, n) * scale)


def run(passed: list[bool], speed: float = 1.0, seed: int = 0, **extra: object) -> RunTaskEvidence:
    n = len(passed)
    fields: dict = {
        "run_id": f"run-{seed}-{speed}",
        "passed": passed,
        "ttft_ms": latencies(n, seed + 1, speed, 300),
        "tpot_ms": latencies(n, seed + 2, speed, 20),  # well within every task's TPOT SLO
        "e2e_ms": latencies(n, seed + 3, speed, 4000),
        "output_throughput": 1000.0 / speed,
    }
    fields.update(extra)
    return RunTaskEvidence(**fields)


def metric(verdict: TaskVerdict, name: str, kind: str | None = None) -> MetricVerdict:
    return next(m for m in verdict.metrics if m.metric == name and (kind is None or m.kind == kind))


def test_a_planted_10_point_regression_fails_the_guardrail_with_its_numbers() -> None:
    base = outcomes(200, 0.92, seed=1)
    cand = drop_passes(base, 20)
    verdict = judge_task(DEFAULT, TaskEvidence("knowledge_qa", run(base), run(cand)), role="risk")
    guard = metric(verdict, "pass_rate", "guardrail")
    assert guard.status == "fail" and verdict.status == "fail"
    assert guard.effect is not None and guard.interval is not None
    assert guard.n == 200 and round(guard.effect, 3) == -0.1
    assert guard.interval[0] < -0.1 < guard.interval[1] < 0
    assert guard.test.startswith("exact McNemar")
    assert "fell from" in guard.reason and "−10.0 points" in guard.reason
    assert "200 paired samples" in guard.reason and "beyond the 5-point margin" in guard.reason
    assert guard.reason.count(".") >= 1 and guard.reason.endswith(".")


def test_identical_runs_pass_every_guardrail() -> None:
    base = run(outcomes(200, 0.9, seed=2))
    verdict = judge_task(DEFAULT, TaskEvidence("compliance_qa", base, base), role="risk")
    assert verdict.status == "pass"
    assert all(m.status != "fail" for m in verdict.metrics)


def test_tiny_n_is_inconclusive_with_a_sample_estimate() -> None:
    base = [True, True, True, False, True, True, True, True]
    cand = [True, True, False, False, True, True, True, True]
    verdict = judge_task(DEFAULT, TaskEvidence("code_assistant", run(base), run(cand)), role="risk")
    guard = metric(verdict, "pass_rate", "guardrail")
    assert guard.status == "inconclusive" and verdict.status == "inconclusive"
    assert guard.samples_needed is not None and guard.samples_needed >= 100 - 8
    assert "fewer than the 100 the policy requires" in guard.reason
    # The task asks for what its most demanding deciding metric needs (goodput's 8 requests too).
    deciding = [m.samples_needed for m in verdict.metrics if m.deciding and m.samples_needed]
    assert verdict.samples_needed == max(deciding) >= guard.samples_needed


def test_a_run_error_is_an_error_never_a_failure() -> None:
    base = run(outcomes(200, 0.9, seed=3))
    broken = RunTaskEvidence(run_id="c", error="vLLM exited with code 137 (out of memory)")
    verdict = judge_task(DEFAULT, TaskEvidence("dataagent_nl2sql", base, broken), role="risk")
    assert verdict.status == "error"
    assert {m.status for m in verdict.metrics} == {"error"}
    assert "code 137" in verdict.reason and "candidate run failed" in verdict.reason


def test_samples_keyed_by_id_pair_on_the_intersection_and_report_the_rest() -> None:
    base = {f"s{i}": True for i in range(120)}
    cand = {f"s{i}": True for i in range(5, 125)}
    verdict = judge_task(
        DEFAULT, TaskEvidence("code_assistant", RunTaskEvidence(passed=base), RunTaskEvidence(passed=cand)), role="risk"
    )
    guard = metric(verdict, "pass_rate", "guardrail")
    assert guard.n == 115
    assert guard.details["unmatched_base"] == 5 and guard.details["unmatched_cand"] == 5


def test_quantization_makes_structured_output_guardrails_critical() -> None:
    base = run(outcomes(200, 0.9, seed=4))
    plain = judge_task(DEFAULT, TaskEvidence("tool_calling", base, base), role="risk")
    quantized = judge_task(
        DEFAULT, TaskEvidence("tool_calling", base, base), role="risk", mechanisms=["weight_quantization"]
    )
    assert not metric(plain, "pass_rate").critical
    guard = metric(quantized, "pass_rate")
    assert guard.critical and guard.details["note"] == "critical under weight_quantization"


def test_objectives_decide_only_for_beneficiary_tasks() -> None:
    passed = outcomes(200, 0.9, seed=5)
    evidence = TaskEvidence("code_assistant", run(passed), run(passed, speed=1.15))  # slower: no benefit
    as_risk = judge_task(DEFAULT, evidence, role="risk")
    as_beneficiary = judge_task(DEFAULT, evidence, role="beneficiary")
    assert metric(as_risk, "tpot_p50").kind == "tradeable" and as_risk.status == "pass"
    objective = metric(as_beneficiary, "tpot_p50", "objective")
    assert objective.status == "fail" and "short of the 5% minimum improvement" in objective.reason


def test_a_faster_candidate_meets_its_objectives_and_bottleneck() -> None:
    passed = outcomes(200, 0.9, seed=6)
    verdict = judge_task(
        DEFAULT,
        TaskEvidence("code_assistant", run(passed, seed=6), run(passed, speed=0.7, seed=6)),
        role="beneficiary",
        bottleneck="decode",
    )
    assert verdict.status == "pass", verdict.reason
    bottleneck = next(m for m in verdict.metrics if m.source == "bottleneck:decode")
    assert bottleneck.metric == "tpot_p50" and bottleneck.status == "pass"
    assert "−30.0%" in bottleneck.reason


def test_prefix_cache_hits_without_ttft_gain_say_the_bottleneck_is_elsewhere() -> None:
    passed = outcomes(200, 0.9, seed=7)
    base = run(passed, seed=7, engine={"prefix_cache_hit_rate": 0.0})
    cand = run(passed, seed=7, engine={"prefix_cache_hit_rate": 0.8})
    verdict = judge_task(DEFAULT, TaskEvidence("knowledge_qa", base, cand), "beneficiary", ["prefix_cache"])
    assert metric(verdict, "prefix_cache_hit_rate").status == "pass"
    ttft = next(m for m in verdict.metrics if m.source == "prefix_cache" and m.metric == "ttft_p50")
    assert ttft.status == "fail"
    assert "80.0% of the time" in ttft.reason and "bottleneck is elsewhere (queueing or decode)" in ttft.reason


def test_prefix_cache_that_never_hits_fails_and_hints_at_the_prefix() -> None:
    passed = outcomes(200, 0.9, seed=8)
    cand = run(passed, speed=0.7, seed=8, engine={"prefix_cache_hit_rate": 0.01})
    verdict = judge_task(
        DEFAULT, TaskEvidence("knowledge_qa", run(passed, seed=8), cand), "beneficiary", ["prefix_cache"]
    )
    hit = metric(verdict, "prefix_cache_hit_rate")
    assert hit.status == "fail" and "trace id" in hit.reason


def test_speculative_decoding_needs_acceptance_and_both_e2e_percentiles() -> None:
    passed = outcomes(200, 0.9, seed=9)
    base = run(passed, seed=9)
    cand = run(passed, speed=0.8, seed=9, engine={"spec_decode_acceptance_rate": 0.3})
    verdict = judge_task(DEFAULT, TaskEvidence("cs_summary", base, cand), "beneficiary", ["speculative_decoding"])
    spec = [m for m in verdict.metrics if m.source == "speculative_decoding"]
    assert {m.metric: m.status for m in spec} == {
        "spec_decode_acceptance_rate": "fail",
        "e2e_p50": "pass",
        "e2e_p95": "pass",
    }


def test_kv_memory_bottleneck_reads_engine_preemptions() -> None:
    passed = outcomes(200, 0.9, seed=10)
    base = run(passed, seed=10, engine={"preemptions": 40})
    cand = run(passed, seed=10, engine={"preemptions": 2})
    verdict = judge_task(DEFAULT, TaskEvidence("knowledge_qa", base, cand), "beneficiary", bottleneck="kv_memory")
    moved = next(m for m in verdict.metrics if m.source == "bottleneck:kv_memory")
    assert moved.metric == "preemptions" and moved.status == "pass" and moved.test.startswith("point comparison")


def test_truncation_counts_a_rise_as_a_regression() -> None:
    policy = validate_policy_text(
        "name: t\nversion: 1\ntasks:\n  cs_summary:\n    min_samples: {quality: 50}\n    guardrails:\n"
        "      - {metric: truncation_rate, margin: 0.05}\n"
    )
    base_truncated = [False] * 200
    cand_truncated = [True] * 30 + [False] * 170
    verdict = judge_task(
        policy,
        TaskEvidence(
            "cs_summary",
            RunTaskEvidence(checks={"truncation_rate": base_truncated}),
            RunTaskEvidence(checks={"truncation_rate": cand_truncated}),
        ),
    )
    guard = metric(verdict, "truncation_rate")
    assert (
        guard.status == "fail" and guard.candidate == pytest.approx(0.15) and "rose from 0.0% to 15.0%" in guard.reason
    )


def test_a_task_missing_from_the_policy_is_an_error() -> None:
    base = run(outcomes(50, 0.9, seed=11))
    verdict = judge_task(DEFAULT, TaskEvidence("poetry", base, base))
    assert verdict.status == "error" and "no rules for task 'poetry'" in verdict.reason


def test_verdicts_serialise_to_json() -> None:
    base = outcomes(200, 0.9, seed=12)
    verdict = judge_task(
        DEFAULT, TaskEvidence("cs_summary", run(base), run(base, speed=0.8)), "beneficiary", ["prefix_cache"], "prefill"
    )
    data = json.loads(json.dumps(verdict.to_dict()))
    assert data["task"] == "cs_summary" and data["metrics"][0]["reason"]


def test_the_same_seed_gives_the_same_verdicts() -> None:
    passed = outcomes(200, 0.9, seed=13)
    evidence = TaskEvidence("code_assistant", run(passed, seed=13), run(passed, speed=0.96, seed=13))
    assert (
        judge_task(DEFAULT, evidence, "beneficiary").to_dict() == judge_task(DEFAULT, evidence, "beneficiary").to_dict()
    )


FAST = validate_policy_text(
    """
name: fast
version: 1
stats: {n_boot: 200}
tasks:
  code_assistant:
    min_samples: {quality: 20, latency: 20}
    guardrails:
      - {metric: pass_rate, margin: 0.05, critical: true}
      - {metric: e2e_p95, margin: 0.1}
      - {metric: ttft_p50, margin: 0.1}
    tradeable:
      - {metric: tpot_p50}
"""
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.booleans(), min_size=1, max_size=250),
    st.lists(st.floats(1, 60_000, allow_nan=False), min_size=1, max_size=250),
    st.booleans(),
    st.integers(0, 2**31),
)
def test_identical_evidence_never_fails(passed: list[bool], lat: list[float], keyed: bool, seed: int) -> None:
    latency = {f"r{i}": v for i, v in enumerate(lat)} if keyed else lat
    same = RunTaskEvidence(passed=passed, ttft_ms=latency, tpot_ms=latency, e2e_ms=latency)
    verdict = judge_task(FAST, TaskEvidence("code_assistant", same, same), seed=seed)
    assert all(m.status != "fail" for m in verdict.metrics), [m.reason for m in verdict.metrics]
