"""Latency of interleaved blocks is judged with whole chunks resampled (gates.judge.resampling).

Requests of one block share the machine's state while it ran (the other engine's threads winding
down, a scrape, the box's other work): they are not independent draws. Two identical engines whose
blocks differ by such block effects must not come out "significantly different" — which is what a
bootstrap over single request pairs says far more often than its 5 %.
"""

from __future__ import annotations

import numpy as np
import pytest

from gates.judge.metric_judge import judge_metric
from gates.judge.performance import judge_ratio
from gates.judge.records import RunTaskEvidence, TaskEvidence
from gates.judge.resampling import (
    _hodges_lehmann,
    _signed_rank_counts,
    _weighted_statistic,
    block_tail_ratio,
    bootstrap_ratio,
)
from gates.judge.rules import Rule
from gates.policy.metrics import metric_spec
from gates.policy.parse import load_policy

CHUNKS, PER_CHUNK = 8, 12
CODE = load_policy("default").task("code_assistant")


def aa_blocks(seed: int, block_sigma: float = 0.3) -> tuple[list[float], list[float], list[int]]:
    """One A/A comparison: the same prompts on two identical engines, each block of each side
    scaled by its own random factor."""
    rng = np.random.default_rng(seed)
    prompt_cost = rng.lognormal(0.0, 0.4, size=CHUNKS * PER_CHUNK)  # the same prompt, the same work
    chunk = np.repeat(np.arange(CHUNKS), PER_CHUNK)
    block_a = rng.lognormal(0.0, block_sigma, size=CHUNKS)[chunk]
    block_b = rng.lognormal(0.0, block_sigma, size=CHUNKS)[chunk]
    noise = rng.lognormal(0.0, 0.05, size=(2, chunk.size))
    return list(prompt_cost * block_a * noise[0]), list(prompt_cost * block_b * noise[1]), list(chunk)


def excludes_one(interval: tuple[float, float]) -> bool:
    return not interval[0] <= 1.0 <= interval[1]


def test_identical_engines_with_block_effects_are_rarely_called_different_when_chunks_are_resampled() -> None:
    by_pairs = by_chunks = 0
    trials = 60
    for seed in range(trials):
        a, b, chunk = aa_blocks(seed)
        by_pairs += excludes_one(bootstrap_ratio(a, b, "median", 0.95, 400, seed, paired=True).interval)
        by_chunks += excludes_one(bootstrap_ratio(a, b, "median", 0.95, 400, seed, True, chunk).interval)
    # Single pairs: a third or more of the A/A comparisons "differ". Whole chunks: near the nominal 5 % (eight chunks
    # still make it somewhat liberal, so allow up to 15 %).
    assert by_pairs / trials > 0.3
    assert by_chunks / trials <= 0.15


def test_a_real_slowdown_is_still_found_with_chunks_resampled() -> None:
    a, b, chunk = aa_blocks(1, block_sigma=0.05)
    slower = [value * 1.5 for value in b]
    result = bootstrap_ratio(a, slower, "median", 0.95, 1000, 0, True, chunk)
    assert result.interval[0] > 1.2
    assert result.test == "block bootstrap of the ratio of medians over 8 interleaved chunks"


def test_clusters_need_one_label_per_pair() -> None:
    with pytest.raises(ValueError, match="one label per pair"):
        bootstrap_ratio([1.0, 2.0], [1.0, 2.0], "median", 0.95, 100, 0, True, [0])
    with pytest.raises(ValueError, match="paired"):
        bootstrap_ratio([1.0, 2.0], [1.0, 2.0], "median", 0.95, 100, 0, False, [0, 1])


