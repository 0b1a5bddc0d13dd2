"""Paired statistics for the gate: pure functions, seeded, no Django.

Conventions used throughout:

* ``effect`` is always *candidate relative to baseline*: a difference ``cand − base`` for pass
  rates and scores, a ratio ``cand / base`` for latency and throughput.
* ``interval`` is a two-sided confidence interval at ``confidence`` for that effect.
* Random resampling uses ``numpy.random.default_rng(seed)`` so the same inputs and seed always give
  the same interval (a verdict must be reproducible from the ledger).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from scipy import optimize
from scipy import stats as sps

Status = Literal["pass", "fail", "inconclusive"]
Stat = Literal["median", "p95", "p99", "p90", "mean"]
# Per-sample values: plain sequences from the services, numpy arrays from tests and the evaluators.
Values = Sequence[float] | npt.NDArray[np.floating[Any]]

# Beyond this many extra samples the effect sits so close to the decision threshold that more
# evidence is not an economical way to settle it; the verdict says "at least this many".
SAMPLES_NEEDED_CAP = 10_000
DEFAULT_N_BOOT = 2_000


@dataclass(frozen=True)
class _Result:
    """Base of the result records below: each serialises to a plain dict for the ledger."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PairedProportionResult(_Result):
    """McNemar-style comparison of paired pass/fail outcomes against a non-inferiority margin."""

    test: str
    n: int
    base_rate: float
    cand_rate: float
    losses: int  # b: baseline passed, candidate failed
    gains: int  # c: baseline failed, candidate passed
    effect: float  # cand_rate − base_rate
    interval: tuple[float, float]
    p_value: float
    confidence: float
    margin: float
    status: Status
    std_error: float

    @property
    def b(self) -> int:
        return self.losses

    @property
    def c(self) -> int:
        return self.gains


@dataclass(frozen=True)
class BootstrapResult(_Result):
    """A bootstrap estimate of a difference or ratio, with a percentile interval."""

    test: str
    n_base: int
    n_cand: int
    baseline: float
    candidate: float
    effect: float
    interval: tuple[float, float]
    p_value: float  # two-sided bootstrap p for "no change" (diff 0 / ratio 1)
    confidence: float
    n_boot: int
    seed: int
    paired: bool
    std_error: float  # bootstrap standard error of the effect


@dataclass(frozen=True)
class MannWhitneyResult(_Result):
    """Rank test for a shift between two unpaired samples."""

    test: str
    n_base: int
    n_cand: int
    statistic: float
    p_value: float
    prob_cand_greater: float  # common-language effect size P(cand > base)


def check_confidence(confidence: float) -> None:
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")


def _z(confidence: float) -> float:
    """Two-sided normal quantile for ``confidence``."""
    return float(sps.norm.ppf(1 - (1 - confidence) / 2))


def classify_noninferiority(
    effect: float, interval: tuple[float, float], margin: float, significant_regression: bool
) -> Status:
    """Decide a non-inferiority question on a "higher is better" scale where 0 means no change.

    * pass: the lower bound is above ``-margin`` (any regression is smaller than the margin);
    * fail: the whole interval lies below ``-margin``, or the regression is significant and its
      point estimate is beyond the margin (a clear regression need not wait for a tight interval);
    * otherwise inconclusive.

    Failure is tested first; since the interval always contains the point estimate, both can
    never hold. Identical inputs give ``effect == 0`` and an interval containing 0, so they can
    never fail for any ``margin >= 0``.
    """
    lower, upper = interval
    if upper < -margin or (significant_regression and effect < -margin):
        return "fail"
    if lower > -margin:
        return "pass"
    return "inconclusive"


def classify_improvement(effect: float, interval: tuple[float, float], min_improvement: float) -> Status:
    """Decide "did it improve by at least ``min_improvement``" on a "higher is better" scale.

    pass: significantly better than no change and the point estimate reaches the minimum;
    fail: the interval's upper bound is below the minimum (confidently not enough benefit);
    otherwise inconclusive. No change at all therefore fails whenever the interval is tight,
    which is intended: an optimization that does not improve its objective has no case.
    """
    lower, upper = interval
    if upper < min_improvement:
        return "fail"
    if lower > 0 and effect >= min_improvement:
        return "pass"
    return "inconclusive"


def _tango_score(delta0: float, gains: int, losses: int, n: int) -> float:
    """Tango's (1998) score statistic for H0: p(gain) − p(loss) = delta0 in a paired design."""
    a = 2 * n
    b = -gains - losses + (2 * n - gains + losses) * delta0
    c = -losses * delta0 * (1 - delta0)
    # Restricted MLE of the loss-cell probability under H0.
    p_loss = (math.sqrt(max(b * b - 4 * a * c, 0.0)) - b) / (2 * a)
    numerator = gains - losses - n * delta0
    variance = n * (2 * p_loss + delta0 * (1 - delta0))
    if variance <= 0:
        return 0.0 if numerator == 0 else math.copysign(math.inf, numerator)
    return numerator / math.sqrt(variance)


def paired_difference_interval(gains: int, losses: int, n: int, confidence: float) -> tuple[float, float]:
    """Tango score interval for the paired difference in pass rates (candidate − baseline).

    Chosen over the Wald interval because it stays honest with zero discordant pairs: at n = 8
    with no disagreements it is about ±0.32, not the misleading [0, 0].
    """
    check_confidence(confidence)
    if n <= 0:
        return (-1.0, 1.0)
    z = _z(confidence)
    estimate = (gains - losses) / n
    eps = 1e-12

    def lower_root(d: float) -> float:
        return _tango_score(d, gains, losses, n) - z

    def upper_root(d: float) -> float:
        return _tango_score(d, gains, losses, n) + z

    # The score is decreasing in delta0, so each bound is the single root on its side.
    lo_start = -1 + eps
    if estimate <= lo_start or lower_root(lo_start) <= 0:
        lower = -1.0
    else:
        lower = float(optimize.brentq(lower_root, lo_start, estimate, xtol=1e-10))
    hi_end = 1 - eps
    if estimate >= hi_end or upper_root(hi_end) >= 0:
        upper = 1.0
    else:
        upper = float(optimize.brentq(upper_root, estimate, hi_end, xtol=1e-10))
    return (min(lower, estimate), max(upper, estimate))


