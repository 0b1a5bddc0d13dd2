"""The gate decision on the ticket page: the verdict matrix, proposed routes and sign-off state."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from gates.display import metric_display
from gates.forms.review import SignOffForm
from gates.models import GateDecision, ReleaseTicket
from gates.selectors.decisions import decision_current
from gates.selectors.routes import route_table
from gates.selectors.summary import FINDING_STATUSES
from gates.services import signoff


def verdict_rows(verdicts: dict[str, Any]) -> list[dict[str, Any]]:
    """The stored per-task verdicts (``TaskVerdict.to_dict()``) as display rows, numbers formatted."""
    rows = []
    for task, verdict in verdicts.items():
        holds_back = verdict.get("status") in FINDING_STATUSES
        metrics = [
            {
                **metric,
                "display": metric.get("display") or metric_display(metric),
                # The summary lists these once; the full table points there instead of repeating them.
                "is_finding": holds_back and metric.get("status") == verdict.get("status"),
            }
            for metric in verdict.get("metrics", [])
        ]
        rows.append(
            {
                "task": task,
                "role": verdict.get("role", ""),
                "status": verdict.get("status", ""),
                "reason": verdict.get("reason", ""),
                "samples_needed": verdict.get("samples_needed"),
                "metrics": metrics,
            }
        )
    return rows


def latest_decision(ticket: ReleaseTicket) -> dict[str, Any] | None:
    """The ticket's current binding decision with its verdict matrix rows, or None before judging."""
    record = decision_current(ticket=ticket)
    if record is None:
        return None
    return {"record": record, "rows": verdict_rows(record.verdicts or {})}


def proposed_route_changes(ticket: ReleaseTicket, decision: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per task of the decision: where it routes now (default route) and where the gate proposes."""
    if decision is None:
        return []
    record: GateDecision = decision["record"]
    current = {r.task.slug: r.backend for r in route_table().filter(tenant="")}
    rows = []
    for task, side in record.proposed_routes.items():
        target = ticket.candidate if side == "candidate" else ticket.baseline
        signed = record.signed_verdict and task in record.signed_tasks
        rows.append(
            {
                "task": task,
                "now": current.get(task),
                "proposed": target,
                "side": side,
                "signed": bool(signed),
                "changes": current.get(task) != target,
            }
        )
    return rows


def signoff_form_for(decision: GateDecision, user: User, data: Any = None) -> SignOffForm:
    return SignOffForm(
        data,
        tasks=list(decision.proposed_routes),
        allowed=list(decision.allowed_tasks),
        capacities=sorted(signoff.user_capacities(user)),
    )


def signoff_context(
    ticket: ReleaseTicket, decision: dict[str, Any] | None, user: User, form: SignOffForm | None
) -> dict[str, Any]:
    """Sign-offs so far, what is still missing, and the form when this user may sign now."""
    if decision is None:
        return {"decision": None}
    record: GateDecision = decision["record"]
    sign_offs = list(record.sign_offs.select_related("reviewer"))
    refusal = signoff.signoff_refusal(ticket, record, user, sign_offs)
    why_not = {
        "owner": "You own this ticket, so you cannot sign it off.",
        "not_reviewer": "Sign-off is for reviewers.",
        "signed": "You have signed this decision.",
    }.get(refusal, "")
    can_sign = not refusal
    return {
        "decision": record,
        "sign_offs": sign_offs,
        "summary": signoff.signoff_summary(record, sign_offs) if sign_offs else [],
        "form": (form or signoff_form_for(record, user)) if can_sign else None,
        "why_not": why_not,
    }