def test_the_judge_resamples_chunks_of_interleaved_latency_and_says_so() -> None:
    a, b, chunk = aa_blocks(3)
    ids = [f"s{i}" for i in range(len(a))]
    base, cand = dict(zip(ids, a, strict=True)), dict(zip(ids, b, strict=True))
    rule = Rule(metric="e2e_p95", kind="guardrail", label="E2E P95", margin=0.5)
    spec = metric_spec("e2e_p95")

    chunks = dict(zip(ids, chunk, strict=True))
    verdict = judge_ratio(rule, spec, "code_assistant", base, cand, 0, 500, "ms", chunks)
    assert verdict.test == "Hodges–Lehmann of the p95 ratios of 8 interleaved block pairs (Wilcoxon interval)"
    assert "in 8 interleaved chunks; block pair by block pair the candidate's was" in verdict.reason
    median = Rule(metric="e2e_p50", kind="guardrail", label="E2E P50", margin=0.5)
    verdict = judge_ratio(median, metric_spec("e2e_p50"), "code_assistant", base, cand, 0, 500, "ms", chunks)
    assert verdict.test.startswith("block bootstrap of the ratio of medians over 8 interleaved chunks")

    # Too few chunks to resample as wholes: single pairs, as before.
    two = {key: value % 2 for key, value in chunks.items()}
    verdict = judge_ratio(rule, spec, "code_assistant", base, cand, 0, 500, "ms", two)
    assert verdict.test.startswith("paired bootstrap")


def _engine_evidence(base: dict[str, list[float | None]], cand: dict[str, list[float | None]]) -> TaskEvidence:
    def side(blocks: dict[str, list[float | None]]) -> RunTaskEvidence:
        point = {key: max((v for v in values if v is not None), default=0.0) for key, values in blocks.items()}
        return RunTaskEvidence(engine=point, engine_blocks=blocks, blocks=True)

    return TaskEvidence(task="code_assistant", base=side(base), cand=side(cand))


def test_engine_figures_of_interleaved_blocks_get_an_interval_from_the_block_pairs() -> None:
    assert CODE is not None
    rule = Rule(metric="queue_time_p95", kind="guardrail", label="queue time P95", margin=0.2)
    evidence = _engine_evidence(
        {"engine_queue_p95_ms": [10.0, 12.0, 11.0, 9.0]}, {"engine_queue_p95_ms": [10.5, 11.0, 12.0, 9.5]}
    )
    verdict = judge_metric(rule, evidence, CODE)
    assert verdict.test == "paired t-interval of the log ratio over 4 interleaved block pairs"
    assert verdict.interval is not None

    # A counter at 0 in the blocks (no ratio to form) and a configuration figure: one point per side.
    rule = Rule(metric="preemptions", kind="guardrail", label="preemptions", margin=0.2)
    zeros = _engine_evidence({"preemptions": [0.0, 0.0, 0.0, 0.0]}, {"preemptions": [0.0, 0.0, 1.0, 0.0]})
    assert judge_metric(rule, zeros, CODE).test.startswith("point comparison")
    rule = Rule(metric="max_concurrency", kind="guardrail", label="max concurrency", margin=0.2)
    levels = _engine_evidence({"max_concurrency": [4.0] * 4}, {"max_concurrency": [16.0] * 4})
    assert judge_metric(rule, levels, CODE).test.startswith("point comparison")


@pytest.mark.parametrize("stat,percentile", [("median", 50), ("p90", 90), ("p95", 95), ("p99", 99)])
def test_a_replicate_statistic_is_that_of_its_pairs_laid_out_one_by_one(stat: str, percentile: int) -> None:
    rng = np.random.default_rng(percentile)
    values = rng.lognormal(size=37)
    counts = rng.integers(0, 4, size=(50, 37))
    counts[:, 0] += 1  # no empty replicate
    expanded = [np.percentile(np.repeat(values, row), percentile) for row in counts]
    assert np.allclose(_weighted_statistic(values, counts, stat), expanded)  # type: ignore[arg-type]
    assert np.allclose(_weighted_statistic(values, counts, "mean"), [np.mean(np.repeat(values, row)) for row in counts])


# --- tail statistics, block pair by block pair ------------------------------------------------------


