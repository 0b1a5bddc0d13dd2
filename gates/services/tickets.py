"""Write paths of the gates app: filing, editing and moving release tickets.

Each public function owns its transaction and writes its ledger entry inside it.
"""

from __future__ import annotations

import math
from typing import Any

from django.contrib.auth.models import User
from django.db import connection, transaction

from backends.models import Backend
from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import ADMIN, ENGINEER, REVIEWER, Actor, has_role
from gates.models import TRANSITIONS, Bottleneck, Mechanism, ReleaseTicket, TicketStatus
from gates.models.tickets import MAX_WINDOW_HOURS, MIN_WINDOW_HOURS
from gates.selectors.plan import TicketPlan, ticket_plan, ticket_tasks_with_roles
from gates.services.policy import gate_policy
from gates.vocabulary import METRICS, ROLLBACK_PLAN_FIELDS
from ledger.services import ledger_append

# Fields of a ticket that only change while it is a draft.
EDITABLE_FIELDS = (
    "title",
    "description",
    "mechanisms",
    "bottleneck",
    "bottleneck_evidence",
    "baseline",
    "candidate",
    "beneficiary_tasks",
    "risk_tasks",
    "benefit_metrics",
    "guardrail_metrics",
    "rollback_target",
    "rollback_plan",
    "observation_window_hours",
    "canary_scope",
)

# Who may take each action. "owner" means the ticket's owner; None as actor is the system (workers).
ACTION_ROLES: dict[str, set[str]] = {
    "submit": {"owner", ADMIN},
    "start_evaluation": {"system", ADMIN},
    "finish_evaluation": {"system", ADMIN},
    "approve": {REVIEWER},
    "restrict": {REVIEWER},
    "reject": {REVIEWER},
    "request_evidence": {"system", REVIEWER, ADMIN},
    "start_canary": {"owner", REVIEWER, ADMIN},
    "promote": {"system", REVIEWER, ADMIN},
    # The system rolls a task back when a canary round breaks a critical guardrail and the policy
    # says so (``canary.auto_rollback``); otherwise a review proposes it to people.
    "roll_back": {"owner", "system", REVIEWER, ADMIN},
    "retire": {REVIEWER, ADMIN},
}
# Sign-off actions: separation of duties forbids the owner from taking them on their own ticket.
SIGN_OFF_ACTIONS = {"approve", "restrict", "reject"}
REASON_REQUIRED = {"reject", "roll_back", "request_evidence"}


def _require(condition: bool, field: str, message: str, errors: dict[str, str]) -> None:
    if not condition and field not in errors:
        errors[field] = message


