"""The fewest pairs on average any sequential test of a pass-rate guardrail could use.

Wald's inequality (Wald 1945; Hoeffding 1960 for the points between the hypotheses): a test that
stops after N paired samples, drawn independently from P, and approves with probability π under P
and π0 under Q, has

    E_P[N] · KL(P ‖ Q) ≥ d(π ‖ π0),     d(x ‖ y) = x ln(x/y) + (1 − x) ln((1 − x)/(1 − y)),

because the log-likelihood ratio of the stopped sample has mean E_P[N] · KL(P ‖ Q) (Wald's
identity) and no function of the data — approving is one — separates P from Q more than the data
themselves. It holds for every stopping rule: looks after every pair, at stages, fixed.

A pair's outcome is a loss, a tie or a gain: P = (p_loss, 1 − ψ, p_gain). Non-inferiority at
``margin`` must approve every Q with Δ_Q = p_gain − p_loss = −margin in at most α of runs, so a
change inside the margin that a design approves in π of runs costs it at least

    d(π ‖ α) / min over Q with Δ_Q = −margin of KL(P ‖ Q)

pairs on average; a change at or beyond the margin, approved in at most α of runs by a design
that approves the planned neutral change P1 in π1 of runs, costs at least d(α ‖ π1) / KL(P ‖ P1).
``bench_sequential`` holds every design's mean pairs to these bounds, with π and π1 the fixed
design's own approve rates: what a design keeping the fixed design's power and error rates could
at best save.
"""

from __future__ import annotations

from scipy import optimize, special


def binary_divergence(x: float, y: float) -> float:
    """d(x ‖ y): the Kullback–Leibler divergence of Bernoulli(x) from Bernoulli(y)."""
    return float(special.rel_entr(x, y) + special.rel_entr(1 - x, 1 - y))


def pair_divergence(p: tuple[float, float], q: tuple[float, float]) -> float:
    """KL(P ‖ Q) of one pair's outcome, each given as (p_loss, p_gain); ties are the rest."""
    return float(special.rel_entr((p[0], 1 - p[0] - p[1], p[1]), (q[0], 1 - q[0] - q[1], q[1])).sum())


def divergence_from_margin(p_loss: float, p_gain: float, *, margin: float) -> float:
    """min KL(P ‖ Q) over the changes Q losing at least ``margin``: 0 for a change that does.

    For a change inside the margin the nearest such Q loses exactly the margin (KL is convex in Q
    and the set is convex), and those run along a segment (q_loss from ``margin`` to
    (1 + margin)/2, q_gain = q_loss − margin): a bounded one-dimensional search finds it.
    """
    if p_gain - p_loss <= -margin + 1e-12:
        return 0.0
    lowest, highest = margin, (1 + margin) / 2
    result = optimize.minimize_scalar(
        lambda q_loss: pair_divergence((p_loss, p_gain), (q_loss, q_loss - margin)),
        bounds=(lowest, highest),
        method="bounded",
        options={"xatol": 1e-12},
    )
    edges = (pair_divergence((p_loss, p_gain), (q, q - margin)) for q in (lowest, highest))
    return float(min(result.fun, *edges))


def least_pairs_inside(p_loss: float, p_gain: float, *, margin: float, approve: float, alpha: float) -> float:
    """Fewest mean pairs of any test approving this change (inside the margin) in ``approve`` of
    runs while approving a change at the margin in at most ``alpha``."""
    if approve <= alpha:
        return 0.0
    return binary_divergence(approve, alpha) / divergence_from_margin(p_loss, p_gain, margin=margin)


def least_pairs_harmful(
    p_loss: float, p_gain: float, *, approve: float, planned: tuple[float, float], planned_approve: float
) -> float:
    """Fewest mean pairs of any test approving this harmful change in at most ``approve`` of runs
    while approving the ``planned`` change (p_loss, p_gain) in ``planned_approve`` of them."""
    if planned_approve <= approve:
        return 0.0
    return binary_divergence(approve, planned_approve) / pair_divergence((p_loss, p_gain), planned)