def _stalled_load(seed: int, stall_ms: float = 0.0, slow_share: int = 0) -> tuple[dict, dict, dict]:
    """16 blocks of 12 requests a side, the same prompts on two identical engines (TTFT 25-45 ms);
    ``stall_ms`` added to every request of one candidate block (the machine held it up), or
    ``slow_share`` requests of every candidate block 200 ms slower (the candidate's own tail)."""
    rng = np.random.default_rng(seed)
    size = 16 * 12
    prompt = rng.uniform(25.0, 40.0, size=size)
    chunk = np.repeat(np.arange(16), 12)
    base = prompt * rng.lognormal(0.0, 0.08, size=size)
    cand = prompt * rng.lognormal(0.0, 0.08, size=size)
    cand[chunk == 5] += stall_ms
    for k in range(16):
        cand[np.flatnonzero(chunk == k)[:slow_share]] += 200.0
    ids = [f"s{i}" for i in range(size)]
    return (
        dict(zip(ids, base.tolist(), strict=True)),
        dict(zip(ids, cand.tolist(), strict=True)),
        dict(zip(ids, chunk.tolist(), strict=True)),
    )


TTFT_P95 = Rule(metric="ttft_p95", kind="guardrail", label="TTFT P95", margin=0.5)


def test_one_block_the_machine_stalled_does_not_decide_a_tail_guardrail() -> None:
    """The demo's compliance_qa on a busy CI box: one candidate block of 12 came out ~120 ms slow,
    all of a 200-request load's top 5 %; the whole load's P95 reads 3× with an interval no margin
    can settle, while the block pairs say what the engines did."""
    base, cand, chunks = _stalled_load(7, stall_ms=120.0)
    whole = bootstrap_ratio(list(base.values()), list(cand.values()), "p95", 0.95, 2000, 0, True, list(chunks.values()))
    assert whole.effect > 2.5 and whole.interval[1] > 2.0
    verdict = judge_ratio(TTFT_P95, metric_spec("ttft_p95"), "compliance_qa", base, cand, 0, 2000, "ms", chunks)
    assert verdict.status == "pass", verdict.reason
    assert verdict.interval is not None and 0.8 < verdict.interval[0] <= 1.0 <= verdict.interval[1] < 1.25
    # The whole load's P95 is still what the reader sees.
    assert verdict.candidate is not None and verdict.baseline is not None
    assert verdict.candidate > 2.5 * verdict.baseline


def test_a_tail_the_candidate_adds_to_every_block_fails_the_guardrail() -> None:
    """Two requests in every twelve 200 ms slower: every block pair's P95 shows it."""
    base, cand, chunks = _stalled_load(7, slow_share=2)
    verdict = judge_ratio(TTFT_P95, metric_spec("ttft_p95"), "compliance_qa", base, cand, 0, 2000, "ms", chunks)
    assert verdict.status == "fail", verdict.reason
    assert verdict.interval is not None and verdict.interval[0] > 3.0


def test_the_block_pairs_interval_is_wilcoxons_published_one() -> None:
    """n = 16 at 95 %: the lower critical value of the signed-rank statistic is 29 (P(T ≤ 29) =
    0.0221, P(T ≤ 30) = 0.0253; Hollander & Wolfe, table A.4), so the interval runs from the 30th
    smallest of the 136 Walsh averages to the 30th largest."""
    logs = np.log(np.linspace(0.7, 1.6, 16))
    estimate, low, high = _hodges_lehmann(logs, 0.95)
    walsh = np.sort([(logs[i] + logs[j]) / 2 for i in range(16) for j in range(i, 16)])
    assert (low, high) == (walsh[29], walsh[136 - 30]) and estimate == np.median(walsh)
    cdf = np.cumsum(_signed_rank_counts(16)) / 2**16
    assert cdf[29] == pytest.approx(0.0221, abs=1e-4) and cdf[30] == pytest.approx(0.0253, abs=1e-4)
    # Five pairs cannot reach 95 % (2 / 32 > 0.05): no bounds.
    assert _hodges_lehmann(logs[:5], 0.95)[1:] == (-np.inf, np.inf)


def test_identical_engines_with_block_effects_rarely_differ_in_their_tails() -> None:
    trials, differ = 80, 0
    for seed in range(trials):
        a, b, chunk = aa_blocks(seed)
        differ += excludes_one(block_tail_ratio(a, b, chunk, "p95", 0.95).interval)
    assert differ / trials <= 0.10
