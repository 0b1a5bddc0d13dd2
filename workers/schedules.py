"""Every periodic task, in one place, and how it is installed into django-celery-beat.

Beat runs with the database scheduler, so operators can pause or retune a schedule in the admin;
``install_schedules`` (run by ``manage.py install_schedules`` on deploy, idempotent) brings the
named entries back to what this module defines without touching entries it does not own.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask


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
    Schedule("optgate: sweep stuck runs and tickets", "optgate.sweep", Every(60),
             "re-queue or fail runs stuck past their deadline; dispatch tickets whose message was lost"),
    Schedule("optgate: close observation windows", "optgate.close_observation_windows", Every(15 * 60),
             "prompt (or auto-promote) canary tickets whose observation window has ended"),
    Schedule("optgate: open due reviews", "optgate.open_due_reviews", Cron(minute="7", hour="*/6"),
             "quarterly reviews, expired approvals, backends re-registered on a new engine or hardware"),
    Schedule("optgate: remind open reviews", "optgate.remind_reviews", Cron(minute="30", hour="9"),
             "remind owners and reviewers of open reviews until they are done"),
)  # fmt: skip


def install_schedules() -> list[str]:
    """Create or update the periodic tasks above; return their names."""
    with transaction.atomic():
        for item in SCHEDULES:
            fields: dict[str, object] = {"task": item.task, "queue": item.queue, "description": item.description,
                                         "enabled": True, "interval": None, "crontab": None}  # fmt: skip
            if isinstance(item.when, Every):
                fields["interval"], _ = IntervalSchedule.objects.get_or_create(
                    every=item.when.seconds, period=IntervalSchedule.SECONDS
                )
            else:
                fields["crontab"], _ = CrontabSchedule.objects.get_or_create(
                    minute=item.when.minute, hour=item.when.hour, day_of_week=item.when.day_of_week,
                    day_of_month=item.when.day_of_month, month_of_year=item.when.month_of_year, timezone="UTC",
                )  # fmt: skip
            PeriodicTask.objects.update_or_create(name=item.name, defaults=fields)
    return [item.name for item in SCHEDULES]
