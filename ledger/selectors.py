"""Read paths of the ledger app: chain verification and ledger queries."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.db import connection, connections
from django.db.models import Max, Min, Q, QuerySet, Subquery

from ledger.models import LedgerEntry, LedgerHead, entry_hash

# Kinds that record a plan the organisation decided not to adopt; searchable with their reasons.
NOT_ADOPTED_KINDS = ("ticket.rejected",)

VERIFY_BATCH = 10_000


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


# The columns the chain covers, in the order the verification walks them; the id orders the walk.
CHAIN_COLUMNS = (
    "id",
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
)
# On PostgreSQL the database formats ``created_at`` exactly as ``entry_content`` does (UTC, ISO 8601
# with microseconds) and hands the payload over as text: parsing a million timestamps and going
# through Django's row converters in Python cost more than half of the verification time.
POSTGRES_CHAIN_SQL = f"""
    SELECT id, seq, kind, subject_type, subject_id, subject_name, actor_name, payload::text,
           to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'), prev_hash, hash
    FROM {LedgerEntry._meta.db_table} WHERE id > %s AND id <= %s ORDER BY id LIMIT %s
"""


def _chain_rows(after_id: int, up_to_id: int) -> Iterator[tuple[Any, ...]]:
    """Entries with ``after_id < id <= up_to_id`` as ``CHAIN_COLUMNS`` tuples, in id order.

    Keyset pagination keeps memory flat over millions of rows, and plain tuples skip building a
    model instance per entry.
    """
    postgres = connection.vendor == "postgresql"
    while True:
        if postgres:
            with connection.cursor() as cursor:
                cursor.execute(POSTGRES_CHAIN_SQL, [after_id, up_to_id, VERIFY_BATCH])
                batch = [(*row[:7], json.loads(row[7]), *row[8:]) for row in cursor.fetchall()]
        else:
            rows = LedgerEntry.objects.filter(id__gt=after_id, id__lte=up_to_id).order_by("id")
            batch = list(rows.values_list(*CHAIN_COLUMNS)[:VERIFY_BATCH])
        if not batch:
            return
        yield from batch
        after_id = batch[-1][0]


@dataclass
class ChainWalk:
    """Where a walk over the chain stands: entries checked so far and the hash the next must point at."""

    checked: int = 0
    expected_prev: str = LedgerEntry.GENESIS_HASH

    def check(self, rows: Iterable[tuple[Any, ...]]) -> ChainReport | None:
        """Check each entry in turn; the first one that breaks the chain is reported."""
        for (
            entry_id,
            seq,
            kind,
            subject_type,
            subject_id,
            subject_name,
            actor_name,
            payload,
            created_at,
            prev_hash,
            stored_hash,
        ) in rows:
            self.checked += 1
            if seq != self.checked:
                problem = f"entry #{seq} (id {entry_id}) follows #{self.checked - 1}: an entry was deleted or reordered"
                return ChainReport(False, self.checked, seq, entry_id, problem)
            if prev_hash != self.expected_prev:
                problem = (
                    f"entry #{seq} (id {entry_id}) does not point at its predecessor: the chain was reordered or cut"
                )
                return ChainReport(False, self.checked, seq, entry_id, problem)
            digest = entry_hash(
                seq=seq,
                kind=kind,
                subject_type=subject_type,
                subject_id=subject_id,
                subject_name=subject_name,
                actor_name=actor_name,
                payload=payload,
                created_at=created_at,
                prev_hash=prev_hash,
            )
            if digest != stored_hash:
                problem = f"entry #{seq} (id {entry_id}) does not match its hash: its content was edited"
                return ChainReport(False, self.checked, seq, entry_id, problem)
            self.expected_prev = stored_hash
        return None


def _verify_segment(after_id: int, up_to_id: int) -> tuple[ChainReport | None, ChainWalk]:
    """Check one id range on its own connection, starting from what the entries before it imply.

    A walk from the start would arrive at this range having checked every earlier entry and
    expecting the last one's hash; when the earlier ranges are sound (the caller reports the
    first unsound one) that is exactly their count and the stored hash of the last of them.
    """
    try:
        before = LedgerEntry.objects.filter(id__lte=after_id)
        previous = before.order_by("-id").values_list("hash", flat=True).first()
        walk = ChainWalk(before.count(), previous or LedgerEntry.GENESIS_HASH)
        return walk.check(_chain_rows(after_id, up_to_id)), walk
    finally:
        connection.close()


def ledger_verify(*, workers: int = 1) -> ChainReport:
    """Recompute the chain and report the first entry that was edited, deleted or reordered.

    Entries are walked in insertion order (primary key). Each must carry the next sequence
    number, point at its predecessor's hash and hash to its stored value; the last one must
    match the head row, which catches entries removed from the end. The head and the last
    entry id are read in one statement, so entries appended during the walk are left out
    rather than mistaken for tampering.

    ``workers`` > 1 checks that many id ranges in parallel processes (PostgreSQL only; the
    report is the same as a single walk's). Forking is for commands, not for web requests.
    """
    last_entry = LedgerEntry.objects.order_by("-id").values("id")[:1]
    head = LedgerHead.objects.filter(id=1).annotate(last_id=Subquery(last_entry)).values("seq", "hash", "last_id")
    snapshot = head.first() or {"seq": 0, "hash": "", "last_id": LedgerEntry.objects.aggregate(last=Max("id"))["last"]}
    up_to_id = snapshot["last_id"] or 0
    parallel = workers > 1 and connection.vendor == "postgresql" and not connection.in_atomic_block
    first_id = (LedgerEntry.objects.aggregate(first=Min("id"))["first"] or 0) if parallel else 0
    if parallel and up_to_id - first_id >= workers:
        # Equal id ranges: ids are dense, as appends only ever add rows.
        start, span = first_id - 1, up_to_id - first_id + 1
        bounds = [start + span * part // workers for part in range(workers + 1)]
        connections.close_all()  # each forked worker opens its own connection
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            segments = list(pool.map(_verify_segment, bounds[:-1], bounds[1:]))
        for report, _ in segments:
            if report is not None:
                return report
        walk = segments[-1][1]
    else:
        walk = ChainWalk()
        report = walk.check(_chain_rows(0, up_to_id))
        if report is not None:
            return report
    checked, head_seq = walk.checked, snapshot["seq"]
    if head_seq != checked or (checked and snapshot["hash"] != walk.expected_prev):
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


def ledger_kinds() -> list[str]:
    """Every entry kind the ledger holds, sorted."""
    return list(LedgerEntry.objects.order_by("kind").values_list("kind", flat=True).distinct())


def ledger_head_seq() -> int | None:
    """The sequence number of the newest entry, read from the head row (None before the first entry)."""
    return LedgerHead.objects.filter(id=1).values_list("seq", flat=True).first()
