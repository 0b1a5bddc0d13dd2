"""The tamper-evident ledger: appends chain, edits, deletions and reordering are caught."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction

from core.errors import DomainError
from gates.models import ReleaseTicket
from gates.services import tickets as services
from ledger.models import LedgerEntry
from ledger.selectors import ledger_entries, ledger_verify
from ledger.services import ledger_append

pytestmark = [pytest.mark.database, pytest.mark.django_db]


@pytest.fixture
def chain(draft: ReleaseTicket, erin: Any, rita: Any) -> list[LedgerEntry]:
    services.ticket_submit(ticket=draft, actor=erin)
    services.ticket_transition(ticket=draft, action="start_evaluation", actor=None)
    services.ticket_transition(ticket=draft, action="finish_evaluation", actor=None)
    services.ticket_transition(ticket=draft, action="reject", actor=rita, reason="FP8 KV hurt citations")
    return list(LedgerEntry.objects.order_by("seq"))


def _sql(statement: str, params: list[Any]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def test_it_chains_every_entry_to_its_predecessor(chain: list[LedgerEntry]) -> None:
    assert [e.seq for e in chain] == list(range(1, len(chain) + 1))
    assert chain[0].prev_hash == LedgerEntry.GENESIS_HASH
    for previous, entry in itertools.pairwise(chain):
        assert entry.prev_hash == previous.hash
    report = ledger_verify()
    assert report.ok and report.checked == len(chain)


def test_it_detects_an_edited_payload(chain: list[LedgerEntry]) -> None:
    victim = chain[3]
    _sql("UPDATE ledger_ledgerentry SET payload = %s WHERE id = %s", ['{"reason": "nothing to see"}', victim.id])
    report = ledger_verify()
    assert not report.ok
    assert report.first_bad_seq == victim.seq
    assert "edited" in report.problem


def test_it_detects_an_edited_actor(chain: list[LedgerEntry]) -> None:
    victim = chain[-1]
    _sql("UPDATE ledger_ledgerentry SET actor_name = %s WHERE id = %s", ["mallory", victim.id])
    report = ledger_verify()
    assert not report.ok and report.first_bad_seq == victim.seq


def test_it_detects_a_deleted_row(chain: list[LedgerEntry]) -> None:
    victim = chain[2]
    _sql("DELETE FROM ledger_ledgerentry WHERE id = %s", [victim.id])
    report = ledger_verify()
    assert not report.ok
    assert report.first_bad_seq == victim.seq + 1
    assert "deleted or reordered" in report.problem


def test_it_detects_a_row_deleted_from_the_end(chain: list[LedgerEntry]) -> None:
    _sql("DELETE FROM ledger_ledgerentry WHERE id = %s", [chain[-1].id])
    report = ledger_verify()
    assert not report.ok
    assert "deleted from the end" in report.problem


def test_it_detects_reordered_rows(chain: list[LedgerEntry]) -> None:
    one, two = chain[1], chain[2]
    # Swap the content of two neighbours, each keeping a self-consistent hash of its own.
    columns = [
        "seq",
        "kind",
        "subject_type",
        "subject_id",
        "subject_name",
        "actor_name",
        "payload",
        "created_at",
        "prev_hash",
        "hash",
    ]
    # Park both rows on placeholder values first: seq and hash are unique.
    for placeholder, row in (("e" * 64, one), ("f" * 64, two)):
        _sql("UPDATE ledger_ledgerentry SET seq = seq + 1000, hash = %s WHERE id = %s", [placeholder, row.id])
    for target, source in ((one, two), (two, one)):
        values = [json.dumps(source.payload) if c == "payload" else getattr(source, c) for c in columns]
        assignments = ", ".join(f"{c} = %s" for c in columns)
        _sql(f"UPDATE ledger_ledgerentry SET {assignments} WHERE id = %s", [*values, target.id])
    report = ledger_verify()
    assert not report.ok
    assert report.first_bad_seq == two.seq


def test_the_verify_command_exits_non_zero_on_a_broken_chain(chain: list[LedgerEntry], capsys: Any) -> None:
    call_command("ledger_verify")
    assert f"ledger chain OK: {len(chain)} entries" in capsys.readouterr().out

    _sql("UPDATE ledger_ledgerentry SET subject_name = %s WHERE id = %s", ["renamed", chain[0].id])
    with pytest.raises(CommandError, match="BROKEN") as caught:
        call_command("ledger_verify")
    assert caught.value.returncode == 1


def test_no_code_path_updates_or_deletes_an_entry(chain: list[LedgerEntry]) -> None:
    entry = chain[0]
    entry.kind = "ticket.approved"
    with pytest.raises(DomainError):
        entry.save()
    with pytest.raises(DomainError):
        entry.delete()
    with pytest.raises(DomainError):
        LedgerEntry.objects.filter(pk=entry.pk).update(kind="x")
    with pytest.raises(DomainError):
        LedgerEntry.objects.all().delete()
    assert ledger_verify().ok


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_it_refuses_an_append_outside_a_transaction(erin: Any) -> None:
    with pytest.raises(RuntimeError, match="inside the transaction"):
        ledger_append(kind="x", subject_type="x", subject_id=1, subject_name="x", actor=erin, payload={})
    assert not LedgerEntry.objects.exists()


def test_an_entry_rolls_back_with_its_change(erin: Any) -> None:
    before = LedgerEntry.objects.count()
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        ledger_append(kind="probe", subject_type="x", subject_id=1, subject_name="x", actor=erin, payload={})
        raise ZeroDivisionError
    assert LedgerEntry.objects.count() == before
    assert ledger_verify().ok


def test_it_finds_not_adopted_plans_by_their_reason(chain: list[LedgerEntry]) -> None:
    found = ledger_entries(not_adopted=True, search="fp8 kv")
    assert [e.kind for e in found] == ["ticket.rejected"]
    assert not ledger_entries(not_adopted=True, search="speculative").exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
@pytest.mark.parametrize("tamper", ["nothing", "edited payload", "deleted row", "deleted tail"])
def test_a_parallel_verification_reports_what_a_single_walk_reports(tamper: str) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("parallel verification runs on PostgreSQL: set DATABASE_URL=postgres://…")
    with transaction.atomic():
        for i in range(40):
            ledger_append(
                kind="probe", subject_type="x", subject_id=i, subject_name=f"entry {i}", actor=None, payload={"i": i}
            )
    entries = list(LedgerEntry.objects.order_by("seq"))
    if tamper == "edited payload":  # in the last of three ranges: the earlier two must be found sound
        _sql("UPDATE ledger_ledgerentry SET payload = %s WHERE id = %s", ['{"i": -1}', entries[33].id])
    elif tamper == "deleted row":
        _sql("DELETE FROM ledger_ledgerentry WHERE id = %s", [entries[14].id])
    elif tamper == "deleted tail":
        _sql("DELETE FROM ledger_ledgerentry WHERE id = %s", [entries[-1].id])

    single = ledger_verify()
    assert ledger_verify(workers=3) == single
    assert single.ok is (tamper == "nothing")
    assert (
        single.first_bad_seq == {"nothing": None, "edited payload": 34, "deleted row": 16, "deleted tail": 40}[tamper]
    )
