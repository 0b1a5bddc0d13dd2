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
from gates.judge.resampling import _weighted_statistic, bootstrap_ratio
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
    assert verdict.test.startswith("block bootstrap of the ratio of p95s over 8 interleaved chunks")
    assert "in 8 interleaved chunks" in verdict.reason

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
