"""Group-sequential non-inferiority for paired pass/fail outcomes: spending, boundaries, looks.

The fixed design judges a quality guardrail once: the Tango score interval at the rule's
two-sided ``confidence`` must clear ``-margin`` (``stats.classify_noninferiority``). That is the
one-sided test of H0: Δ ≤ −margin at ``alpha = (1 − confidence) / 2``, Δ = candidate − baseline
pass rate. The sequential design tests the same hypothesis with the same statistic — Tango's
score at Δ0 = −margin, :func:`noninferiority_score` — after each stage of samples, against
boundaries that spend ``alpha`` over the looks (Lan–DeMets):

* **approve** (efficacy) when the score reaches the look's efficacy boundary ``a_k``: the
  repeated confidence interval at that look clears −margin;
* **reject** (harm) when the loss is significant against *half* the margin at the look's boundary
  — Tango's score at Δ0 = −margin/2 (:func:`harm_score`) falls to ``−a_k`` — and the estimate
  lies beyond the margin. The boundaries spend ``alpha`` under Δ = −margin/2, where that score is
  centred, so a change losing at most half the margin is rejected in at most ``alpha`` of runs,
  and the estimate's condition keeps one whose estimate is inside the margin from being rejected
  at all. This sits between the fixed judge's rule (a loss significant against *no change*, the
  estimate beyond the margin: 9–11 % of half-margin regressions rejected, 24 % of the kit's
  4-point code loss under a 5-point margin) and demanding the whole repeated interval below
  −margin (the score at −margin itself at ``−a_k``), which an earlier version did and which let a
  regression of twice the margin run to the last look, or stop as futile, in most staged runs
  (``manage.py bench_sequential``, docs/sequential.md). The score decreases in Δ0, so the old
  rule's rejections are rejections here too;
* **futile** — stop, inconclusive — when neither side can be expected to settle within the
  budget: the score lies inside the wedge ``|Z| ≤ f_k``. ``f_k`` is the futility boundary of the
  approve side, found by spending ``beta`` under the planned alternative (Δ1, usually 0); by
  symmetry ``−f_k`` is the reject side's futility boundary for the mirrored alternative
  (Δ = −2·margin − Δ1), so a change sitting at the margin stops early while a clear regression
  runs on until it is rejected (Jennison & Turnbull 2000, ch. 5: two-sided tests with an inner
  wedge). Non-binding: the efficacy boundaries are computed as if it never stopped anything, so
  obeying it or not cannot raise either error rate;
* at the last look, neither boundary crossed → **inconclusive** with the estimate.

The efficacy boundaries are computed under Δ = −margin, where the approve score is centred; the
reject side uses the same boundaries on the score at −margin/2, centred under Δ = −margin/2. The
boundaries come from the exact joint normal distribution of the scores at
the looks (corr(Z_j, Z_k) = √(n_j / n_k)), integrated numerically look by look with the
Armitage–McPherson–Rowe recursion (Jennison & Turnbull 2000, ch. 19) on a Simpson grid.

Zero discordance: a Wald statistic's variance collapses to 0 when no pair disagrees, which is why
a seed-only change could never settle. Tango's score evaluates the variance *under the null*
(its restricted maximum likelihood puts a loss rate of at least ``margin`` in the table), so with
b = c = 0 the score is √(n · margin / (1 − margin)): finite, growing with n, and it crosses the
look's boundary once n ≥ a_k² (1 − margin) / margin — 189 pairs for a 2-point margin at a final
boundary of 1.96. No floor or pseudo-count is needed, and the decision agrees with the fixed
design's interval at every n.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from scipy import optimize
from scipy import stats as sps

from gates.judge import stats

Outcome = Literal["approve", "reject", "futile", "continue", "inconclusive"]
SpendingKind = Literal["obrien_fleming", "pocock", "power"]
FloatArray = npt.NDArray[np.float64]

# Simpson grid step (z units) and how far beyond the mean an unbounded region is integrated:
# boundaries come out within about 1e-6 of published tables.
GRID_STEP = 0.025
TAIL_SD = 9.0
# A boundary that spends (almost) nothing: e.g. O'Brien–Fleming at t = 0.05 spends 1e-23.
NO_STOP = math.inf


@dataclass(frozen=True)
class Spending:
    """A Lan–DeMets spending function: how much of ``total`` error may be spent by fraction t.

    * ``obrien_fleming``: 2 − 2Φ(z_{1−total/2} / √t) — almost nothing early (Lan & DeMets 1983);
    * ``pocock``: total · ln(1 + (e − 1) t) — roughly even (Lan & DeMets 1983);
    * ``power``: total · t^rho (Kim & DeMets 1987; rho = 3 is close to O'Brien–Fleming).
    """

    kind: SpendingKind = "obrien_fleming"
    rho: float = 1.0

    def __call__(self, t: float, total: float) -> float:
        if t <= 0:
            return 0.0
        if t >= 1:
            return total
        if self.kind == "obrien_fleming":
            return float(2 * sps.norm.sf(sps.norm.isf(total / 2) / math.sqrt(t)))
        if self.kind == "pocock":
            return total * math.log(1 + (math.e - 1) * t)
        return total * t**self.rho

    @property
    def label(self) -> str:
        names = {"obrien_fleming": "O'Brien–Fleming-type", "pocock": "Pocock-type", "power": f"power (ρ={self.rho:g})"}
        return f"Lan–DeMets {names[self.kind]}"


OBRIEN_FLEMING = Spending("obrien_fleming")
POCOCK = Spending("pocock")


def equally_spaced(looks: int) -> tuple[float, ...]:
    """Information fractions of ``looks`` equally spaced looks: (1/K, 2/K, …, 1)."""
    if looks < 1:
        raise ValueError(f"a design needs at least one look, got {looks}")
    return tuple((k + 1) / looks for k in range(looks))


# --- the recursion -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Density:
    """Sub-density of Z at information ``info`` over the paths that have not stopped yet.

    Z_k = W(t_k) / √t_k for a Brownian motion W with drift ``drift`` per unit of information; the
    start is a point mass at 0 at information 0, so the first look needs no special case.
    """

    info: float
    grid: FloatArray
    mass: FloatArray  # density × Simpson weight at each grid point


_START = _Density(0.0, np.zeros(1), np.ones(1))


def _next_moments(state: _Density, info: float, drift: float) -> tuple[FloatArray, float]:
    """Mean (per grid point of ``state``) and sd of Z at ``info`` given Z at ``state.info``."""
    step = info - state.info
    if step <= 0:
        raise ValueError("information must increase from look to look")
    mean = (state.grid * math.sqrt(state.info) + drift * step) / math.sqrt(info)
    return mean, math.sqrt(step / info)


def _cross_up(state: _Density, info: float, bound: float, drift: float) -> float:
    """P(still running at ``state`` and Z ≥ ``bound`` at ``info``)."""
    if bound == math.inf:
        return 0.0
    mean, sd = _next_moments(state, info, drift)
    return float(np.dot(state.mass, sps.norm.sf((bound - mean) / sd)))


def _cross_down(state: _Density, info: float, bound: float, drift: float) -> float:
    """P(still running at ``state`` and Z ≤ ``bound`` at ``info``)."""
    if bound == -math.inf:
        return 0.0
    mean, sd = _next_moments(state, info, drift)
    return float(np.dot(state.mass, sps.norm.cdf((bound - mean) / sd)))


def _simpson(lower: float, upper: float) -> tuple[FloatArray, FloatArray]:
    intervals = max(2, 2 * math.ceil((upper - lower) / (2 * GRID_STEP)))
    grid = np.linspace(lower, upper, intervals + 1)
    weights = np.ones(intervals + 1)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    return grid, weights * (upper - lower) / (3 * intervals)


def _continue(
    state: _Density, info: float, lower: float, upper: float, drift: float, wedge: float = -math.inf
) -> _Density:
    """The sub-density at ``info`` of the paths with ``lower < Z < upper`` and not |Z| ≤ ``wedge``."""
    centre = drift * math.sqrt(info)  # Z at ``info`` is N(centre, 1) before any stopping
    low, high = max(lower, centre - TAIL_SD), min(upper, centre + TAIL_SD)
    pieces = [(low, high)] if wedge < 0 else [(low, min(high, -wedge)), (max(low, wedge), high)]
    grids = [_simpson(a, b) for a, b in pieces if a < b]
    if not grids:
        return _Density(info, np.zeros(1), np.zeros(1))
    grid, weights = np.concatenate([g for g, _ in grids]), np.concatenate([w for _, w in grids])
    mean, sd = _next_moments(state, info, drift)
    kernel = sps.norm.pdf((grid[:, None] - mean[None, :]) / sd) / sd
    return _Density(info, grid, weights * (kernel @ state.mass))


def _solve(function: Any, low: float, high: float) -> float:
    return float(optimize.brentq(function, low, high, xtol=1e-10))


def efficacy_boundaries(info: Sequence[float], spent: Sequence[float]) -> tuple[float, ...]:
    """Upper z boundaries whose crossing probabilities under H0 are the increments of ``spent``.

    ``info``: information at each look (any scale; only ratios matter under H0); ``spent``: the
    cumulative error allowed by each look. Computed with no lower boundary, so that a futility
    rule on top is non-binding.
    """
    bounds: list[float] = []
    state, previous = _START, 0.0
    for t, cumulative in zip(info, spent, strict=True):
        target = cumulative - previous
        if target <= 1e-300:
            bound = NO_STOP
        else:
            bound = _solve(lambda a, s=state, t=t, p=target: _cross_up(s, t, a, 0.0) - p, -10.0, 40.0)
        bounds.append(bound)
        state, previous = _continue(state, t, -math.inf, bound, 0.0), cumulative
    return tuple(bounds)


# --- the design ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupSequentialDesign:
    """Looks, boundaries and spent error of a one-sided group-sequential test.

    ``info`` are the looks' information fractions of the planned maximum (the last one is the
    final look whatever its value). ``drift`` is E[Z] at information 1 under the planned
    alternative: (z_α + z_β)·√inflation.
    """

    info: tuple[float, ...]
    alpha: float
    beta: float
    alpha_spending: Spending
    beta_spending: Spending | None
    alpha_spent: tuple[float, ...]  # cumulative, per look; the last is ``alpha``
    beta_spent: tuple[float, ...]  # cumulative, per look, under the planned alternative
    efficacy: tuple[float, ...]  # approve when Z ≥ efficacy[k]; reject when Z ≤ −efficacy[k]
    futility: tuple[float, ...]  # approve side's; stop inconclusive when |Z| ≤ futility[k] ≥ 0
    drift: float

    @property
    def looks(self) -> int:
        return len(self.info)

    @property
    def harm(self) -> tuple[float, ...]:
        return tuple(-a for a in self.efficacy)

    @property
    def inflation(self) -> float:
        """Maximum sample size relative to the fixed design with the same alpha and power."""
        fixed = sps.norm.isf(self.alpha) + sps.norm.isf(self.beta)
        return float((self.drift / fixed) ** 2)

    def expected_fraction(self, drift: float) -> float:
        """Expected samples as a fraction of the maximum when E[Z at the maximum] is ``drift``.

        Under the rules of :func:`decide_look`, with the score at −margin standing in for the reject
        rule's score at −margin/2 (stop at ``a_k``, at ``−a_k`` or inside the wedge): under the
        planned alternative neither rejects; at the margin the real reject rule stops sooner, so
        the figure there is an upper bound.
        """
        state, expected, running = _START, 0.0, 1.0
        for k, (t, bound) in enumerate(zip(self.info, self.efficacy, strict=True)):
            last = k == self.looks - 1
            wedge = bound if last else self.futility[k]
            state = _continue(state, t, -bound, bound, drift, wedge)
            still = 0.0 if last else float(state.mass.sum())
            expected += min(t, 1.0) * (running - still)
            running = still
        return expected

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        finite = {"efficacy", "futility"}
        for key in finite:
            data[key] = [x if math.isfinite(x) else None for x in data[key]]
        data["harm"] = [-x if x is not None else None for x in data["efficacy"]]
        data["alpha_spending"] = self.alpha_spending.label
        data["beta_spending"] = self.beta_spending.label if self.beta_spending else None
        return data


def _spent(spending: Spending, info: Sequence[float], total: float) -> tuple[float, ...]:
    """Cumulative spending at each look; the last look is final and spends everything."""
    return tuple(total if k == len(info) - 1 else spending(min(t, 1.0), total) for k, t in enumerate(info))


def group_sequential_design(
    info: Sequence[float] = equally_spaced(5),
    *,
    alpha: float = 0.025,
    beta: float = 0.2,
    alpha_spending: Spending = OBRIEN_FLEMING,
    beta_spending: Spending | None = POCOCK,
    drift: float | None = None,
) -> GroupSequentialDesign:
    """Efficacy boundaries by ``alpha_spending``; non-binding futility by ``beta_spending``.

    Without ``drift`` it is solved so that the power is 1 − ``beta`` with the futility rule
    obeyed, and the futility boundary meets the efficacy boundary at the last look (the
    construction of rpact's and gsDesign's non-binding beta-spending designs). Re-planning at
    looks that came out at other sample counts passes the original ``drift`` and the observed
    fractions (Lan–DeMets: the boundaries of the looks already taken do not change).
    """
    if not 0 < alpha < 0.5 or not 0 < beta < 0.5:
        raise ValueError(f"alpha and beta must be in (0, 0.5), got {alpha} and {beta}")
    return _design(tuple(float(t) for t in info), alpha, beta, alpha_spending, beta_spending, drift)


@functools.lru_cache(maxsize=4096)
def _design(
    info: tuple[float, ...],
    alpha: float,
    beta: float,
    alpha_spending: Spending,
    beta_spending: Spending | None,
    drift: float | None,
) -> GroupSequentialDesign:
    """:func:`group_sequential_design`, cached: plans and benchmarks ask for the same designs often."""
    if not info or any(b <= a for a, b in zip((0.0, *info), info, strict=False)):
        raise ValueError(f"information fractions must be positive and increasing, got {info}")
    alpha_spent = _spent(alpha_spending, info, alpha)
    efficacy = efficacy_boundaries(info, alpha_spent)
    beta_spent = _spent(beta_spending, info, beta) if beta_spending else (0.0,) * (len(info) - 1) + (beta,)

    def futility_at(eta: float) -> tuple[tuple[float, ...], float]:
        """Futility boundaries at drift ``eta`` and the type II error they leave at the last look."""
        bounds: list[float] = []
        state, previous = _START, 0.0
        for k, (t, high) in enumerate(zip(info, efficacy, strict=True)):
            if k == len(info) - 1:
                return (*bounds, high), previous + _cross_down(state, t, high, eta)
            target = beta_spent[k] - previous
            if beta_spending is None or target <= 0:
                low = -math.inf
            elif _cross_down(state, t, high, eta) <= target:
                low = high
            else:
                low = _solve(lambda f, s=state, t=t, p=target: _cross_down(s, t, f, eta) - p, -40.0, high)
            bounds.append(low)
            state, previous = _continue(state, t, low, high, eta), previous + _cross_down(state, t, low, eta)
        raise AssertionError("unreachable: the loop returns at the last look")

    if drift is None:
        fixed = float(sps.norm.isf(alpha) + sps.norm.isf(beta))
        drift = _solve(lambda eta: futility_at(eta)[1] - beta, 0.5 * fixed, 3.0 * fixed)
    futility, _ = futility_at(drift)
    return GroupSequentialDesign(
        info=info,
        alpha=alpha,
        beta=beta,
        alpha_spending=alpha_spending,
        beta_spending=beta_spending,
        alpha_spent=alpha_spent,
        beta_spent=beta_spent,
        efficacy=efficacy,
        futility=futility,
        drift=float(drift),
    )


# --- the statistic and the look -----------------------------------------------------------------


def noninferiority_score(losses: npt.ArrayLike, gains: npt.ArrayLike, n: npt.ArrayLike, margin: float) -> FloatArray:
    """Tango's score for H0: Δ = −``margin`` (the judge's statistic), elementwise over arrays.

    ``losses`` (b): baseline passed, candidate failed; ``gains`` (c): the reverse; ``n`` > 0
    pairs. Positive means better than the margin. The same formula as ``stats._tango_score``,
    written for numpy so that simulations score thousands of runs at once.
    """
    b, c, m = (np.asarray(x, dtype=float) for x in (losses, gains, n))
    numerator = c - b + m * margin
    variance = _null_variance(b, c, m, margin)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = numerator / np.sqrt(variance)
        return np.where(variance > 0, z, np.where(numerator == 0, 0.0, np.sign(numerator) * np.inf))


def _null_variance(b: FloatArray, c: FloatArray, m: FloatArray, margin: float) -> FloatArray:
    """Variance of c − b under H0 Δ = −margin at Tango's restricted MLE (0 where ``m`` is 0)."""
    d0 = -margin
    qa = 2 * np.maximum(m, 1e-300)
    qb = -c - b + (2 * m - c + b) * d0
    qc = -b * d0 * (1 - d0)
    p_loss = (np.sqrt(np.maximum(qb * qb - 4 * qa * qc, 0.0)) - qb) / (2 * qa)
    return np.asarray(m * (2 * p_loss + d0 * (1 - d0)), dtype=float)


