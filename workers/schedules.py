"""Every periodic task, in one place, and how it is installed into django-celery-beat.

Beat runs with the database scheduler, so operators can pause or retune a schedule in the admin;
``install_schedules`` (run by ``manage.py install_schedules`` on deploy, idempotent) brings the
named entries back to what this module defines without touching entries it does not own
(``workers.services.schedules_install``).
"""

from __future__ import annotations

from dataclasses import dataclass

from core import queue


@dataclass(frozen=True)
class Every:
    """Run every ``seconds``."""

    seconds: int


@dataclass(frozen=True)
class Cron:
    """Run at a crontab time (UTC)."""

    minute: str = "0"
    hour: str = "*"
    day_of_week: str = "*"
    day_of_month: str = "*"
    month_of_year: str = "*"


@dataclass(frozen=True)
class Schedule:
    name: str
    task: str
    when: Every | Cron
    description: str
    queue: str = "default"


SCHEDULES: tuple[Schedule, ...] = (
    Schedule(
        "optgate: sweep stuck runs and tickets",
        queue.SWEEP,
        Every(60),
        "re-queue or fail runs stuck past their deadline; dispatch tickets whose message was lost",
    ),
    Schedule(
        "optgate: close observation windows",
        queue.CLOSE_OBSERVATION_WINDOWS,
        Every(15 * 60),
        "prompt (or auto-promote) canary tickets whose observation window has ended",
    ),
    Schedule(
        "optgate: canary analysis rounds",
        queue.SCHEDULE_CANARY_ROUNDS,
        Every(60),
        "queue an analysis round for every canary ticket due one (the policy's canary.interval_minutes)",
    ),
    Schedule(
        "optgate: open due reviews",
        queue.OPEN_DUE_REVIEWS,
        Cron(minute="7", hour="*/6"),
        "quarterly reviews, expired approvals, backends re-registered on a new engine or hardware",
    ),
    Schedule(
        "optgate: remind open reviews",
        queue.REMIND_REVIEWS,
        Cron(minute="30", hour="9"),
        "remind owners and reviewers of open reviews until they are done",
    ),
    Schedule(
        "optgate: ledger checkpoint",
        queue.LEDGER_CHECKPOINT,
        Cron(minute="13"),
        "sign the ledger head with the key outside the database and append it to the checkpoint directory",
    ),
)
