"""Gate decisions: every outcome is reachable, errors never count as failures, routes follow."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gates.judge.decision import decide, evaluate
from gates.judge.verdicts import RunTaskEvidence, TaskEvidence, judge_task
from gates.policy.parse import load_policy, validate_policy_text

DEFAULT = load_policy("default")


def outcomes(n: int, rate: float, seed: int) -> list[bool]:
    return [bool(x) for x in np.random.default_rng(seed).random(n) < rate]


def drop_passes(passed: list[bool], count: int) -> list[bool]:
    out, left = list(passed), count
    for i, ok in enumerate(out):
        if ok and left:
            out[i], left = False, left - 1
    return out


def run(passed: list[bool], speed: float = 1.0, seed: int = 0, **extra: object) -> RunTaskEvidence:
    """A run whose latencies scale with ``speed`` (0.7 = 30% faster) and throughput inversely."""
    rng = np.random.default_rng(seed)
    n = max(len(passed), 1)
    fields: dict = {
        "run_id": f"run-{seed}-{speed}",
        "passed": passed,
        "ttft_ms": list(rng.lognormal(np.log(300), 0.3, n) * speed),
        "tpot_ms": list(rng.lognormal(np.log(40), 0.3, n) * speed),
        "e2e_ms": list(rng.lognormal(np.log(4000), 0.3, n) * speed),
        "output_throughput": 1000.0 / speed,
    }
    fields.update(extra)
    return RunTaskEvidence(**fields)


def same_quality(task: str, seed: int, speed: float = 1.0, n: int = 200) -> TaskEvidence:
    passed = outcomes(n, 0.9, seed)
    return TaskEvidence(task, run(passed, seed=seed), run(passed, speed=speed, seed=seed))


def regressed(task: str, seed: int, points: int, speed: float = 1.0, n: int = 200) -> TaskEvidence:
    passed = outcomes(n, 0.92, seed)
    return TaskEvidence(task, run(passed, seed=seed), run(drop_passes(passed, points * n // 100), speed, seed))


def gate(evidence: list[TaskEvidence], beneficiary: list[str], risk: list[str], mechanisms=(), bottleneck=None):
    return evaluate(
        DEFAULT,
        evidence,
        mechanisms=list(mechanisms),
        bottleneck=bottleneck,
        beneficiary_tasks=beneficiary,
        risk_tasks=risk,
    )


def test_it_approves_when_every_task_passes() -> None:
    decision = gate(
        [same_quality("cs_summary", 1, speed=0.7), same_quality("code_assistant", 2, speed=0.7)],
        ["cs_summary"],
        ["code_assistant"],
    )
    assert decision.outcome == "approve", decision.reasons
    assert decision.allowed_tasks == ("cs_summary", "code_assistant") and decision.blocked_tasks == ()
    assert decision.proposed_routes == {"cs_summary": "candidate", "code_assistant": "candidate"}


def test_it_restricts_to_passing_tasks_when_a_risk_task_fails() -> None:
    decision = gate(
        [same_quality("cs_summary", 3, speed=0.7), regressed("knowledge_qa", 4, points=10)],
        ["cs_summary"],
        ["knowledge_qa"],
    )
    assert decision.outcome == "restrict", decision.reasons
    assert decision.allowed_tasks == ("cs_summary",) and decision.blocked_tasks == ("knowledge_qa",)
    assert decision.proposed_routes == {"cs_summary": "candidate", "knowledge_qa": "baseline"}
    assert any("knowledge_qa" in r and "−10.0 points" in r for r in decision.reasons)


def test_a_critical_failure_on_a_risk_task_vetoes_everything() -> None:
    # The acceptance scenario: a quantized candidate, cs_summary benefits, DataAgent SQL regresses.
    decision = gate(
        [same_quality("cs_summary", 5, speed=0.7), regressed("dataagent_nl2sql", 6, points=10, speed=0.7)],
        ["cs_summary"],
        ["dataagent_nl2sql"],
        mechanisms=["weight_quantization"],
    )
    assert decision.outcome == "reject"
    assert decision.allowed_tasks == () and set(decision.proposed_routes.values()) == {"baseline"}
    veto = [r for r in decision.reasons if r.startswith("Veto on dataagent_nl2sql")]
    assert veto and "SQL execution accuracy fell from" in veto[0] and "−10.0 points" in veto[0]


def test_quantization_turns_a_tool_calling_regression_into_a_veto() -> None:
    evidence = [same_quality("cs_summary", 7, speed=0.7), regressed("tool_calling", 8, points=10)]
    assert gate(evidence, ["cs_summary"], ["tool_calling"]).outcome == "restrict"
    quantized = gate(evidence, ["cs_summary"], ["tool_calling"], mechanisms=["weight_quantization"])
    assert quantized.outcome == "reject"


def test_a_beneficiary_guardrail_break_rejects() -> None:
    decision = gate([regressed("code_assistant", 9, points=10, speed=0.7)], ["code_assistant"], [])
    assert decision.outcome == "reject"
    assert any("Beneficiary task code_assistant breaks a guardrail" in r for r in decision.reasons)


def test_a_beneficiary_without_the_promised_benefit_rejects() -> None:
    decision = gate([same_quality("code_assistant", 10, speed=1.2)], ["code_assistant"], [])
    assert decision.outcome == "reject"
    assert any("does not show the promised benefit" in r for r in decision.reasons)


def test_a_rejection_also_names_a_risk_task_that_fails_on_its_own() -> None:
    decision = gate(
        [regressed("code_assistant", 9, points=10, speed=0.7), regressed("knowledge_qa", 4, points=10, speed=0.7)],
        ["code_assistant"],
        ["knowledge_qa"],
    )
    assert decision.outcome == "reject"
    also = [r for r in decision.reasons if r.startswith("Risk task knowledge_qa also fails: ")]
    assert len(also) == 1 and "−10.0 points" in also[0], decision.reasons


def test_tiny_samples_need_more_evidence_with_a_count() -> None:
    decision = gate(
        [same_quality("cs_summary", 11, speed=0.7), same_quality("knowledge_qa", 12, n=8)],
        ["cs_summary"],
        ["knowledge_qa"],
    )
    assert decision.outcome == "needs_evidence", decision.reasons
    assert decision.samples_needed["knowledge_qa"] >= 92
    assert "more samples" in decision.reasons[0]


def test_a_run_error_needs_evidence_and_names_the_error() -> None:
    base = run(outcomes(200, 0.9, 13), seed=13)
    crashed = RunTaskEvidence(run_id="c-13", error="engine did not become healthy within 600 s")
    decision = gate(
        [same_quality("cs_summary", 14, speed=0.7), TaskEvidence("dataagent_nl2sql", base, crashed)],
        ["cs_summary"],
        ["dataagent_nl2sql"],
    )
    assert decision.outcome == "needs_evidence"
    assert decision.verdicts["dataagent_nl2sql"].status == "error"
    assert any("engine did not become healthy" in r for r in decision.reasons)


def test_a_task_without_evidence_needs_evidence() -> None:
    decision = gate([same_quality("cs_summary", 15, speed=0.7)], ["cs_summary"], ["compliance_qa"])
    assert decision.outcome == "needs_evidence"
    assert any("No evidence was judged for compliance_qa" in r for r in decision.reasons)


def test_a_dry_run_policy_flags_the_decision() -> None:
    policy = replace(DEFAULT, dry_run=True)
    verdict = judge_task(policy, same_quality("cs_summary", 16, speed=0.7), "beneficiary")
    decision = decide(policy, [], None, ["cs_summary"], [], [verdict])
    assert decision.dry_run is True and decision.outcome == "approve"


def test_a_decision_needs_a_beneficiary_task() -> None:
    with pytest.raises(ValueError, match="beneficiary"):
        decide(DEFAULT, [], None, [], ["cs_summary"], {})


def test_decisions_serialise_to_json_with_policy_version_and_routes() -> None:
    decision = gate(
        [same_quality("cs_summary", 17, speed=0.7), regressed("knowledge_qa", 18, points=10)],
        ["cs_summary"],
        ["knowledge_qa"],
        mechanisms=["prefix_cache"],
        bottleneck="prefill",
    )
    data = json.loads(json.dumps(decision.to_dict()))
    assert data["policy_version"] == DEFAULT.version_label
    assert set(data["verdicts"]) == {"cs_summary", "knowledge_qa"}
    assert data["proposed_routes"]["knowledge_qa"] == "baseline"


FAST = validate_policy_text(
    """
