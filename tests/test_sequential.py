"""Group-sequential boundaries against published values, spending, and the decision at a look."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from gates.judge.power import simulate_sequential
from gates.judge.sequential import (
    INFORMATION_LEVELS,
    OBRIEN_FLEMING,
    POCOCK,
    Spending,
    decide_look,
    efficacy_boundaries,
    equally_spaced,
    group_sequential_design,
    information_design,
    information_levels,
    noninferiority_score,
    null_information,
)
from gates.judge.stats import _tango_score, mcnemar_noninferiority

RUNS = 4000
TOLERANCE = 3 * math.sqrt(0.025 * 0.975 / RUNS)  # three standard errors of a rate of α

# Lan–DeMets O'Brien–Fleming-type spending, one-sided alpha 0.025, equally spaced looks, as
# printed by R gsDesign (sfLDOF) and rpact (typeOfDesign = "asOF"); e.g. K = 5 in the rpact
# vignette "Defining group-sequential boundaries" and gsDesign's manual.
PUBLISHED_LDOF = {
    2: (2.963, 1.969),
    3: (3.710, 2.511, 1.993),
    4: (4.333, 2.963, 2.359, 2.014),
    5: (4.877, 3.357, 2.680, 2.290, 2.031),
}


@pytest.mark.parametrize("looks", sorted(PUBLISHED_LDOF))
def test_it_matches_published_obrien_fleming_spending_boundaries(looks: int) -> None:
    """Lan–DeMets OBF boundaries for K = 2..5 at one-sided 0.025 (gsDesign sfLDOF / rpact asOF)."""
    info = equally_spaced(looks)
    bounds = efficacy_boundaries(info, [OBRIEN_FLEMING(t, 0.025) for t in info])
    assert bounds == pytest.approx(PUBLISHED_LDOF[looks], abs=1e-3)


def test_it_matches_rpact_for_obrien_fleming_with_pocock_beta_spending() -> None:
    """rpact unit test "getDesignGroupSequential with type of design = 'asOF' and 'bsP'":
    getDesignGroupSequential(kMax = 3, alpha = 0.03, typeOfDesign = "asOF", typeBetaSpending = "bsP")
    (rpact inst/tests/testthat/test-f_design_group_sequential.R, non-binding futility, beta 0.2).
    """
    design = group_sequential_design(equally_spaced(3), alpha=0.03, beta=0.2, beta_spending=POCOCK)
    assert design.efficacy == pytest.approx((3.5815302, 2.417863, 1.9175839), abs=1e-6)
    assert design.futility[:2] == pytest.approx((0.42062972, 1.2539286), abs=1e-6)
    assert design.alpha_spent == pytest.approx((0.00017079385, 0.0078650906, 0.03), abs=1e-9)
    assert design.beta_spent == pytest.approx((0.090566485, 0.1526765, 0.2), abs=1e-8)


def test_it_matches_rpact_for_kim_demets_spending_on_unequal_looks() -> None:
    """rpact unit test x3: getDesignInverseNormal(kMax = 3, informationRates = c(0.3, 0.7, 1),
    alpha = 0.03, beta = 0.34, typeOfDesign = "asKD", gammaA = 2.2, typeBetaSpending = "bsKD",
    gammaB = 3.2): critical values, futility bounds and the inflation factor 1.0555891.
    """
    alpha_spending, beta_spending = Spending("power", 2.2), Spending("power", 3.2)
    design = group_sequential_design(
        (0.3, 0.7, 1.0), alpha=0.03, beta=0.34, alpha_spending=alpha_spending, beta_spending=beta_spending
    )
    assert design.efficacy == pytest.approx((2.8594012, 2.2435708, 1.9735737), abs=1e-6)
    assert design.futility[:2] == pytest.approx((-1.1558435, 0.72836893), abs=1e-6)
    assert design.inflation == pytest.approx(1.0555891, abs=1e-6)


def test_it_matches_rpact_for_a_user_spending_sequence() -> None:
    """rpact unit test x5: getDesignGroupSequential(typeOfDesign = "asUser",
    userAlphaSpending = c(0.01, 0.02, 0.03, 0.05)) → 2.3263479, 2.2192994, 2.1201347, 1.8189562.
    """
    bounds = efficacy_boundaries(equally_spaced(4), (0.01, 0.02, 0.03, 0.05))
    assert bounds == pytest.approx((2.3263479, 2.2192994, 2.1201347, 1.8189562), abs=1e-6)


@pytest.mark.parametrize("spending", [OBRIEN_FLEMING, POCOCK, Spending("power", 3.0)], ids=lambda s: s.kind)
def test_spending_rises_from_nothing_to_alpha(spending: Spending) -> None:
    t = np.linspace(0, 1, 101)
    spent = [spending(x, 0.025) for x in t]
    assert spent[0] == 0 and spent[-1] == 0.025
    assert all(b > a for a, b in itertools.pairwise(spent))


def test_boundaries_spend_exactly_alpha_under_the_joint_normal() -> None:
    """Independent of the recursion: P(any Z_k ≥ a_k) from scipy's multivariate normal CDF."""
    info = (0.2, 0.5, 0.75, 1.0)
    bounds = efficacy_boundaries(info, [POCOCK(t, 0.025) for t in info])
    corr = np.sqrt(np.minimum.outer(info, info) / np.maximum.outer(info, info))
    never_crossed = sps.multivariate_normal.cdf(
        np.asarray(bounds), mean=np.zeros(4), cov=corr, abseps=1e-7, releps=1e-7, rng=np.random.default_rng(18)
    )
    assert 1 - never_crossed == pytest.approx(0.025, abs=2e-4)


