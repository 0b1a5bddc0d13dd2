"""The power plan of a ticket before evaluation: per task, how many paired samples its pass-rate
guardrails need (``gates.judge.staged.guardrail_plan``), whether the suite holds them, and the engine time.

Each input is stated with its source, so a reader can judge the plan:

* **the design** is the policy's ``sequential`` one (looks, alpha and futility spending, power):
  the plan sizes what the staged evaluation will be judged with (a policy that judges one fixed
  stage plans with ``SequentialRule``'s defaults);
* **margin and confidence** from the policy's quality guardrails on pass/fail metrics (a graded
  score is judged by bootstrap and has no such plan); the guardrail needing the most pairs decides;
* **discordance** (the share of paired samples whose outcome differs) from ``task_discordance``:
  the baseline's A/A calibration once there is one, today its own history; otherwise the policy's
  ``power_plan.discordance_default``;
* **suite size**: the shipped samples plus the held-out pool (``evaluators.suites``);
* **engine time per pair** from the baseline's latest measured run of the task, otherwise
  ``DEFAULT_SECONDS_PER_PAIR``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from backends.models import Backend
from evaluators.models import EvaluationAttempt, RunSource, RunStatus, SampleRecord, TaskResult
from evaluators.suites import get_suite
from evaluators.suites.base import HELD_OUT_SIZE
from gates.judge.power import PowerPlan
from gates.judge.staged import design_summary, expected_pairs, guardrail_plan, staged_guardrails
from gates.models import ReleaseTicket
from gates.policy.metrics import METRIC_SPECS
from gates.policy.rules import MetricRule, Policy, SequentialRule
from gates.selectors.calibrations import current_calibration
from gates.selectors.stages import stage_sizes

# Fewer common samples than one shipped suite say too little about a rate of a few percent.
MIN_HISTORY_PAIRS = 100
# Engine seconds one paired sample costs (both sides answer one prompt) before the baseline has a
# measured run to time: an order of magnitude for a few hundred output tokens per side, stated as such.
DEFAULT_SECONDS_PER_PAIR = 1.0
DEFAULT_SOURCE = "default"


@dataclass(frozen=True)
class TaskPlan:
    """One task's plan: the deciding guardrail, its inputs with their sources, and the verdict on it."""

    task: str
    role: str  # beneficiary | risk
    metric: str
    label: str
    margin: float
    confidence: float
    discordance: float
    discordance_source: str  # "default", or what measured it (A/A calibration, the baseline's history)
    shipped_samples: int
    suite_size: int  # shipped plus held out: every paired sample a sequential run can draw
    seconds_per_pair: float
    seconds_source: str
    power: PowerPlan
    refused: bool  # not settleable, and the policy refuses on this discordance source
    stage_looks: tuple[int, ...]  # the pairs the staged evaluation looks at (policy ``sequential``); () unstaged
    # The pairs the evaluation is expected to take on a neutral change: at its stage looks where it
    # is staged (``gates.judge.staged.expected_pairs``), otherwise the design's at ``power.max_n``.
    expected_pairs: float

    @property
    def most_pairs(self) -> int:
        """The pairs the evaluation takes at most: its last stage look, or the design's maximum."""
        return self.stage_looks[-1] if self.stage_looks else self.power.max_n

    @property
    def expected_engine_s(self) -> float:
        return self.expected_pairs * self.seconds_per_pair

    @property
    def max_engine_s(self) -> float:
        return self.most_pairs * self.seconds_per_pair

    @property
    def message(self) -> str:
        """What the plan says of this task in one sentence (the refusal's wording when it refuses)."""
        needs = (
            f"{self.task}: a {self.margin * 100:g}-point margin on {self.label} at {self.confidence:.0%} "
            f"needs up to {self.power.max_n:,} paired samples at {self.discordance:.1%} discordance "
            f"({self.discordance_source})"
        )
        if self.power.settleable:
            return f"{needs}; the suite has {self.suite_size:,}."
        sizes = f"the suite has {self.suite_size:,} ({self.shipped_samples:,} shipped + {HELD_OUT_SIZE:,} held out)"
        return f"{needs}; {sizes}."

    def to_dict(self) -> dict[str, Any]:
        plan = self.power
        return {
            "task": self.task,
            "role": self.role,
            "metric": self.metric,
            "label": self.label,
            "margin": self.margin,
            "confidence": self.confidence,
            "power": plan.power,
            "discordance": self.discordance,
            "discordance_source": self.discordance_source,
            "fixed_n": plan.fixed_n,
            "max_n": plan.max_n,
            "look_sizes": list(plan.look_sizes),
            "stage_looks": list(self.stage_looks),
            "most_pairs": self.most_pairs,
            "expected_n": round(self.expected_pairs, 1),
            "shipped_samples": self.shipped_samples,
            "suite_size": self.suite_size,
            "settleable": plan.settleable,
            "refused": self.refused,
            "seconds_per_pair": self.seconds_per_pair,
            "seconds_source": self.seconds_source,
            "expected_engine_s": round(self.expected_engine_s, 1),
            "max_engine_s": round(self.max_engine_s, 1),
            "message": self.message,
        }