name: fast
version: 1
stats: {n_boot: 200}
tasks:
  cs_summary:
    min_samples: {quality: 50, latency: 50}
    guardrails: [{metric: pass_rate, margin: 0.05, critical: true}]
    objectives: [{metric: e2e_p50, min_improvement: 0.05}]
  knowledge_qa:
    min_samples: {quality: 50, latency: 50}
    guardrails: [{metric: pass_rate, margin: 0.05}]
"""
)


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(["cs_summary", "knowledge_qa"]),
    st.integers(100, 300),
    st.integers(40, 60),
    st.floats(0.5, 1.5),
    st.integers(0, 10_000),
)
def test_a_large_planted_regression_is_never_approved(task: str, n: int, points: int, speed: float, seed: int) -> None:
    passed = outcomes(n, 0.95, seed)
    hurt = TaskEvidence(task, run(passed, seed=seed), run(drop_passes(passed, points * n // 100), speed, seed))
    other = "knowledge_qa" if task == "cs_summary" else "cs_summary"
    fine = same_quality(other, seed + 1, speed=speed, n=n)
    decision = evaluate(
        FAST,
        [hurt, fine],
        mechanisms=[],
        bottleneck=None,
        beneficiary_tasks=["cs_summary"],
        risk_tasks=["knowledge_qa"],
    )
    assert decision.outcome != "approve"
    assert decision.proposed_routes[task] == "baseline"


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 300), st.floats(0.05, 0.95), st.integers(0, 10_000))
def test_identical_quality_never_fails_a_risk_task(n: int, rate: float, seed: int) -> None:
    passed = outcomes(n, rate, seed)
    same = run(passed, seed=seed)
    verdict = judge_task(FAST, TaskEvidence("knowledge_qa", same, same), "risk")
    assert verdict.status != "fail"
