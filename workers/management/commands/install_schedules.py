"""``manage.py install_schedules``: write the periodic tasks of ``workers.schedules`` into beat's tables."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from workers.schedules import install_schedules


class Command(BaseCommand):
    help = "Create or update OptGate's periodic tasks in django-celery-beat (idempotent; run on deploy)."

    def handle(self, *args: Any, **options: Any) -> None:
        for name in install_schedules():
            self.stdout.write(f"installed: {name}")
