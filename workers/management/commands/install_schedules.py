"""``manage.py install_schedules``: write the periodic tasks of ``workers.schedules`` into beat's tables."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from workers.services import schedules_install


class Command(BaseCommand):
    help = "Create or update OptGate's periodic tasks in django-celery-beat (idempotent; run on deploy)."

    def handle(self, *args: Any, **options: Any) -> None:
        for name in schedules_install():
            self.stdout.write(f"installed: {name}")