def null_information(losses: npt.ArrayLike, gains: npt.ArrayLike, n: npt.ArrayLike, margin: float) -> FloatArray:
    """The score's observed information about Δ: n² over the null variance of c − b, elementwise.

    Z = (Δ̂ + margin)·√information, so the information is what a look's boundary is about: n over
    the per-pair null variance, which is margin·(1 − margin) with no discordant pair and grows
    with the discordance. A seed-only change therefore collects information 2–3 times as fast per
    pair as one at the planned 5 % discordance (Mehta & Tsiatis 2001: information-based designs).
    """
    b, c, m = (np.asarray(x, dtype=float) for x in (losses, gains, n))
    variance = _null_variance(b, c, m, margin)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(variance > 0, m * m / variance, 0.0)


def harm_score(losses: npt.ArrayLike, gains: npt.ArrayLike, n: npt.ArrayLike, margin: float) -> FloatArray:
    """The reject side's statistic, elementwise: Tango's score at Δ0 = −``margin``/2."""
    return noninferiority_score(losses, gains, n, margin / 2)


def rejects(harm_statistic: npt.ArrayLike, effect: npt.ArrayLike, bound: npt.ArrayLike, margin: float) -> Any:
    """The reject rule, elementwise: a loss significant against half the margin at ``bound``, and
    an estimate beyond −``margin``."""
    return (np.asarray(harm_statistic) <= -np.asarray(bound)) & (np.asarray(effect) < -margin)


