"""The power plan's sample counts against direct computations, and whether a suite can settle a margin."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gates.judge.power import (
    OperatingCharacteristics,
    exact_power,
    exact_sequential,
    null_variance,
    plan_task,
    planned_information,
    shipped_first_sizes,
    simulate_information,
    simulate_sequential,
    sized_design,
)
from gates.judge.sequential import (
    INFORMATION_LEVELS,
    POCOCK,
    GroupSequentialDesign,
    decide_look,
    equally_spaced,
    group_sequential_design,
    information_design,
    null_information,
)


@pytest.mark.parametrize(
    ("margin", "discordance"), [(0.05, 0.05), (0.03, 0.10), (0.02, 0.02)], ids=["5pt-5%", "3pt-10%", "2pt-2%"]
)
def test_the_fixed_sample_size_has_the_planned_power_by_exact_enumeration(margin: float, discordance: float) -> None:
    plan = plan_task(margin=margin, discordance=discordance, power=0.8)
    half = discordance / 2
    power = exact_power(plan.fixed_n, margin=margin, alpha=0.025, p_loss=half, p_gain=half)
    # Within 4 points: at ~10 discordant pairs (5 points, 5 %) the discrete test has 0.84.
    assert power == pytest.approx(0.8, abs=0.04)
    # Well short of the planned size the same test is clearly underpowered.
    fewer = exact_power(plan.fixed_n * 2 // 3, margin=margin, alpha=0.025, p_loss=half, p_gain=half)
    assert fewer < 0.72


def test_with_no_discordance_the_plan_is_the_exact_threshold() -> None:
    """A seed-only change: every outcome is b = c = 0, so the power is 0 or 1; 189 is the first 1."""
    plan = plan_task(margin=0.02, discordance=0.0)
    assert plan.fixed_n == 189
    assert exact_power(189, margin=0.02, alpha=0.025, p_loss=0.0, p_gain=0.0) == 1.0
    assert exact_power(188, margin=0.02, alpha=0.025, p_loss=0.0, p_gain=0.0) == 0.0


def test_the_sequential_plan_has_its_power_and_expected_samples_in_simulation() -> None:
    plan = plan_task(margin=0.05, discordance=0.05, power=0.8)
    assert plan.max_n == pytest.approx(plan.design.inflation * plan.fixed_n, abs=2)
    assert plan.look_sizes[-1] == plan.max_n
    result = simulate_sequential(
        plan.design, plan.look_sizes, margin=0.05, p_loss=0.025, p_gain=0.025, runs=3000,
        rng=np.random.default_rng(7),
    )  # fmt: skip
    assert result.approve >= 0.8 - 0.03
    # The plan's normal approximation vs whole simulated runs of the discrete score (7 % apart here).
    assert result.mean_samples == pytest.approx(plan.expected_n, rel=0.1)
    assert plan.expected_n < plan.max_n


def test_a_margin_no_suite_can_settle_is_refused_with_the_reason() -> None:
    refused = plan_task(margin=0.02, discordance=0.05, suite_size=1100)
    assert not refused.settleable
    assert "no available suite can settle a 2-point margin" in refused.reason
    calibrated = plan_task(margin=0.02, discordance=0.0, discordance_source="A/A calibration", suite_size=1100)
    assert calibrated.settleable and calibrated.max_n < 300


def test_the_plan_states_its_default_discordance_and_engine_time() -> None:
    plan = plan_task(margin=0.03, suite_size=1100, seconds_per_sample=2.0)
    assert plan.discordance == 0.05 and plan.discordance_source == "default"
    assert plan.expected_engine_s == pytest.approx(2.0 * plan.expected_n)
    assert plan.max_engine_s == 2.0 * plan.max_n
    assert list(plan.to_dict()["design"]["info"]) == [0.2, 0.4, 0.6, 0.8, 1.0]


def test_an_assumed_difference_beyond_the_margin_cannot_be_planned() -> None:
    with pytest.raises(ValueError):
        plan_task(margin=0.02, difference=-0.02)
    with pytest.raises(ValueError):
        plan_task(margin=0.02, discordance=0.01, difference=0.05)


def test_the_planned_information_is_the_observed_information_at_the_expected_counts() -> None:
    plan = plan_task(margin=0.02, discordance=0.05)
    maximum = planned_information(plan.max_n, margin=0.02, discordance=0.05)
    assert maximum == pytest.approx(plan.max_n / null_variance(0.025, 0.025, 0.02))
    # A run that sees exactly the planned discordance reaches that information.
    assert float(null_information(0.025 * plan.max_n, 0.025 * plan.max_n, plan.max_n, 0.02)) == pytest.approx(maximum)


def test_a_seed_only_change_stops_at_the_stage_the_information_grid_allows() -> None:
    """No discordance: every run is the same; walk the stages by hand and compare."""
    plan = plan_task(margin=0.02, discordance=0.05)
    maximum = planned_information(plan.max_n, margin=0.02, discordance=0.05)
    stages = math.ceil(plan.max_n / 100)
    grid = information_design(plan.design)
    expected = None
    for stage in range(1, stages + 1):
        n = 100 * stage
        level = min(INFORMATION_LEVELS, math.floor(n / (0.02 * 0.98) / maximum * INFORMATION_LEVELS))
        if decide_look(grid, level, losses=0, gains=0, n=n, margin=0.02).outcome == "approve":
            expected = n
            break
    result = simulate_information(
        plan.design, stage_size=100, stages=stages, max_information=maximum, margin=0.02, p_loss=0.0,
        p_gain=0.0, runs=50, rng=np.random.default_rng(1),
    )  # fmt: skip
    assert expected == 400  # √(400·0.02/0.98) = 2.86 at level 16 (0.82 of the maximum)
    assert result.approve == 1.0 and result.mean_samples == expected
    assert expected < plan.fixed_n / 2


def _information_run(p_loss: float, p_gain: float) -> OperatingCharacteristics:
    plan = plan_task(margin=0.02, discordance=0.05)
    return simulate_information(
        plan.design, stage_size=100, stages=math.ceil(plan.max_n / 100),
        max_information=planned_information(plan.max_n, margin=0.02, discordance=0.05), margin=0.02,
        p_loss=p_loss, p_gain=p_gain, runs=4000, rng=np.random.default_rng(11),
    )  # fmt: skip


@pytest.mark.parametrize(("p_loss", "p_gain"), [(0.045, 0.025), (0.02, 0.0)], ids=["margin", "losses-only"])
def test_the_information_based_design_keeps_false_approvals_within_alpha(p_loss: float, p_gain: float) -> None:
    assert _information_run(p_loss, p_gain).approve <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / 4000)


@pytest.mark.parametrize(("p_loss", "p_gain"), [(0.025, 0.025), (0.035, 0.025)], ids=["unchanged", "half-margin"])
def test_the_information_based_design_keeps_false_rejections_within_alpha(p_loss: float, p_gain: float) -> None:
    assert _information_run(p_loss, p_gain).reject <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / 4000)


def test_one_sided_futility_stops_a_clear_regression_sooner_but_rejects_it_less_often() -> None:
    """The variant the design search measures: futile whenever Z ≤ f_k, not only inside |Z| ≤ f_k."""
    plan = plan_task(margin=0.02, discordance=0.05, alpha_spending=POCOCK)

    def run(p_loss: float, seed: int, one_sided: bool) -> OperatingCharacteristics:
        return simulate_sequential(
            plan.design, plan.look_sizes, margin=0.02, p_loss=p_loss, p_gain=0.025, runs=2000,
            rng=np.random.default_rng(seed), one_sided_futility=one_sided,
        )  # fmt: skip

    wedge, one_sided = run(0.025 + 0.04, 3, False), run(0.025 + 0.04, 3, True)
    assert one_sided.mean_samples < 0.8 * wedge.mean_samples
    assert one_sided.futile > wedge.futile + 0.2
    assert one_sided.reject < wedge.reject - 0.2
    assert one_sided.approve == wedge.approve == 0.0
    # A neutral change is approved about as often: the one-sided stop ends only runs whose score has
    # fallen below the futility bound, few of which would have recovered to the efficacy bound.
    neutral = run(0.025, 4, False), run(0.025, 4, True)
    assert neutral[1].approve == pytest.approx(neutral[0].approve, abs=0.03)


def test_shipped_first_stages_reach_the_plans_maximum_within_the_pool() -> None:
    """Stage one is the shipped suite; the stages after it are equal held-out blocks to the plan's
    maximum, cut at the pool (2 points at 5 %: 1,577 planned, 1,100 exist)."""
    assert shipped_first_sizes(318, shipped=100, looks=5, pool=1100) == (100, 155, 210, 265, 320)
    assert shipped_first_sizes(1577, shipped=100, looks=5, pool=1100) == (100, 350, 600, 850, 1100)
    assert shipped_first_sizes(404, shipped=200, looks=3, pool=1200) == (200, 302, 404)
    # The shipped suite already holds the maximum: one look, the fixed test.
    assert shipped_first_sizes(80, shipped=100, looks=5, pool=1100) == (100,)
    # Equal blocks, the last rounded up past the maximum, never past the pool.
    assert shipped_first_sizes(103, shipped=100, looks=6, pool=1100) == (100, 101, 102, 103, 104, 105)
    assert shipped_first_sizes(5000, shipped=100, looks=4, pool=1100) == (100, 433, 766, 1099)
    with pytest.raises(ValueError, match="pool ≥ shipped"):
        shipped_first_sizes(300, shipped=100, looks=5, pool=50)


def test_a_sized_design_spends_all_alpha_at_its_last_look_and_scales_the_drift_to_it() -> None:
    plan = plan_task(margin=0.02, discordance=0.05, alpha_spending=POCOCK, beta_spending=POCOCK)
    sizes = shipped_first_sizes(plan.max_n, shipped=100, looks=5, pool=1100)
    design = sized_design(plan, sizes)
    assert design.info == pytest.approx([n / 1100 for n in sizes])
    assert design.alpha_spent[-1] == pytest.approx(plan.alpha)
    assert design.drift == pytest.approx(plan.design.drift * math.sqrt(1100 / plan.max_n))
    uncut = sized_design(plan3 := plan_task(margin=0.05, discordance=0.05), (100, 155, 210, 265, 318))
    assert uncut.drift == pytest.approx(plan3.design.drift)


@pytest.mark.parametrize(("p_loss", "p_gain"), [(0.02, 0.0), (0.045, 0.025)], ids=["losses-only", "with-gains"])
def test_a_design_the_pool_cuts_short_keeps_false_approvals_within_alpha(p_loss: float, p_gain: float) -> None:
    """A change exactly at the 2-point margin, judged at the shipped-first looks the pool allows."""
    plan = plan_task(margin=0.02, discordance=0.05, alpha_spending=POCOCK, beta_spending=POCOCK)
    sizes = shipped_first_sizes(plan.max_n, shipped=100, looks=5, pool=1100)
    result = simulate_sequential(
        sized_design(plan, sizes),
        sizes,
        margin=0.02,
        p_loss=p_loss,
        p_gain=p_gain,
        runs=4000,
        rng=np.random.default_rng(7),
    )
    assert result.approve <= 0.025 + 2 * math.sqrt(0.025 * 0.975 / 4000)


def test_plan_sized_stages_approve_a_neutral_two_point_change_far_more_often_than_shipped_size_ones() -> None:
    """The policy's five looks at 100, 200, … 500 pairs against the same looks sized from the plan:
    a neutral change at the planned 5 % discordance, same draws."""
    plan = plan_task(margin=0.02, discordance=0.05, alpha_spending=POCOCK, beta_spending=POCOCK)
    sized = shipped_first_sizes(plan.max_n, shipped=100, looks=5, pool=1100)

    def neutral(design: GroupSequentialDesign, sizes: tuple[int, ...]) -> OperatingCharacteristics:
        return simulate_sequential(
            design, sizes, margin=0.02, p_loss=0.025, p_gain=0.025, runs=2000, rng=np.random.default_rng(3)
        )

    five = group_sequential_design(equally_spaced(5), alpha=plan.alpha, beta=0.2, alpha_spending=POCOCK)
    shipped = neutral(five, (100, 200, 300, 400, 500))
    planned = neutral(sized_design(plan, sized), sized)
    assert shipped.approve < 0.45 < 0.65 < planned.approve


@pytest.mark.parametrize(
    ("p_loss", "p_gain"),
    [(0.025, 0.025), (0.0, 0.0), (0.04, 0.01), (0.08, 0.02), (0.01, 0.05)],
    ids=["neutral", "no-discordance", "at-the-margin", "twice-the-margin", "better"],
)
def test_the_exact_operating_characteristics_are_the_simulated_ones(p_loss: float, p_gain: float) -> None:
    """``exact_sequential`` carries the distribution of the counts look to look; drawing 20,000
    evaluations with ``simulate_sequential`` lands within Monte Carlo error of it (the plan-sized
    2-point design, cut at the pool, where every outcome occurs)."""
    plan = plan_task(margin=0.02, discordance=0.05, alpha_spending=POCOCK, beta_spending=POCOCK)
    sizes = shipped_first_sizes(plan.max_n, shipped=100, looks=5, pool=1100)
    design = sized_design(plan, sizes)
    exact = exact_sequential(design, sizes, margin=0.02, p_loss=p_loss, p_gain=p_gain)
    drawn = simulate_sequential(
        design, sizes, margin=0.02, p_loss=p_loss, p_gain=p_gain, runs=20_000, rng=np.random.default_rng(11)
    )
    total = exact.approve + exact.reject + exact.futile + exact.inconclusive
    assert total == pytest.approx(1.0, abs=1e-9)
    for name in ("approve", "reject", "futile", "inconclusive"):
        rate = getattr(exact, name)
        assert abs(getattr(drawn, name) - rate) <= 4 * math.sqrt(rate * (1 - rate) / 20_000) + 1e-9, name
    spread = max(sizes) / math.sqrt(20_000)  # the pairs used vary by less than the largest look
    assert abs(drawn.mean_samples - exact.mean_samples) <= 4 * spread / 2
