"""Evaluation orchestration: fan a ticket out to its two runs, recover lost work, judge once.

Every function here is safe to call again with the same ids (a redelivered message, a sweep that
overlaps a task): state moves are compare-and-swap and "already done" returns quietly.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from evaluators import services as run_services
from evaluators.engine import kill_process_group, process_alive
from evaluators.models import EvaluationAttempt, EvaluationRun, RunStatus
from gates import services as gate_services
from gates.models import GateDecision, IllegalTransition, ReleaseTicket, TicketStatus
from ledger.services import ledger_append
from optgate.errors import DomainError, NotAllowed
from optgate.roles import ADMIN, Actor, has_role, person

logger = logging.getLogger(__name__)


def ticket_tasks(ticket: ReleaseTicket) -> list[str]:
    """The task types a ticket is judged on: beneficiary tasks first, then risk tasks."""
    beneficiary = sorted(t.slug for t in ticket.beneficiary_tasks.all())
    risk = sorted(t.slug for t in ticket.risk_tasks.all() if t.slug not in beneficiary)
    return beneficiary + risk


def run_task_id(run_id: int, attempt_number: int) -> str:
    """The Celery task id of a run's n-th attempt: duplicates share it, a cancel can revoke it."""
    return f"evaluate-run-{run_id}-a{attempt_number}"


def run_enqueue(run_id: int) -> None:
    """Send a queued run to the ``gpu`` queue (call after commit)."""
    from workers.tasks import evaluate_run

    attempts = EvaluationAttempt.objects.filter(run_id=run_id).count()
    evaluate_run.apply_async((run_id,), task_id=run_task_id(run_id, attempts + 1))
    # Only now is the message the broker's: a run still without ``sent_at`` is re-sent by the sweeper.
    EvaluationRun.objects.filter(pk=run_id, status=RunStatus.QUEUED, sent_at__isnull=True).update(
        sent_at=timezone.now()
    )


def _enqueue_runs(run_ids: list[int]) -> None:
    for run_id in run_ids:
        # robust: a broker outage must not fail the request; the sweeper re-sends queued runs.
        transaction.on_commit(lambda run_id=run_id: run_enqueue(run_id), robust=True)  # type: ignore[misc]


def _enqueue_check(ticket_id: int) -> None:
    from workers.tasks import check_ticket

    transaction.on_commit(lambda: check_ticket.delay(ticket_id), robust=True)


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
        ticket = gate_services.ticket_submit(ticket=ticket, actor=actor)
    if ticket.status not in (TicketStatus.SUBMITTED, TicketStatus.NEEDS_EVIDENCE):
        raise DomainError(f"ticket #{ticket.pk} is {ticket.status}; only submitted tickets are evaluated")
    from workers.tasks import evaluate_ticket

    ticket_id = ticket.pk
    with transaction.atomic():
        transaction.on_commit(lambda: evaluate_ticket.delay(ticket_id), robust=True)
    return ticket


def _judged_runs(ticket: ReleaseTicket) -> set[int]:
    """Runs a binding decision of this ticket has already judged."""
    pairs = GateDecision.objects.filter(ticket=ticket, dry_run=False).values_list("baseline_run_id", "candidate_run_id")
    return {run_id for pair in pairs for run_id in pair}


def awaits_fresh_runs(ticket: ReleaseTicket) -> bool:
    """An evaluating ticket still holding runs it was judged on: its re-evaluation has not fanned out."""
    current = {ticket.baseline_run_id, ticket.candidate_run_id} - {None}
    return bool(current & _judged_runs(ticket))


