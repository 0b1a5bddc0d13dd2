"""Write path of the ledger app: appending to the chain."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection
from django.utils import timezone

from core.canonical import canonical_json
from core.roles import Actor, person
from ledger.models import LedgerEntry, LedgerHead


def _actor_name(actor: Actor) -> str:
    user = person(actor)
    return user.get_username() if user else "system"


def ledger_append(
    *,
    kind: str,
    subject_type: str,
    subject_id: Any,
    subject_name: str,
    actor: Actor,
    payload: dict[str, Any],
) -> LedgerEntry:
    """Append one entry to the chain. Must run inside the caller's transaction.

    The head row is locked for the rest of the transaction, so concurrent appends queue up
    behind each other and the chain cannot fork; the entry commits or rolls back together
    with the change it records.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("ledger_append must be called inside the transaction of the change it records")
    head, _ = LedgerHead.objects.select_for_update().get_or_create(id=1)
    # Round-trip through canonical JSON so the stored payload hashes identically after reload.
    clean_payload = json.loads(canonical_json(payload))
    entry = LedgerEntry(
        seq=head.seq + 1,
        kind=kind,
        subject_type=subject_type,
        subject_id=str(subject_id),
        subject_name=subject_name[:300],
        actor=person(actor),
        actor_name=_actor_name(actor),
        payload=clean_payload,
        created_at=timezone.now(),
        prev_hash=head.hash or LedgerEntry.GENESIS_HASH,
    )
    entry.hash = entry.compute_hash()
    entry.save()
    LedgerHead.objects.filter(id=1).update(seq=entry.seq, hash=entry.hash)
    return entry