@pytest.mark.parametrize("margin", [0.0, 0.02, 0.05])
def test_the_vectorised_score_is_the_judges_tango_score(margin: float) -> None:
    n = 60
    for losses in range(0, n + 1, 7):
        for gains in range(0, n - losses + 1, 5):
            expected = _tango_score(-margin, gains, losses, n)
            assert float(noninferiority_score(losses, gains, n, margin)) == pytest.approx(expected, abs=1e-12)


def test_with_no_discordant_pair_one_look_settles_where_the_fixed_judge_does() -> None:
    """b = c = 0: the score is √(n·δ/(1−δ)); 189 identical pairs clear a 2-point margin, 188 do not."""
    single = group_sequential_design((1.0,), beta_spending=None)
    assert single.efficacy[0] == pytest.approx(1.959964, abs=1e-6)
    for n, outcome, status in ((189, "approve", "pass"), (188, "inconclusive", "inconclusive")):
        decision = decide_look(single, 1, losses=0, gains=0, n=n, margin=0.02)
        assert decision.outcome == outcome
        assert mcnemar_noninferiority([True] * n, [True] * n, 0.02).status == status


def test_a_seed_only_change_settles_at_the_look_the_boundary_allows() -> None:
    design = group_sequential_design(equally_spaced(5))
    sizes = [280, 560, 840, 1120, 1400]
    outcomes = [decide_look(design, k + 1, losses=0, gains=0, n=n, margin=0.02).outcome for k, n in enumerate(sizes)]
    # √(n·0.02/0.98): 2.39 < 4.88, 3.38 ≥ 3.36 at the second look.
    assert outcomes[:2] == ["continue", "approve"]


def test_all_discordant_pairs_settle_at_the_first_look() -> None:
    design = group_sequential_design(equally_spaced(5))
    assert decide_look(design, 1, losses=100, gains=0, n=100, margin=0.02).outcome == "reject"
    assert decide_look(design, 1, losses=0, gains=100, n=100, margin=0.02).outcome == "approve"


def test_the_last_look_is_inconclusive_with_the_estimate_when_nothing_was_crossed() -> None:
    design = group_sequential_design(equally_spaced(3))
    decision = decide_look(design, 3, losses=30, gains=25, n=600, margin=0.02)
    assert decision.outcome == "inconclusive"
    assert decision.effect == pytest.approx(-5 / 600)
    assert decision.interval[0] < -0.02 < decision.interval[1]
    assert decision.futility_bound is None


