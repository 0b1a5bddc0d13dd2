"""Staged evaluation of pass-rate guardrails: the looks of one task, and the verdicts they give.

The statistics are :mod:`gates.judge.sequential`'s; this module applies them to a ticket's stages.
A stage is one interleaved pair of runs on the same samples (stage one the shipped suite, each
further stage a block of held-out samples: as many as the shipped suite, or sized from the power
plan, policy ``sequential.stage_size``); its per-sample outcomes are pooled with the earlier
stages' by sample id, and look ``k`` is decided on the cumulative counts of stages 1..k.

Pure functions, no database: ``gates.selectors.stages`` reads the outcomes, the services decide
what to do with the looks (request the next stage, or judge).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gates.judge.power import (
    DEFAULT_DISCORDANCE,
    PowerPlan,
    exact_sequential,
    plan_task,
    planned_information,
    shipped_first_sizes,
    sized_design,
)
from gates.judge.records import MetricVerdict
from gates.judge.sequential import (
    INFORMATION_LEVELS,
    OBRIEN_FLEMING,
    POCOCK,
    GroupSequentialDesign,
    LookDecision,
    Spending,
    decide_look,
    equally_spaced,
    group_sequential_design,
    information_design,
    information_levels,
    null_information,
)
from gates.judge.wording import signed
from gates.policy.metrics import METRIC_SPECS
from gates.policy.rules import MetricRule, SequentialRule, TaskPolicy

# One stage's paired outcomes: (baseline passed by sample id, candidate passed by sample id).
StageOutcomes = tuple[Mapping[str, bool], Mapping[str, bool]]
_SPENDING = {"obrien_fleming": OBRIEN_FLEMING, "pocock": POCOCK}
# What a look's outcome makes of the guardrail's verdict.
_STATUS = {"approve": "pass", "reject": "fail", "futile": "inconclusive", "inconclusive": "inconclusive"}


def staged_guardrails(task_policy: TaskPolicy) -> list[MetricRule]:
    """The task's guardrails judged in stages: non-inferiority margins on the per-sample pass/fail
    outcome every run stores (a graded score is judged by bootstrap on stage one, as before)."""
    return [
        rule
        for rule in task_policy.guardrails
        if rule.margin is not None and getattr(METRIC_SPECS.get(rule.metric), "field", "") == "passed"
    ]


def planned_design(rule: SequentialRule, confidence: float) -> GroupSequentialDesign:
    """The design a staged task is judged with: ``rule.looks`` equally spaced looks at one-sided
    alpha = (1 − confidence)/2, the fixed judge's level."""
    beta_spending: Spending | None = None if rule.futility == "none" else _SPENDING[rule.futility]
    return group_sequential_design(
        equally_spaced(rule.looks),
        alpha=(1 - confidence) / 2,
        beta=1 - rule.power,
        alpha_spending=_SPENDING[rule.alpha_spending],
        beta_spending=beta_spending,
    )


def design_summary(rule: SequentialRule) -> str:
    """The policy's sequential design in words, as the plan at filing states what it sizes with."""
    futility = "no futility stop" if rule.futility == "none" else f"{_SPENDING[rule.futility].label} futility"
    return (
        f"{rule.looks} looks, {_SPENDING[rule.alpha_spending].label} alpha spending, {futility}, power {rule.power:.0%}"
    )


def guardrail_plan(
    rule: SequentialRule,
    guardrail: MetricRule,
    discordance: float,
    *,
    discordance_source: str = "default",
    suite_size: int | None = None,
) -> PowerPlan:
    """The power plan of a pass-rate guardrail under the policy's design: its margin and confidence,
    the policy's power, looks and spending, at ``discordance``. Planned stages are sized from it at
    the policy's default discordance (the design is the policy's, whatever was measured since); the
    plan at filing shows it at the baseline's measured discordance, against the suite."""
    planned = planned_design(rule, guardrail.confidence)
    return plan_task(
        margin=float(guardrail.margin or 0.0),
        confidence=guardrail.confidence,
        power=rule.power,
        discordance=discordance,
        discordance_source=discordance_source,
        looks=rule.looks,
        suite_size=suite_size,
        alpha_spending=planned.alpha_spending,
        beta_spending=planned.beta_spending,
    )


