"""Sending work to the workers once the transaction that asked for it has committed.

Shared by the evaluation orchestration and the staged evaluation, which both ask for runs.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core import queue
from evaluators.models import EvaluationAttempt, EvaluationRun, RunStatus


def run_task_id(run_id: int, attempt_number: int) -> str:
    """The Celery task id of a run's n-th attempt: duplicates share it, a cancel can revoke it."""
    return f"evaluate-run-{run_id}-a{attempt_number}"


def run_enqueue(run_id: int) -> None:
    """Send a queued run to the ``gpu`` queue (call after commit)."""
    attempts = EvaluationAttempt.objects.filter(run_id=run_id).count()
    queue.enqueue(queue.EVALUATE_RUN, run_id, task_id=run_task_id(run_id, attempts + 1))
    # Only now is the message the broker's: a run still without ``sent_at`` is re-sent by the sweeper.
    # One message carries an interleaved pair, so it counts as sent for both runs.
    pair = Q(pk=run_id) | Q(paired_run_id=run_id)
    EvaluationRun.objects.filter(pair, status=RunStatus.QUEUED, sent_at__isnull=True).update(sent_at=timezone.now())


def enqueue_runs(run_ids: list[int]) -> None:
    """Send each run after the current transaction commits."""
    for run_id in run_ids:
        # robust: a broker outage must not fail the request; the sweeper re-sends queued runs.
        transaction.on_commit(lambda run_id=run_id: run_enqueue(run_id), robust=True)  # type: ignore[misc]


def enqueue_ticket_check(ticket_id: int) -> None:
    """Ask for the ticket's completion check after the current transaction commits."""
    transaction.on_commit(lambda: queue.enqueue(queue.CHECK_TICKET, ticket_id), robust=True)
