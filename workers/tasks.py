"""Celery tasks: thin wrappers that take ids, load rows and call services.

Every task is idempotent (a redelivered or duplicated message is harmless), acknowledged late and
rejected back to the queue when its worker dies, and has explicit names and time limits. Only
transient causes are retried.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

from celery import shared_task
from celery.signals import worker_process_init, worker_process_shutdown, worker_ready, worker_shutdown
from django.conf import settings
from django.db import OperationalError, close_old_connections

from backends.services import backend_args_check
from backends.vllm_check import CHECK_TIMEOUT_S
from core import queue
from evaluators import warm
from gates.services import calibration, canary, evaluation, github, reviews
from gates.services.notifications import TransientDeliveryError, notification_deliver
from ledger import checkpoints
from workers import services, sweeper

logger = logging.getLogger(__name__)

COMMON: dict[str, Any] = {"acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}
# The database may blip (failover, restart): that is worth a retry; a bug is not.
TRANSIENT = (OperationalError,)


@shared_task(
    name=queue.EVALUATE_RUN,
    bind=True,
    **COMMON,
    soft_time_limit=settings.OPTGATE_RUN_TIMEOUT_S + 60,
    time_limit=settings.OPTGATE_RUN_TIMEOUT_S + 180,
    autoretry_for=TRANSIENT,
    retry_backoff=10,
    max_retries=5,
)
def evaluate_run(self: Any, run_id: int) -> None:
    """Execute one evaluation run on this GPU worker, then ask its tickets to check completion and
    compute the noise floors of an A/A calibration it measured."""
    run = services.run_execute_task(run_id=run_id, nodename=self.request.hostname or "celery@localhost")
    if run is not None and run.is_finished:
        for ticket_id in evaluation.tickets_for_run(run_id):
            check_ticket.delay(ticket_id)
        calibration.calibrations_finish_for_run(run_id=run_id)


@shared_task(
    name=queue.EVALUATE_TICKET,
    **COMMON,
    soft_time_limit=120,
    time_limit=180,
    autoretry_for=TRANSIENT,
    retry_backoff=5,
    max_retries=5,
)
def evaluate_ticket(ticket_id: int) -> None:
    """Fan a submitted ticket out to its baseline and candidate runs (or reuse them)."""
    evaluation.ticket_evaluate(ticket_id=ticket_id)


@shared_task(
    name=queue.CHECK_TICKET,
    **COMMON,
    soft_time_limit=600,
    time_limit=660,
    autoretry_for=TRANSIENT,
    retry_backoff=5,
    max_retries=5,
)
def check_ticket(ticket_id: int) -> None:
    """Judge the ticket when both runs have finished (the database decides, not this message)."""
    evaluation.ticket_check(ticket_id=ticket_id)


@shared_task(
    name=queue.DELIVER_NOTIFICATION,
    **COMMON,
    soft_time_limit=60,
    time_limit=90,
    autoretry_for=(TransientDeliveryError, *TRANSIENT),
    retry_backoff=30,
    retry_backoff_max=1800,
    max_retries=settings.OPTGATE_NOTIFY_MAX_ATTEMPTS,
)
def deliver_notification(notification_id: int) -> None:
    """Deliver one notification on its pending channels; transient failures come back later."""
    notification_deliver(notification_id=notification_id)


@shared_task(
    name=queue.DELIVER_GITHUB_CALLBACK,
    **COMMON,
    soft_time_limit=60,
    time_limit=90,
    autoretry_for=(TransientDeliveryError, *TRANSIENT),
    retry_backoff=10,
    retry_backoff_max=600,
    max_retries=settings.OPTGATE_NOTIFY_MAX_ATTEMPTS,
)
def deliver_github_callback(callback_id: int) -> None:
    """Post one deployment review to GitHub; transient failures come back later, others are final."""
    github.github_callback_deliver(callback_id=callback_id)


@shared_task(
    name=queue.CHECK_BACKEND_ARGS,
    **COMMON,
    soft_time_limit=CHECK_TIMEOUT_S + 30,
    time_limit=CHECK_TIMEOUT_S + 60,
    autoretry_for=TRANSIENT,
    retry_backoff=5,
    max_retries=5,
)
def check_backend_args(backend_id: int) -> None:
    """Check a newly registered backend's engine arguments with vLLM's own parser (off the request path)."""
    backend_args_check(backend_id=backend_id)


@shared_task(name=queue.SWEEP, **COMMON, soft_time_limit=120, time_limit=180)
def sweep() -> None:
    """Re-queue or fail stuck runs, dispatch forgotten tickets, re-check finished evaluations."""
    sweeper.sweep()


@shared_task(name=queue.CLOSE_OBSERVATION_WINDOWS, **COMMON, soft_time_limit=120, time_limit=180)
def close_observation_windows() -> None:
    """Prompt (or auto-promote) canary tickets whose observation window has ended."""
    reviews.observation_windows_close()


@shared_task(name=queue.SCHEDULE_CANARY_ROUNDS, **COMMON, soft_time_limit=60, time_limit=90)
def schedule_canary_rounds() -> None:
    """Queue one analysis round for every canary ticket whose round is due."""
    for ticket_id in canary.canary_rounds_due():
        run_canary_round.delay(ticket_id)


@shared_task(
    name=queue.RUN_CANARY_ROUND,
    bind=True,
    **COMMON,
    soft_time_limit=300,
    time_limit=360,
    autoretry_for=(canary.CanaryRoundError, *TRANSIENT),
    retry_backoff=15,
    retry_backoff_max=120,
    max_retries=3,
)
def run_canary_round(self: Any, ticket_id: int) -> None:
    """Run the ticket's canary analysis round when due; a round Prometheus could not answer is
    recorded as an error and retried (a retry runs at once: its round is due by definition)."""
    if self.request.retries:
        canary.canary_round_run(ticket_id=ticket_id)
    else:
        canary.canary_round_if_due(ticket_id=ticket_id)


@shared_task(name=queue.OPEN_DUE_REVIEWS, **COMMON, soft_time_limit=120, time_limit=180)
def open_due_reviews() -> None:
    """Open quarterly reviews, expire old approvals into review, queue re-checks of changed backends."""
    reviews.reviews_open_due()
    reviews.approvals_expire()
    reviews.backends_recheck()


@shared_task(name=queue.REMIND_REVIEWS, **COMMON, soft_time_limit=120, time_limit=180)
def remind_reviews() -> None:
    """Remind owners and reviewers of open reviews until they are done."""
    reviews.reviews_remind()


@shared_task(name=queue.LEDGER_CHECKPOINT, **COMMON, soft_time_limit=120, time_limit=180)
def ledger_checkpoint() -> None:
    """Sign the ledger head and append the checkpoint outside the database (skipped, loudly, when unset)."""
    if not checkpoints.signing_configured():
        logger.warning(
            "ledger checkpoint skipped: OPTGATE_LEDGER_SIGNING_KEY_FILE is not set; the ledger is not anchored"
        )
        return
    checkpoint, path = checkpoints.checkpoint_write()
    logger.info("ledger checkpoint #%s (key %s) appended to %s", checkpoint.seq, checkpoint.key_id, path)


@worker_ready.connect
def _recover_on_start(sender: Any = None, **kwargs: Any) -> None:
    """On worker start, kill engines this worker's dead processes left and re-queue their runs."""
    nodename = getattr(sender, "hostname", None)
    if not nodename:
        return
    try:
        killed = warm.reap()
        if killed:
            logger.warning("worker %s: killed parked engines of dead worker processes: %s", nodename, killed)
        recovered = services.worker_recover(nodename=nodename)
        if recovered:
            logger.warning("worker %s: re-queued runs lost by a previous process: %s", nodename, recovered)
    except Exception:  # a recovery problem must not keep the worker from serving
        logger.exception("worker %s: recovery on start failed", nodename)
    finally:
        close_old_connections()


@worker_process_shutdown.connect
@worker_shutdown.connect
def _stop_parked_engine(**kwargs: Any) -> None:
    """A stopping worker process stops the engine it kept warm (a killed one leaves it to warm.reap)."""
    warm.stop_parked()


@worker_process_init.connect
def _parked_engine_dies_with_its_process(**kwargs: Any) -> None:
    """Celery resets SIGTERM in pool processes so that they die at once; this one first kills the
    engine it kept warm (a run in progress has its own handler: evaluators.services)."""

    def on_term(signum: int, frame: Any) -> None:
        warm.kill_parked_now()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
