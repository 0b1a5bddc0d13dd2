"""Reviewer sign-off on a gate decision: who must sign, in which capacity, and when the ticket moves.

Capacities are Django groups: every member of ``reviewer`` signs as ``platform``; the other
capacities need an extra group, ``reviewer:sre``, ``reviewer:business_owner`` or
``reviewer:security`` (and the ``reviewer`` role itself). The capacities a ticket needs come from
the risk tiers of the tasks the candidate would serve, per
``settings.OPTGATE_SIGNOFF_CAPACITIES`` (default: ``platform`` for every tier, plus
``business_owner`` for high-risk tasks); a decision carrying the cross-tenant
prefix-cache finding also needs ``security``. A rejection keeps everything on the baseline, so
one reviewer of any capacity suffices.

The ticket moves (approve / restrict / reject through the ticket's state machine) once the
sign-offs agreeing on one verdict and task set cover the required capacities. Agreeing with the
policy's outcome needs no more; overriding it needs a written reason on every overriding
sign-off and at least two distinct reviewers. The ticket's owner never signs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from accounts.services import group_grant
from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import CAPACITY_GROUP_PREFIX, REVIEWER, Actor, has_role, person
from gates.models import (
    DecisionOutcome,
    GateDecision,
    ReasonCode,
    ReleaseTicket,
    ReviewerCapacity,
    RiskTier,
    SignOff,
    SignOffVerdict,
    TaskType,
    TicketStatus,
)
from gates.prefix_cache import CROSS_TENANT
from gates.selectors.decisions import decision_current
from gates.selectors.evidence import owner_imported_unaccepted
from gates.services.policy import gate_policy
from gates.services.tickets import ticket_transition_within
from ledger.services import ledger_append


def capacity_grant(*, actor: Actor, user: User, capacity: str) -> bool:
    """Let a reviewer also sign as ``capacity`` (every reviewer signs as ``platform``); True when new."""
    if capacity not in ReviewerCapacity.values:
        raise InvalidInput({"capacity": f"must be one of {', '.join(ReviewerCapacity.values)}"})
    return group_grant(actor=actor, user=user, group=f"{CAPACITY_GROUP_PREFIX}{capacity}")


def capacities_by_tier() -> dict[str, frozenset[str]]:
    """Required capacities per risk tier; a typo in the setting raises instead of weakening the gate."""
    configured = settings.OPTGATE_SIGNOFF_CAPACITIES
    if not isinstance(configured, dict) or set(configured) != set(RiskTier.values):
        raise ImproperlyConfigured(f"OPTGATE_SIGNOFF_CAPACITIES must map each of {RiskTier.values} to capacities")
    result = {}
    for tier, names in configured.items():
        unknown = set(names) - set(ReviewerCapacity.values)
        if unknown or not names:
            raise ImproperlyConfigured(f"OPTGATE_SIGNOFF_CAPACITIES[{tier!r}]: unknown or no capacities {unknown}")
        result[str(tier)] = frozenset(str(name) for name in names)
    return result


def user_capacities(user: Actor) -> frozenset[str]:
    """The capacities ``user`` may sign in: none without the reviewer role, ``platform`` with it."""
    if not has_role(user, REVIEWER):
        return frozenset()
    signer = person(user)
    assert signer is not None
    groups = signer.groups.filter(name__startswith=CAPACITY_GROUP_PREFIX).values_list("name", flat=True)
    extra = {name.removeprefix(CAPACITY_GROUP_PREFIX) for name in groups}
    return frozenset({ReviewerCapacity.PLATFORM.value} | (extra & set(ReviewerCapacity.values)))


def required_capacities(decision: GateDecision, verdict: str, tasks: Iterable[str]) -> frozenset[str]:
    """Capacities that must sign ``verdict`` for the candidate to serve ``tasks``; empty = anyone."""
    if verdict == SignOffVerdict.REJECT:
        return frozenset()
    tiers = capacities_by_tier()
    needed: set[str] = set()
    for task in TaskType.objects.filter(slug__in=list(tasks)):
        needed |= tiers[task.risk_tier]
    if any(w.get("code") == CROSS_TENANT for w in decision.warnings):
        needed.add(ReviewerCapacity.SECURITY)
    return frozenset(needed)


def _decision_tasks(decision: GateDecision) -> list[str]:
    return list(decision.proposed_routes)


def _is_override(decision: GateDecision, verdict: str, tasks: list[str]) -> bool:
    if decision.outcome == DecisionOutcome.ERROR and verdict == SignOffVerdict.REJECT:
        return False  # a candidate that cannot start is not adopted: rejecting it follows the gate
    if verdict != decision.outcome:
        return True
    return verdict == SignOffVerdict.RESTRICT and set(tasks) != set(decision.allowed_tasks)


@dataclass(frozen=True)
class SignOffState:
    """Where one verdict stands on a decision: who signed, what is still missing."""

    verdict: str
    tasks: tuple[str, ...]
    override: bool
    reviewers: tuple[str, ...]
    capacities: tuple[str, ...]
    missing: tuple[str, ...] = field(default_factory=tuple)

    @property
    def complete(self) -> bool:
        return not self.missing

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "tasks": list(self.tasks),
            "override": self.override,
            "reviewers": list(self.reviewers),
            "capacities": list(self.capacities),
            "missing": list(self.missing),
            "complete": self.complete,
        }


def signoff_state(
    decision: GateDecision, verdict: str, tasks: list[str], sign_offs: Iterable[SignOff] | None = None
) -> SignOffState:
    """Whether the sign-offs agreeing on ``verdict`` for exactly ``tasks`` are enough to move the ticket.

    ``sign_offs`` are the decision's sign-offs with their reviewers when the caller has them
    already; otherwise they are read here.
    """
    if sign_offs is None:
        sign_offs = decision.sign_offs.select_related("reviewer")
    agreeing = [s for s in sign_offs if s.verdict == verdict and set(s.tasks) == set(tasks)]
    capacities = {s.capacity for s in agreeing}
    reviewers = {s.reviewer.get_username() for s in agreeing}
    override = _is_override(decision, verdict, tasks)
    missing = [
        f"a {name.replace('_', ' ')} reviewer"
        for name in sorted(required_capacities(decision, verdict, tasks) - capacities)
    ]
    if not agreeing:
        missing.append("a reviewer")
    if override and len(reviewers) < 2:
        missing.append("a second, distinct reviewer (overriding the policy needs two)")
    return SignOffState(
        verdict, tuple(sorted(tasks)), override, tuple(sorted(reviewers)), tuple(sorted(capacities)), tuple(missing)
    )


def signoff_summary(decision: GateDecision, sign_offs: Iterable[SignOff] | None = None) -> list[dict[str, Any]]:
    """The state of every verdict someone has signed on ``decision``.

    ``sign_offs`` are the decision's sign-offs with their reviewers when the caller has them.
    """
    sign_offs = list(decision.sign_offs.select_related("reviewer") if sign_offs is None else sign_offs)
    seen = dict.fromkeys((s.verdict, tuple(sorted(s.tasks))) for s in sign_offs)
    return [signoff_state(decision, verdict, list(tasks), sign_offs).to_dict() for verdict, tasks in seen]


def signoff_refusal(ticket: ReleaseTicket, decision: GateDecision, user: Actor, sign_offs: Iterable[SignOff]) -> str:
    """Why ``user`` may not sign ``decision`` now ("" when they may): the rules ``signoff_record`` enforces.

    ``not_awaiting`` (the ticket is not waiting for a sign-off), ``owner``, ``not_reviewer`` or ``signed``.
    """
    if ticket.status != TicketStatus.EVALUATED or decision.outcome == DecisionOutcome.NEEDS_EVIDENCE:
        return "not_awaiting"
    if decision.signed_verdict:
        return "not_awaiting"
    signer = person(user)
    if signer is not None and ticket.owner_id == signer.pk:
        return "owner"
    if signer is None or not has_role(signer, REVIEWER):
        return "not_reviewer"
    if any(s.reviewer_id == signer.pk for s in sign_offs):
        return "signed"
    return ""


@dataclass(frozen=True)
class SignOffResult:
    sign_off: SignOff
    ticket: ReleaseTicket
    state: SignOffState
    moved: bool


def _choose_capacity(user: User, capacity: str | None) -> str:
    allowed = user_capacities(user)
    if capacity is None:
        extra = allowed - {ReviewerCapacity.PLATFORM}
        if len(extra) > 1:
            raise InvalidInput({"capacity": f"you hold several capacities; choose one of {', '.join(sorted(allowed))}"})
        return next(iter(extra)) if extra else ReviewerCapacity.PLATFORM
    if capacity not in ReviewerCapacity.values:
        raise InvalidInput({"capacity": f"must be one of {', '.join(ReviewerCapacity.values)}"})
    if capacity not in allowed:
        raise NotAllowed(
            f"{user.get_username()} may not sign as {capacity} (needs group {CAPACITY_GROUP_PREFIX}{capacity})"
        )
    return capacity


def _tasks_for(decision: GateDecision, verdict: str, tasks: list[str] | None) -> list[str]:
    every = _decision_tasks(decision)
    if verdict == SignOffVerdict.APPROVE:
        if tasks is not None and set(tasks) != set(every):
            raise InvalidInput({"tasks": "an approval covers every task; restrict to name a subset"})
        return every
    if verdict == SignOffVerdict.REJECT:
        if tasks:
            raise InvalidInput({"tasks": "a rejection routes no task to the candidate"})
        return []
    chosen = list(dict.fromkeys(tasks if tasks is not None else decision.allowed_tasks))
    if not chosen:
        raise InvalidInput({"tasks": "name the tasks the candidate may serve"})
    outside = sorted(set(chosen) - set(every))
    if outside:
        raise InvalidInput({"tasks": f"not tasks of this ticket: {', '.join(outside)}"})
    if set(chosen) == set(every):
        raise InvalidInput({"tasks": "a restriction leaves at least one task on the baseline; approve instead"})
    return chosen


def _check_owner_evidence_accepted(ticket: ReleaseTicket, decision: GateDecision) -> None:
    """Under ``evidence.owner_imported: inform``, evidence the owner imported approves nothing until
    a reviewer other than the owner has accepted it (``gates.services.provenance.evidence_accept``)."""
    if gate_policy().evidence.owner_imported != "inform":
        return
    waiting = owner_imported_unaccepted(ticket, [decision.baseline_run, decision.candidate_run])
    if waiting:
        runs = ", ".join(f"#{run.pk}" for run in waiting)
        raise DomainError(
            f"the owner imported the evidence of run {runs}: it informs but approves nothing until a reviewer "
            "other than the owner accepts it with a reason"
        )


def signoff_record(
    *,
    ticket: ReleaseTicket,
    actor: Actor,
    verdict: str,
    reason_code: str,
    comment: str = "",
    override_reason: str = "",
    capacity: str | None = None,
    tasks: list[str] | None = None,
) -> SignOffResult:
    """Record one reviewer's sign-off on the ticket's current decision; move the ticket when enough.

    Raises ``NotAllowed`` for the owner, non-reviewers and capacities the reviewer lacks;
    ``InvalidInput`` for an unknown verdict or reason code, or an override without a reason;
    ``DomainError`` when the ticket is not awaiting sign-off or the reviewer already signed.
    """
    user = person(actor)
    if user is not None and ticket.owner_id == user.pk:
        raise NotAllowed("the ticket's owner cannot sign off their own ticket")
    if user is None or not has_role(user, REVIEWER):
        raise NotAllowed("sign-off is for reviewers")
    if verdict not in SignOffVerdict.values:
        raise InvalidInput({"decision": f"must be one of {', '.join(SignOffVerdict.values)}"})
    if reason_code not in ReasonCode.values:
        raise InvalidInput({"reason_code": f"must be one of {', '.join(ReasonCode.values)}"})
    chosen_capacity = _choose_capacity(user, capacity)
    with transaction.atomic(durable=True):
        locked = (
            ReleaseTicket.objects.select_for_update()
            .select_related("baseline", "candidate", "rollback_target", "owner")
            .get(pk=ticket.pk)
        )
        if locked.status != TicketStatus.EVALUATED:
            raise DomainError(f"ticket #{locked.pk} is {locked.status}; sign-off happens while it is evaluated")
        decision = decision_current(ticket=locked)
        if decision is None or decision.outcome == DecisionOutcome.NEEDS_EVIDENCE:
            raise DomainError(f"ticket #{locked.pk} has no gate decision to sign off")
        if decision.signed_verdict:
            raise DomainError(f"decision #{decision.pk} is already signed: {decision.signed_verdict}")
        if decision.outcome == DecisionOutcome.ERROR and verdict != SignOffVerdict.REJECT:
            raise InvalidInput(
                {"decision": "an engine could not start, so nothing was measured: the only sign-off is reject"}
            )
        if decision.sign_offs.filter(reviewer=user).exists():
            raise DomainError(f"{user.get_username()} already signed decision #{decision.pk}")
        if verdict != SignOffVerdict.REJECT:
            _check_owner_evidence_accepted(locked, decision)
        chosen_tasks = _tasks_for(decision, verdict, tasks)
        override = _is_override(decision, verdict, chosen_tasks)
        if override and not override_reason.strip():
            raise InvalidInput(
                {"override_reason": f"the policy said {decision.outcome}; write why you decide {verdict}"}
            )
        sign_off = SignOff.objects.create(
            ticket=locked,
            decision=decision,
            reviewer=user,
            capacity=chosen_capacity,
            verdict=verdict,
            tasks=chosen_tasks,
            reason_code=reason_code,
            comment=comment,
            override=override,
            override_reason=override_reason if override else "",
        )
        state = signoff_state(decision, verdict, chosen_tasks)
        ledger_append(
            kind="gate.sign_off",
            subject_type="ticket",
            subject_id=locked.pk,
            subject_name=locked.title,
            actor=user,
            payload={
                "decision": decision.pk,
                "policy_outcome": decision.outcome,
                "verdict": verdict,
                "tasks": chosen_tasks,
                "capacity": chosen_capacity,
                "reason_code": reason_code,
                "comment": comment,
                "override": override,
                "override_reason": sign_off.override_reason,
                "missing": list(state.missing),
            },
        )
        if not state.complete:
            return SignOffResult(sign_off, locked, state, moved=False)
        claimed = GateDecision.objects.filter(pk=decision.pk, signed_verdict="").update(
            signed_verdict=verdict, signed_tasks=chosen_tasks, signed_at=timezone.now()
        )
        if claimed != 1:
            raise DomainError(f"decision #{decision.pk} was signed concurrently; reload")
        reason = override_reason or comment or ReasonCode(reason_code).label
        ticket_transition_within(
            ticket=locked,
            action=verdict,
            actor=user,
            reason=reason,
            details={
                "decision": decision.pk,
                "policy_outcome": decision.outcome,
                "tasks": chosen_tasks,
                "override": override,
                "reviewers": list(state.reviewers),
            },
        )
    return SignOffResult(sign_off, locked, state, moved=True)
