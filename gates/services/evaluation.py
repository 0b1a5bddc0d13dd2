"""Evaluation orchestration: fan a ticket out to its two runs, judge once both have finished.

Every function here is safe to call again with the same ids (a redelivered message, a sweep that
overlaps a task): state moves are compare-and-swap and "already done" returns quietly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core import queue
from core.errors import DomainError, NotAllowed
from core.roles import ADMIN, Actor, has_role, person
from evaluators import services as run_services
from evaluators.models import EvaluationRun, RunStatus, TaskResult
from gates.judge import TaskEvidence, evaluate
from gates.judge.decision import settled_rejecting
from gates.judge.mechanisms import NOT_EXERCISED
from gates.judge.staged import StagedTask, staged_guardrails
from gates.models import DecisionOutcome, EvaluationStage, GateDecision, IllegalTransition, ReleaseTicket, TicketStatus
from gates.policy.rules import Policy
from gates.selectors.calibrations import calibration_noise
from gates.selectors.evidence import stored_task_evidence
from gates.selectors.stages import (
    first_pair_staged,
    looks_judged,
    series_stages,
    stage_runs,
    stored_answers,
    ticket_staged,
)
from gates.services.decisions import decision_judge, decision_make
from gates.services.dispatch import enqueue_runs, enqueue_ticket_check, run_task_id
from gates.services.dispatch import run_enqueue as run_enqueue  # re-exported: callers send a run from here
from gates.services.notifications import notify
from gates.services.policy import gate_policy
from gates.services.stages import looks_summary, stage_request
from gates.services.tickets import ticket_submit, ticket_transition
from ledger.models import LedgerEntry
from ledger.services import ledger_append

# Statuses from which a ticket is evaluated: submitted, or evaluated again after needing evidence.
EVALUABLE = (TicketStatus.SUBMITTED, TicketStatus.NEEDS_EVIDENCE)


def ticket_tasks(ticket: ReleaseTicket) -> list[str]:
    """The task types a ticket is judged on: beneficiary tasks first, then risk tasks."""
    beneficiary = sorted(t.slug for t in ticket.beneficiary_tasks.all())
    risk = sorted(t.slug for t in ticket.risk_tasks.all() if t.slug not in beneficiary)
    return beneficiary + risk


def _require_owner_or_admin(ticket: ReleaseTicket, actor: Actor, what: str) -> None:
    user = person(actor)
    if user is None or (user.pk != ticket.owner_id and not has_role(user, ADMIN)):
        raise NotAllowed(f"only the ticket's owner or an admin may {what} it")


def evaluation_request(*, ticket: ReleaseTicket, actor: Actor) -> ReleaseTicket:
    """Submit a draft (when it is one) and ask for its evaluation; the fan-out happens on a worker.

    The request is persisted before anything is enqueued: if the broker is down, the ticket waits
    as ``submitted`` and the dispatch sweep picks it up once the broker is back.
    """
    _require_owner_or_admin(ticket, actor, "evaluate")
    if ticket.status == TicketStatus.DRAFT:
        ticket = ticket_submit(ticket=ticket, actor=actor)
    if ticket.status not in EVALUABLE:
        raise DomainError(f"ticket #{ticket.pk} is {ticket.status}; only submitted tickets are evaluated")
    ticket_id = ticket.pk
    with transaction.atomic():
        transaction.on_commit(lambda: queue.enqueue(queue.EVALUATE_TICKET, ticket_id), robust=True)
    return ticket


def _judged_runs(ticket: ReleaseTicket) -> set[int]:
    """Runs a binding decision of this ticket has already judged."""
    pairs = GateDecision.objects.filter(ticket=ticket, dry_run=False).values_list("baseline_run_id", "candidate_run_id")
    return {run_id for pair in pairs for run_id in pair}


def awaits_fresh_runs(ticket: ReleaseTicket) -> bool:
    """An evaluating ticket whose evidence a decision has judged already, every stage of it: its
    re-evaluation has fanned out neither fresh runs nor a further stage yet."""
    current = {ticket.baseline_run_id, ticket.candidate_run_id} - {None}
    if not current & _judged_runs(ticket):
        return False
    return looks_judged(ticket) >= 1 + len(series_stages(ticket))


# Claimed bottlenecks with a stress point of their own (evaluators.pipeline); a queueing claim is
# judged at the open-loop point every task gets.
STRESSED_BOTTLENECKS = ("kv_memory",)


def ticket_evaluate(*, ticket_id: int) -> ReleaseTicket | None:
    """Move a submitted ticket to evaluating and request its baseline and candidate runs.

    With ``OPTGATE_INTERLEAVED`` (the default) the two are a new interleaved pair, measured
    together on one worker (the baseline's deterministic quality outcomes may still be reused
    from a matching earlier run, its timing never is). Otherwise, as before:

    A finished or in-flight run with the same reuse key is reused (the ledger entry names it),
    except a run this ticket's decisions already judged: evaluating a ticket again (after
    *needs evidence*) measures both backends afresh, close together in time. New runs are
    enqueued on the ``gpu`` queue after commit. Returns None when the ticket is gone.
    """
    ticket = ReleaseTicket.objects.filter(pk=ticket_id).first()
    if ticket is None:
        return None
    if ticket.status in EVALUABLE:
        try:
            ticket = ticket_transition(ticket=ticket, action="start_evaluation", actor=None)
        except IllegalTransition:
            ticket.refresh_from_db()  # another delivery got there first
    if ticket.status != TicketStatus.EVALUATING:
        return ticket
    current = [ticket.baseline_run, ticket.candidate_run]
    judged = _judged_runs(ticket)
    measured = all(run is not None and run.status not in (RunStatus.ERROR, RunStatus.CANCELLED) for run in current)
    if measured and not awaits_fresh_runs(ticket):
        _enqueue_check_now(ticket.pk)  # fanned out already: a redelivery only re-checks
        return ticket
    if measured and _stage_again(ticket):
        return ReleaseTicket.objects.get(pk=ticket.pk)

    tasks = ticket_tasks(ticket)
    profile = dict(settings.OPTGATE_LOAD_PROFILE)
    if ticket.bottleneck in STRESSED_BOTTLENECKS and "stress" not in profile:
        # Only where the benefit is promised: the beneficiary tasks.
        profile["stress"] = ticket.bottleneck
        profile["stress_tasks"] = sorted(t.slug for t in ticket.beneficiary_tasks.all())
    if settings.OPTGATE_INTERLEAVED:
        # Both measured together in alternating blocks; the pair's one message goes with the candidate.
        baseline_run, candidate_run = run_services.pair_request(
            baseline=ticket.baseline, candidate=ticket.candidate, tasks=tasks, load_profile=profile
        )
        baseline_reused = candidate_reused = False
    else:
        baseline_run, baseline_reused = run_services.run_request(
            backend=ticket.baseline, tasks=tasks, load_profile=profile, exclude=judged
        )
        candidate_run, candidate_reused = run_services.run_request(
            backend=ticket.candidate, tasks=tasks, load_profile=profile, exclude=judged
        )
    with transaction.atomic(durable=True):
        moved = ReleaseTicket.objects.filter(pk=ticket.pk, status=TicketStatus.EVALUATING).update(
            baseline_run=baseline_run, candidate_run=candidate_run, updated_at=timezone.now()
        )
        if moved != 1:
            return ReleaseTicket.objects.get(pk=ticket.pk)
        ledger_append(
            kind="ticket.evaluation_requested",
            subject_type="ticket",
            subject_id=ticket.pk,
            subject_name=ticket.title,
            actor=None,
            payload={
                "tasks": tasks,
                "load_profile": profile,
                "baseline": {
                    "backend": ticket.baseline.name,
                    "run": baseline_run.pk,
                    "reused": baseline_reused,
                    "run_status": baseline_run.status,
                },
                "candidate": {
                    "backend": ticket.candidate.name,
                    "run": candidate_run.pk,
                    "reused": candidate_reused,
                    "run_status": candidate_run.status,
                },
                "judged_before": sorted(judged),
                "interleaved": bool(settings.OPTGATE_INTERLEAVED),
            },
        )
        # A reused run in flight already has its message; only new runs are sent (a pair's once).
        fresh = [
            run
            for run, reused in ((baseline_run, baseline_reused), (candidate_run, candidate_reused))
            if not reused and run.status == RunStatus.QUEUED and run.pair_side != "baseline"
        ]
        enqueue_runs(sorted({run.pk for run in fresh}))
        enqueue_ticket_check(ticket.pk)
    ticket.refresh_from_db()
    return ticket


def _stage_again(ticket: ReleaseTicket) -> bool:
    """Evaluated again after *needs evidence*: add a stage to the same paired evidence when the
    policy stages and a task's design has looks left (not settled; futility does not bind), and
    nothing in the evidence broke (a run or task error is measured afresh, as before).

    True when a stage was asked for (or another delivery asked for it first: then it re-checks).
    """
    policy = gate_policy()
    rule = policy.sequential
    stages = series_stages(ticket)
    if not rule.enabled or 1 + len(stages) >= rule.looks:
        return False
    runs = [run for run in stage_runs(ticket) if run is not None]
    if any(run.status != RunStatus.SUCCEEDED for run in runs):
        return False
    if TaskResult.objects.filter(run__in=runs).exclude(error="").exists():
        return False
    tasks = ticket_tasks(ticket)
    staged = ticket_staged(ticket, policy, tasks)
    planned = [t for t in tasks if (task_policy := policy.task(t)) is not None and staged_guardrails(task_policy)]
    if not staged or any(task not in staged for task in planned):
        return False
    if not _only_staged_questions_open(ticket, staged):
        return False
    again = [task for task, item in staged.items() if item.may_continue]
    if not again:
        return False
    if stage_request(ticket=ticket, tasks=again, staged=staged) is None:
        _enqueue_check_now(ticket.pk)
    return True


def _only_staged_questions_open(ticket: ReleaseTicket, staged: dict[str, StagedTask]) -> bool:
    """The latest decision left open only staged pass-rate guardrails: more held-out samples can
    settle it. Anything else open (a latency check, a missing task) needs both backends measured
    afresh, which a quality-only stage would not do, except a claimed bottleneck the workload never
    met: the same workload measured afresh would not meet it either, so it stays open beside the
    stage."""
    decision = GateDecision.objects.filter(ticket=ticket, dry_run=False).order_by("-id").first()
    if decision is None or decision.outcome != DecisionOutcome.NEEDS_EVIDENCE:
        return False
    for task, verdict in (decision.verdicts or {}).items():
        for metric in verdict.get("metrics") or []:
            if metric.get("kind") == "tradeable" or metric.get("status") not in ("inconclusive", "error"):
                continue
            if metric.get("status") == "inconclusive" and metric.get("test") == NOT_EXERCISED:
                continue
            item = staged.get(task)
            if metric.get("status") == "error" or item is None or metric.get("metric") not in item.guardrails:
                return False
    return True


def _next_stage_tasks(ticket: ReleaseTicket, policy: Policy) -> tuple[list[str], dict[str, StagedTask]]:
    """The tasks whose last look asks for another stage, when this evaluation may take one.

    None when the design's looks or this evaluation's stage budget are spent, a look already
    rejects a guardrail that decides the outcome on its own (a beneficiary task's, or a critical
    one's), or the evidence already rejects the candidate on something no stage measures again (a
    beneficiary's promised speed-up that confidently failed, a critical latency veto): the ticket
    is judged then, and the tasks still open end inconclusive with their estimate.
    """
    rule = policy.sequential
    if not rule.enabled:
        return [], {}
    stages = 1 + len(series_stages(ticket))
    staged = ticket_staged(ticket, policy, ticket_tasks(ticket))
    if stages >= rule.looks or not staged or any(item.budget_spent for item in staged.values()):
        return [], staged
    if _deciding_rejections(ticket, policy, staged):
        return [], staged
    more = [task for task, item in staged.items() if item.continuing]
    if more and settled_rejecting(decision_judge(ticket=ticket, policy=policy).decision, _still_open(staged)):
        return [], staged
    return more, staged


def _still_open(staged: Mapping[str, StagedTask]) -> dict[str, list[str]]:
    """Per task, the staged guardrails whose last look asks for another stage."""
    return {
        task: [metric for metric, looks in item.guardrails.items() if looks.last.outcome == "continue"]
        for task, item in staged.items()
    }


def _deciding_rejections(ticket: ReleaseTicket, policy: Policy, staged: Mapping[str, StagedTask]) -> list[str]:
    """Each staged guardrail whose last look rejects and that decides the outcome on its own: a
    beneficiary task's, a critical task's under the ticket's mechanisms, or a critical rule's
    (``gates.judge.decision``: each of them rejects the ticket whatever else is measured)."""
    beneficiary = {t.slug for t in ticket.beneficiary_tasks.all()}
    critical = policy.critical_tasks_for(list(ticket.mechanisms))
    found = []
    for task, item in staged.items():
        task_policy = policy.task(task)
        rules = {r.metric: r for r in (task_policy.guardrails if task_policy else ())}
        for metric, looks in item.guardrails.items():
            deciding = task in beneficiary or task in critical or rules[metric].critical
            if looks.last.outcome == "reject" and deciding:
                found.append(f"{task}'s {metric}")
    return found


def load_not_needed(run_id: int, answers: Mapping[str, tuple[dict[str, bool], dict[str, bool]]]) -> str | None:
    """The worker's question once a ticket's first pair has every task's answers, before any load
    (``evaluators.services.LoadChecks.answers``): why the load need not run, when those answers
    already reject the candidate (a staged guardrail that decides on its own rejects at look 1,
    which is where ``ticket_check`` judges the ticket instead of asking for a stage), so no timing
    could change the outcome. None otherwise, and for a run that is not an evaluating ticket's first
    pair.

    The ledger records the skip with the looks behind it.
    """
    ticket = ReleaseTicket.objects.filter(candidate_run_id=run_id, status=TicketStatus.EVALUATING).first()
    if ticket is None:
        return None
    policy = gate_policy()
    staged = first_pair_staged(policy, answers)
    rejected = _deciding_rejections(ticket, policy, staged)
    if not rejected:
        return None
    reason = (
        f"not measured: {', '.join(rejected)} rejected the candidate at look 1 of its answers, "
        "so no timing could change the outcome"
    )
    _record_load_skipped(ticket, run_id, reason, {"looks": looks_summary(staged)})
    return reason


def load_rest_not_needed(run_id: int, measured: Sequence[str]) -> str | None:
    """The worker's question after each task's load of a ticket's first pair is stored, while other
    tasks' loads remain (``evaluators.services.LoadChecks.loads``): why the rest need not run, when
    the tasks ``measured`` so far already reject the candidate on findings no later stage could
    undo (``settled_rejecting``: a beneficiary's promised benefit that confidently failed, a broken
    guardrail on a beneficiary task, a critical veto). The decision rejects on them whatever the
    other tasks show. None otherwise, and for a run that is not an evaluating ticket's first pair.

    The tasks are judged as ``decision_judge`` judges them (the same policy, seed, noise floors and
    looks at 1), from what both runs have stored so far. The ledger records the skip with the
    failing checks behind it.
    """
    ticket = (
        ReleaseTicket.objects.select_related("baseline", "baseline_run", "candidate_run")
        .filter(candidate_run_id=run_id, status=TicketStatus.EVALUATING)
        .first()
    )
    if ticket is None or ticket.baseline_run is None or ticket.candidate_run is None:
        return None
    policy = gate_policy()
    base_run, cand_run = ticket.baseline_run, ticket.candidate_run
    staged = first_pair_staged(policy, stored_answers(base_run.pk, cand_run.pk, measured))
    decision = evaluate(
        policy,
        [TaskEvidence(t, stored_task_evidence(base_run, t), stored_task_evidence(cand_run, t)) for t in measured],
        mechanisms=list(ticket.mechanisms),
        bottleneck=ticket.bottleneck or None,
        beneficiary_tasks=[t.slug for t in ticket.beneficiary_tasks.all()],
        risk_tasks=[t.slug for t in ticket.risk_tasks.all()],
        seed=policy.seed,
        noise=calibration_noise(ticket.baseline),
        staged=staged,
    )
    failing = dict.fromkeys((m.task, m.metric) for m in settled_rejecting(decision, _still_open(staged)))
    if not failing:
        return None
    by_task: dict[str, list[str]] = {}
    for task, metric in failing:
        by_task.setdefault(task, []).append(metric)
    checks = "; ".join(f"{task}'s {', '.join(metrics)}" for task, metrics in by_task.items())
    rejecting = [f"{task}'s {metric}" for task, metric in failing]
    reason = (
        f"not measured: {checks} rejected the candidate on the load of {', '.join(measured)}, "
        "so no timing of this task could change the outcome"
    )
    _record_load_skipped(ticket, run_id, reason, {"measured": list(measured), "rejected_by": rejecting})
    return reason


def _record_load_skipped(ticket: ReleaseTicket, run_id: int, reason: str, why: dict[str, Any]) -> None:
    """A ``ticket.load_skipped`` ledger entry, once per candidate run: a worker that retries the
    pair after the check asks again and gets the same answer."""
    with transaction.atomic():
        if LedgerEntry.objects.filter(
            kind="ticket.load_skipped", subject_type="ticket", subject_id=ticket.pk, payload__candidate_run=run_id
        ).exists():
            return
        ledger_append(
            kind="ticket.load_skipped",
            subject_type="ticket",
            subject_id=ticket.pk,
            subject_name=ticket.title,
            actor=None,
            payload={"candidate_run": run_id, "reason": reason, **why},
        )


# What the ``gpu`` task passes to a pair's worker: the gate's two questions on the load still to come.
LOAD_CHECKS = run_services.LoadChecks(answers=load_not_needed, loads=load_rest_not_needed)


def _enqueue_check_now(ticket_id: int) -> None:
    with transaction.atomic():
        enqueue_ticket_check(ticket_id)


def ticket_check(*, ticket_id: int) -> str | None:
    """Judge the ticket once both of its runs have finished; the database decides, not the message.

    Returns the decision's outcome when this call judged, else None (not ready, already judged,
    or a run was cancelled and waits for a new evaluation request).
    """
    ticket = (
        ReleaseTicket.objects.select_related("baseline_run", "candidate_run", "baseline", "candidate", "owner")
        .filter(pk=ticket_id)
        .first()
    )
    if ticket is None or ticket.status != TicketStatus.EVALUATING:
        return None
    runs = stage_runs(ticket)
    if any(run is None or not run.is_finished for run in runs):
        return None
    if any(run is not None and run.status == RunStatus.CANCELLED for run in runs):
        return None
    if awaits_fresh_runs(ticket):
        return None  # evaluated again: the old runs were judged already, the new ones are not yet asked for
    # Staged: the tasks whose look continues get the next stage; the ticket is judged once none does.
    more, staged = _next_stage_tasks(ticket, gate_policy())
    if more:
        stage_request(ticket=ticket, tasks=more, staged=staged)
        return None
    try:
        outcome = str(decision_make(ticket=ticket, actor=None).outcome)
    except DomainError:
        return None  # a concurrent check judged first (illegal transitions are domain errors)
    with transaction.atomic():
        notify(
            event="ticket.evaluated",
            subject=f"Ticket #{ticket.pk} evaluated: {outcome}",
            text=f"{ticket.title}: the gate's outcome is {outcome}.",
            users=[ticket.owner],
            ticket=ticket,
        )
    return outcome


def tickets_for_run(run_id: int) -> list[int]:
    """Tickets still evaluating that use ``run_id`` as baseline or candidate evidence, of any stage."""
    in_stage = EvaluationStage.objects.filter(Q(baseline_run_id=run_id) | Q(candidate_run_id=run_id))
    uses_run = Q(baseline_run_id=run_id) | Q(candidate_run_id=run_id) | Q(pk__in=in_stage.values("ticket_id"))
    return list(ReleaseTicket.objects.filter(uses_run, status=TicketStatus.EVALUATING).values_list("pk", flat=True))


def evaluation_cancel(*, ticket: ReleaseTicket, actor: Actor) -> list[EvaluationRun]:
    """Cancel the ticket's unfinished runs: queued ones at once, running ones stop and tear down.

    A running run notices ``cancel_requested`` between tasks; the worker's task is also revoked with
    SIGTERM, which the run turns into a cancellation that still tears the engine down.
    """
    _require_owner_or_admin(ticket, actor, "cancel the evaluation of")
    cancelled = []
    for run in (ticket.baseline_run, ticket.candidate_run):
        if run is None or run.is_finished:
            continue
        # A reused run may serve other tickets too: cancel it only when no other ticket needs it.
        others = [pk for pk in tickets_for_run(run.pk) if pk != ticket.pk]
        if others:
            continue
        run = run_services.run_cancel(run_id=run.pk)
        attempt = run.attempts.filter(status=RunStatus.RUNNING).order_by("-number").first()
        if attempt is not None and attempt.worker:
            queue.revoke(run_task_id(run.pk, attempt.number), signal="SIGTERM")
        cancelled.append(run)
    with transaction.atomic(durable=True):
        ledger_append(
            kind="ticket.evaluation_cancelled",
            subject_type="ticket",
            subject_id=ticket.pk,
            subject_name=ticket.title,
            actor=person(actor),
            payload={"runs": [run.pk for run in cancelled]},
        )
    return cancelled