def _string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _validate_ticket(fields: dict[str, Any]) -> None:
    """Check the business rules of a complete ticket; raise ``InvalidInput`` naming each bad field."""
    errors: dict[str, str] = {}
    title = fields.get("title") or ""
    _require(isinstance(title, str) and bool(title.strip()), "title", "a title is required", errors)

    mechanisms = fields.get("mechanisms")
    _require(_string_list(mechanisms) and bool(mechanisms), "mechanisms", "name at least one mechanism", errors)
    if _string_list(mechanisms):
        unknown = sorted(set(mechanisms or []) - set(Mechanism.values))
        _require(not unknown, "mechanisms", f"unknown mechanism(s): {', '.join(unknown)}", errors)

    _require(
        fields.get("bottleneck") in Bottleneck.values,
        "bottleneck",
        f"must be one of {', '.join(Bottleneck.values)}",
        errors,
    )
    evidence = fields.get("bottleneck_evidence") or ""
    _require(
        isinstance(evidence, str) and bool(evidence.strip()),
        "bottleneck_evidence",
        "say what shows this bottleneck (measurements, traces)",
        errors,
    )

    baseline, candidate = fields.get("baseline"), fields.get("candidate")
    _require(isinstance(baseline, Backend), "baseline", "choose a registered backend", errors)
    _require(isinstance(candidate, Backend), "candidate", "choose a registered backend", errors)
    _require(
        baseline is None or candidate is None or baseline != candidate,
        "candidate",
        "the candidate must differ from the baseline",
        errors,
    )
    _require(
        isinstance(fields.get("rollback_target"), Backend),
        "rollback_target",
        "choose the backend to roll back to",
        errors,
    )
    _require(
        fields.get("rollback_target") is None or fields.get("rollback_target") != candidate,
        "rollback_target",
        "the rollback target cannot be the candidate itself",
        errors,
    )

    beneficiary: list[Any] = list(fields.get("beneficiary_tasks") or [])
    risk: list[Any] = list(fields.get("risk_tasks") or [])
    _require(bool(beneficiary), "beneficiary_tasks", "name at least one task type that should benefit", errors)
    overlap = sorted({t.slug for t in beneficiary} & {t.slug for t in risk})
    _require(not overlap, "risk_tasks", f"a task cannot be both beneficiary and risk: {', '.join(overlap)}", errors)
    if isinstance(candidate, Backend) and candidate.model_card.get("allowed_tasks"):
        allowed = set(candidate.model_card["allowed_tasks"])
        outside = sorted({t.slug for t in beneficiary} - allowed)
        _require(
            not outside, "beneficiary_tasks", f"the candidate's model card does not allow: {', '.join(outside)}", errors
        )

    for name in ("benefit_metrics", "guardrail_metrics"):
        metrics = fields.get(name)
        _require(_string_list(metrics) and bool(metrics), name, "name at least one metric", errors)
        if _string_list(metrics):
            unknown = sorted(set(metrics or []) - METRICS)
            _require(not unknown, name, f"unknown metric(s): {', '.join(unknown)}", errors)

    plan = fields.get("rollback_plan")
    if not isinstance(plan, dict):
        errors["rollback_plan"] = "must be an object with " + ", ".join(ROLLBACK_PLAN_FIELDS)
    else:
        for key, meaning in ROLLBACK_PLAN_FIELDS.items():
            value = plan.get(key)
            _require(
                isinstance(value, str) and bool(value.strip()), f"rollback_plan.{key}", f"required: {meaning}", errors
            )
        extra = sorted(set(plan) - set(ROLLBACK_PLAN_FIELDS))
        _require(not extra, "rollback_plan", f"unknown field(s): {', '.join(extra)}", errors)

    window = fields.get("observation_window_hours")
    _require(
        isinstance(window, int | float)
        and not isinstance(window, bool)
        and math.isfinite(window)
        and MIN_WINDOW_HOURS <= window <= MAX_WINDOW_HOURS,
        "observation_window_hours",
        f"must be a number of hours between {MIN_WINDOW_HOURS:g} and {MAX_WINDOW_HOURS:g}",
        errors,
    )

    scope = fields.get("canary_scope")
    if not isinstance(scope, dict):
        errors["canary_scope"] = "must be an object with tenants (list) and business_domain (text)"
    else:
        _require(_string_list(scope.get("tenants", [])), "canary_scope.tenants", "must be a list of tenant ids", errors)
        _require(
            isinstance(scope.get("business_domain", ""), str), "canary_scope.business_domain", "must be text", errors
        )
        extra = sorted(set(scope) - {"tenants", "business_domain"})
        _require(not extra, "canary_scope", f"unknown field(s): {', '.join(extra)}", errors)
    if errors:
        raise InvalidInput(errors)


def _settleable_plan(fields: dict[str, Any]) -> TicketPlan:
    """The power plan of a valid ticket's fields; raise ``InvalidInput`` naming each task the policy
    refuses because no available suite can settle its margin (``gates.selectors.plan``)."""
    plan = ticket_plan(
        policy=gate_policy(),
        baseline=fields["baseline"],
        tasks=ticket_tasks_with_roles(fields["beneficiary_tasks"], fields.get("risk_tasks") or []),
    )
    errors: dict[str, str] = {}
    for task in plan.refusals:
        field = "beneficiary_tasks" if task.role == "beneficiary" else "risk_tasks"
        errors[field] = " ".join(filter(None, [errors.get(field), task.message]))
    if errors:
        rule = f"policy {plan.policy}, power_plan.refuse_unsettleable: {plan.refuse_unsettleable}"
        why = f"No available suite can settle it ({rule})."
        raise InvalidInput({field: f"{text} {why}" for field, text in errors.items()})
    return plan