# The information-based design's grid: boundaries are planned at every twentieth of the maximum
# information, and a look is taken at the grid level its observed information has reached.
INFORMATION_STEP = 0.05
INFORMATION_LEVELS = round(1 / INFORMATION_STEP)


def information_levels(information: Sequence[float], max_information: float) -> tuple[int, ...]:
    """Each look's grid level (1..``INFORMATION_LEVELS``): its information fraction floored to the
    grid, one level past the previous look's at least, and at most the last level. A look that
    reaches the last level is the final one: the looks after it are not taken."""
    if max_information <= 0:
        raise ValueError(f"the maximum information must be positive, got {max_information}")
    levels: list[int] = []
    for observed in information:
        if levels and levels[-1] >= INFORMATION_LEVELS:
            break
        floor = math.floor(observed / max_information * INFORMATION_LEVELS + 1e-9)
        levels.append(min(INFORMATION_LEVELS, max(levels[-1] + 1 if levels else 1, floor)))
    return tuple(levels)


def information_design(planned: GroupSequentialDesign, final_level: int | None = None) -> GroupSequentialDesign:
    """The planned design on the information grid, or its truncation at a final look at ``final_level``.

    Looks are taken at the grid levels the information reached, some levels skipped: deciding a
    look at level j with the grid design's boundary there is conservative, since the chance of
    crossing a subset of the boundaries is at most that of crossing any of them. A final look
    before the last level (the stage budget is spent) spends the rest of alpha with the grid
    truncated there. Spending and the drift per unit of information are the planned design's.
    """
    levels = final_level or INFORMATION_LEVELS
    if not 1 <= levels <= INFORMATION_LEVELS:
        raise ValueError(f"the final level must be in 1..{INFORMATION_LEVELS}, got {final_level}")
    return group_sequential_design(
        tuple((j + 1) / INFORMATION_LEVELS for j in range(levels)),
        alpha=planned.alpha,
        beta=planned.beta,
        alpha_spending=planned.alpha_spending,
        beta_spending=planned.beta_spending,
        drift=planned.drift,
    )


