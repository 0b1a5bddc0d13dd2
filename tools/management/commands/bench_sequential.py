"""``manage.py bench_sequential``: the sequential quality design against the fixed one.

For every pass-rate margin of the policy it prints the power plan, then simulates paired
outcomes — neutral changes at several discordance rates, regressions inside, at and beyond the
margin — and runs both designs on them at the policy's alpha:

* **fixed**: the judge as it is (``stats`` Tango interval and McNemar rule), once, at the plan's
  fixed sample size;
* **sequential**: ``gates.judge.sequential`` at the plan's looks, up to its maximum;
* **pairs at stages**: the sequential design with its looks where the staged evaluation can take
  them, after every ``--stage-size`` pairs up to the plan's maximum (re-planned on those fractions);
* **information-based**: the same boundaries' spending at the information the score observed,
  looks only at stage boundaries (``--stage-size`` pairs, the shipped suites' 100 by default), the
  maximum information what the plan's maximum pairs carry at the planned discordance, at most the
  plan's maximum rounded up to whole stages (``power.simulate_information``, what
  ``gates.judge.staged`` does under ``sequential.information: observed``).

* **deployed**: what the policy's own ``sequential`` section runs (``gates.judge.staged``): under
  ``stage_size: shipped`` its ``looks`` stages of the suite's shipped size (100 samples; 200 for
  compliance_qa), boundaries by its spending at the pairs over looks × stage size — whatever the
  margin's plan says; under ``stage_size: planned`` the plan-sized stages below.
* **plan-sized stages**: the policy's looks and spending with stages sized from the plan: stage
  one the shipped suite, the stages after it equal blocks of held-out samples up to the plan's
  maximum (at most the pool), all alpha spent at the last look (``power.shipped_first_sizes``,
  ``power.sized_design``; what ``sequential.stage_size: planned`` runs).

The fixed design's sample size is the one a gate without sequential testing commits to in advance:
the plan's fixed n at the policy's margin and confidence, the power and the *planned* discordance
(``--discordance``), whatever the scenario's true discordance is. The scenarios are declared here,
before any figure: neutral changes at 0, half, 1 and 2 times the planned discordance, regressions
of half the margin, at the margin (with and without gains) and of twice the margin.

False approve = approving a change whose true difference is at or beyond −margin; false reject =
rejecting one within the margin; approve rate = the share of runs approving a change within the
margin (a design that stops early by giving up would look cheap and safe on the first two alone).
Samples are the mean pairs used, as a fraction of the fixed design's. Beside them, **the least
any design could use** (``gates.judge.bounds``, Wald's inequality): the mean pairs below which no
stopping rule — looks after every pair included — can approve the scenario as often as the fixed
design does (exactly, by enumeration) while approving a change at the margin in at most α of runs;
for a harmful scenario, approving it in at most max(α, the fixed design's rate) of runs while
approving the planned neutral change as often as the fixed design. Then the same for pairs
resampled from recorded per-sample outcomes: the shipped kit's manifest lists, for every variant
and suite, the samples it failed (its base model passes every one), so each variant/task is a
population of real paired outcomes.

``--search`` runs a declared grid of group-sequential designs instead (looks, alpha and beta
spending, two- or one-sided futility, and stages of the shipped size as many as the plan's maximum
needs) on the same scenarios, and prints per design the mean samples, approve rate, worst error
rates and how often a regression of twice the margin is rejected, beside the fixed design's: the
search for a standard design that meets issue 18's "≤ 50 % of the samples on average" while keeping
the fixed design's error and approve rates.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.core.management.base import BaseCommand, CommandParser

from evaluators.suites import get_suite
from evaluators.suites.base import HELD_OUT_SIZE
from gates.judge.bounds import least_pairs_harmful, least_pairs_inside
from gates.judge.power import (
    DEFAULT_DISCORDANCE,
    DEFAULT_LOOKS,
    DEFAULT_POWER,
    OperatingCharacteristics,
    PowerPlan,
    exact_power,
    plan_task,
    planned_information,
    shipped_first_sizes,
    simulate_fixed,
    simulate_information,
    simulate_sequential,
    sized_design,
)
from gates.judge.sequential import (
    OBRIEN_FLEMING,
    POCOCK,
    GroupSequentialDesign,
    Spending,
    equally_spaced,
    group_sequential_design,
)
from gates.judge.staged import planned_design
from gates.policy.parse import load_policy
from gates.policy.rules import SequentialRule
from tools.kit.manifest import SHIPPED_DIR, read_manifest

SPENDING = {"obrien_fleming": OBRIEN_FLEMING, "pocock": POCOCK}


@dataclass(frozen=True)
class Scenario:
    label: str
    p_loss: float
    p_gain: float

    @property
    def difference(self) -> float:
        return self.p_gain - self.p_loss

    def harmful(self, margin: float) -> bool:
        """The true difference is at or beyond −margin: approving it is a false approve."""
        return self.difference <= -margin + 1e-12

    def twice_the_margin(self, margin: float) -> bool:
        return math.isclose(self.difference, -2 * margin)


def simulated_scenarios(margin: float, discordance: float) -> list[Scenario]:
    half = discordance / 2
    return [
        Scenario("neutral, no discordance (seed-only)", 0.0, 0.0),
        Scenario(f"neutral, {discordance / 2:.1%} discordant", half / 2, half / 2),
        Scenario(f"neutral, {discordance:.1%} discordant (planned)", half, half),
        Scenario(f"neutral, {2 * discordance:.1%} discordant", discordance, discordance),
        Scenario("regression of half the margin", half + margin / 2, half),
        Scenario("regression at the margin, losses only", margin, 0.0),
        Scenario("regression at the margin", half + margin, half),
        Scenario("regression of twice the margin", half + 2 * margin, half),
    ]


def recorded_scenarios(margin_of: dict[str, float]) -> Iterator[tuple[str, Scenario]]:
    """(task, scenario) per kit variant and task: the variant's recorded failures, base all passing."""
    manifest = read_manifest(SHIPPED_DIR) or {}
    variants = {**manifest.get("variants", {}), **manifest.get("not_shipped", {})}
    for name, variant in sorted(variants.items()):
        if name == "base":
            continue
        for task, outcome in sorted(variant.get("accuracy", {}).get("per_task", {}).items()):
            if task in margin_of:
                rate = len(outcome["failed_ids"]) / outcome["total"]
                yield task, Scenario(f"{name} on {task} ({outcome['total']} recorded, {rate:.0%} lost)", rate, 0.0)