@dataclass(frozen=True)
class TicketPlan:
    """The plan of every task a ticket is judged on, under one policy."""

    policy: str
    design: str  # the policy's sequential design in words (``gates.judge.staged.design_summary``)
    discordance_default: float
    refuse_unsettleable: str
    tasks: tuple[TaskPlan, ...]
    unplanned: tuple[tuple[str, str], ...]  # (task, why it has no plan)

    @property
    def refusals(self) -> list[TaskPlan]:
        return [task for task in self.tasks if task.refused]

    @property
    def expected_engine_s(self) -> float:
        return sum(task.expected_engine_s for task in self.tasks)

    @property
    def max_engine_s(self) -> float:
        return sum(task.max_engine_s for task in self.tasks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "design": self.design,
            "discordance_default": self.discordance_default,
            "refuse_unsettleable": self.refuse_unsettleable,
            "tasks": [task.to_dict() for task in self.tasks],
            "unplanned": [{"task": task, "reason": reason} for task, reason in self.unplanned],
            "expected_engine_s": round(self.expected_engine_s, 1),
            "max_engine_s": round(self.max_engine_s, 1),
            "refused": bool(self.refusals),
        }


# --- inputs ------------------------------------------------------------------------------------


def _measured_task_runs(backend: Backend, task: str) -> list[int]:
    """Ids of the backend's succeeded runs that measured ``task``'s samples themselves, newest first.

    A run that reused an earlier run's answers (greedy decoding makes them reusable) only copies
    them, so it would make any engine look perfectly repeatable.
    """
    results = (
        TaskResult.objects.filter(
            run__backend=backend,
            run__status=RunStatus.SUCCEEDED,
            run__source=RunSource.MEASURED,
            run__reused_from__isnull=True,
            task=task,
            error="",
        )
        .exclude(quality__has_key="reused_from_run")
        .order_by("-run__finished_at", "-run_id")
    )
    return list(results.values_list("run_id", flat=True)[:2])


def task_discordance(*, backend: Backend, task: str) -> tuple[float, str] | None:
    """The share of paired samples whose outcome differs when ``backend`` meets itself, and its source.

    The backend's current A/A calibration comes first. Without one, the backend's two newest runs
    that measured the task are an A/A pair of their own (same configuration, suite samples paired
    by id). None when there is not enough of either: the plan then assumes the policy's default.
    """
    calibration = current_calibration(backend)
    counted = (calibration.discordance or {}).get(task) if calibration else None
    if calibration is not None and counted and counted.get("paired"):
        source = f"A/A calibration #{calibration.pk}: {counted['discordant']} of {counted['paired']} samples differ"
        return float(counted["rate"]), source
    runs = _measured_task_runs(backend, task)
    if len(runs) < 2:
        return None
    newer, older = (
        dict(SampleRecord.objects.filter(run_id=run_id, task=task).values_list("sample_id", "passed"))
        for run_id in runs
    )
    common = newer.keys() & older.keys()
    if len(common) < MIN_HISTORY_PAIRS:
        return None
    differ = sum(newer[sample] != older[sample] for sample in common)
    source = f"baseline history: runs #{runs[1]} and #{runs[0]}, {differ} of {len(common)} samples differ"
    return differ / len(common), source


def seconds_per_pair(*, backend: Backend, task: str) -> tuple[float, str]:
    """Engine seconds one paired sample of ``task`` costs, and where the figure comes from.

    From the backend's newest measured run that timed the task: its wall time over the samples it
    answered (it includes the load phase unless the load was skipped, so it rather overstates what
    a quality-only stage costs), doubled when that run measured
    the baseline alone rather than both sides together. Otherwise ``DEFAULT_SECONDS_PER_PAIR``.
    """
    key = f"{task}_s"
    attempt = (
        EvaluationAttempt.objects.filter(
            run__backend=backend,
            run__status=RunStatus.SUCCEEDED,
            run__source=RunSource.MEASURED,
            status=RunStatus.SUCCEEDED,
            timings__has_key=key,
        )
        .select_related("run")
        .order_by("-finished_at", "-id")
        .first()
    )
    if attempt is not None:
        samples = SampleRecord.objects.filter(run_id=attempt.run_id, task=task).count()
        seconds = attempt.timings.get(key)
        if samples and isinstance(seconds, int | float) and seconds > 0:
            sides = 1 if attempt.run.paired_run_id else 2
            return sides * seconds / samples, f"run #{attempt.run_id}: {seconds:g} s for {samples} samples"
    return DEFAULT_SECONDS_PER_PAIR, DEFAULT_SOURCE


