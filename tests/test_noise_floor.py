"""The A/A noise floor in the judge: floors from two identical sides, and no benefit inside them.

Pure judge tests: the evidence is built in memory, as ``gates.selectors.evidence`` shapes stored runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from gates.judge.noise import NoiseFloor, aa_floors, apply_noise_floor, discordance, floor_key
from gates.judge.records import MetricVerdict, RequestTiming, RunTaskEvidence, TaskEvidence
from gates.judge.verdicts import judge_task
from gates.policy.parse import load_policy

POLICY = load_policy("default")
N = 100


def _side(ttft_ms: np.ndarray, e2e_ms: np.ndarray, *, passed: list[bool], blocks: list[float]) -> RunTaskEvidence:
    ids = [f"s{i:03d}" for i in range(len(ttft_ms))]
    tpot = e2e_ms / 100
    return RunTaskEvidence(
        run_id="1",
        passed=dict(zip(ids, passed, strict=True)),
        ttft_ms=dict(zip(ids, map(float, ttft_ms), strict=True)),
        tpot_ms=dict(zip(ids, map(float, tpot), strict=True)),
        e2e_ms=dict(zip(ids, map(float, e2e_ms), strict=True)),
        requests=[
            RequestTiming(ok=True, ttft_ms=float(a), tpot_ms=float(b), e2e_ms=float(c))
            for a, b, c in zip(ttft_ms, tpot, e2e_ms, strict=True)
        ],
        output_throughput=blocks,
        blocks=True,
    )


def _pair(speedup: float, jitter: float, *, flips: int = 0, seed: int = 0) -> TaskEvidence:
    """A baseline, and a candidate ``speedup`` times as fast on the same prompts with per-prompt jitter."""
    rng = np.random.default_rng(seed)
    ttft = rng.lognormal(np.log(300), 0.3, N)
    e2e = rng.lognormal(np.log(2000), 0.3, N)
    noise = rng.lognormal(0, jitter, (3, N))
    passed = [True] * N
    cand_passed = [not ok if i < flips else ok for i, ok in enumerate(passed)]
    blocks = list(rng.normal(1000, 5, 8))
    base = _side(ttft, e2e, passed=passed, blocks=blocks)
    cand = _side(
        ttft * noise[0] / speedup,
        e2e * noise[1] / speedup,
        passed=cand_passed,
        blocks=[b * speedup * float(n) for b, n in zip(blocks, noise[2][:8], strict=True)],
    )
    return TaskEvidence("code_assistant", base, cand)


def test_two_identical_sides_have_a_floor_from_their_own_spread() -> None:
    floors = aa_floors(_pair(1.0, 0.05, flips=3), POLICY.task("code_assistant"), n_boot=500)  # type: ignore[arg-type]
    for metric in ("ttft_p50", "ttft_p95", "tpot_p50", "e2e_p50", "e2e_p95", "output_throughput", "goodput"):
        assert metric in floors, sorted(floors)
    # A 5% per-prompt jitter: the P50 ratio of 100 paired prompts stays within a few percent of 1.
    assert 0 < floors["e2e_p50"] < 0.05
    assert floors["ttft_p95"] >= floors["ttft_p50"] * 0.5
    assert floors["pass_rate"] == pytest.approx(0.03)  # 3 of 100 samples answered differently


def test_quieter_engines_have_lower_floors() -> None:
    task_policy = POLICY.task("code_assistant")
    assert task_policy is not None
    quiet = aa_floors(_pair(1.0, 0.01), task_policy, n_boot=500)
    loud = aa_floors(_pair(1.0, 0.10), task_policy, n_boot=500)
    assert quiet["e2e_p50"] < loud["e2e_p50"] and quiet["ttft_p95"] < loud["ttft_p95"]


def test_discordance_counts_only_samples_both_sides_answered() -> None:
    base = RunTaskEvidence(passed={"a": True, "b": True, "c": False, "x": True})
    cand = RunTaskEvidence(passed={"a": True, "b": False, "c": True, "y": False})
    counted = discordance(base, cand)
    assert (counted.discordant, counted.paired, counted.rate) == (2, 3, pytest.approx(2 / 3))


def _objective(verdict_metrics: tuple[MetricVerdict, ...], metric: str) -> MetricVerdict:
    return next(m for m in verdict_metrics if m.metric == metric and m.kind == "objective")


def test_the_judge_refuses_a_benefit_within_the_noise_floor() -> None:
    evidence = _pair(1.08, 0.01)  # 8 % faster, measured tightly: a pass without a calibration
    plain = _objective(judge_task(POLICY, evidence, role="beneficiary").metrics, "e2e_p50")
    assert plain.status == "pass", plain.reason

    noise = NoiseFloor(source="A/A calibration #7 of kit-base", floors={"e2e_p50": 0.12, "tpot_p50": 0.12})
    verdict = judge_task(POLICY, evidence, role="beneficiary", noise=noise)
    e2e = _objective(verdict.metrics, "e2e_p50")
    assert e2e.status == "fail", e2e.reason
    assert "within the A/A noise floor of ±12.0%" in e2e.reason and "not counted as a benefit" in e2e.reason
    assert e2e.details["noise_floor"] == 0.12 and e2e.details["noise_floor_from"] == noise.source
    assert verdict.status == "fail"


def test_the_judge_accepts_a_benefit_beyond_the_noise_floor() -> None:
    evidence = _pair(1.08, 0.01)
    noise = NoiseFloor(source="A/A calibration #7 of kit-base", floors={"e2e_p50": 0.02, "tpot_p50": 0.02})
    e2e = _objective(judge_task(POLICY, evidence, role="beneficiary", noise=noise).metrics, "e2e_p50")
    assert e2e.status == "pass", e2e.reason
    assert e2e.details["noise_floor"] == 0.02  # shown against its floor all the same


def test_guardrails_show_their_floor_and_keep_their_status() -> None:
    evidence = _pair(1.0, 0.01)
    noise = NoiseFloor(source="A/A", floors={"e2e_p95": 0.5, "pass_rate": 0.0})
    plain = {m.metric: m for m in judge_task(POLICY, evidence, role="risk").metrics if m.kind == "guardrail"}
    floored = {m.metric: m for m in judge_task(POLICY, evidence, role="risk", noise=noise).metrics}
    assert floored["e2e_p95"].status == plain["e2e_p95"].status
    assert floored["e2e_p95"].details["noise_floor"] == 0.5
    assert floored["pass_rate"].details["noise_floor"] == 0.0


def _improvement(effect: float, interval: tuple[float, float], metric: str = "ttft_p50") -> MetricVerdict:
    return MetricVerdict(
        task="knowledge_qa",
        metric=metric,
        kind="mechanism",
        status="pass",
        n=100,
        baseline=300.0,
        candidate=300.0 * effect,
        effect=effect,
        interval=interval,
        test="paired bootstrap",
        reason="TTFT P50 went from 300 ms to 282 ms, meeting the 5% minimum improvement.",
    )


def test_an_effect_inside_the_floor_whose_interval_reaches_past_it_is_inconclusive() -> None:
    # 6 % faster (ratio 0.94), interval 0.88–0.99: the benefit might clear an 8 % floor, or not.
    verdict = apply_noise_floor(_improvement(0.94, (0.88, 0.99)), NoiseFloor("A/A", {"ttft_p50": 0.08}))
    assert verdict.status == "inconclusive", verdict.reason
    assert verdict.samples_needed and verdict.samples_needed > 0
    assert "within the A/A noise floor of ±8.0%" in verdict.reason


def test_an_effect_wholly_inside_the_floor_fails() -> None:
    verdict = apply_noise_floor(_improvement(0.96, (0.95, 0.97)), NoiseFloor("A/A", {"ttft_p50": 0.08}))
    assert verdict.status == "fail" and verdict.samples_needed is None


def test_no_calibration_or_no_floor_for_the_metric_changes_nothing() -> None:
    verdict = _improvement(0.96, (0.95, 0.97))
    assert apply_noise_floor(verdict, None) == verdict
    assert apply_noise_floor(verdict, NoiseFloor("A/A", {"e2e_p50": 0.5})) == verdict


def test_goodput_floors_read_in_points() -> None:
    verdict = MetricVerdict(
        task="code_assistant",
        metric="goodput",
        kind="objective",
        status="pass",
        n=100,
        baseline=0.80,
        candidate=0.83,
        effect=0.03,
        interval=(0.01, 0.05),
        test="bootstrap",
        reason="Goodput rose.",
    )
    floored = apply_noise_floor(verdict, NoiseFloor("A/A", {"goodput": 0.06}))
    assert floored.status == "fail" and "±6.0 points" in floored.reason


def test_a_verdict_measured_at_the_open_loop_point_reads_that_points_floor() -> None:
    verdict = _improvement(0.9, (0.85, 0.95))
    at_open_loop = MetricVerdict(**{**verdict.__dict__, "details": {"load_point": "open_loop"}})
    assert floor_key(at_open_loop) == "open_loop:ttft_p50"
    assert floor_key(verdict) == "ttft_p50"
    floored = apply_noise_floor(at_open_loop, NoiseFloor("A/A", {"ttft_p50": 0.01, "open_loop:ttft_p50": 0.2}))
    assert floored.status == "fail" and floored.details["noise_floor"] == 0.2
