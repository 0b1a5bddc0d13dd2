"""Power plan for a quality guardrail, and direct computations to check plans and designs against.

A guardrail on a pass rate is non-inferiority of paired outcomes: H0 Δ ≤ −margin against the
assumed truth Δ1 (0 for a change meant to be neutral), one-sided ``alpha = (1 − confidence)/2``.
How many pairs that takes depends mostly on the **discordance** ψ, the share of samples whose
outcome differs between baseline and candidate: with ψ = 0 (a seed-only change, every answer
the same) 189 pairs settle a 2-point margin; with ψ = 5 % it takes about 1,000. The plan takes
ψ from the task's A/A calibration or the baseline's history; without either it assumes
``DEFAULT_DISCORDANCE``.

Fixed design (Nam 1997; the sample size of Tango's score test)::

    n = ((z_α √v0 + z_β √v1) / (Δ1 + margin))²

with v1 = ψ − Δ1² the per-pair variance of the difference under the truth and v0 the variance
Tango's score uses under H0 (its restricted MLE, evaluated at the expected counts). The
sequential design needs ``inflation`` times that at most, and less on average
(``GroupSequentialDesign.expected_fraction``).

:func:`exact_power` (the score test's power summed over every trinomial outcome) and
:func:`simulate_sequential` / :func:`simulate_fixed` (Monte Carlo of whole runs, the fixed one
through the judge's own functions) are the direct computations the tests and the benchmark hold
the formulas to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import signal, special
from scipy import stats as sps

from gates.judge import stats
from gates.judge.sequential import (
    INFORMATION_LEVELS,
    OBRIEN_FLEMING,
    POCOCK,
    GroupSequentialDesign,
    Spending,
    equally_spaced,
    fixed_status,
    group_sequential_design,
    harm_score,
    information_design,
    information_levels,
    noninferiority_score,
    null_information,
    rejects,
)

# Assumed share of discordant pairs when a task has neither A/A calibration nor history: a few
# answers in a hundred flipping either way is what numerics changes (kernels, batch shapes, KV
# precision) do at greedy decoding. A/A calibration of a deterministic engine gives less.
DEFAULT_DISCORDANCE = 0.05
DEFAULT_POWER = 0.8  # as ``stats.samples_needed``
DEFAULT_LOOKS = 5


def one_sided_alpha(confidence: float) -> float:
    """The one-sided level of the judge's non-inferiority check at two-sided ``confidence``."""
    stats.check_confidence(confidence)
    return (1 - confidence) / 2


def _cells(discordance: float, difference: float) -> tuple[float, float]:
    """(loss rate, gain rate) of pairs with this discordance and difference gains − losses."""
    if not 0 <= discordance <= 1 or abs(difference) > discordance + 1e-12:
        raise ValueError(f"discordance {discordance} cannot hold a difference of {difference}")
    return (discordance - difference) / 2, (discordance + difference) / 2


def null_variance(p_loss: float, p_gain: float, margin: float) -> float:
    """Per-pair variance Tango's score uses under H0 Δ = −margin, at the expected counts."""
    d0 = -margin
    qa = 2.0
    qb = -p_gain - p_loss + (2 - p_gain + p_loss) * d0
    qc = -p_loss * d0 * (1 - d0)
    restricted_loss = (math.sqrt(max(qb * qb - 4 * qa * qc, 0.0)) - qb) / (2 * qa)
    return 2 * restricted_loss + d0 * (1 - d0)


def fixed_sample_size(
    *, margin: float, alpha: float, power: float, discordance: float, difference: float = 0.0
) -> float:
    """Pairs the fixed design needs (not rounded): see the module docstring."""
    if not 0 < margin < 1:
        raise ValueError(f"margin must be in (0, 1), got {margin}")
    if difference <= -margin:
        raise ValueError(f"an assumed difference of {difference} is not within the margin {margin}")
    p_loss, p_gain = _cells(discordance, difference)
    v0 = null_variance(p_loss, p_gain, margin)
    v1 = discordance - difference**2
    z_alpha, z_beta = float(sps.norm.isf(alpha)), float(sps.norm.isf(1 - power))
    return ((z_alpha * math.sqrt(v0) + z_beta * math.sqrt(max(v1, 0.0))) / (difference + margin)) ** 2