def ticket_evaluate(*, ticket_id: int) -> ReleaseTicket | None:
    """Move a submitted ticket to evaluating and request its baseline and candidate runs.

    A finished or in-flight run with the same reuse key is reused (the ledger entry names it),
    except a run this ticket's decisions already judged: evaluating a ticket again (after
    *needs evidence*) measures both backends afresh, close together in time. New runs are
    enqueued on the ``gpu`` queue after commit. Returns None when the ticket is gone.
    """
    ticket = ReleaseTicket.objects.filter(pk=ticket_id).first()
    if ticket is None:
        return None
    if ticket.status in (TicketStatus.SUBMITTED, TicketStatus.NEEDS_EVIDENCE):
        try:
            ticket = gate_services.ticket_transition(ticket=ticket, action="start_evaluation", actor=None)
        except IllegalTransition:
            ticket.refresh_from_db()  # another delivery got there first
    if ticket.status != TicketStatus.EVALUATING:
        return ticket
    current = [ticket.baseline_run, ticket.candidate_run]
    judged = _judged_runs(ticket)
    if all(run is not None and run.status not in (RunStatus.ERROR, RunStatus.CANCELLED) and run.pk not in judged
           for run in current):  # fmt: skip
        _enqueue_check_now(ticket.pk)  # fanned out already: a redelivery only re-checks
        return ticket

    tasks = ticket_tasks(ticket)
    profile = dict(settings.OPTGATE_LOAD_PROFILE)
    baseline_run, baseline_reused = run_services.run_request(backend=ticket.baseline, tasks=tasks,
                                                             load_profile=profile, exclude=judged)  # fmt: skip
    candidate_run, candidate_reused = run_services.run_request(backend=ticket.candidate, tasks=tasks,
                                                               load_profile=profile, exclude=judged)  # fmt: skip
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
                "baseline": {"backend": ticket.baseline.name, "run": baseline_run.pk, "reused": baseline_reused,
                             "run_status": baseline_run.status},
                "candidate": {"backend": ticket.candidate.name, "run": candidate_run.pk, "reused": candidate_reused,
                              "run_status": candidate_run.status},
                "judged_before": sorted(judged),
            },
        )  # fmt: skip
        # A reused run in flight already has its message; only new runs are sent.
        fresh = [run for run, reused in ((baseline_run, baseline_reused), (candidate_run, candidate_reused))
                 if not reused and run.status == RunStatus.QUEUED]  # fmt: skip
        _enqueue_runs(sorted({run.pk for run in fresh}))
        _enqueue_check(ticket.pk)
    ticket.refresh_from_db()
    return ticket


def _enqueue_check_now(ticket_id: int) -> None:
    with transaction.atomic():
        _enqueue_check(ticket_id)


def _decision_make(ticket: ReleaseTicket) -> str:
    """Judge through the gates app's decision service (stores a GateDecision and moves the ticket)."""
    from gates.decisions import decision_make

    decision = decision_make(ticket=ticket, actor=None)
    return str(decision.outcome)


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
    runs = [ticket.baseline_run, ticket.candidate_run]
    if any(run is None or not run.is_finished for run in runs):
        return None
    if any(run is not None and run.status == RunStatus.CANCELLED for run in runs):
        return None
    if awaits_fresh_runs(ticket):
        return None  # evaluated again: the old runs were judged already, the new ones are not yet asked for
    try:
        outcome = _decision_make(ticket)
    except DomainError:
        return None  # a concurrent check judged first (illegal transitions are domain errors)
    from workers.notifications import notify

    with transaction.atomic():
        notify(event="ticket.evaluated", subject=f"Ticket #{ticket.pk} evaluated: {outcome}",
               text=f"{ticket.title}: the gate's outcome is {outcome}.", users=[ticket.owner],
               ticket=ticket)  # fmt: skip
    return outcome


def tickets_for_run(run_id: int) -> list[int]:
    """Tickets still evaluating that use ``run_id`` as baseline or candidate evidence."""
    from django.db.models import Q

    uses_run = Q(baseline_run_id=run_id) | Q(candidate_run_id=run_id)
    return list(ReleaseTicket.objects.filter(uses_run, status=TicketStatus.EVALUATING).values_list("pk", flat=True))


def evaluation_cancel(*, ticket: ReleaseTicket, actor: Actor) -> list[EvaluationRun]:
    """Cancel the ticket's unfinished runs: queued ones at once, running ones stop and tear down.

    A running run notices ``cancel_requested`` between tasks; the worker's task is also revoked with
    SIGTERM, which the run turns into a cancellation that still tears the engine down.
    """
    from optgate.celery import app

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
            app.control.revoke(run_task_id(run.pk, attempt.number), terminate=True, signal="SIGTERM")
        cancelled.append(run)
    with transaction.atomic(durable=True):
        ledger_append(kind="ticket.evaluation_cancelled", subject_type="ticket", subject_id=ticket.pk,
                      subject_name=ticket.title, actor=person(actor),
                      payload={"runs": [run.pk for run in cancelled]})  # fmt: skip
    return cancelled


