"""Recompute the ledger's hash chain; exit non-zero and name the first bad entry when broken.

With ``--checkpoints FILE`` it also checks the chain against signed checkpoints (see
``ledger.checkpoints``): a chain rewritten in the database with every hash recomputed still
hashes consistently, but no longer has the signed hash at a checkpoint's sequence number.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.checkpoints import checkpoints_read, checkpoints_verify, trusted_keys_default
from ledger.selectors import ledger_verify


class Command(BaseCommand):
    help = "Verify the ledger's hash chain (and signed checkpoints); exits 1 and names the first problem."

    def add_arguments(self, parser: CommandParser) -> None:
        # Half the CPUs by default: the database usually runs on the same host and needs the others.
        parser.add_argument(
            "--workers",
            type=int,
            default=min(max(1, (os.cpu_count() or 1) // 2), 8),
            help="processes checking parts of the chain in parallel on PostgreSQL (default: half the CPUs, ≤ 8)",
        )
        parser.add_argument(
            "--checkpoints", type=Path, help="a JSON-lines file of signed checkpoints (ledger_checkpoint writes them)"
        )
        parser.add_argument(
            "--trusted-key",
            action="append",
            default=[],
            help="a trusted public key (base64), repeatable; trusted besides OPTGATE_LEDGER_TRUSTED_KEYS and the "
            "signing key's own",
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
        if options["checkpoints"] is not None:
            self._verify_checkpoints(options["checkpoints"], set(options["trusted_key"]))

    def _verify_checkpoints(self, path: Path, extra_keys: set[str]) -> None:
        try:
            checkpoints = checkpoints_read(path)
            trusted = trusted_keys_default() | extra_keys
        except (OSError, ValueError, ImproperlyConfigured) as exc:
            raise CommandError(f"cannot read the checkpoints: {exc}", returncode=1) from None
        if not checkpoints:
            raise CommandError(f"{path} holds no checkpoints", returncode=1)
        if not trusted:
            raise CommandError("no trusted keys: pass --trusted-key or set OPTGATE_LEDGER_TRUSTED_KEYS", returncode=1)
        checked, problem = checkpoints_verify(checkpoints, trusted)
        if problem:
            raise CommandError(f"ledger checkpoints FAILED after {checked} good ones: {problem}", returncode=1)
        self.stdout.write(f"ledger checkpoints OK: {checked} signed checkpoints match the chain")