def fixed_status(losses: int, gains: int, n: int, margin: float, confidence: float) -> stats.Status:
    """The judge's fixed-design verdict on counts, reached as ``stats.mcnemar_noninferiority`` does."""
    interval = stats.paired_difference_interval(gains, losses, n, confidence)
    discordant = losses + gains
    p_value = float(sps.binomtest(losses, discordant, 0.5).pvalue) if discordant else 1.0
    significant = p_value < 1 - confidence and losses > gains
    return stats.classify_noninferiority((gains - losses) / n, interval, margin, significant)


@dataclass(frozen=True)
class LookDecision:
    """What the judge decided for one task at one look, with everything the ledger must keep."""

    look: int  # 1-based
    looks: int
    n: int
    losses: int
    gains: int
    margin: float
    effect: float  # (gains − losses) / n, candidate − baseline pass rate
    statistic: float  # Tango score at −margin
    efficacy_bound: float
    harm_bound: float
    futility_bound: float | None  # stop when |statistic| ≤ this; None: no futility stop here
    alpha_spent: float  # cumulative, one-sided, on each side
    interval: tuple[float, float]  # repeated confidence interval at this look's boundary
    outcome: Outcome
    information: float | None = None  # the look's observed information fraction, when the design counts it
    harm_statistic: float = 0.0  # Tango score at −margin/2; rejects at ≤ harm_bound with the estimate beyond −margin

    @property
    def settled(self) -> bool:
        return self.outcome in ("approve", "reject")

    @property
    def stopped(self) -> bool:
        return self.outcome != "continue"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("statistic", "harm_statistic", "efficacy_bound", "harm_bound"):
            data[key] = data[key] if math.isfinite(data[key]) else None
        return data