# --- Worker identity and lost work ------------------------------------------------------------


def worker_identity(nodename: str, pid: int | None = None) -> str:
    """How an attempt names the process executing it: ``<celery nodename>:<pid>``."""
    return f"{nodename}:{pid if pid is not None else os.getpid()}"


def _on_this_host(worker: str) -> bool:
    nodename = worker.rpartition(":")[0]
    return nodename.rpartition("@")[2] == socket.gethostname()


def attempt_is_orphaned(attempt: EvaluationAttempt, nodename: str) -> bool:
    """True when ``attempt`` ran in a process of worker ``nodename`` that no longer runs it.

    Only attempts of this worker (this host) are judged: another worker's process ids mean nothing here.
    """
    name, _, pid = attempt.worker.rpartition(":")
    if name != nodename or not pid.isdigit():
        return False
    return int(pid) == os.getpid() or not process_alive(int(pid))


def run_recover(*, run: EvaluationRun, reason: str) -> bool:
    """Kill an orphaned attempt's engine process group and put the run back in the queue.

    Returns True when this call re-queued the run (False: it moved on meanwhile).
    """
    for attempt in run.attempts.filter(status=RunStatus.RUNNING):
        # Process group ids mean something only on the host that recorded them.
        if attempt.engine_pgid and _on_this_host(attempt.worker):
            killed = kill_process_group(attempt.engine_pgid)
            logger.warning("run %s: killed engine group %s of lost attempt %s: %s", run.pk, attempt.engine_pgid,
                           attempt.number, killed)  # fmt: skip
    attempts = run.attempts.count()
    try:
        if attempts >= settings.OPTGATE_RUN_MAX_ATTEMPTS:
            run_fail(run_id=run.pk, reason=f"{reason}; gave up after {attempts} attempts")
            return False
        run_services.run_retry(run_id=run.pk, reason=reason)
    except DomainError:
        return False
    return True


def run_fail(*, run_id: int, reason: str) -> EvaluationRun:
    """End a stuck run in ``error`` with ``reason`` (the sweeper's verdict on work that is lost)."""
    with transaction.atomic(durable=True):
        run = EvaluationRun.objects.select_for_update().get(pk=run_id)
        if run.is_finished:
            return run
        run.move(RunStatus.ERROR, error=reason, phase="error")
        EvaluationAttempt.objects.filter(run=run, status=RunStatus.RUNNING).update(
            status=RunStatus.ERROR, error=reason, finished_at=timezone.now()
        )
        ledger_append(kind="evaluation.error", subject_type="run", subject_id=run.pk, subject_name=run.backend.name,
                      actor=None, payload={"reason": reason, "by": "sweeper"})  # fmt: skip
        for ticket_id in tickets_for_run(run.pk):
            _enqueue_check(ticket_id)
    return run


def worker_recover(*, nodename: str) -> list[int]:
    """On worker start: kill engines left by this worker's dead processes and re-queue their runs."""
    recovered = []
    orphans = EvaluationAttempt.objects.filter(status=RunStatus.RUNNING, run__status=RunStatus.RUNNING,
                                               worker__startswith=f"{nodename}:").select_related("run")  # fmt: skip
    for attempt in orphans:
        if not attempt_is_orphaned(attempt, nodename):
            continue
        if run_recover(run=attempt.run, reason=f"worker {attempt.worker} lost"):
            recovered.append(attempt.run_id)
    with transaction.atomic():
        _enqueue_runs(recovered)
    return recovered


def run_execute_task(*, run_id: int, nodename: str, cancel_check: Any = None) -> EvaluationRun | None:
    """What the ``gpu`` task does with a run id: execute, take over an orphan, or return quietly."""
    run = EvaluationRun.objects.filter(pk=run_id).first()
    if run is None or run.is_finished:
        return run
    if run.status == RunStatus.RUNNING:
        attempt = run.attempts.filter(status=RunStatus.RUNNING).order_by("-number").first()
        if attempt is None or not attempt_is_orphaned(attempt, nodename):
            return run  # another live process has it; the sweeper watches its deadline
        if not run_recover(run=run, reason=f"worker {attempt.worker} lost"):
            return EvaluationRun.objects.get(pk=run_id)
    return run_services.run_execute(run_id=run_id, worker=worker_identity(nodename), cancel_check=cancel_check)
