"""Reads of a ticket's staged evaluation: its stages, and the looks of every staged task so far."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from evaluators.models import EvaluationRun, RunStatus, SampleRecord
from evaluators.suites import get_suite
from evaluators.suites.base import HELD_OUT_SIZE
from gates.judge.staged import (
    StagedLooks,
    StagedTask,
    StageOutcomes,
    staged_guardrails,
    task_looks,
    task_stage_sizes,
)
from gates.models import EvaluationStage, GateDecision, ReleaseTicket
from gates.policy.rules import MetricRule, Policy


def series_stages(ticket: ReleaseTicket) -> list[EvaluationStage]:
    """The stages after the first of the ticket's current evidence (its runs' series), in order."""
    if ticket.candidate_run_id is None:
        return []
    stages = EvaluationStage.objects.filter(ticket=ticket, first_run_id=ticket.candidate_run_id)
    return list(stages.select_related("baseline_run", "candidate_run").order_by("number"))


def stage_runs(ticket: ReleaseTicket) -> list[EvaluationRun | None]:
    """Every run the ticket's current evidence consists of: the first pair, then each stage's."""
    runs: list[EvaluationRun | None] = [ticket.baseline_run, ticket.candidate_run]
    for stage in series_stages(ticket):
        runs += [stage.baseline_run, stage.candidate_run]
    return runs


def looks_judged(ticket: ReleaseTicket) -> int:
    """How many stages of the current evidence the latest binding decision judged (0: none yet).

    A decision on these runs made before staging (no ``stages`` recorded) judged the first stage.
    """
    decision = (
        GateDecision.objects.filter(
            ticket=ticket,
            dry_run=False,
            baseline_run_id=ticket.baseline_run_id,
            candidate_run_id=ticket.candidate_run_id,
        )
        .order_by("-id")
        .values_list("stages", flat=True)
        .first()
    )
    if decision is None:
        return 0
    return int((decision or {}).get("count") or 1)


def _passed(run_id: int, task: str) -> dict[str, bool]:
    return dict(SampleRecord.objects.filter(run_id=run_id, task=task).values_list("sample_id", "passed"))


def _usable(run: EvaluationRun | None) -> bool:
    return run is not None and run.status == RunStatus.SUCCEEDED


def stage_sizes(policy: Policy, guardrails: Sequence[MetricRule], shipped: int) -> tuple[int, ...]:
    """Cumulative pairs at each of a task's looks under the policy's design (``sequential.stage_size``,
    sized at ``power_plan.discordance_default``), within the shipped suite and its held-out pool: what
    the judge looks at, and what the plan at filing shows."""
    return task_stage_sizes(
        policy.sequential,
        guardrails,
        shipped=shipped,
        pool=shipped + HELD_OUT_SIZE,
        discordance=policy.power_plan.discordance_default,
    )


def ticket_staged(ticket: ReleaseTicket, policy: Policy, tasks: Iterable[str]) -> dict[str, StagedTask]:
    """Per task with staged guardrails, their looks over the first stage and every later stage that
    evaluated the task, pooled by sample id.

    Empty when the policy judges one fixed stage. A task is left out when one of its stages has no
    paired outcome (a run that failed or a task that broke): the judge then reports that run's
    error, and the ticket needs evidence measured afresh.
    """
    rule = policy.sequential
    if not rule.enabled or ticket.baseline_run_id is None or ticket.candidate_run_id is None:
        return {}
    stages = series_stages(ticket)
    budget_spent = 1 + len(stages) - looks_judged(ticket) >= rule.stages_per_evaluation
    staged: dict[str, StagedTask] = {}
    for task in tasks:
        task_policy = policy.task(task)
        guardrails = staged_guardrails(task_policy) if task_policy else []
        if not guardrails:
            continue
        pairs = [(ticket.baseline_run, ticket.candidate_run)]
        pairs += [(s.baseline_run, s.candidate_run) for s in stages if task in s.tasks]
        if not all(_usable(base) and _usable(cand) for base, cand in pairs):
            continue
        outcomes: list[StageOutcomes] = [(_passed(b.pk, task), _passed(c.pk, task)) for b, c in pairs if b and c]
        looks = staged_looks(policy, task, guardrails, outcomes)
        if looks is not None:
            staged[task] = StagedTask(looks, budget_spent=budget_spent)
    return staged


def first_pair_staged(policy: Policy, answers: Mapping[str, StageOutcomes]) -> dict[str, StagedTask]:
    """Per task with staged guardrails, their looks at 1 over a ticket's first pair from ``answers``
    (per task, each side's pass/fail by sample id), before its runs have finished: what the worker's
    load checks judge with. Empty when the policy judges one fixed stage."""
    if not policy.sequential.enabled:
        return {}
    staged = {}
    for task, outcome in answers.items():
        task_policy = policy.task(task)
        guardrails = staged_guardrails(task_policy) if task_policy else []
        looks = staged_looks(policy, task, guardrails, [outcome]) if guardrails else None
        if looks is not None:
            staged[task] = StagedTask(looks)
    return staged


def stored_answers(baseline_run_id: int, candidate_run_id: int, tasks: Iterable[str]) -> dict[str, StageOutcomes]:
    """Per task, each side's stored pass/fail by sample id (baseline, candidate)."""
    return {task: (_passed(baseline_run_id, task), _passed(candidate_run_id, task)) for task in tasks}


def staged_looks(
    policy: Policy, task: str, guardrails: Sequence[MetricRule], outcomes: list[StageOutcomes]
) -> dict[str, StagedLooks] | None:
    """Per staged guardrail of ``task``, its looks over ``outcomes`` (each stage's pass/fail by
    sample id, baseline and candidate); None when a stage pairs no sample or the design has fewer
    looks than stages."""
    sizes = stage_sizes(policy, guardrails, len(get_suite(task).load_samples()))
    if not all(set(base) & set(cand) for base, cand in outcomes) or len(outcomes) > len(sizes):
        return None
    discordance = policy.power_plan.discordance_default
    return {g.metric: task_looks(policy.sequential, g, outcomes, sizes, discordance=discordance) for g in guardrails}
