"""Read paths of the ledger app: chain verification and ledger queries."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import Q, QuerySet

from ledger.models import Backend, LedgerEntry, LedgerHead

# Kinds that record a plan the organisation decided not to adopt; searchable with their reasons.
NOT_ADOPTED_KINDS = ("ticket.rejected",)

VERIFY_BATCH = 5000


@dataclass(frozen=True)
class ChainReport:
    ok: bool
    checked: int
    first_bad_seq: int | None = None
    first_bad_id: int | None = None
    problem: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "checked": self.checked,
            "first_bad_seq": self.first_bad_seq,
            "first_bad_id": self.first_bad_id,
            "problem": self.problem,
        }


def _entries_in_chain_order() -> Iterator[LedgerEntry]:
    # Keyset pagination keeps memory flat over millions of rows.
    last_id = 0
    while True:
        batch = list(LedgerEntry.objects.filter(id__gt=last_id).order_by("id")[:VERIFY_BATCH])
        if not batch:
            return
        yield from batch
        last_id = batch[-1].id


def ledger_verify() -> ChainReport:
    """Recompute the chain and report the first entry that was edited, deleted or reordered.

    Entries are walked in insertion order (primary key). Each must carry the next sequence
    number, point at its predecessor's hash and hash to its stored value; the last one must
    match the head row, which catches entries removed from the end.
    """
    expected_prev = LedgerEntry.GENESIS_HASH
    expected_seq = 1
    checked = 0
    for entry in _entries_in_chain_order():
        checked += 1
        if entry.seq != expected_seq:
            problem = (
                f"entry #{entry.seq} (id {entry.id}) follows #{expected_seq - 1}: an entry was deleted or reordered"
            )
            return ChainReport(False, checked, entry.seq, entry.id, problem)
        if entry.prev_hash != expected_prev:
            problem = (
                f"entry #{entry.seq} (id {entry.id}) does not point at its predecessor: the chain was reordered or cut"
            )
            return ChainReport(False, checked, entry.seq, entry.id, problem)
        if entry.compute_hash() != entry.hash:
            problem = f"entry #{entry.seq} (id {entry.id}) does not match its hash: its content was edited"
            return ChainReport(False, checked, entry.seq, entry.id, problem)
        expected_prev = entry.hash
        expected_seq += 1
    head = LedgerHead.objects.filter(id=1).first()
    head_seq, head_hash = (head.seq, head.hash) if head else (0, "")
    if head_seq != checked or (checked and head_hash != expected_prev):
        problem = f"the chain ends at #{checked} but its head records #{head_seq}: entries were deleted from the end"
        return ChainReport(False, checked, checked + 1 if head_seq > checked else head_seq, None, problem)
    return ChainReport(True, checked)


def ledger_entries(
    *,
    kind: str | None = None,
    subject_type: str | None = None,
    subject_id: str | None = None,
    actor: str | None = None,
    not_adopted: bool = False,
    search: str | None = None,
) -> QuerySet[LedgerEntry]:
    entries = LedgerEntry.objects.all()
    if kind:
        entries = entries.filter(kind=kind)
    if subject_type:
        entries = entries.filter(subject_type=subject_type)
    if subject_id:
        entries = entries.filter(subject_id=subject_id)
    if actor:
        entries = entries.filter(actor_name=actor)
    if not_adopted:
        entries = entries.filter(kind__in=NOT_ADOPTED_KINDS)
    if search:
        entries = entries.filter(Q(subject_name__icontains=search) | Q(payload__icontains=search))
    return entries


def backend_list() -> QuerySet[Backend]:
    return Backend.objects.all()