def test_a_change_at_the_margin_stops_inside_the_wedge_and_a_clear_loss_beyond_it_is_rejected() -> None:
    design = group_sequential_design(equally_spaced(5))
    assert design.futility[2] > 0.5
    at_margin = decide_look(design, 3, losses=40, gains=28, n=600, margin=0.02)  # Δ̂ = −2 points
    assert abs(at_margin.statistic) < design.futility[2] and at_margin.outcome == "futile"
    # Δ̂ = −5.3 points: the loss is significant against half the margin (Tango's score at −1 point
    # −2.80 ≤ −2.68), so it is rejected, where the whole repeated interval below −2 points (the
    # score at −margin, −2.17) would have waited for another stage.
    beyond = decide_look(design, 3, losses=60, gains=28, n=600, margin=0.02)
    assert beyond.harm_statistic == pytest.approx(_tango_score(-0.01, 28, 60, 600))
    assert beyond.harm_statistic <= -design.efficacy[2] < beyond.statistic
    assert beyond.outcome == "reject"
    # Δ̂ = −4 points, not yet significant against half the margin (−2.03): another stage.
    assert decide_look(design, 3, losses=52, gains=28, n=600, margin=0.02).outcome == "continue"


def test_a_loss_inside_the_margin_is_never_rejected_however_significant() -> None:
    """5,000 pairs losing 200 and gaining 105: 1.9 points lost, significant even against half the
    2-point margin (score −2.6 ≤ −2.29 at look 4), but inside the margin: not a rejection."""
    design = group_sequential_design(equally_spaced(5))
    look = decide_look(design, 4, losses=200, gains=105, n=5000, margin=0.02)
    assert look.harm_statistic <= -design.efficacy[3] and look.effect > -0.02
    assert look.outcome != "reject"


def test_a_look_with_no_pairs_continues_and_bad_counts_are_refused() -> None:
    design = group_sequential_design(equally_spaced(2))
    assert decide_look(design, 1, losses=0, gains=0, n=0, margin=0.02).outcome == "continue"
    with pytest.raises(ValueError):
        decide_look(design, 1, losses=5, gains=6, n=10, margin=0.02)
    with pytest.raises(ValueError):
        decide_look(design, 3, losses=0, gains=0, n=10, margin=0.02)


def test_the_decision_and_design_serialise_for_the_ledger() -> None:
    design = group_sequential_design(equally_spaced(5))
    decision = decide_look(design, 2, losses=3, gains=1, n=400, margin=0.03)
    data = json.loads(json.dumps({"design": design.to_dict(), "look": decision.to_dict()}, allow_nan=False))
    assert data["look"]["alpha_spent"] == pytest.approx(design.alpha_spent[1])
    assert data["design"]["efficacy"] == pytest.approx(list(design.efficacy))
    assert data["design"]["alpha_spending"] == "Lan–DeMets O'Brien–Fleming-type"


@pytest.mark.parametrize(("p_loss", "p_gain"), [(0.045, 0.025), (0.02, 0.0)], ids=["discordant", "losses-only"])
def test_simulated_approvals_at_the_margin_stay_within_alpha(p_loss: float, p_gain: float) -> None:
    """A regression exactly at the 2-point margin is approved in at most α of runs."""
    result = simulate_sequential(
        group_sequential_design(equally_spaced(5)), [200, 400, 600, 800, 1000], margin=0.02, p_loss=p_loss,
        p_gain=p_gain, runs=RUNS, rng=np.random.default_rng(18),
    )  # fmt: skip
    assert result.approve <= 0.025 + TOLERANCE


@pytest.mark.parametrize(
    ("p_loss", "p_gain"),
    [(0.01, 0.01), (0.025, 0.025), (0.05, 0.05), (0.035, 0.025), (0.01, 0.0)],
    ids=["unchanged-2%", "unchanged-5%", "unchanged-10%", "half-margin-5%", "half-margin-losses-only"],
)
def test_simulated_rejections_of_a_change_losing_at_most_half_the_margin_stay_within_alpha(
    p_loss: float, p_gain: float
) -> None:
    """The reject side's score is centred at −margin/2: no change that loses less is rejected in
    more than α of runs, whatever its discordance."""
    result = simulate_sequential(
        group_sequential_design(equally_spaced(5)), [200, 400, 600, 800, 1000], margin=0.02, p_loss=p_loss,
        p_gain=p_gain, runs=RUNS, rng=np.random.default_rng(18),
    )  # fmt: skip
    assert result.reject <= 0.025 + TOLERANCE