@dataclass(frozen=True)
class PowerPlan:
    """Per task at filing: the samples its margin needs, whether the suite holds them, engine time."""

    margin: float
    alpha: float
    power: float
    discordance: float
    discordance_source: str  # "A/A calibration", "baseline history" or "default"
    difference: float
    fixed_n: int
    max_n: int
    look_sizes: tuple[int, ...]  # cumulative pairs at each look
    expected_n: float  # under the assumed difference
    expected_n_at_margin: float  # under a regression exactly at the margin
    suite_size: int | None
    settleable: bool
    expected_engine_s: float | None
    max_engine_s: float | None
    reason: str
    design: GroupSequentialDesign

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["design"] = self.design.to_dict()
        return data


def look_sizes(design: GroupSequentialDesign, max_n: int) -> tuple[int, ...]:
    """Cumulative pairs at each look: the design's fractions of ``max_n``, at least one more each."""
    sizes: list[int] = []
    for t in design.info:
        sizes.append(max(math.ceil(t * max_n - 1e-9), sizes[-1] + 1 if sizes else 1))
    return tuple(sizes)


def shipped_first_sizes(max_n: int, *, shipped: int, looks: int, pool: int) -> tuple[int, ...]:
    """Cumulative pairs at each look when stage one is the shipped suite and the ``looks − 1``
    stages after it are equal blocks of held-out samples (what a worker draws: block ``k`` of one
    size) reaching the plan's ``max_n``, rounded up to whole blocks, within the ``pool`` of shipped
    plus held-out samples. One look when the shipped suite already holds ``max_n``."""
    if shipped < 1 or looks < 1 or pool < shipped:
        raise ValueError(f"need shipped ≥ 1, looks ≥ 1 and pool ≥ shipped, got {shipped}, {looks}, {pool}")
    last = min(max_n, pool)
    if last <= shipped or looks == 1:
        return (shipped,)
    stage = max(1, min(math.ceil((last - shipped) / (looks - 1)), (pool - shipped) // (looks - 1)))
    return tuple(size for k in range(looks) if (size := shipped + stage * k) <= pool)


def sized_design(plan: PowerPlan, sizes: Sequence[int]) -> GroupSequentialDesign:
    """The plan's spending at looks after ``sizes`` pairs, the last look final (all alpha spent).

    Information fractions are the pairs over the last look's; the drift is the plan's scaled to
    that maximum (√(last / max_n)), so a design the pool cuts short keeps futility boundaries for
    the effect it can actually see rather than stopping as futile against the planned one.
    """
    design, last = plan.design, sizes[-1]
    return group_sequential_design(
        tuple(n / last for n in sizes),
        alpha=design.alpha,
        beta=design.beta,
        alpha_spending=design.alpha_spending,
        beta_spending=design.beta_spending,
        drift=design.drift * math.sqrt(min(1.0, last / plan.max_n)),
    )


def plan_task(
    *,
    margin: float,
    confidence: float = 0.95,
    power: float = DEFAULT_POWER,
    discordance: float | None = None,
    discordance_source: str = "default",
    difference: float = 0.0,
    looks: int = DEFAULT_LOOKS,
    suite_size: int | None = None,
    seconds_per_sample: float | None = None,
    alpha_spending: Spending = OBRIEN_FLEMING,
    beta_spending: Spending | None = POCOCK,
) -> PowerPlan:
    """The power plan of one task's quality guardrail (see the module docstring).

    ``suite_size``: paired samples available (shipped plus held-out pool); the plan is
    settleable when the sequential maximum fits in it. ``seconds_per_sample``: engine time of
    one paired sample (both sides), from the baseline's history; the engine time is then the
    expected and the maximum sample count times it.
    """
    if discordance is None:
        discordance, discordance_source = DEFAULT_DISCORDANCE, "default"
    alpha = one_sided_alpha(confidence)
    fixed = fixed_sample_size(margin=margin, alpha=alpha, power=power, discordance=discordance, difference=difference)
    design = group_sequential_design(
        equally_spaced(looks), alpha=alpha, beta=1 - power, alpha_spending=alpha_spending, beta_spending=beta_spending
    )
    max_n = math.ceil(design.inflation * fixed - 1e-9)
    sizes = look_sizes(design, max_n)
    expected = design.expected_fraction(design.drift) * max_n
    at_margin = design.expected_fraction(0.0) * max_n
    settleable = suite_size is None or max_n <= suite_size
    if suite_size is None:
        reason = f"needs up to {max_n} paired samples ({expected:.0f} expected); no suite size was given"
    elif settleable:
        reason = f"needs up to {max_n} of the {suite_size} paired samples available ({expected:.0f} expected)"
    else:
        reason = (
            f"no available suite can settle a {margin * 100:g}-point margin: it needs up to {max_n} paired "
            f"samples at {discordance:.0%} discordance ({math.ceil(fixed)} in one fixed run), {suite_size} exist"
        )
    return PowerPlan(
        margin=margin,
        alpha=alpha,
        power=power,
        discordance=discordance,
        discordance_source=discordance_source,
        difference=difference,
        fixed_n=math.ceil(fixed - 1e-9),
        max_n=max_n,
        look_sizes=sizes,
        expected_n=expected,
        expected_n_at_margin=at_margin,
        suite_size=suite_size,
        settleable=settleable,
        expected_engine_s=expected * seconds_per_sample if seconds_per_sample is not None else None,
        max_engine_s=max_n * seconds_per_sample if seconds_per_sample is not None else None,
        reason=reason,
        design=design,
    )


# --- direct computations -------------------------------------------------------------------------


def exact_power(n: int, *, margin: float, alpha: float, p_loss: float, p_gain: float) -> float:
    """P(Tango's score at −margin ≥ z_{1−α}) over every outcome of n pairs, summed exactly."""
    losses = np.arange(n + 1)[:, None]
    gains = np.arange(n + 1)[None, :]
    possible = losses + gains <= n
    ties = np.where(possible, n - losses - gains, 0)
    p_tie = 1 - p_loss - p_gain
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = (
            special.gammaln(n + 1)
            - special.gammaln(losses + 1)
            - special.gammaln(gains + 1)
            - special.gammaln(ties + 1)
            + special.xlogy(losses, p_loss)
            + special.xlogy(gains, p_gain)
            + special.xlogy(ties, p_tie)
        )
        score = noninferiority_score(losses, gains, np.full(possible.shape, n), margin)
    settles = possible & (score >= sps.norm.isf(alpha))
    return float(np.exp(log_pmf[settles]).sum())


@dataclass(frozen=True)
class OperatingCharacteristics:
    """Share of simulated runs ending each way, and the pairs they used on average."""

    runs: int
    approve: float
    reject: float
    futile: float
    inconclusive: float
    mean_samples: float


def _counts(
    rng: np.random.Generator, sizes: Sequence[int], runs: int, p_loss: float, p_gain: float
) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative (losses, gains) at each look size, shape (runs, looks), stages drawn independently."""
    steps = np.diff(np.asarray((0, *sizes)))
    draws = np.stack([rng.multinomial(m, (p_loss, p_gain, 1 - p_loss - p_gain), size=runs) for m in steps], axis=1)
    cumulative = draws.cumsum(axis=1)
    return cumulative[:, :, 0], cumulative[:, :, 1]


def _look_outcomes(
    losses: np.ndarray,
    gains: np.ndarray,
    n: npt.ArrayLike,
    margin: float,
    efficacy: np.ndarray | float,
    futility: np.ndarray | float,
    one_sided_futility: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Elementwise, whether a look at these counts approves, rejects or stops as futile, by the rules
    of ``sequential.decide_look`` in its order (a last look never stops as futile: the caller's)."""
    score = noninferiority_score(losses, gains, n, margin)
    approve = score >= efficacy
    reject = ~approve & rejects(harm_score(losses, gains, n, margin), (gains - losses) / n, efficacy, margin)
    futile_zone = score <= futility if one_sided_futility else np.abs(score) <= futility
    return approve, reject, futile_zone & ~approve & ~reject


def simulate_sequential(
    design: GroupSequentialDesign,
    sizes: Sequence[int],
    *,
    margin: float,
    p_loss: float,
    p_gain: float,
    runs: int,
    rng: np.random.Generator,
    one_sided_futility: bool = False,
) -> OperatingCharacteristics:
    """Run the sequential design ``runs`` times on pairs drawn with these loss and gain rates.

    Applies the rules of ``sequential.decide_look`` (approve, reject, futile, continue; the last
    look approves, rejects or is inconclusive), vectorised over runs. ``one_sided_futility``
    measures a variant the judge does not use: stop as futile whenever Z ≤ f_k (approval has become
    unlikely), not only inside the wedge |Z| ≤ f_k.
    """
    losses, gains = _counts(rng, sizes, runs, p_loss, p_gain)
    n = np.broadcast_to(np.asarray(sizes), losses.shape)
    approve, reject, futile = _look_outcomes(
        losses, gains, n, margin, np.asarray(design.efficacy), np.asarray(design.futility), one_sided_futility
    )
    futile[:, -1] = False
    stops = approve | reject | futile
    stops[:, -1] = True
    first = stops.argmax(axis=1)
    rows = np.arange(runs)
    ended = {name: array[rows, first] for name, array in (("approve", approve), ("reject", reject), ("futile", futile))}
    return OperatingCharacteristics(
        runs=runs,
        approve=float(ended["approve"].mean()),
        reject=float(ended["reject"].mean()),
        futile=float(ended["futile"].mean()),
        inconclusive=float((~(ended["approve"] | ended["reject"] | ended["futile"])).mean()),
        mean_samples=float(np.asarray(sizes)[first].mean()),
    )


def exact_sequential(
    design: GroupSequentialDesign,
    sizes: Sequence[int],
    *,
    margin: float,
    p_loss: float,
    p_gain: float,
    tail: float = 1e-10,
) -> OperatingCharacteristics:
    """:func:`simulate_sequential`'s figures computed instead of drawn: the joint distribution of the
    cumulative (losses, gains) of the evaluations still running, carried from look to look (each
    stage's trinomial counts convolved in) and split by the same rules at each look. Counts a
    binomial reaches with less than ``tail`` probability are left out; ``runs`` is 0.
    """
    most = min(sizes[-1], int(sps.binom.isf(tail, sizes[-1], max(p_loss, p_gain))) + 1)
    losses, gains = np.ogrid[: most + 1, : most + 1]
    running = np.zeros((most + 1, most + 1))
    running[0, 0] = 1.0
    ended = {"approve": 0.0, "reject": 0.0, "futile": 0.0}
    expected, previous = 0.0, 0
    for k, n in enumerate(sizes):
        step, previous = n - previous, n
        # A stage of `step` pairs: b losses, then c gains among the other step − b pairs.
        stage = sps.binom.pmf(losses, step, p_loss) * sps.binom.pmf(
            gains, np.maximum(step - losses, 0), p_gain / (1 - p_loss) if p_loss < 1 else 0.0
        )
        running = np.clip(signal.fftconvolve(running, stage)[: most + 1, : most + 1], 0.0, None)
        approve, reject, futile = _look_outcomes(losses, gains, n, margin, design.efficacy[k], design.futility[k])
        last = k == len(sizes) - 1
        futile &= not last
        for name, mask in (("approve", approve), ("reject", reject), ("futile", futile)):
            ended[name] += float(running[mask].sum())
        stops = approve | reject | futile | last
        expected += n * float(running[stops].sum())
        running = np.where(stops, 0.0, running)
    return OperatingCharacteristics(
        runs=0,
        approve=ended["approve"],
        reject=ended["reject"],
        futile=ended["futile"],
        inconclusive=max(0.0, 1.0 - sum(ended.values())),
        mean_samples=expected,
    )


def planned_information(max_n: int, *, margin: float, discordance: float, difference: float = 0.0) -> float:
    """The maximum information of a design planned for ``max_n`` pairs at this discordance.

    What ``null_information`` of ``max_n`` pairs comes to at the expected counts: at the planned
    discordance an information-based design takes its looks where the pair-counting one would.
    """
    return max_n / null_variance(*_cells(discordance, difference), margin)


def simulate_information(
    planned: GroupSequentialDesign,
    *,
    stage_size: int,
    stages: int,
    max_information: float,
    margin: float,
    p_loss: float,
    p_gain: float,
    runs: int,
    rng: np.random.Generator,
) -> OperatingCharacteristics:
    """Run the information-based design ``runs`` times: a look after every stage of ``stage_size``
    pairs at the grid level its observed information reached (``sequential.information_levels``),
    with the boundaries of ``sequential.information_design`` — what ``gates.judge.staged`` decides
    at each stage boundary. The last look comes at the last level or after ``stages`` stages.
    """
    sizes = np.asarray([stage_size * (k + 1) for k in range(stages)])
    losses, gains = _counts(rng, sizes.tolist(), runs, p_loss, p_gain)
    n = np.broadcast_to(sizes, losses.shape)
    information = null_information(losses, gains, n, margin)
    score = noninferiority_score(losses, gains, n, margin)
    harm = harm_score(losses, gains, n, margin)
    effect = (gains - losses) / n
    grid = information_design(planned)
    ended = np.full(runs, "inconclusive", dtype=object)
    used = np.zeros(runs)
    for run in range(runs):
        levels = information_levels(information[run].tolist(), max_information)
        for k, level in enumerate(levels):
            final = k == len(levels) - 1 and (level == INFORMATION_LEVELS or k == stages - 1)
            design = information_design(planned, level) if final else grid
            z, bound = score[run, k], design.efficacy[level - 1]
            if z >= bound:
                outcome = "approve"
            elif rejects(harm[run, k], effect[run, k], bound, margin):
                outcome = "reject"
            elif final:
                outcome = "inconclusive"
            elif abs(z) <= design.futility[level - 1]:
                outcome = "futile"
            else:
                continue
            ended[run], used[run] = outcome, sizes[k]
            break
    return OperatingCharacteristics(
        runs=runs,
        approve=float((ended == "approve").mean()),
        reject=float((ended == "reject").mean()),
        futile=float((ended == "futile").mean()),
        inconclusive=float((ended == "inconclusive").mean()),
        mean_samples=float(used.mean()),
    )


def simulate_fixed(
    n: int,
    *,
    margin: float,
    confidence: float,
    p_loss: float,
    p_gain: float,
    runs: int,
    rng: np.random.Generator,
) -> OperatingCharacteristics:
    """Run the judge's fixed design (one look at ``n`` pairs) ``runs`` times, verdicts by ``fixed_status``."""
    losses, gains = _counts(rng, (n,), runs, p_loss, p_gain)
    verdicts: dict[tuple[int, int], str] = {}
    tally = {"pass": 0, "fail": 0, "inconclusive": 0}
    for b, c in zip(losses[:, 0].tolist(), gains[:, 0].tolist(), strict=True):
        if (b, c) not in verdicts:
            verdicts[(b, c)] = fixed_status(b, c, n, margin, confidence)
        tally[verdicts[(b, c)]] += 1
    return OperatingCharacteristics(
        runs=runs,
        approve=tally["pass"] / runs,
        reject=tally["fail"] / runs,
        futile=0.0,
        inconclusive=tally["inconclusive"] / runs,
        mean_samples=float(n),
    )
