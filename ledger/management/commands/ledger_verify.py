"""Recompute the ledger's hash chain; exit non-zero and name the first bad entry when broken."""

from __future__ import annotations

import os
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.selectors import ledger_verify


class Command(BaseCommand):
    help = "Verify the ledger's hash chain; exits 1 and names the first bad entry when it is broken."

    def add_arguments(self, parser: CommandParser) -> None:
        # Half the CPUs by default: the database usually runs on the same host and needs the others.
        parser.add_argument(
            "--workers",
            type=int,
            default=min(max(1, (os.cpu_count() or 1) // 2), 8),
            help="processes checking parts of the chain in parallel on PostgreSQL (default: half the CPUs, ≤ 8)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["workers"] < 1:
            raise CommandError("--workers must be at least 1")
        started = time.monotonic()
        report = ledger_verify(workers=options["workers"])
        elapsed = time.monotonic() - started
        if not report.ok:
            raise CommandError(f"ledger chain BROKEN after {report.checked} entries: {report.problem}", returncode=1)
        self.stdout.write(f"ledger chain OK: {report.checked} entries verified in {elapsed:.2f} s")