# The repeated confidence interval uses the look's boundary as its z; beyond this the interval is
# (−1, 1) to machine precision anyway, and a confidence of exactly 1 is not an interval.
_MAX_INTERVAL_Z = 8.0


def decide_look(
    design: GroupSequentialDesign, look: int, *, losses: int, gains: int, n: int, margin: float
) -> LookDecision:
    """Approve, reject, stop as futile, continue — or, at the last look, inconclusive.

    ``look`` is 1-based; ``losses``/``gains``/``n`` are cumulative over the stages so far.
    Approve iff the score at −margin reaches the efficacy boundary, which is the same as the
    repeated confidence interval's lower bound clearing −margin; reject iff the loss is significant
    against half the margin at the mirrored boundary and the estimate lies beyond the margin
    (:func:`rejects`); futile when the score lies inside the wedge |Z| ≤ futility boundary.
    """
    if not 1 <= look <= design.looks:
        raise ValueError(f"look must be in 1..{design.looks}, got {look}")
    if n < 0 or losses < 0 or gains < 0 or losses + gains > n:
        raise ValueError(f"inconsistent counts: {losses} losses and {gains} gains in {n} pairs")
    k = look - 1
    final = look == design.looks
    efficacy, futility = design.efficacy[k], design.futility[k]
    statistic = float(noninferiority_score(losses, gains, n, margin)) if n else 0.0
    harm_statistic = float(harm_score(losses, gains, n, margin)) if n else 0.0
    effect = (gains - losses) / n if n else 0.0
    outcome: Outcome
    if n and statistic >= efficacy:
        outcome = "approve"
    elif n and bool(rejects(harm_statistic, effect, efficacy, margin)):
        outcome = "reject"
    elif final:
        outcome = "inconclusive"
    elif n and abs(statistic) <= futility:
        outcome = "futile"
    else:
        outcome = "continue"
    z = min(efficacy, _MAX_INTERVAL_Z)
    interval = stats.paired_difference_interval(gains, losses, n, 1 - 2 * float(sps.norm.sf(z)))
    return LookDecision(
        look=look,
        looks=design.looks,
        n=n,
        losses=losses,
        gains=gains,
        margin=margin,
        effect=effect,
        statistic=statistic,
        efficacy_bound=efficacy,
        harm_bound=-efficacy,
        futility_bound=None if final or futility < 0 else futility,
        alpha_spent=design.alpha_spent[k],
        interval=interval,
        outcome=outcome,
        harm_statistic=harm_statistic,
    )
