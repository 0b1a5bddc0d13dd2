"""Write paths of the workers: recovering work a dead worker process left, and installing the schedules.

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
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from core.errors import DomainError
from evaluators import services as run_services
from evaluators.models import EvaluationAttempt, EvaluationRun, RunStatus
from evaluators.processes import kill_process_group, process_alive
from gates.services.evaluation import LOAD_CHECKS, enqueue_runs, enqueue_ticket_check, tickets_for_run
from ledger.services import ledger_append
from workers.schedules import SCHEDULES, Every

logger = logging.getLogger(__name__)


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
            logger.warning(
                "run %s: killed engine group %s of lost attempt %s: %s",
                run.pk,
                attempt.engine_pgid,
                attempt.number,
                killed,
            )
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
        ledger_append(
            kind="evaluation.error",
            subject_type="run",
            subject_id=run.pk,
            subject_name=run.backend.name,
            actor=None,
            payload={"reason": reason, "by": "sweeper"},
        )
        for ticket_id in tickets_for_run(run.pk):
            enqueue_ticket_check(ticket_id)
    return run


def worker_recover(*, nodename: str) -> list[int]:
    """On worker start: kill engines left by this worker's dead processes and re-queue their runs."""
    recovered = []
    orphans = EvaluationAttempt.objects.filter(
        status=RunStatus.RUNNING, run__status=RunStatus.RUNNING, worker__startswith=f"{nodename}:"
    ).select_related("run")
    for attempt in orphans:
        if not attempt_is_orphaned(attempt, nodename):
            continue
        if run_recover(run=attempt.run, reason=f"worker {attempt.worker} lost"):
            recovered.append(attempt.run_id)
    with transaction.atomic():
        enqueue_runs(recovered)
    return recovered


def run_execute_task(*, run_id: int, nodename: str, cancel_check: Any = None) -> EvaluationRun | None:
    """What the ``gpu`` task does with a run id: execute, take over an orphan, or return quietly.

    A ticket's first pair skips the load still to come when what it measured already rejects the
    candidate: its answers, or the loads measured so far (``gates.services.evaluation.LOAD_CHECKS``)."""
    run = EvaluationRun.objects.filter(pk=run_id).first()
    if run is None or run.is_finished:
        return run
    if run.status == RunStatus.RUNNING:
        attempt = run.attempts.filter(status=RunStatus.RUNNING).order_by("-number").first()
        if attempt is None or not attempt_is_orphaned(attempt, nodename):
            return run  # another live process has it; the sweeper watches its deadline
        if not run_recover(run=run, reason=f"worker {attempt.worker} lost"):
            return EvaluationRun.objects.get(pk=run_id)
    return run_services.run_execute(
        run_id=run_id, worker=worker_identity(nodename), cancel_check=cancel_check, load_checks=LOAD_CHECKS
    )


def schedules_install() -> list[str]:
    """Create or update the periodic tasks of ``workers.schedules.SCHEDULES`` in beat's tables; return their names."""
    with transaction.atomic():
        for item in SCHEDULES:
            fields: dict[str, object] = {
                "task": item.task,
                "queue": item.queue,
                "description": item.description,
                "enabled": True,
                "interval": None,
                "crontab": None,
            }
            if isinstance(item.when, Every):
                fields["interval"], _ = IntervalSchedule.objects.get_or_create(
                    every=item.when.seconds, period=IntervalSchedule.SECONDS
                )
            else:
                fields["crontab"], _ = CrontabSchedule.objects.get_or_create(
                    minute=item.when.minute,
                    hour=item.when.hour,
                    day_of_week=item.when.day_of_week,
                    day_of_month=item.when.day_of_month,
                    month_of_year=item.when.month_of_year,
                    timezone="UTC",
                )
            PeriodicTask.objects.update_or_create(name=item.name, defaults=fields)
    return [item.name for item in SCHEDULES]