def task_stage_sizes(
    rule: SequentialRule, guardrails: Sequence[MetricRule], *, shipped: int, pool: int, discordance: float
) -> tuple[int, ...]:
    """Cumulative paired samples at each of a task's looks: ``rule.looks`` stages of the ``shipped``
    size, or (``stage_size: planned``) the shipped suite then equal held-out stages reaching the
    plan's maximum of the guardrail needing the most pairs, within the ``pool``."""
    if rule.stage_size != "planned" or not guardrails:
        return tuple(shipped * (k + 1) for k in range(rule.looks))
    most = max(guardrail_plan(rule, g, discordance).max_n for g in guardrails)
    return shipped_first_sizes(most, shipped=shipped, looks=rule.looks, pool=pool)


@dataclass(frozen=True)
class StagedLooks:
    """Every look of one guardrail of one task so far, with the design they were decided under."""

    metric: str
    label: str
    design: GroupSequentialDesign
    looks: tuple[LookDecision, ...]
    stage_size: int  # the held-out samples the next stage adds
    rates: tuple[float, float]  # pooled baseline and candidate pass rates over the paired samples
    sizes: tuple[int, ...]  # the cumulative pairs each look was planned at

    @property
    def last(self) -> LookDecision:
        return self.looks[-1]

    def to_dict(self) -> dict[str, Any]:
        design = self.design
        return {
            "metric": self.metric,
            "label": self.label,
            "stage_size": self.stage_size,
            "planned_sizes": list(self.sizes),
            "design": {
                "looks": design.looks,
                "alpha": design.alpha,
                "alpha_spending": design.alpha_spending.label,
                "beta_spending": design.beta_spending.label if design.beta_spending else None,
                "info": list(design.info),
                "drift": design.drift,
            },
            "looks": [look.to_dict() for look in self.looks],
            "rates": list(self.rates),
        }


def judged_design(
    rule: SequentialRule, guardrail: MetricRule, sizes: Sequence[int], *, discordance: float = DEFAULT_DISCORDANCE
) -> GroupSequentialDesign:
    """The design the guardrail's looks at ``sizes`` are planned with (``information: pairs``): the
    policy's spending at those looks when the stages are sized from the plan at ``discordance``,
    ``rule.looks`` equally spaced looks when they have the shipped size."""
    if rule.stage_size == "planned":
        return sized_design(guardrail_plan(rule, guardrail, discordance), sizes)
    return planned_design(rule, guardrail.confidence)


def expected_pairs(
    rule: SequentialRule, guardrail: MetricRule, sizes: Sequence[int], *, discordance: float, planned: float
) -> float:
    """Paired samples the staged evaluation of ``guardrail`` is expected to take on a neutral change
    (no true difference) at ``discordance``: its looks at ``sizes`` with the boundaries planned at the
    policy's ``planned`` discordance, computed exactly (``power.exact_sequential``)."""
    design = judged_design(rule, guardrail, sizes, discordance=planned)
    margin, half = float(guardrail.margin or 0.0), discordance / 2
    return exact_sequential(design, sizes, margin=margin, p_loss=half, p_gain=half).mean_samples


