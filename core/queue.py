"""Celery tasks by name: the apps below ``workers`` enqueue work without importing the tasks.

The workers app registers a task under each of these names (``workers/tasks.py``); everything
else sends messages by name, so imports run one way (gates → core, never gates → workers).
Call ``enqueue`` after commit (``transaction.on_commit``): the database is the record of work and
the broker only carries ids.
"""

from __future__ import annotations

from typing import Any

from celery import current_app

EVALUATE_RUN = "optgate.evaluate_run"
EVALUATE_TICKET = "optgate.evaluate_ticket"
CHECK_TICKET = "optgate.check_ticket"
DELIVER_NOTIFICATION = "optgate.deliver_notification"
DELIVER_GITHUB_CALLBACK = "optgate.deliver_github_callback"
SWEEP = "optgate.sweep"
CLOSE_OBSERVATION_WINDOWS = "optgate.close_observation_windows"
OPEN_DUE_REVIEWS = "optgate.open_due_reviews"
REMIND_REVIEWS = "optgate.remind_reviews"
LEDGER_CHECKPOINT = "optgate.ledger_checkpoint"
CHECK_BACKEND_ARGS = "optgate.check_backend_args"
SCHEDULE_CANARY_ROUNDS = "optgate.schedule_canary_rounds"
RUN_CANARY_ROUND = "optgate.run_canary_round"


def enqueue(name: str, *args: Any, task_id: str | None = None) -> None:
    """Publish task ``name`` with positional ``args`` (ids); routing follows ``CELERY_TASK_ROUTES``."""
    current_app.send_task(name, args=args, task_id=task_id)


def revoke(task_id: str, *, signal: str = "SIGTERM") -> None:
    """Ask the worker running ``task_id`` to stop it (the task turns the signal into a cancellation)."""
    current_app.control.revoke(task_id, terminate=True, signal=signal)
