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
    # Every 15 s, not every minute: a round is due one interval after the last one started, and
    # that start comes a moment after the tick that queued it, so with ticks as far apart as the
    # interval each round just misses its tick and waits a whole interval more (the demo policy's
    # one-minute rounds came every two minutes). Ticking at a quarter of the shortest interval
    # keeps every round within a quarter of it.
    Schedule(
        "optgate: canary analysis rounds",
        queue.SCHEDULE_CANARY_ROUNDS,
        Every(15),
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
