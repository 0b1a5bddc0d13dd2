"""The sweeper: the database is the record of work, so lost messages and dead workers are found here.

- a queued run whose message the broker never accepted (published while the broker was down) is
  sent again once it has waited ``SEND_GRACE``;
- a queued run past its deadline (its message was lost inside the broker) is sent again with a new
  deadline;
- a running run past its deadline is re-queued (another attempt) or, after the last attempt,
  failed with the reason;
- a submitted ticket nobody fanned out is dispatched; an evaluating ticket whose runs are all
  finished is checked (judged) again;
- a backend whose engine-argument check is still pending well after registration (its message
  was lost) is sent to the check again;
- an A/A calibration whose two runs have finished gets its noise floors;
- an engine a worker process kept warm (evaluators.warm) whose process is gone, or whose idle
  timeout passed long ago, is killed (on this host).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from backends.models import ArgsCheckStatus, EngineArgsCheck
from backends.vllm_check import CHECK_TIMEOUT_S
from core import queue
from evaluators import services as run_services
from evaluators import warm
from evaluators.models import FINISHED_STATUSES, EvaluationRun, RunStatus
from gates.models import Calibration, CalibrationStatus, ReleaseTicket, TicketStatus
from gates.services.calibration import calibration_finish
from gates.services.evaluation import awaits_fresh_runs, run_enqueue
from workers import services

logger = logging.getLogger(__name__)

# A submitted ticket is left alone this long: the enqueue after commit normally takes it first.
DISPATCH_GRACE = timedelta(seconds=30)
# Likewise a queued run whose message has not reached the broker yet.
SEND_GRACE = timedelta(seconds=60)
# An engine-argument check normally ends within vLLM's own timeout; one pending longer was lost.
ARGS_CHECK_GRACE = timedelta(seconds=CHECK_TIMEOUT_S + 120)


@dataclass
class SweepReport:
    resent: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    dispatched: list[int] = field(default_factory=list)
    checked: list[int] = field(default_factory=list)
    args_checks: list[int] = field(default_factory=list)
    calibrated: list[int] = field(default_factory=list)
    parked_killed: list[int] = field(default_factory=list)


def sweep(*, now: datetime | None = None) -> SweepReport:
    """One pass over stuck runs and tickets; safe to run concurrently with workers and itself."""
    now = now or timezone.now()
    report = SweepReport()
    new_deadline = now + timedelta(seconds=settings.OPTGATE_RUN_TIMEOUT_S)
    unsent = EvaluationRun.objects.filter(
        status=RunStatus.QUEUED, sent_at__isnull=True, queued_at__lte=now - SEND_GRACE
    )
    for run in unsent:
        if run_services.run_claim_unsent(run=run, now=now, deadline=new_deadline):
            report.resent.append(run.pk)
    for run in EvaluationRun.objects.filter(status=RunStatus.QUEUED, deadline_at__lte=now).exclude(
        pk__in=report.resent
    ):
        if run_services.run_claim_overdue(run=run, deadline=new_deadline):
            report.resent.append(run.pk)
    for run in EvaluationRun.objects.filter(status=RunStatus.RUNNING, deadline_at__lte=now).select_related("backend"):
        reason = f"stuck past its deadline ({run.deadline_at:%Y-%m-%d %H:%M:%S} UTC) in phase {run.phase!r}"
        if run.attempts.count() >= settings.OPTGATE_RUN_MAX_ATTEMPTS:
            services.run_fail(run_id=run.pk, reason=reason + "; no attempts left")
            report.failed.append(run.pk)
        elif services.run_recover(run=run, reason=reason):
            report.requeued.append(run.pk)
    with transaction.atomic():
        for run_id in report.resent + report.requeued:
            transaction.on_commit(lambda run_id=run_id: run_enqueue(run_id), robust=True)  # type: ignore[misc]
    waiting = ReleaseTicket.objects.filter(status=TicketStatus.SUBMITTED, submitted_at__lte=now - DISPATCH_GRACE)
    for ticket_id in waiting.values_list("pk", flat=True):
        queue.enqueue(queue.EVALUATE_TICKET, ticket_id)
        report.dispatched.append(ticket_id)
    evaluating = ReleaseTicket.objects.filter(status=TicketStatus.EVALUATING).select_related(
        "baseline_run", "candidate_run"
    )
    for ticket in evaluating:
        runs = [ticket.baseline_run, ticket.candidate_run]
        if any(run is None for run in runs) or awaits_fresh_runs(ticket):
            queue.enqueue(queue.EVALUATE_TICKET, ticket.pk)  # the fan-out was interrupted half-way
            report.dispatched.append(ticket.pk)
        elif all(run is not None and run.is_finished for run in runs):
            queue.enqueue(queue.CHECK_TICKET, ticket.pk)
            report.checked.append(ticket.pk)
    # A calibration whose pair ended while its worker's hook did not run gets its floors here.
    for calibration_id in Calibration.objects.filter(
        status=CalibrationStatus.MEASURING,
        baseline_run__status__in=FINISHED_STATUSES,
        candidate_run__status__in=FINISHED_STATUSES,
    ).values_list("pk", flat=True):
        calibration_finish(calibration_id=calibration_id)
        report.calibrated.append(calibration_id)
    lost_checks = EngineArgsCheck.objects.filter(
        status=ArgsCheckStatus.PENDING, created_at__lte=now - ARGS_CHECK_GRACE
    ).values_list("backend_id", flat=True)
    for backend_id in lost_checks:
        queue.enqueue(queue.CHECK_BACKEND_ARGS, backend_id)  # the check returns quietly once done
        report.args_checks.append(backend_id)
    report.parked_killed = warm.reap(now=now)
    if any(
        (
            report.resent,
            report.requeued,
            report.failed,
            report.dispatched,
            report.args_checks,
            report.calibrated,
            report.parked_killed,
        )
    ):
        logger.info("sweep: %s", report)
    return report