def ticket_snapshot(ticket: ReleaseTicket) -> dict[str, Any]:
    """Everything a reader of the ledger needs to understand the plan, without joining tables."""

    def backend(b: Backend) -> dict[str, str]:
        return {"id": str(b.pk), "name": b.name, "fingerprint": b.fingerprint}

    return {
        "title": ticket.title,
        "mechanisms": ticket.mechanisms,
        "bottleneck": ticket.bottleneck,
        "bottleneck_evidence": ticket.bottleneck_evidence,
        "baseline": backend(ticket.baseline),
        "candidate": backend(ticket.candidate),
        "beneficiary_tasks": sorted(t.slug for t in ticket.beneficiary_tasks.all()),
        "risk_tasks": sorted(t.slug for t in ticket.risk_tasks.all()),
        "benefit_metrics": ticket.benefit_metrics,
        "guardrail_metrics": ticket.guardrail_metrics,
        "rollback_target": backend(ticket.rollback_target),
        "rollback_plan": ticket.rollback_plan,
        "observation_window_hours": ticket.observation_window_hours,
        "canary_scope": ticket.canary_scope,
        "owner": ticket.owner.get_username(),
    }


def _normalised_scope(scope: Any) -> Any:
    if isinstance(scope, dict):
        return {"tenants": scope.get("tenants", []), "business_domain": scope.get("business_domain", ""), **scope}
    return scope


def ticket_create(*, owner: User, **fields: Any) -> ReleaseTicket:
    """File a draft release ticket owned by ``owner``."""
    if not has_role(owner, ENGINEER, ADMIN):
        raise NotAllowed("only engineers file release tickets")
    unknown = sorted(set(fields) - set(EDITABLE_FIELDS))
    if unknown:
        raise InvalidInput({name: "unknown field" for name in unknown})
    fields.setdefault("risk_tasks", [])
    fields.setdefault("description", "")
    fields.setdefault("observation_window_hours", 168)
    fields.setdefault("canary_scope", {"tenants": [], "business_domain": ""})
    fields["canary_scope"] = _normalised_scope(fields["canary_scope"])
    _validate_ticket(fields)
    plan = _settleable_plan(fields)
    beneficiary = fields.pop("beneficiary_tasks")
    risk = fields.pop("risk_tasks")
    with transaction.atomic(durable=True):
        ticket = ReleaseTicket.objects.create(owner=owner, **fields)
        ticket.beneficiary_tasks.set(beneficiary)
        ticket.risk_tasks.set(risk)
        ledger_append(
            kind="ticket.filed",
            subject_type="ticket",
            subject_id=ticket.pk,
            subject_name=ticket.title,
            actor=owner,
            payload={"status": ticket.status, "ticket": ticket_snapshot(ticket), "power_plan": plan.to_dict()},
        )
    return ticket


def ticket_update(*, ticket: ReleaseTicket, actor: Actor, **changes: Any) -> ReleaseTicket:
    """Edit a draft ticket; the whole ticket is re-validated and the changed fields are ledgered."""
    if actor is None or (ticket.owner_id != actor.pk and not has_role(actor, ADMIN)):
        raise NotAllowed("only the ticket's owner edits it")
    unknown = sorted(set(changes) - set(EDITABLE_FIELDS))
    if unknown:
        raise InvalidInput({name: "unknown or read-only field" for name in unknown})
    with transaction.atomic(durable=True):
        locked = ReleaseTicket.objects.select_for_update().get(pk=ticket.pk)
        if locked.status != TicketStatus.DRAFT:
            raise DomainError(f"ticket #{locked.pk} is {locked.status}; only drafts can be edited")
        merged: dict[str, Any] = {
            name: getattr(locked, name) for name in EDITABLE_FIELDS if name not in ("beneficiary_tasks", "risk_tasks")
        }
        merged["beneficiary_tasks"] = list(locked.beneficiary_tasks.all())
        merged["risk_tasks"] = list(locked.risk_tasks.all())
        if "canary_scope" in changes:
            changes["canary_scope"] = _normalised_scope(changes["canary_scope"])
        merged.update(changes)
        _validate_ticket(merged)
        if {"baseline", "beneficiary_tasks", "risk_tasks"} & set(changes):
            _settleable_plan(merged)
        before = ticket_snapshot(locked)
        scalar_changes = {k: v for k, v in changes.items() if k not in ("beneficiary_tasks", "risk_tasks")}
        for name, value in scalar_changes.items():
            setattr(locked, name, value)
        locked.save(update_fields=[*scalar_changes, "updated_at"])
        if "beneficiary_tasks" in changes:
            locked.beneficiary_tasks.set(changes["beneficiary_tasks"])
        if "risk_tasks" in changes:
            locked.risk_tasks.set(changes["risk_tasks"])
        after = ticket_snapshot(locked)
        changed = {k: {"before": before[k], "after": after[k]} for k in after if before[k] != after[k]}
        if not changed:
            return locked
        ledger_append(
            kind="ticket.updated",
            subject_type="ticket",
            subject_id=locked.pk,
            subject_name=locked.title,
            actor=actor,
            payload={"changed": changed},
        )
    return locked


