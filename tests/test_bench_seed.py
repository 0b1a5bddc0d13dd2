"""The benchmark seeder: realistic rows, a ledger chain that verifies, and no accidental re-seeding.

Runs with small numbers on whichever database the suite uses (COPY on PostgreSQL, bulk_create
on SQLite); the full-size figures are in docs/benchmarks.md.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from backends.models import Backend
from gates.models import GateDecision, ReleaseTicket, SignOff, TicketStatus
from gates.selectors.decisions import decision_current
from gates.services import tickets as services
from ledger.models import LedgerEntry, LedgerHead
from ledger.selectors import ledger_verify
from tests.factories import ticket_fields

pytestmark = [pytest.mark.database, pytest.mark.django_db]


def seed(*args: str) -> str:
    out = StringIO()
    call_command("bench_seed", *args, stdout=out)
    return out.getvalue()


def test_it_seeds_tickets_decisions_and_a_ledger_chain_that_verifies() -> None:
    output = seed("--tickets", "300", "--ledger-entries", "2500", "--batch", "128")

    assert ReleaseTicket.objects.count() == 300 and "seeded 300 tickets" in output
    assert ReleaseTicket.objects.values("status").distinct().count() >= 8
    decided = ReleaseTicket.objects.filter(status=TicketStatus.APPROVED).first()
    assert decided is not None and decided.beneficiary_tasks.exists()
    decision = decision_current(ticket=decided)
    assert decision is not None and decision.signed_verdict == "approve"
    assert SignOff.objects.filter(decision=decision).count() == 1
    assert not GateDecision.objects.filter(ticket__status=TicketStatus.DRAFT).exists()
    report = ledger_verify()
    assert report.ok and report.checked == 2500
    assert LedgerHead.objects.get(id=1).seq == 2500
    assert LedgerEntry.objects.filter(kind="ticket.filed").count() == 300


def test_it_refuses_a_database_with_data_unless_forced_and_then_continues_the_chain(
    erin: User, baseline: Backend, candidate: Backend
) -> None:
    registered = LedgerEntry.objects.count()  # the two backends' registrations
    with pytest.raises(CommandError, match="--force"):
        seed("--tickets", "20", "--ledger-entries", "50")

    seed("--tickets", "20", "--ledger-entries", "50", "--force")

    report = ledger_verify()
    assert report.ok and report.checked == registered + 50
    # The id sequences were moved past the seeded rows: the next ticket filed gets a fresh id.
    ticket = services.ticket_create(owner=erin, **ticket_fields(baseline, candidate))
    assert ticket.pk == ReleaseTicket.objects.count() == 21
    assert ledger_verify().ok