def test_a_regression_of_twice_the_margin_is_rejected_early_in_nearly_every_run() -> None:
    """4 points lost of 100 with no gains, a 2-point margin: rejected in ≥ 95 % of runs, on about
    half the design's maximum pairs."""
    result = simulate_sequential(
        group_sequential_design(equally_spaced(5)), [200, 400, 600, 800, 1000], margin=0.02, p_loss=0.04,
        p_gain=0.0, runs=RUNS, rng=np.random.default_rng(18),
    )  # fmt: skip
    assert result.reject >= 0.95 and result.approve == 0
    assert result.mean_samples < 550


# --- information-based looks ------------------------------------------------------------------


@pytest.mark.parametrize("margin", [0.02, 0.05])
def test_the_score_is_the_estimate_over_its_null_standard_error_of_the_observed_information(margin: float) -> None:
    """Z = (Δ̂ + margin)·√I; with no discordant pair I = n / (margin·(1 − margin))."""
    assert float(null_information(0, 0, 300, margin)) == pytest.approx(300 / (margin * (1 - margin)))
    for losses, gains, n in ((3, 1, 100), (10, 12, 400), (0, 5, 250)):
        information = float(null_information(losses, gains, n, margin))
        score = float(noninferiority_score(losses, gains, n, margin))
        assert score == pytest.approx(((gains - losses) / n + margin) * math.sqrt(information), rel=1e-12)
    # More discordance, less information per pair.
    assert null_information(5, 5, 100, margin) < null_information(0, 0, 100, margin)


def test_information_levels_floor_to_the_grid_always_advance_and_stop_at_the_maximum() -> None:
    maximum = 1000.0
    # 0.26 → 5; 0.27 would be 5 again, so it counts one more; 0.61 → 12; 1.3 → the last level.
    assert information_levels([260, 270, 610, 1300, 1500], maximum) == (5, 6, 12, INFORMATION_LEVELS)
    assert information_levels([10], maximum) == (1,)  # a first look always counts one level
    with pytest.raises(ValueError, match="maximum information"):
        information_levels([1.0], 0.0)


def test_the_information_grid_keeps_the_planned_spending_and_a_truncated_grid_spends_all_alpha() -> None:
    planned = group_sequential_design(equally_spaced(5))
    grid = information_design(planned)
    assert grid.looks == INFORMATION_LEVELS and grid.drift == planned.drift
    # At the planned looks' fractions the grid has spent what the planned design spent by then.
    for k, t in enumerate(planned.info[:-1]):
        assert grid.alpha_spent[round(t * INFORMATION_LEVELS) - 1] == pytest.approx(planned.alpha_spent[k])
    truncated = information_design(planned, 7)
    assert truncated.info[-1] == pytest.approx(0.35) and truncated.alpha_spent[-1] == 0.025
    assert truncated.efficacy[:6] == pytest.approx(grid.efficacy[:6])
    assert truncated.efficacy[6] < grid.efficacy[6]  # the final look spends what is left


def test_looks_at_some_grid_levels_only_stay_within_alpha() -> None:
    """Skipping levels can only lower the chance of crossing: Brownian paths under H0, looks at
    every other level from the fourth on, with the grid's boundaries."""
    grid = information_design(group_sequential_design(equally_spaced(5)))
    rng = np.random.default_rng(3)
    steps = rng.normal(0.0, math.sqrt(1 / INFORMATION_LEVELS), size=(200_000, INFORMATION_LEVELS))
    z = steps.cumsum(axis=1) / np.sqrt(np.arange(1, INFORMATION_LEVELS + 1) / INFORMATION_LEVELS)
    every = (z >= np.asarray(grid.efficacy)).any(axis=1).mean()
    chosen = [3, 5, 7, 9, 11, 13, 15, 17, 19]
    some = (z[:, chosen] >= np.asarray(grid.efficacy)[chosen]).any(axis=1).mean()
    assert every == pytest.approx(0.025, abs=0.002)
    assert some <= every
