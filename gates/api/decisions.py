"""REST API of a ticket's gate decision and the reviewers' sign-off on it."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import StrictInputSerializer
from core.roles import Actor
from gates.display import metric_display
from gates.models import (
    GateDecision,
    ReasonCode,
    ReleaseTicket,
    ReviewerCapacity,
    SignOff,
    SignOffVerdict,
    TicketStatus,
)
from gates.selectors.decisions import (
    DECISION_FIELDS,
    SIGN_OFF_FIELDS,
    decision_read,
    decision_shown_fields,
    sign_off_shown,
)
from gates.selectors.summary import decision_summary, next_action
from gates.services import signoff


class SignOffSerializer(serializers.ModelSerializer):
    reviewer: serializers.SlugRelatedField = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = SignOff
        fields = list(SIGN_OFF_FIELDS)
        read_only_fields = fields


class DecisionSerializer(serializers.ModelSerializer):
    """The schema of a decision read; ``ticket_decision`` builds the same fields by hand (faster), plus
    ``display`` blocks in the verdicts' metrics, the ``summary`` and the ``history``."""

    sign_offs = SignOffSerializer(many=True, read_only=True)
    sign_off_state = serializers.SerializerMethodField()

    class Meta:
        model = GateDecision
        fields = [*DECISION_FIELDS, "sign_offs", "sign_off_state"]
        read_only_fields = fields

    def get_sign_off_state(self, decision: GateDecision) -> list[dict[str, Any]]:
        return signoff.signoff_summary(decision, decision.sign_offs.all())  # prefetched by the read


def verdicts_shown(verdicts: dict[str, Any]) -> dict[str, Any]:
    """The stored verdicts with a ``display`` block per metric: the numbers as the ticket page shows them."""
    return {
        task: {**verdict, "metrics": [{**m, "display": metric_display(m)} for m in verdict.get("metrics") or []]}
        for task, verdict in verdicts.items()
    }


# A decision's judgement (verdicts, reasons, outcome) never changes once stored; only its
# signature does. So each web process formats a decision's verdicts and summary once and reuses
# them: reads then pay for the rows, not for re-deriving the display. Keyed by id and creation
# time, so a reused id (tests rolling back) is never mistaken for another decision.
_SHOWN_LIMIT = 2048
_shown: dict[tuple[int, str], tuple[dict[str, Any], dict[str, Any]]] = {}


def decision_shown(decision: GateDecision) -> tuple[dict[str, Any], dict[str, Any]]:
    """The decision's verdicts with display blocks and its summary (without the signature), memoised."""
    key = (decision.pk, decision.created_at.isoformat())
    shown = _shown.get(key)
    if shown is None:
        if len(_shown) >= _SHOWN_LIMIT:
            _shown.pop(next(iter(_shown)))  # the oldest first
        shown = _shown[key] = (verdicts_shown(decision.verdicts or {}), decision_summary(decision))
    return shown


def ticket_decision(ticket: ReleaseTicket, user: Actor) -> Response:
    """The ticket's current decision with its sign-offs, its summary, and the earlier decisions in brief."""
    # The verdicts are read only when this process has not formatted the decision yet (``decision_shown``).
    read = decision_read(ticket_id=ticket.pk)
    if read is None:
        return Response({"detail": f"ticket #{ticket.pk} has no gate decision yet"}, status=status.HTTP_404_NOT_FOUND)
    current, sign_offs, history = read
    return decision_response(ticket, user, current, sign_offs, history)


def decision_response(
    ticket: ReleaseTicket, user: Actor, current: GateDecision, sign_offs: list[SignOff], history: list[dict[str, Any]]
) -> Response:
    """The decision read's body from its parts: the decision (its verdicts may be deferred), its
    sign-offs with their reviewers, and the ticket's other decisions in brief."""
    verdicts, summary_base = decision_shown(current)
    data = {
        **decision_shown_fields(current, verdicts=verdicts),
        "sign_offs": [sign_off_shown(s) for s in sign_offs],
        "sign_off_state": signoff.signoff_summary(current, sign_offs),
    }
    # Only a ticket waiting for sign-off needs to know whether this caller may sign (a role lookup).
    may_sign = ticket.status == TicketStatus.EVALUATED and not signoff.signoff_refusal(ticket, current, user, sign_offs)
    summary = {
        **summary_base,
        "signed_verdict": current.signed_verdict or "",
        "signed_tasks": list(current.signed_tasks or []),
    }
    summary["next_action"] = next_action(
        status=ticket.status, decision=current, may_sign=may_sign, is_owner=ticket.owner_id == getattr(user, "pk", None)
    )
    return Response({**data, "summary": summary, "history": history})


class SignOffInputSerializer(StrictInputSerializer):
    decision = serializers.ChoiceField(choices=SignOffVerdict.choices)
    reason_code = serializers.ChoiceField(choices=ReasonCode.choices)
    comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)
    override_reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)
    capacity = serializers.ChoiceField(choices=ReviewerCapacity.choices, required=False)
    tasks = serializers.ListField(child=serializers.SlugField(), required=False)


def ticket_sign_off(request: Request, ticket: ReleaseTicket) -> Response:
    """Record the caller's sign-off; 201 with the sign-off, its state and the ticket's status."""
    body = SignOffInputSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    data = body.validated_data
    result = signoff.signoff_record(
        ticket=ticket,
        actor=request.user,
        verdict=data["decision"],
        reason_code=data["reason_code"],
        comment=data["comment"],
        override_reason=data["override_reason"],
        capacity=data.get("capacity"),
        tasks=data.get("tasks"),
    )
    return Response(
        {
            "sign_off": SignOffSerializer(result.sign_off).data,
            "state": result.state.to_dict(),
            "moved": result.moved,
            "ticket_status": result.ticket.status,
        },
        status=status.HTTP_201_CREATED,
    )