def task_looks(
    rule: SequentialRule,
    guardrail: MetricRule,
    stages: Sequence[StageOutcomes],
    sizes: Sequence[int],
    *,
    discordance: float = DEFAULT_DISCORDANCE,
) -> StagedLooks:
    """Look k on the pooled counts of stages 1..k, for each of ``stages`` (at most one per planned
    size in ``sizes``, :func:`task_stage_sizes`).

    The looks' information fractions are the pairs observed so far over the design's maximum (the
    last planned size), the looks still to come where they were planned, and the drift the planned
    design's: Lan–DeMets, a look that came out at another count leaves the earlier boundaries as
    they were. A stage with no pair in common adds no information and is refused.
    """
    if not stages:
        raise ValueError("a staged task needs at least its first stage")
    sizes = tuple(sizes)
    if len(stages) > len(sizes):
        raise ValueError(f"{len(stages)} stages are more than the design's {len(sizes)} looks")
    margin = float(guardrail.margin or 0.0)
    planned = judged_design(rule, guardrail, sizes, discordance=discordance)
    counts: list[tuple[int, int, int]] = []
    losses = gains = n = base_passed = cand_passed = 0
    for number, (base, cand) in enumerate(stages, start=1):
        common = set(base) & set(cand)
        if not common:
            raise ValueError(f"stage {number} has no paired sample")
        base_passed += sum(1 for s in common if base[s])
        cand_passed += sum(1 for s in common if cand[s])
        losses += sum(1 for s in common if base[s] and not cand[s])
        gains += sum(1 for s in common if cand[s] and not base[s])
        n += len(common)
        counts.append((losses, gains, n))
    rates = (base_passed / n, cand_passed / n)
    taken = len(counts)
    next_stage = sizes[taken] - sizes[taken - 1] if taken < len(sizes) else 0  # none after the last look
    if rule.information == "observed":
        design, looks = _observed_looks(rule, guardrail.confidence, counts, margin)
        return StagedLooks(guardrail.metric, guardrail.label, design, looks, next_stage, rates, sizes)
    # Stages larger than planned (evidence brought in from elsewhere) stretch the maximum, so the
    # looks to come stay where they were planned relative to it.
    maximum = max(sizes[-1], n * sizes[-1] / sizes[taken - 1])
    observed = [c[2] / maximum for c in counts]
    info = tuple(observed + list(planned.info[len(observed) :]))
    if info == planned.info:
        design = planned
    else:
        design = group_sequential_design(
            info,
            alpha=planned.alpha,
            beta=planned.beta,
            alpha_spending=planned.alpha_spending,
            beta_spending=planned.beta_spending,
            drift=planned.drift,
        )
    looks = tuple(
        decide_look(design, k, losses=b, gains=c, n=m, margin=margin) for k, (b, c, m) in enumerate(counts, start=1)
    )
    return StagedLooks(guardrail.metric, guardrail.label, design, looks, next_stage, rates, sizes)


def _observed_looks(
    rule: SequentialRule, confidence: float, counts: Sequence[tuple[int, int, int]], margin: float
) -> tuple[GroupSequentialDesign, tuple[LookDecision, ...]]:
    """The looks of the information-based design (policy ``sequential.information: observed``).

    The maximum information is the power plan's (``power.plan_task`` at the planned discordance,
    the policy's power, looks and spending): what its maximum pairs carry at that discordance.
    Each stage's look is taken at the grid level its observed information reached
    (``sequential.information_levels``): with fewer discordant pairs than planned the looks come
    further along, and the boundaries lower. The last look is the one at the last level or the
    ``rule.looks``-th stage, whichever comes first.
    """
    planned = planned_design(rule, confidence)
    stages = rule.looks
    plan = plan_task(
        margin=margin,
        confidence=confidence,
        power=rule.power,
        discordance=DEFAULT_DISCORDANCE,
        looks=rule.looks,
        alpha_spending=planned.alpha_spending,
        beta_spending=planned.beta_spending,
    )
    maximum = planned_information(plan.max_n, margin=margin, discordance=DEFAULT_DISCORDANCE)
    levels = information_levels([float(null_information(b, c, m, margin)) for b, c, m in counts], maximum)
    if len(levels) < len(counts):
        raise ValueError(f"{len(counts)} stages are more than the {len(levels)} the information allowed")
    design, looks = information_design(planned), []
    for stage, (level, (b, c, m)) in enumerate(zip(levels, counts, strict=False), start=1):
        final = level == INFORMATION_LEVELS or stage == stages
        design = information_design(planned, level) if final else information_design(planned)
        look = decide_look(design, level, losses=b, gains=c, n=m, margin=margin)
        looks.append(
            replace(look, look=stage, looks=stage if final else stages, information=level / INFORMATION_LEVELS)
        )
    return design, tuple(looks)


def continues(staged: StagedLooks) -> bool:
    """The task's last look asks for another stage (before the design's last look)."""
    return staged.last.outcome == "continue"


def may_continue(staged: StagedLooks) -> bool:
    """Another stage may still be added: neither boundary was crossed and looks are left
    (futility is non-binding, so a task stopped as futile may be continued)."""
    return not staged.last.settled and staged.last.look < staged.last.looks