def mcnemar_noninferiority(
    base: Sequence[bool], cand: Sequence[bool], margin: float, confidence: float = 0.95
) -> PairedProportionResult:
    """Paired pass/fail comparison: exact McNemar test plus a non-inferiority decision.

    ``base[i]`` and ``cand[i]`` must be the same sample. The p-value is the exact two-sided
    binomial test on the discordant pairs (H0: a loss is as likely as a gain); the interval is the
    Tango score interval for ``cand_rate − base_rate``. The decision follows
    :func:`classify_noninferiority`, with "significant" meaning p < 1 − confidence and more
    losses than gains.
    """
    check_confidence(confidence)
    if len(base) != len(cand):
        raise ValueError(f"paired samples differ in length: {len(base)} vs {len(cand)}")
    if not 0 <= margin <= 1:
        raise ValueError(f"margin must be in [0, 1], got {margin}")
    n = len(base)
    losses = sum(1 for b, c in zip(base, cand, strict=True) if b and not c)
    gains = sum(1 for b, c in zip(base, cand, strict=True) if c and not b)
    base_rate = sum(map(bool, base)) / n if n else 0.0
    cand_rate = sum(map(bool, cand)) / n if n else 0.0
    effect = (gains - losses) / n if n else 0.0
    interval = paired_difference_interval(gains, losses, n, confidence)
    discordant = gains + losses
    p_value = float(sps.binomtest(losses, discordant, 0.5).pvalue) if discordant else 1.0
    significant = p_value < 1 - confidence and losses > gains
    status: Status = "inconclusive" if n == 0 else classify_noninferiority(effect, interval, margin, significant)
    # Per-pair variance of the difference, smoothed by one pseudo-discordance so that a tiny run
    # with no disagreements still reports an uncertainty (used for the samples-needed estimate).
    smoothed_discordance = (discordant + 1) / (n + 2)
    std_error = math.sqrt(max(smoothed_discordance - effect**2, 1e-9) / max(n, 1))
    return PairedProportionResult(
        test="exact McNemar (binomial on discordant pairs) with Tango score interval",
        n=n,
        base_rate=base_rate,
        cand_rate=cand_rate,
        losses=losses,
        gains=gains,
        effect=effect,
        interval=interval,
        p_value=p_value,
        confidence=confidence,
        margin=margin,
        status=status,
        std_error=std_error,
    )


def quantile_bounds(
    cumulative: Sequence[tuple[float, float]], q: float, confidence: float
) -> tuple[float, float] | None:
    """A distribution-free interval for the ``q`` quantile of what a histogram counted, from its
    cumulative bucket counts ``[(upper bound, count), ...]`` (the last bound ``inf``); None for an
    empty histogram.

    The quantile lies between the order statistics of ranks l and u, where a Binomial(n, q) count
    falls below l or at or above u with probability at most (1 − confidence)/2 each. A histogram
    knows each order statistic only to its bucket, so the interval widens to the lower bound of the
    bucket holding rank l and the upper bound of the bucket holding rank u (0 and ``inf`` where a
    rank falls off either end).
    """
    check_confidence(confidence)
    if not 0 < q < 1:
        raise ValueError(f"q must be within (0, 1), got {q}")
    counts = sorted(cumulative)
    n = round(counts[-1][1]) if counts else 0
    if n < 1:
        return None
    tail = (1 - confidence) / 2
    lower_rank = int(sps.binom.ppf(tail, n, q))
    upper_rank = int(sps.binom.ppf(1 - tail, n, q)) + 1

    def bucket_of(rank: int) -> tuple[float, float]:
        below = 0.0
        for bound, count in counts:
            if count >= rank - 0.5:  # increase() extrapolates: counts need not be whole
                return below, bound
            below = bound
        return below, math.inf

    low = bucket_of(lower_rank)[0] if lower_rank >= 1 else 0.0
    high = bucket_of(upper_rank)[1] if upper_rank <= n else math.inf
    return low, high


def samples_needed(
    *,
    n: int,
    effect: float,
    threshold: float,
    std_error: float,
    confidence: float = 0.95,
    power: float = 0.8,
    cap: int = SAMPLES_NEEDED_CAP,
) -> int:
    """Further samples likely to settle whether ``effect`` lies above or below ``threshold``.

    A power-style estimate: assume the observed effect is the truth and the standard error shrinks
    as 1/√n, then find the total n at which the two-sided interval would exclude the threshold with
    probability ``power``:  n_total = n · ((z_{α/2} + z_power) · SE / |effect − threshold|)².
    Returns the extra samples (at least 1), capped at ``cap``: when the effect sits (almost) on the
    threshold no affordable sample size settles it, and the cap says "at least this many".
    """
    check_confidence(confidence)
    if n <= 0 or not math.isfinite(std_error) or std_error <= 0:
        return cap
    distance = abs(effect - threshold)
    if distance < 1e-12:
        return cap
    z_total = _z(confidence) + float(sps.norm.ppf(power))
    n_total = n * (z_total * std_error / distance) ** 2
    extra = math.ceil(n_total) - n
    return int(min(cap, max(1, extra)))
