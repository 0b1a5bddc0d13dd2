"""REST API of the canary: business-signal counts for systems without Prometheus, and the rounds.

``POST /api/v1/canary/outcomes/`` takes ``{"counts": [{"task", "backend", "tenant", "outcome",
"count"}, …]}`` (the contract of docs/canary.md); send an ``Idempotency-Key`` so a retry does not
count twice. ``GET`` lists the running totals. ``GET /api/v1/tickets/{id}/canary-rounds/`` lists a
ticket's analysis rounds with their numbers, verdicts and actions.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import permissions, serializers, status
from rest_framework.decorators import api_view, permission_classes
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import StrictInputSerializer, idempotent_create
from gates.canary.contract import OUTCOMES
from gates.models import CanaryRound, OutcomeCount
from gates.selectors.tickets import ticket_get
from gates.services.outcomes import outcomes_record

TENANT = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"


class OutcomeCountInput(StrictInputSerializer):
    task = serializers.SlugField(max_length=60)
    backend = serializers.SlugField(max_length=100)
    tenant = serializers.RegexField(
        TENANT,
        max_length=100,
        error_messages={"invalid": "letters, digits and _ . : - (starting with a letter or digit)"},
    )
    outcome = serializers.ChoiceField(choices=OUTCOMES)
    count = serializers.IntegerField(min_value=1, max_value=1_000_000)


class OutcomesInput(StrictInputSerializer):
    counts = serializers.ListField(child=OutcomeCountInput(), min_length=1, max_length=1000)


class OutcomeTotalSerializer(serializers.ModelSerializer):
    class Meta:
        model = OutcomeCount
        fields = ["task", "backend", "tenant", "outcome", "total", "updated_at"]
        read_only_fields = fields


class CanaryRoundSerializer(serializers.ModelSerializer):
    class Meta:
        model = CanaryRound
        fields = [
            "number",
            "started_at",
            "window_start",
            "window_end",
            "policy_version",
            "verdict",
            "action",
            "reason",
            "tasks",
            "traffic",
            "queries",
            "details",
            "error",
        ]
        read_only_fields = fields


@extend_schema(
    methods=["POST"],
    request=OutcomesInput,
    responses={201: inline_serializer("OutcomesRecorded", {"totals": OutcomeTotalSerializer(many=True)})},
)
@extend_schema(methods=["GET"], responses={200: OutcomeTotalSerializer(many=True)})
@api_view(["GET", "POST"])
@permission_classes([permissions.IsAuthenticated])
def canary_outcomes(request: Request) -> Response:
    """Post business-signal counts (engineers' and admins' tokens), or list the running totals."""
    if request.method == "GET":
        totals = OutcomeCount.objects.order_by("task", "backend", "tenant", "outcome")
        for key in ("task", "backend", "tenant"):
            value = request.query_params.get(key, "")
            if "\x00" in value:  # PostgreSQL refuses to compare text holding a NUL character
                return Response({key: ["must not contain NUL characters"]}, status=status.HTTP_400_BAD_REQUEST)
            if value:
                totals = totals.filter(**{key: value})
        return Response(OutcomeTotalSerializer(totals[:1000], many=True).data)

    def record() -> Response:
        data = OutcomesInput(data=request.data)
        data.is_valid(raise_exception=True)
        totals = outcomes_record(counts=data.validated_data["counts"], actor=request.user)
        return Response({"totals": OutcomeTotalSerializer(totals, many=True).data}, status=status.HTTP_201_CREATED)

    return idempotent_create(request, "canary-outcomes", record)


@extend_schema(responses={200: CanaryRoundSerializer(many=True)})
@api_view(["GET"])
@permission_classes([permissions.IsAuthenticated])
def ticket_canary_rounds(request: Request, pk: int) -> Response:
    """A ticket's canary analysis rounds, newest first (at most 500)."""
    ticket = ticket_get(pk=pk) if pk <= 2**62 else None  # beyond a 64-bit id: no such ticket
    if ticket is None:
        return Response({"detail": f"no ticket #{pk}"}, status=status.HTTP_404_NOT_FOUND)
    rounds = CanaryRound.objects.filter(ticket=ticket).order_by("-number")[:500]
    return Response(CanaryRoundSerializer(rounds, many=True).data)
