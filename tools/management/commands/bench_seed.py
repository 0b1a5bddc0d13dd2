"""``manage.py bench_seed``: fill a database with benchmark volumes (see ``tools.seeding``)."""

from __future__ import annotations

import random
import time
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from backends.models import Backend
from evaluators.models import EvaluationRun
from gates.models import (
    GateDecision,
    ReleaseTicket,
    SignOff,
    TaskType,
)
from ledger.models import LedgerEntry
from tools.bulk_rows import reset_sequences
from tools.seeding import Seeder


class Command(BaseCommand):
    help = "Seed a benchmark database: N tickets with decisions and sign-offs, and M hash-chained ledger entries."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tickets", type=int, default=100_000)
        parser.add_argument("--ledger-entries", type=int, default=1_000_000)
        parser.add_argument("--batch", type=int, default=20_000, help="rows per COPY / bulk_create batch")
        parser.add_argument("--seed", type=int, default=0, help="random seed, for repeatable data")
        parser.add_argument("--force", action="store_true", help="add to a database that already has tickets")

    def handle(self, *args: Any, **options: Any) -> None:
        tickets, entries, batch = options["tickets"], options["ledger_entries"], options["batch"]
        if min(tickets, entries) < 0 or batch < 1:
            raise CommandError("--tickets and --ledger-entries must be ≥ 0 and --batch ≥ 1")
        if not options["force"] and (ReleaseTicket.objects.exists() or LedgerEntry.objects.exists()):
            raise CommandError("the database already has tickets or ledger entries; pass --force to add to them")
        if not TaskType.objects.exists():
            raise CommandError("no task types: run `manage.py migrate` first")
        seeder = Seeder(random.Random(options["seed"]), batch, self.stdout.write)
        started = time.monotonic()
        with transaction.atomic():
            seeder.seed_tickets(tickets)
            seeder.seed_ledger(entries)
            reset_sequences([User, ReleaseTicket, GateDecision, SignOff, LedgerEntry, EvaluationRun, Backend])
        if connection.vendor == "postgresql" and not connection.in_atomic_block:
            # What autovacuum would do in a while: planner statistics, and the visibility map
            # that lets COUNT(*) read an index instead of every row. (VACUUM cannot run in a transaction.)
            seeded = (
                ReleaseTicket,
                ReleaseTicket.beneficiary_tasks.through,
                ReleaseTicket.risk_tasks.through,
                GateDecision,
                SignOff,
                LedgerEntry,
                User,
            )
            with connection.cursor() as cursor:
                for model in seeded:
                    cursor.execute(f"VACUUM (ANALYZE) {connection.ops.quote_name(model._meta.db_table)}")
        elapsed = time.monotonic() - started
        self.stdout.write(
            f"seeded {seeder.counts['tickets']} tickets, {seeder.counts['decisions']} decisions, "
            f"{seeder.counts['sign_offs']} sign-offs and {seeder.counts['entries']} ledger entries "
            f"in {elapsed:.1f} s ({connection.vendor})"
        )