@dataclass(frozen=True)
class Row:
    source: str  # "simulated", or the task whose recorded outcomes were resampled
    harmful: bool  # true difference at or beyond −margin
    fixed: OperatingCharacteristics
    sequential: OperatingCharacteristics
    staged: OperatingCharacteristics
    information: OperatingCharacteristics
    deployed: OperatingCharacteristics
    sized: OperatingCharacteristics  # the policy's looks, stage one shipped, the rest sized from the plan
    fixed_n: int
    least: float  # the fewest mean pairs any design keeping the fixed design's approve rates could use


class Command(BaseCommand):
    help = "False-approve and false-reject rates and samples: sequential vs fixed quality design."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--policy", default="default")
        parser.add_argument("--runs", type=int, default=2000, help="simulated runs per scenario and design")
        parser.add_argument("--discordance", type=float, default=DEFAULT_DISCORDANCE, help="planned discordance")
        parser.add_argument("--power", type=float, default=DEFAULT_POWER)
        parser.add_argument("--looks", type=int, default=DEFAULT_LOOKS)
        parser.add_argument("--suite-size", type=int, default=1100, help="shipped plus held-out pool")
        parser.add_argument("--stage-size", type=int, default=100, help="pairs per stage of the staged designs")
        parser.add_argument(
            "--alpha-spending", choices=sorted(SPENDING), help="for the plan-based designs; default: the policy's"
        )
        parser.add_argument("--seed", type=int, default=18)
        parser.add_argument(
            "--search", action="store_true", help="run the declared grid of designs instead (SEARCH_GRID)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        policy = load_policy(options["policy"])
        options["alpha_spending"] = options["alpha_spending"] or policy.sequential.alpha_spending
        options["sequential"] = policy.sequential
        rng = np.random.default_rng(options["seed"])
        margin_of: dict[str, float] = {}
        confidence_of: dict[str, float] = {}
        stage_of: dict[str, int] = {}
        for name, task_policy in policy.tasks.items():
            for rule in task_policy.guardrails:
                if rule.metric == "pass_rate" and rule.margin:
                    margin_of[name], confidence_of[name] = rule.margin, rule.confidence
                    stage_of[name] = len(get_suite(name).load_samples())
        options["stage_of"] = stage_of
        if options["search"]:
            self._search(margin_of, confidence_of, stage_of, options, rng)
            return
        plans: dict[float, PowerPlan] = {}
        for margin in sorted(set(margin_of.values())):
            confidence = min(c for t, c in confidence_of.items() if margin_of[t] == margin)
            plans[margin] = plan_task(
                margin=margin,
                confidence=confidence,
                power=options["power"],
                discordance=options["discordance"],
                looks=options["looks"],
                suite_size=options["suite_size"],
                alpha_spending=SPENDING[options["alpha_spending"]],
            )
        design = plans[min(plans)].design
        beta_spending = design.beta_spending.label if design.beta_spending else "no"
        self.stdout.write(
            f"policy {policy.version_label}; plans at {options['discordance']:.0%} discordance, power "
            f"{options['power']:.0%}, {options['looks']} looks ({design.alpha_spending.label} alpha, "
            f"{beta_spending} beta spending); {options['runs']} runs per scenario"
        )
        rows: list[Row] = []
        for margin, plan in plans.items():
            tasks = ", ".join(t for t, m in margin_of.items() if m == margin)
            self.stdout.write(
                f"\nmargin {margin * 100:g} points ({tasks}), one-sided alpha {plan.alpha:g}: fixed {plan.fixed_n}, "
                f"sequential looks {list(plan.look_sizes)}, expected {plan.expected_n:.0f} neutral / "
                f"{plan.expected_n_at_margin:.0f} at the margin; {plan.reason}"
            )
            # The deployed design's stage is the suite's shipped size: the smallest among this margin's tasks.
            stage = min(stage_of[t] for t, m in margin_of.items() if m == margin)
            sized = shipped_first_sizes(
                plan.max_n, shipped=stage, looks=policy.sequential.looks, pool=stage + HELD_OUT_SIZE
            )
            shipped = [stage * (k + 1) for k in range(policy.sequential.looks)]
            self.stdout.write(
                f"  looks of shipped-size stages {shipped}; of plan-sized stages (the shipped suite, then "
                f"held-out stages to the plan's maximum) {list(sized)}; the policy's: {policy.sequential.stage_size}"
            )
            for scenario in simulated_scenarios(margin, options["discordance"]):
                rows.append(self._compare("simulated", scenario, margin, plan, stage, options, rng))
        self.stdout.write("\nresampled from the kit's recorded per-sample outcomes (kit/manifest.json):")
        for task, scenario in recorded_scenarios(margin_of):
            margin = margin_of[task]
            rows.append(self._compare(task, scenario, margin, plans[margin], stage_of[task], options, rng))
        self._summary(rows)

    def _search(
        self,
        margin_of: dict[str, float],
        confidence_of: dict[str, float],
        stage_of: dict[str, int],
        options: dict[str, Any],
        rng: np.random.Generator,
    ) -> None:
        runs, discordance, power = options["runs"], options["discordance"], options["power"]
        confidence = {m: min(c for t, c in confidence_of.items() if margin_of[t] == m) for m in set(margin_of.values())}
        alpha = {m: (1 - c) / 2 for m, c in confidence.items()}
        worst_alpha = max(alpha.values())  # the Monte Carlo error of a false-approve rate near it
        cases = [
            SearchCase(False, scenario, margin, min(stage_of[t] for t, m in margin_of.items() if m == margin))
            for margin in sorted(confidence)
            for scenario in simulated_scenarios(margin, discordance)
        ] + [
            SearchCase(True, scenario, margin_of[task], stage_of[task])
            for task, scenario in recorded_scenarios(margin_of)
        ]

        @functools.cache
        def plan(margin: float, variant: Variant) -> PowerPlan:
            return plan_task(
                margin=margin,
                confidence=confidence[margin],
                power=power,
                discordance=discordance,
                looks=variant.looks or options["looks"],
                alpha_spending=variant.alpha_spending,
                beta_spending=variant.beta_spending,
            )

        fixed_n = {m: plan(m, SEARCH_GRID[0]).fixed_n for m in confidence}
        self.stdout.write(
            f"design search: {len(SEARCH_GRID)} designs declared in SEARCH_GRID, {runs} runs per scenario; "
            f"plans at {discordance:.0%} discordance, power {power:.0%}; fixed n "
            + ", ".join(f"{fixed_n[m]} at {m * 100:g} points" for m in sorted(fixed_n))
        )
        fixed = [
            simulate_fixed(
                fixed_n[c.margin],
                margin=c.margin,
                confidence=1 - 2 * alpha[c.margin],
                p_loss=c.scenario.p_loss,
                p_gain=c.scenario.p_gain,
                runs=runs,
                rng=rng,
            )
            for c in cases
        ]
        fixed_simulated, fixed_recorded = self._both(cases, fixed, fixed_n)
        summaries: list[tuple[Variant, SearchSummary, SearchSummary]] = []
        for variant in SEARCH_GRID:
            results = []
            for case in cases:
                planned = plan(case.margin, variant)
                if variant.looks is None:
                    pool = case.stage + HELD_OUT_SIZE
                    stages = max(2, min(math.ceil(planned.max_n / case.stage), pool // case.stage))
                    sizes: tuple[int, ...] = tuple(case.stage * (k + 1) for k in range(stages))
                    design = group_sequential_design(
                        equally_spaced(stages),
                        alpha=planned.alpha,
                        beta=1 - power,
                        alpha_spending=variant.alpha_spending,
                        beta_spending=variant.beta_spending,
                    )
                elif variant.shipped_first:
                    pool = case.stage + HELD_OUT_SIZE
                    sizes = shipped_first_sizes(planned.max_n, shipped=case.stage, looks=variant.looks, pool=pool)
                    design = sized_design(planned, sizes)
                else:
                    sizes, design = planned.look_sizes, planned.design
                results.append(
                    simulate_sequential(
                        design,
                        sizes,
                        margin=case.margin,
                        p_loss=case.scenario.p_loss,
                        p_gain=case.scenario.p_gain,
                        runs=runs,
                        rng=rng,
                        one_sided_futility=variant.one_sided_futility,
                    )
                )
            summaries.append((variant, *self._both(cases, results, fixed_n)))
        self.stdout.write(f"  {'fixed':<76} simulated: {fixed_simulated.text()}")
        self.stdout.write(f"  {'':<76} recorded:  {fixed_recorded.text()}")
        ranked = sorted(summaries, key=lambda item: item[1].samples)
        kept = [
            (v, s, r)
            for v, s, r in ranked
            if _keeps(s, fixed_simulated, runs, worst_alpha) and _keeps(r, fixed_recorded, runs, worst_alpha)
        ]
        for item in ranked:
            variant, simulated, recorded = item
            mark = "keeps the fixed rates" if item in kept else "loses against fixed"
            self.stdout.write(f"  {variant.label:<76} simulated: {simulated.text()}")
            self.stdout.write(f"  {mark:<76} recorded:  {recorded.text()}")
        for label, chosen in (
            ("keeping the fixed design's rates", kept),
            (
                f"keeping them and rejecting a regression of twice the margin in ≥ {REJECTS_TWICE:.0%} of runs at "
                "every margin",
                [item for item in kept if min(item[1].twice_rejected) >= REJECTS_TWICE],
            ),
        ):
            if chosen:
                variant, simulated, recorded = chosen[0]
                self.stdout.write(
                    f"best {label}: {variant.label} — samples {simulated.samples:.2f} simulated, "
                    f"{recorded.samples:.2f} recorded"
                )
            else:
                self.stdout.write(f"best {label}: none")
        for source, samples in (
            ("simulated", [s.samples for _, s, _ in kept]),
            ("recorded", [r.samples for *_, r in kept]),
        ):
            met = [fraction for fraction in samples if fraction <= 0.5]
            self.stdout.write(
                f"designs keeping the fixed design's rates with ≤ 0.50 of its samples on {source} outcomes: "
                f"{len(met)} of {len(SEARCH_GRID)}"
            )

    @staticmethod
    def _both(
        cases: list[SearchCase], results: list[OperatingCharacteristics], fixed_n: dict[float, int]
    ) -> tuple[SearchSummary, SearchSummary]:
        pick = [
            [(c, r) for c, r in zip(cases, results, strict=True) if c.recorded == recorded]
            for recorded in (False, True)
        ]
        simulated, recorded = (_summarize([c for c, _ in p], [r for _, r in p], fixed_n) for p in pick)
        return simulated, recorded

    def _compare(
        self,
        source: str,
        scenario: Scenario,
        margin: float,
        plan: PowerPlan,
        deployed_stage: int,
        options: dict[str, Any],
        rng: np.random.Generator,
    ) -> Row:
        common = {"margin": margin, "p_loss": scenario.p_loss, "p_gain": scenario.p_gain, "runs": options["runs"]}
        fixed = simulate_fixed(plan.fixed_n, confidence=1 - 2 * plan.alpha, rng=rng, **common)
        sequential = simulate_sequential(plan.design, plan.look_sizes, rng=rng, **common)
        stage_size = options["stage_size"]
        stages = math.ceil(plan.max_n / stage_size)
        maximum = planned_information(plan.max_n, margin=margin, discordance=plan.discordance)
        information = simulate_information(
            plan.design, stage_size=stage_size, stages=stages, max_information=maximum, rng=rng, **common
        )
        staged_sizes = [min(stage_size * (k + 1), plan.max_n) for k in range(stages)]
        staged = simulate_sequential(_pair_design(plan, staged_sizes), staged_sizes, rng=rng, **common)
        rule: SequentialRule = options["sequential"]
        pool = deployed_stage + HELD_OUT_SIZE
        sized_sizes = shipped_first_sizes(plan.max_n, shipped=deployed_stage, looks=rule.looks, pool=pool)
        sized = simulate_sequential(sized_design(plan, sized_sizes), sized_sizes, rng=rng, **common)
        if rule.stage_size == "planned":  # the policy itself sizes its stages from the plan
            deployed = sized
        else:
            deployed_sizes = [deployed_stage * (k + 1) for k in range(rule.looks)]
            shipped_design = planned_design(rule, 1 - 2 * plan.alpha)
            deployed = simulate_sequential(shipped_design, deployed_sizes, rng=rng, **common)
        harmful = scenario.harmful(margin)
        error = "approve" if harmful else "reject"
        least = _least_pairs(scenario, margin, plan, harmful)

        def rate(result: OperatingCharacteristics) -> float:
            return result.approve if harmful else result.reject

        self.stdout.write(
            f"  {scenario.label:<48} Δ {scenario.difference * 100:+5.1f} pt  false {error}: fixed {rate(fixed):.3f}"
            f" seq {rate(sequential):.3f} | approve {fixed.approve:.2f}/{sequential.approve:.2f} reject "
            f"{fixed.reject:.2f}/{sequential.reject:.2f} | samples {sequential.mean_samples:.0f} = "
            f"{sequential.mean_samples / plan.fixed_n:.2f} of fixed"
        )
        for name, result in (
            ("pairs at stages", staged),
            ("information-based", information),
            (f"deployed ({rule.stage_size})", deployed),
            ("plan-sized stages", sized),
        ):
            self.stdout.write(
                f"  {'':<48} {name:<18} false {error} {rate(result):.3f} | approve {result.approve:.2f} reject "
                f"{result.reject:.2f} | samples {result.mean_samples:.0f} = {result.mean_samples / plan.fixed_n:.2f}"
                " of fixed"
            )
        self.stdout.write(
            f"  {'':<48} {'least possible':<18} {least:.0f} = {least / plan.fixed_n:.2f} of fixed (Wald's bound at "
            "the fixed design's approve rates)"
        )
        return Row(source, harmful, fixed, sequential, staged, information, deployed, sized, plan.fixed_n, least)

    def _summary(self, rows: list[Row]) -> None:
        self.stdout.write(
            "\nsummary (worst case over scenarios; approve: mean approve rate over the changes within the "
            "margin; samples: mean over scenarios of the design's mean / fixed n)"
        )
        for name, chosen in (
            ("simulated", [r for r in rows if r.source == "simulated"]),
            ("recorded", [r for r in rows if r.source != "simulated"]),
        ):
            harmful = [r for r in chosen if r.harmful]
            neutral = [r for r in chosen if not r.harmful]
            for label, pick in (
                ("fixed", lambda r: r.fixed),
                ("sequential", lambda r: r.sequential),
                ("at stages", lambda r: r.staged),
                ("information", lambda r: r.information),
                ("deployed", lambda r: r.deployed),
                ("plan-sized", lambda r: r.sized),
            ):
                approve = max((pick(r).approve for r in harmful), default=0.0)
                reject = max((pick(r).reject for r in neutral), default=0.0)
                power = float(np.mean([pick(r).approve for r in neutral])) if neutral else math.nan
                fraction = float(np.mean([pick(r).mean_samples / r.fixed_n for r in chosen])) if chosen else math.nan
                self.stdout.write(
                    f"  {name:<9} {label:<11} worst false approve {approve:.3f}, worst false reject {reject:.3f}, "
                    f"approve {power:.2f}, samples {fraction:.2f} of fixed over {len(chosen)} scenarios"
                )
            if chosen:
                least = float(np.mean([r.least / r.fixed_n for r in chosen]))
                self.stdout.write(
                    f"  {name:<9} {'least':<11} no design keeping the fixed design's approve rates and alpha can use "
                    f"fewer than {least:.2f} of fixed on average over these scenarios (Wald's bound)"
                )


@dataclass(frozen=True)
class Variant:
    """One design of the search: its looks (``None``: stages of the task's shipped size, as many as
    the plan's maximum needs within the pool), spending and futility rule."""

    looks: int | None
    alpha_spending: Spending
    beta_spending: Spending | None
    one_sided_futility: bool
    shipped_first: bool = False  # stage one the shipped suite, then equal stages to the plan's max

    @property
    def label(self) -> str:
        looks = "shipped-size stages to the plan's max" if self.looks is None else f"{self.looks} looks"
        if self.shipped_first:
            looks += ", shipped suite first"
        beta = _spending_name(self.beta_spending) if self.beta_spending else "no"
        futility = "one-sided" if self.one_sided_futility else "two-sided"
        return f"{looks}, {_spending_name(self.alpha_spending)} alpha, {beta} beta, {futility} futility"


def _spending_name(spending: Spending) -> str:
    return f"power {spending.rho:g}" if spending.kind == "power" else spending.kind.replace("_", "-")


SPENDINGS = (OBRIEN_FLEMING, POCOCK, Spending("power", 0.5))
BETA_SPENDINGS = (POCOCK, Spending("power", 0.5), Spending("power", 2.0))
# Declared before any figure: looks at the plan's equal fractions (5, 10, 15), three alpha and three
# beta spending functions, the judge's two-sided futility wedge or a one-sided futility stop; then
# the deployed shape sized from the plan (Pocock-type, the policy's looks replaced by as many
# shipped-size stages as the plan's maximum needs, at most the pool).
SEARCH_GRID = (
    *(
        Variant(looks, alpha, beta, one_sided)
        for looks in (5, 10, 15)
        for alpha in SPENDINGS
        for beta in BETA_SPENDINGS
        for one_sided in (False, True)
    ),
    Variant(None, POCOCK, POCOCK, False),
    Variant(None, POCOCK, POCOCK, True),
    # Added on 2026-12-05 (later), after the figures above: the plan's looks as a staged evaluation can take
    # them (stage one the shipped suite, then equal held-out stages to the plan's maximum), with the
    # policy's Pocock spending and the best two-sided design that still rejected twice the margin.
    *(
        Variant(looks, alpha, alpha, False, shipped_first=True)
        for looks in (5, 10)
        for alpha in (POCOCK, Spending("power", 0.5))
    ),
)


@dataclass(frozen=True)
class SearchCase:
    recorded: bool
    scenario: Scenario
    margin: float
    stage: int  # the task's shipped size (for simulated outcomes: the smallest among the margin's tasks)


@dataclass(frozen=True)
class SearchSummary:
    samples: float  # mean over the cases of mean pairs / fixed n
    approve: float  # mean approve rate over the cases inside the margin
    false_approve: float  # worst over the harmful cases
    false_reject: float  # worst over the cases inside the margin
    twice_rejected: tuple[float, ...]  # per margin: the share of runs rejecting a regression of twice it

    def text(self) -> str:
        twice = "/".join(f"{r:.0%}" for r in self.twice_rejected)
        return (
            f"samples {self.samples:.2f}, approve {self.approve:.2f}, false approve {self.false_approve:.3f}, "
            f"false reject {self.false_reject:.3f}" + (f", twice the margin rejected {twice}" if twice else "")
        )


def _summarize(
    cases: list[SearchCase], results: list[OperatingCharacteristics], fixed_n: dict[float, int]
) -> SearchSummary:
    pairs = list(zip(cases, results, strict=True))
    harmful = [r for c, r in pairs if c.scenario.harmful(c.margin)]
    inside = [r for c, r in pairs if not c.scenario.harmful(c.margin)]
    twice = tuple(r.reject for c, r in pairs if c.scenario.twice_the_margin(c.margin))
    return SearchSummary(
        samples=float(np.mean([r.mean_samples / fixed_n[c.margin] for c, r in pairs])),
        approve=float(np.mean([r.approve for r in inside])),
        false_approve=max((r.approve for r in harmful), default=0.0),
        false_reject=max(r.reject for r in inside),
        twice_rejected=twice,
    )


# A design keeps the fixed design's rates when its worst false approve is within two Monte Carlo
# standard errors of the fixed design's, its worst false reject no higher, and its approve rate
# inside the margin at most two points lower.
APPROVE_SLACK = 0.02
# Issue 18 asks that a harmful change stops early *with reject*: the second ranking keeps only
# designs that reject a regression of twice the margin in at least this share of runs.
REJECTS_TWICE = 0.5


def _keeps(design: SearchSummary, fixed: SearchSummary, runs: int, alpha: float) -> bool:
    error = 2 * math.sqrt(alpha * (1 - alpha) / runs)
    return (
        design.false_approve <= fixed.false_approve + error
        and design.false_reject <= fixed.false_reject + error
        and design.approve >= fixed.approve - APPROVE_SLACK
    )


def _least_pairs(scenario: Scenario, margin: float, plan: PowerPlan, harmful: bool) -> float:
    """Wald's bound for this scenario at the fixed design's exact approve rates (``gates.judge.bounds``)."""
    approve = _fixed_approve(plan.fixed_n, margin, plan.alpha, scenario.p_loss, scenario.p_gain)
    if not harmful:
        return least_pairs_inside(scenario.p_loss, scenario.p_gain, margin=margin, approve=approve, alpha=plan.alpha)
    planned = (plan.discordance / 2, plan.discordance / 2)
    return least_pairs_harmful(
        scenario.p_loss,
        scenario.p_gain,
        approve=max(plan.alpha, approve),
        planned=planned,
        planned_approve=_fixed_approve(plan.fixed_n, margin, plan.alpha, *planned),
    )


@functools.cache
def _fixed_approve(n: int, margin: float, alpha: float, p_loss: float, p_gain: float) -> float:
    """The fixed design's exact approve rate, once per plan and change: every harmful scenario asks
    for the planned neutral change's (a quarter of a second at 2 points' 1,067 pairs)."""
    return exact_power(n, margin=margin, alpha=alpha, p_loss=p_loss, p_gain=p_gain)


def _pair_design(plan: PowerPlan, sizes: list[int]) -> GroupSequentialDesign:
    """The plan's pair-counting design with its looks at stage boundaries: fractions of its maximum
    pairs, re-planned with the planned drift (what ``gates.judge.staged`` does with ``pairs``)."""
    design = plan.design
    return group_sequential_design(
        tuple(n / plan.max_n for n in sizes),
        alpha=design.alpha,
        beta=design.beta,
        alpha_spending=design.alpha_spending,
        beta_spending=design.beta_spending,
        drift=design.drift,
    )