def staged_verdict(fixed: MetricVerdict, staged: StagedLooks, *, budget_spent: bool) -> MetricVerdict:
    """The guardrail's verdict from its last look, in place of the fixed design's.

    Approve → pass, reject → fail, futile or inconclusive → inconclusive with the estimate and
    the repeated confidence interval; a look that would continue but whose evaluation's stage
    budget is spent (``budget_spent``) is inconclusive and asks for the next stage.
    """
    look, design = staged.last, staged.design
    status = _STATUS.get(look.outcome, "inconclusive")
    pooled = f"{look.n} paired samples over {look.look} stage{'s' if look.look > 1 else ''}"
    rates = f"({look.losses} lost, {look.gains} gained; {signed(look.effect * 100)} points"
    interval = (
        f"repeated {1 - 2 * look.alpha_spent:.1%} CI {signed(look.interval[0] * 100)} to "
        f"{signed(look.interval[1] * 100)})"
    )
    score = f"score {signed(look.statistic, 2)} against ±{look.efficacy_bound:.2f} at look {look.look} of {look.looks}"
    head = f"{staged.label} on {pooled} {rates}, {interval}: {score}"
    if look.outcome == "approve":
        reason = f"{head}; non-inferior within the {look.margin * 100:g}-point margin."
    elif look.outcome == "reject":
        reason = (
            f"{head}; worse than half the margin (score against a {look.margin * 50:g}-point loss "
            f"{signed(look.harm_statistic, 2)} ≤ −{look.efficacy_bound:.2f}), the estimate beyond the "
            f"{look.margin * 100:g}-point margin."
        )
    elif look.outcome == "futile":
        reason = f"{head}; inside the futility bound ±{look.futility_bound:.2f}: the change sits at the margin."
    elif look.outcome == "inconclusive":
        reason = f"{head}; the design's last look crossed neither boundary."
    else:
        spent = "this evaluation's stage budget is spent" if budget_spent else "not settled yet"
        reason = f"{head}; {spent}, the next stage would add {staged.stage_size} samples."
    needed = staged.stage_size if status == "inconclusive" and look.look < look.looks else None
    details = {
        **{k: v for k, v in fixed.details.items() if k not in ("losses", "gains")},
        "losses": look.losses,
        "gains": look.gains,
        "look": look.look,
        "looks": look.looks,
        "look_outcome": look.outcome,
        "statistic": look.statistic,
        "harm_statistic": look.harm_statistic,
        "efficacy_bound": look.efficacy_bound,
        "futility_bound": look.futility_bound,
        "alpha_spent": look.alpha_spent,
        "fixed_status": fixed.status,
    }
    return replace(
        fixed,
        status=status,  # type: ignore[arg-type]
        n=look.n,
        baseline=staged.rates[0],
        candidate=staged.rates[1],
        effect=look.effect,
        interval=look.interval,
        test=f"group-sequential Tango score ({design.alpha_spending.label}, look {look.look} of {look.looks})",
        reason=reason,
        samples_needed=needed,
        p_value=None,
        details=details,
    )


def decides(staged: StagedLooks) -> bool:
    """Whether the last look, rather than the fixed design, gives the guardrail's verdict.

    Always from the second look on (a fixed test of pooled stages would spend its alpha again at
    every look); at the first look only when it stopped — its boundaries are stricter than the
    fixed design's, so the two agree there, and a first look that would continue (a decision on
    one stage asked for directly) is the fixed design's judgement of that stage.
    """
    return staged.last.look > 1 or staged.last.stopped


@dataclass(frozen=True)
class StagedTask:
    """One task's staged guardrails (by metric) and whether its evaluation may take no more stages."""

    guardrails: Mapping[str, StagedLooks]
    budget_spent: bool = False

    @property
    def continuing(self) -> bool:
        """Some guardrail's last look asks for another stage."""
        return any(continues(staged) for staged in self.guardrails.values())

    @property
    def may_continue(self) -> bool:
        return any(may_continue(staged) for staged in self.guardrails.values())

    @property
    def looks_taken(self) -> int:
        return max((staged.last.look for staged in self.guardrails.values()), default=0)

    def apply(self, verdicts: Sequence[MetricVerdict]) -> list[MetricVerdict]:
        """``verdicts`` with each staged guardrail's fixed verdict replaced by its last look's."""
        out = []
        for verdict in verdicts:
            staged = self.guardrails.get(verdict.metric)
            if verdict.kind == "guardrail" and staged is not None and verdict.n and decides(staged):
                verdict = staged_verdict(verdict, staged, budget_spent=self.budget_spent)
            out.append(verdict)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget_spent": self.budget_spent,
            "guardrails": {metric: staged.to_dict() for metric, staged in self.guardrails.items()},
        }