def check_actor(ticket: ReleaseTicket, action: str, actor: Actor) -> None:
    allowed = ACTION_ROLES[action]
    if actor is None:
        if "system" not in allowed:
            raise NotAllowed(f"{action.replace('_', ' ')} needs a person, not the system")
        return
    is_owner = ticket.owner_id == actor.pk
    if action in SIGN_OFF_ACTIONS and is_owner:
        raise NotAllowed("the ticket's owner cannot sign off their own ticket")
    if is_owner and "owner" in allowed:
        return
    if not has_role(actor, *(allowed - {"owner", "system"})):
        who = " or ".join(sorted(role for role in allowed if role != "system"))
        raise NotAllowed(f"{action.replace('_', ' ')} is for: {who}")


def ticket_transition_within(
    *, ticket: ReleaseTicket, action: str, actor: Actor, reason: str = "", details: dict[str, Any] | None = None
) -> str:
    """Take ``action`` inside the caller's transaction (role checks, compare-and-swap, ledger entry).

    For services that move a ticket as part of a larger change (a sign-off, a route update).
    A rejection records the complete plan with its reason, so it stays searchable as a plan
    that was not adopted. Returns the previous status.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("ticket_transition_within must run inside the caller's transaction")
    if action not in TRANSITIONS:
        raise InvalidInput({"action": f"unknown action {action!r}"})
    check_actor(ticket, action, actor)
    if action in REASON_REQUIRED and not reason.strip():
        raise InvalidInput({"reason": f"a reason is required to {action.replace('_', ' ')}"})
    previous = ticket.transition(action)
    payload: dict[str, Any] = {"action": action, "from": previous, "to": ticket.status, "reason": reason}
    if details:
        payload["details"] = details
    if ticket.status == TicketStatus.REJECTED:
        payload["plan"] = ticket_snapshot(ticket)
    ledger_append(
        kind=f"ticket.{ticket.status}",
        subject_type="ticket",
        subject_id=ticket.pk,
        subject_name=ticket.title,
        actor=actor,
        payload=payload,
    )
    return previous


def ticket_transition(
    *, ticket: ReleaseTicket, action: str, actor: Actor, reason: str = "", details: dict[str, Any] | None = None
) -> ReleaseTicket:
    """Take ``action`` on ``ticket`` (see ``TRANSITIONS``) in its own transaction; see
    ``ticket_transition_within``."""
    if action not in TRANSITIONS:
        raise InvalidInput({"action": f"unknown action {action!r}"})
    check_actor(ticket, action, actor)
    with transaction.atomic(durable=True):
        ticket = ReleaseTicket.objects.select_related("baseline", "candidate", "rollback_target", "owner").get(
            pk=ticket.pk
        )
        ticket_transition_within(ticket=ticket, action=action, actor=actor, reason=reason, details=details)
    return ticket


def ticket_submit(*, ticket: ReleaseTicket, actor: Actor) -> ReleaseTicket:
    """Submit a draft for evaluation, unless the power plan now refuses it (the baseline's measured
    discordance may have grown since filing); the plan it was submitted on is ledgered."""
    check_actor(ticket, "submit", actor)
    if ticket.status != TicketStatus.DRAFT:
        return ticket_transition(ticket=ticket, action="submit", actor=actor)  # refused there, as it is
    fields = {
        "baseline": ticket.baseline,
        "beneficiary_tasks": list(ticket.beneficiary_tasks.all()),
        "risk_tasks": list(ticket.risk_tasks.all()),
    }
    plan = _settleable_plan(fields)
    return ticket_transition(ticket=ticket, action="submit", actor=actor, details={"power_plan": plan.to_dict()})