def pass_fail_guardrails(policy: Policy, task: str) -> list[MetricRule]:
    """The task's quality guardrails on pass/fail metrics: the ones a paired-sample plan applies to."""
    task_policy = policy.task(task)
    if task_policy is None:
        return []
    return [
        rule
        for rule in task_policy.guardrails
        # A zero margin asks for a proof of no change at all, which no sample size gives.
        if METRIC_SPECS[rule.metric].family == "pass_fail" and 0 < (rule.margin or 0.0) < 1
    ]


@functools.lru_cache(maxsize=256)
def _power(
    rule: SequentialRule,
    guardrail: MetricRule,
    discordance: float,
    source: str,
    suite_size: int,
) -> PowerPlan:
    # The policy's design (looks, spending, power), the one its staged evaluation is judged with.
    # plan_task builds the group-sequential design afresh (~0.1 s); a page shows the same few plans.
    return guardrail_plan(rule, guardrail, discordance, discordance_source=source, suite_size=suite_size)


@functools.lru_cache(maxsize=256)
def _expected(
    rule: SequentialRule, guardrail: MetricRule, looks: tuple[int, ...], discordance: float, planned: float
) -> float:
    return expected_pairs(rule, guardrail, looks, discordance=discordance, planned=planned)


# --- the plan ----------------------------------------------------------------------------------


def _stage_looks(policy: Policy, task: str, shipped: int) -> tuple[int, ...]:
    """The cumulative pairs at which the policy's staged evaluation will look at ``task``
    (``gates.selectors.stages.stage_sizes``; empty: one fixed stage)."""
    task_policy = policy.task(task)
    guardrails = staged_guardrails(task_policy) if task_policy else []
    if not policy.sequential.enabled or not guardrails:
        return ()
    return stage_sizes(policy, guardrails, shipped)


def ticket_plan(*, policy: Policy, baseline: Backend, tasks: Iterable[tuple[str, str]]) -> TicketPlan:
    """The power plan for ``tasks`` ((slug, role) pairs) against ``baseline`` under ``policy``."""
    rule = policy.power_plan
    planned: list[TaskPlan] = []
    unplanned: list[tuple[str, str]] = []
    for task, role in tasks:
        guardrails = pass_fail_guardrails(policy, task)
        if not guardrails:
            unplanned.append((task, f"policy {policy.version_label} has no pass-rate guardrail for {task}"))
            continue
        try:
            shipped = len(get_suite(task).load_samples())
        except ValueError:
            unplanned.append((task, f"no suite is registered for {task}"))
            continue
        measured = task_discordance(backend=baseline, task=task)
        discordance, source = measured or (rule.discordance_default, DEFAULT_SOURCE)
        seconds, seconds_source = seconds_per_pair(backend=baseline, task=task)
        suite_size = shipped + HELD_OUT_SIZE
        candidates = [
            (
                guardrail,
                _power(policy.sequential, guardrail, discordance, source, suite_size),
            )
            for guardrail in guardrails
        ]
        deciding, power = max(candidates, key=lambda pair: pair[1].max_n)
        looks = _stage_looks(policy, task, shipped)
        expected = (
            _expected(policy.sequential, deciding, looks, discordance, rule.discordance_default)
            if looks and policy.sequential.information == "pairs"
            else power.expected_n
        )
        refuses = rule.refuse_unsettleable == "always" or (
            rule.refuse_unsettleable == "measured" and measured is not None
        )
        planned.append(
            TaskPlan(
                task=task,
                role=role,
                metric=deciding.metric,
                label=deciding.label,
                margin=deciding.margin or 0.0,
                confidence=deciding.confidence,
                discordance=discordance,
                discordance_source=source,
                shipped_samples=shipped,
                suite_size=suite_size,
                seconds_per_pair=seconds,
                seconds_source=seconds_source,
                power=power,
                refused=refuses and not power.settleable,
                stage_looks=looks,
                expected_pairs=expected,
            )
        )
    return TicketPlan(
        policy=policy.version_label,
        design=design_summary(policy.sequential),
        discordance_default=rule.discordance_default,
        refuse_unsettleable=rule.refuse_unsettleable,
        tasks=tuple(planned),
        unplanned=tuple(unplanned),
    )


def stored_ticket_plan(*, ticket: ReleaseTicket, policy: Policy) -> TicketPlan:
    """The plan of a stored ticket, as its page and ``GET /api/v1/tickets/{id}/plan/`` show it."""
    tasks = ticket_tasks_with_roles(ticket.beneficiary_tasks.all(), ticket.risk_tasks.all())
    return ticket_plan(policy=policy, baseline=ticket.baseline, tasks=tasks)


def ticket_tasks_with_roles(beneficiary: Iterable[Any], risk: Iterable[Any]) -> list[tuple[str, str]]:
    """(slug, role) in the judge's order: beneficiary tasks first, then risk tasks not already named."""
    benefit = sorted(_slug(task) for task in beneficiary)
    risks = sorted({_slug(task) for task in risk} - set(benefit))
    return [(slug, "beneficiary") for slug in benefit] + [(slug, "risk") for slug in risks]


def _slug(task: Any) -> str:
    return task if isinstance(task, str) else str(task.slug)
