"""Paired statistics: planted regressions are found, identical inputs never fail, tiny n waits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gates.judge.resampling import bootstrap_ratio, mann_whitney, paired_bootstrap_mean_diff
from gates.judge.stats import (
    SAMPLES_NEEDED_CAP,
    mcnemar_noninferiority,
    paired_difference_interval,
    samples_needed,
)


def planted_regression(n: int, base_rate: float, drop: float, seed: int) -> tuple[list[bool], list[bool]]:
    """Baseline outcomes, and a candidate that loses ``drop * n`` of the baseline's passes."""
    rng = np.random.default_rng(seed)
    base = [bool(x) for x in rng.random(n) < base_rate]
    cand = list(base)
    passing = [i for i, ok in enumerate(base) if ok]
    for i in rng.choice(passing, size=round(drop * n), replace=False):
        cand[i] = False
    return base, cand


def test_it_detects_a_planted_10_point_regression_at_n_200() -> None:
    base, cand = planted_regression(200, 0.92, 0.10, seed=7)
    result = mcnemar_noninferiority(base, cand, margin=0.05, confidence=0.95)
    assert result.status == "fail"
    assert result.n == 200
    assert (result.losses, result.gains) == (20, 0)
    assert result.effect == pytest.approx(-0.10)
    assert result.interval[0] < -0.10 < result.interval[1] < 0
    assert result.p_value < 1e-4


def test_it_passes_identical_outcomes_at_n_200() -> None:
    base, _ = planted_regression(200, 0.9, 0.0, seed=1)
    result = mcnemar_noninferiority(base, base, margin=0.05)
    assert result.status == "pass"
    assert result.effect == 0
    assert result.p_value == 1.0


def test_it_is_inconclusive_at_tiny_n_with_a_sample_estimate() -> None:
    base = [True, True, False, True, True, True, False, True]
    cand = [True, False, False, True, True, True, False, True]
    result = mcnemar_noninferiority(base, cand, margin=0.05)
    assert result.status == "inconclusive"
    extra = samples_needed(n=result.n, effect=result.effect, threshold=-0.05, std_error=result.std_error)
    assert 0 < extra <= SAMPLES_NEEDED_CAP


def test_zero_discordant_pairs_still_leave_an_honest_interval() -> None:
    low, high = paired_difference_interval(gains=0, losses=0, n=8, confidence=0.95)
    # Tango's interval for b = c = 0 is ±z²/(n + z²).
    assert high == pytest.approx(1.959964**2 / (8 + 1.959964**2), rel=1e-4)
    assert low == pytest.approx(-high)


def test_it_fails_when_the_whole_interval_is_below_the_margin() -> None:
    base, cand = planted_regression(400, 0.95, 0.30, seed=3)
    result = mcnemar_noninferiority(base, cand, margin=0.05)
    assert result.interval[1] < -0.05
    assert result.status == "fail"


def test_it_rejects_unpaired_lengths() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        mcnemar_noninferiority([True], [True, False], margin=0.05)


def test_bootstrap_ratio_finds_a_20_percent_speedup_and_is_reproducible() -> None:
    rng = np.random.default_rng(11)
    base = rng.lognormal(6, 0.4, 300)
    cand = base * 0.8
    first = bootstrap_ratio(base, cand, stat="median", seed=5)
    again = bootstrap_ratio(base, cand, stat="median", seed=5)
    assert first == again
    assert first.effect == pytest.approx(0.8)
    assert first.interval[1] < 1


def test_bootstrap_ratio_of_p95_covers_one_for_identical_samples() -> None:
    values = np.random.default_rng(2).lognormal(5, 0.5, 200)
    result = bootstrap_ratio(values, values, stat="p95", seed=1)
    assert result.effect == 1
    assert result.interval[0] <= 1 <= result.interval[1]


def test_bootstrap_ratio_refuses_a_zero_baseline() -> None:
    with pytest.raises(ValueError, match="positive baseline"):
        bootstrap_ratio([0.0, 0.0], [1.0, 2.0])


def test_paired_bootstrap_mean_diff_sees_a_score_drop() -> None:
    rng = np.random.default_rng(4)
    base = rng.uniform(0.5, 1.0, 150)
    cand = base - 0.1
    result = paired_bootstrap_mean_diff(base, cand, seed=9)
    assert result.effect == pytest.approx(-0.1)
    assert result.interval[1] < 0


def test_mann_whitney_sees_a_shift_and_not_a_copy() -> None:
    rng = np.random.default_rng(8)
    base = rng.normal(100, 10, 120)
    assert mann_whitney(base, base + 15).p_value < 1e-6
    assert mann_whitney(base, base).p_value > 0.9


def test_samples_needed_caps_when_the_effect_sits_on_the_threshold() -> None:
    assert samples_needed(n=100, effect=-0.05, threshold=-0.05, std_error=0.02) == SAMPLES_NEEDED_CAP
    assert samples_needed(n=100, effect=0.0, threshold=-0.05, std_error=0.001) == 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=300), st.floats(0, 0.2), st.sampled_from([0.9, 0.95, 0.99]))
def test_identical_pass_fail_never_fails(outcomes: list[bool], margin: float, confidence: float) -> None:
    assert mcnemar_noninferiority(outcomes, outcomes, margin, confidence).status != "fail"


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(1, 10_000, allow_nan=False), min_size=1, max_size=200),
    st.sampled_from(["median", "p95"]),
    st.booleans(),
    st.integers(0, 2**31),
)
def test_identical_latencies_cover_no_change(values: list[float], stat: str, paired: bool, seed: int) -> None:
    result = bootstrap_ratio(values, values, stat=stat, n_boot=200, seed=seed, paired=paired)  # type: ignore[arg-type]
    assert result.effect == 1
    assert result.interval[0] <= 1 <= result.interval[1]


@settings(max_examples=50, deadline=None)
@given(st.integers(100, 400), st.floats(0.4, 0.6), st.integers(0, 10_000))
def test_a_40_point_regression_always_fails(n: int, drop: float, seed: int) -> None:
    base, cand = planted_regression(n, 0.95, drop, seed)
    assert mcnemar_noninferiority(base, cand, margin=0.05).status == "fail"
