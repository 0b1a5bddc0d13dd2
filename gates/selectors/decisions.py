"""Reading gate decisions."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet

from core.compiled import CompiledQuery
from gates.models import DecisionOutcome, GateDecision, ReleaseTicket, SignOff, TicketStatus
from gates.selectors.tickets import utc_iso
from ledger.models import LedgerEntry
from ledger.selectors import ledger_entries

# Ledger kinds that record a gate outcome or a reviewer's decision on a ticket.
DECISION_KINDS = (
    "gate.decision",
    "gate.sign_off",
    "ticket.approved",
    "ticket.restricted",
    "ticket.rejected",
    "ticket.needs_evidence",
)


def decision_current(*, ticket: ReleaseTicket) -> GateDecision | None:
    """The ticket's current decision: its latest binding (not dry-run) one."""
    return GateDecision.objects.filter(ticket=ticket, dry_run=False).order_by("-id").first()


def decisions_awaiting_canary(*, limit: int = 20) -> list[GateDecision]:
    """Signed approvals and restrictions whose ticket has not started its canary yet, newest first."""
    return list(
        GateDecision.objects.filter(
            dry_run=False,
            signed_verdict__in=[DecisionOutcome.APPROVE, DecisionOutcome.RESTRICT],
            ticket__status__in=[TicketStatus.APPROVED, TicketStatus.RESTRICTED],
        )
        .select_related("ticket__baseline", "ticket__candidate")
        .order_by("-signed_at")[:limit]
    )


def signed_route_changes(decision: GateDecision) -> list[dict[str, Any]]:
    """What a signed decision will route: signed tasks to the candidate, the others stay on the baseline."""
    ticket = decision.ticket
    return [
        {
            "task": task,
            "backend": ticket.candidate if task in decision.signed_tasks else ticket.baseline,
            "moves": task in decision.signed_tasks,
        }
        for task in decision.proposed_routes
    ]


def decision_entries() -> QuerySet[LedgerEntry]:
    """Ledger entries of gate outcomes and reviewers' decisions, newest first."""
    return ledger_entries().filter(kind__in=DECISION_KINDS)


# --- the API's decision read, through queries each web process compiles once (``core.compiled``):
# building its four queries cost more of the read's CPU than SQLite spent answering them.

_DECISION_COLUMNS = [f.attname for f in GateDecision._meta.concrete_fields if f.name != "verdicts"]
_SIGN_OFF_COLUMNS = [f.attname for f in SignOff._meta.concrete_fields]
_BRIEF_FIELDS = ("id", "outcome", "policy_version", "dry_run", "created_at")
_current = CompiledQuery(
    lambda ticket_id: (
        GateDecision.objects.filter(ticket_id=ticket_id, dry_run=False).order_by("-id").values(*_DECISION_COLUMNS)[:1]
    )
)
_sign_offs = CompiledQuery(
    lambda decision_id: SignOff.objects.filter(decision_id=decision_id).values(*_SIGN_OFF_COLUMNS, "reviewer__username")
)
_decisions_in_brief = CompiledQuery(
    lambda ticket_id: GateDecision.objects.filter(ticket_id=ticket_id).order_by("-id").values(*_BRIEF_FIELDS)
)


def decision_read(*, ticket_id: int) -> tuple[GateDecision, list[SignOff], list[dict[str, Any]]] | None:
    """The ticket's current decision (``decision_current``) with its verdicts unread, its sign-offs with
    their reviewers' usernames (the reviewers' other fields unread), and its other decisions in brief,
    newest first; None when the ticket has no binding decision.

    The verdicts, the row's largest JSON, are read when first asked for: the read keeps a decision's
    verdicts formatted per web process (``gates.api.decisions.decision_shown``) and seldom needs them again.
    """
    found = _current.rows(ticket_id)
    if not found:
        return None
    decision = GateDecision.from_db(_current.db, _DECISION_COLUMNS, [found[0][name] for name in _DECISION_COLUMNS])
    sign_offs = []
    for row in _sign_offs.rows(decision.pk):
        sign_off = SignOff.from_db(_sign_offs.db, _SIGN_OFF_COLUMNS, [row[name] for name in _SIGN_OFF_COLUMNS])
        sign_off.reviewer = User.from_db(
            _sign_offs.db, ["id", "username"], [row["reviewer_id"], row["reviewer__username"]]
        )
        sign_offs.append(sign_off)
    history = [row for row in _decisions_in_brief.rows(ticket_id) if row["id"] != decision.pk]
    return decision, sign_offs, history


# The fields of a decision and a sign-off as read: the hand-built read here and the API serializers
# (``gates.api.decisions``) both list these.
SIGN_OFF_FIELDS = (
    "id",
    "reviewer",
    "capacity",
    "verdict",
    "tasks",
    "reason_code",
    "comment",
    "override",
    "override_reason",
    "created_at",
)
DECISION_FIELDS = (
    "id",
    "ticket",
    "policy_version",
    "dry_run",
    "baseline_run",
    "candidate_run",
    "outcome",
    "reasons",
    "verdicts",
    "proposed_routes",
    "allowed_tasks",
    "samples_needed",
    "warnings",
    "seed",
    "stages",
    "created_at",
    "signed_verdict",
    "signed_tasks",
    "signed_at",
)


def _time(moment: Any) -> str | None:
    return None if moment is None else utc_iso(moment)


def sign_off_shown(sign_off: SignOff) -> dict[str, Any]:
    """One sign-off as the API shows it (``SignOffSerializer(sign_off).data``); its reviewer loaded."""
    return {
        "id": sign_off.pk,
        "reviewer": sign_off.reviewer.get_username(),
        "capacity": sign_off.capacity,
        "verdict": sign_off.verdict,
        "tasks": sign_off.tasks,
        "reason_code": sign_off.reason_code,
        "comment": sign_off.comment,
        "override": sign_off.override,
        "override_reason": sign_off.override_reason,
        "created_at": _time(sign_off.created_at),
    }


def decision_shown_fields(decision: GateDecision, *, verdicts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The decision's own fields as the API shows them (``DecisionSerializer`` without the sign-offs);
    ``verdicts`` stand in for the stored ones when the caller has them already (shown, with display blocks).

    Built by hand: through the ModelSerializer, building its fields from the model (and a nested
    one per sign-off) was most of a decision read's CPU. Tests hold the two equal.
    """
    return {
        "id": decision.pk,
        "ticket": decision.ticket_id,
        "policy_version": decision.policy_version,
        "dry_run": decision.dry_run,
        "baseline_run": decision.baseline_run_id,
        "candidate_run": decision.candidate_run_id,
        "outcome": decision.outcome,
        "reasons": decision.reasons,
        "verdicts": decision.verdicts if verdicts is None else verdicts,
        "proposed_routes": decision.proposed_routes,
        "allowed_tasks": decision.allowed_tasks,
        "samples_needed": decision.samples_needed,
        "warnings": decision.warnings,
        "seed": decision.seed,
        "stages": decision.stages,
        "created_at": _time(decision.created_at),
        "signed_verdict": decision.signed_verdict,
        "signed_tasks": decision.signed_tasks,
        "signed_at": _time(decision.signed_at),
    }
