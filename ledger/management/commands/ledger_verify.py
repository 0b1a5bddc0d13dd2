"""Recompute the ledger's hash chain; exit non-zero and name the first bad entry when broken."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ledger.selectors import ledger_verify


class Command(BaseCommand):
    help = "Verify the ledger's hash chain; exits 1 and names the first bad entry when it is broken."

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic()
        report = ledger_verify()
        elapsed = time.monotonic() - started
        if not report.ok:
            raise CommandError(f"ledger chain BROKEN after {report.checked} entries: {report.problem}", returncode=1)
        self.stdout.write(f"ledger chain OK: {report.checked} entries verified in {elapsed:.2f} s")
