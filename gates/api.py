"""REST API of the gates app: task types and release tickets with their transition actions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import django_filters
from django.contrib.auth.models import User
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from gates import selectors, services
from gates.api_gate import SignOffInputSerializer
from gates.models import TRANSITIONS, Bottleneck, Mechanism, ReleaseTicket, TaskType, TicketStatus, allowed_actions
from gates.vocabulary import METRICS
from ledger.models import Backend
from optgate.api import IsEngineerOrReadOnly, StrictInputSerializer, idempotent_create


class TaskTypeSerializer(serializers.ModelSerializer):
    class Meta:
        model = TaskType
        fields = ["slug", "name", "description", "risk_tier", "suite_ref", "suite_version"]
        read_only_fields = fields


class TaskTypeViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = TaskType.objects.all()
    serializer_class = TaskTypeSerializer
    lookup_field = "slug"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"  # a slug; anything else (a NUL byte, say) is a 404, not a query
    pagination_class = None


class BackendRefField(serializers.SlugRelatedField):
    """A backend named by its name (CI files refer to backends by name)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="name", queryset=Backend.objects.all(), **kwargs)


class TicketInputSerializer(StrictInputSerializer):
    """What an engineer files. Shapes are checked here; business rules in the service."""

    read_only_hint = {
        "status": "read-only: the status moves only through the POST actions",
        "owner": "read-only: the owner is whoever files the ticket",
    }

    title = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True)
    mechanisms = serializers.ListField(child=serializers.ChoiceField(choices=Mechanism.choices), allow_empty=False)
    bottleneck = serializers.ChoiceField(choices=Bottleneck.choices)
    bottleneck_evidence = serializers.CharField()
    baseline = BackendRefField()
    candidate = BackendRefField()
    beneficiary_tasks = serializers.SlugRelatedField(
        slug_field="slug", queryset=TaskType.objects.all(), many=True, allow_empty=False
    )
    risk_tasks = serializers.SlugRelatedField(
        slug_field="slug", queryset=TaskType.objects.all(), many=True, required=False
    )
    benefit_metrics = serializers.ListField(child=serializers.ChoiceField(choices=sorted(METRICS)), allow_empty=False)
    guardrail_metrics = serializers.ListField(child=serializers.ChoiceField(choices=sorted(METRICS)), allow_empty=False)
    rollback_target = BackendRefField()
    rollback_plan = serializers.DictField(child=serializers.CharField())
    observation_window_hours = serializers.IntegerField(min_value=1, max_value=24 * 366, required=False)
    canary_scope = serializers.DictField(required=False)


class BackendRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Backend
        fields = ["id", "name", "fingerprint"]
        read_only_fields = fields


def action_paths(status: str) -> list[str]:
    """The URL paths of the actions a ticket in ``status`` may take (``start_canary`` → ``start-canary``)."""
    return [name.replace("_", "-") for name in allowed_actions(status)]


class TicketSerializer(serializers.ModelSerializer):
    owner: serializers.SlugRelatedField = serializers.SlugRelatedField(slug_field="username", read_only=True)
    baseline = BackendRefSerializer(read_only=True)
    candidate = BackendRefSerializer(read_only=True)
    rollback_target = BackendRefSerializer(read_only=True)
    beneficiary_tasks: serializers.RelatedField = serializers.SlugRelatedField(
        slug_field="slug", many=True, read_only=True
    )
    risk_tasks: serializers.RelatedField = serializers.SlugRelatedField(slug_field="slug", many=True, read_only=True)
    allowed_actions = serializers.SerializerMethodField()

    class Meta:
        model = ReleaseTicket
        fields = [
            "id", "title", "description", "status", "allowed_actions", "mechanisms", "bottleneck",
            "bottleneck_evidence", "baseline", "candidate", "beneficiary_tasks", "risk_tasks", "benefit_metrics",
            "guardrail_metrics", "rollback_target", "rollback_plan", "observation_window_hours", "canary_scope",
            "owner", "created_at", "updated_at", "submitted_at", "decided_at", "closed_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_allowed_actions(self, ticket: ReleaseTicket) -> list[str]:
        return action_paths(ticket.status)


class TransitionSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)


class TicketRollbackSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=4000)
    task = serializers.SlugField(
        required=False, allow_blank=True, help_text="one task type; all of the ticket's if empty"
    )


class TicketFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=TicketStatus.choices)
    owner = django_filters.CharFilter(method="filter_owner", label="owner's username")
    task = django_filters.CharFilter(method="filter_task", label="beneficiary or risk task type slug")
    mechanism = django_filters.ChoiceFilter(choices=Mechanism.choices, method="filter_mechanism")

    class Meta:
        model = ReleaseTicket
        fields = ["status", "owner", "task", "mechanism"]

    def filter_owner(self, queryset: Any, name: str, value: str) -> Any:
        return queryset & selectors.ticket_list(owner=value)

    def filter_task(self, queryset: Any, name: str, value: str) -> Any:
        return queryset.filter(pk__in=selectors.ticket_list(task=value).values("pk"))

    def filter_mechanism(self, queryset: Any, name: str, value: str) -> Any:
        return queryset & selectors.ticket_list(mechanism=value)


def _transition_action(name: str) -> Any:
    sources, target = TRANSITIONS[name]

    def take(self: TicketViewSet, request: Request, pk: str | None = None) -> Response:
        ticket = self.get_object()
        body = TransitionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        moved = services.ticket_transition(ticket=ticket, action=name, actor=request.user, **body.validated_data)
        return Response(ticket_shown(moved))

    take.__doc__ = f"{name.replace('_', ' ').capitalize()}: {' | '.join(sorted(sources))} → {target}."
    take.__name__ = name
    # extend_schema goes on top: @action replaces the function's kwargs, where the schema is kept.
    routed = action(detail=True, methods=["post"], url_path=name.replace("_", "-"))(take)
    return extend_schema(request=TransitionSerializer, responses={200: TicketSerializer})(routed)


TICKET_TIMES = ("created_at", "updated_at", "submitted_at", "decided_at", "closed_at")
BACKEND_REFS = ("baseline", "candidate", "rollback_target")
TICKET_PLAIN_FIELDS = [
    name for name in TicketSerializer.Meta.fields
    if name not in {"allowed_actions", "owner", "beneficiary_tasks", "risk_tasks", *BACKEND_REFS, *TICKET_TIMES}
]  # fmt: skip
TICKET_ROW_FIELDS = [
    *TICKET_PLAIN_FIELDS,
    *TICKET_TIMES,
    *(f"{backend}__{field}" for backend in BACKEND_REFS for field in ("id", "name", "fingerprint")),
    "owner__username",
]


def _utc_iso(moment: datetime) -> str:
    """A stored time as DRF's DateTimeField writes it with ``TIME_ZONE = "UTC"``."""
    text = moment.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def ticket_rows(tickets: QuerySet[ReleaseTicket]) -> list[dict[str, Any]]:
    """``TicketSerializer(tickets, many=True).data``, built from plain rows in three queries.

    Through the serializer a page of 50 tickets built some 350 model instances and made 1,200
    per-field calls, and one ticket paid for building the serializer's fields from the model:
    most of each request's time. ``TicketSerializer`` stays the schema; tests hold the two equal.
    """
    rows = list(tickets.values(*TICKET_ROW_FIELDS))
    tasks: dict[str, dict[int, list[str]]] = {}
    for relation in ("beneficiary_tasks", "risk_tasks"):
        tasks[relation] = {row["id"]: [] for row in rows}
        links = getattr(ReleaseTicket, relation).through.objects.filter(releaseticket_id__in=list(tasks[relation]))
        for ticket_id, slug in links.order_by("tasktype__slug").values_list("releaseticket_id", "tasktype__slug"):
            tasks[relation][ticket_id].append(slug)
    shown = []
    for row in rows:
        ticket: dict[str, Any] = {name: row[name] for name in TICKET_PLAIN_FIELDS}
        ticket["allowed_actions"] = action_paths(row["status"])
        for backend in BACKEND_REFS:
            ticket[backend] = {field: row[f"{backend}__{field}"] for field in ("id", "name", "fingerprint")}
        for relation, slugs in tasks.items():
            ticket[relation] = slugs[row["id"]]
        ticket["owner"] = row["owner__username"]
        for name in TICKET_TIMES:
            ticket[name] = None if row[name] is None else _utc_iso(row[name])
        shown.append({name: ticket[name] for name in TicketSerializer.Meta.fields})
    return shown


def ticket_shown(ticket: ReleaseTicket) -> dict[str, Any]:
    """One ticket as the API shows it, read afresh."""
    return ticket_rows(ReleaseTicket.objects.filter(pk=ticket.pk))[0]


class TicketViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Release tickets. Status is read-only: it moves only through the POST actions."""

    serializer_class = TicketSerializer
    permission_classes = [IsEngineerOrReadOnly]
    filterset_class = TicketFilter
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self) -> Any:
        # Responses are built by ``ticket_rows``; the reads need only the ticket's id, the other
        # actions the ticket itself.
        if self.action in ("retrieve", "decision"):
            return ReleaseTicket.objects.only("pk")
        return ReleaseTicket.objects.all()

    def filter_queryset(self, queryset: Any) -> Any:
        # The list's filters (?status=, ?owner=…) choose among tickets; one named by id is just that ticket.
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        tickets = self.filter_queryset(self.get_queryset())
        # The page is chosen (and counted) on the tickets alone: counting the rows would join
        # the backends and owners too. Its rows come back in the same (the model's) order.
        page = self.paginate_queryset(tickets.values_list("pk", flat=True))
        return self.get_paginated_response(ticket_rows(ReleaseTicket.objects.filter(pk__in=page)))

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(ticket_shown(self.get_object()))

    def get_permissions(self) -> Sequence[Any]:
        # Transition actions are open to every signed-in role; the service decides who may act.
        if self.action in TRANSITIONS:
            return [permissions.IsAuthenticated()]
        return list(super().get_permissions())

    @extend_schema(request=TicketInputSerializer, responses={201: TicketSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        def file_ticket() -> Response:
            data = TicketInputSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            ticket = services.ticket_create(owner=cast(User, request.user), **data.validated_data)
            return Response(ticket_shown(ticket), status=status.HTTP_201_CREATED)

        return idempotent_create(request, "tickets", file_ticket)

    @extend_schema(request=TicketInputSerializer, responses={200: TicketSerializer})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Edit a draft ticket; any other status answers 409."""
        ticket = self.get_object()
        data = TicketInputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        services.ticket_update(ticket=ticket, actor=request.user, **data.validated_data)
        return Response(ticket_shown(ticket))

    # Approve, restrict and reject happen only through sign-off (capacities, overrides); the
    # evaluation moves belong to the workers; canary, promotion and rollback move routes too.
    submit = _transition_action("submit")
    request_evidence = _transition_action("request_evidence")
    retire = _transition_action("retire")

    @extend_schema(request=TransitionSerializer, responses={200: TicketSerializer})
    @action(detail=True, methods=["post"], url_path="start-canary")
    def start_canary(self, request: Request, pk: str | None = None) -> Response:
        """Start the canary (approved | restricted → canary): signed tasks route to the candidate for canary tenants."""
        from gates.routing import routes_start_canary

        body = TransitionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ticket = routes_start_canary(ticket=self.get_object(), actor=request.user, **body.validated_data)
        return Response(ticket_shown(ticket))

    @extend_schema(request=TransitionSerializer, responses={200: TicketSerializer})
    @action(detail=True, methods=["post"])
    def promote(self, request: Request, pk: str | None = None) -> Response:
        """Promote after the observation window: canary → default; the tasks' default routes move to the candidate."""
        from gates.routing import routes_promote

        body = TransitionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ticket = routes_promote(ticket=self.get_object(), actor=request.user, **body.validated_data)
        return Response(ticket_shown(ticket))

    @extend_schema(request=TicketRollbackSerializer, responses={200: TicketSerializer})
    @action(detail=True, methods=["post"], url_path="roll-back")
    def roll_back(self, request: Request, pk: str | None = None) -> Response:
        """Move one task type (or all of the ticket's) back to the rollback target in one route version."""
        from gates.routing import routes_rollback

        ticket = self.get_object()
        body = TicketRollbackSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        routes_rollback(ticket=ticket, actor=request.user, reason=body.validated_data["reason"],
                        task=body.validated_data.get("task") or None)  # fmt: skip
        return Response(ticket_shown(ticket))

    # --- the gate (gates.api_gate): the current decision and reviewer sign-off ---

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"], permission_classes=[permissions.IsAuthenticated])
    def decision(self, request: Request, pk: str | None = None) -> Response:
        """The ticket's current gate decision, its sign-offs and earlier decisions."""
        from gates.api_gate import ticket_decision

        return ticket_decision(self.get_object())

    @extend_schema(request=SignOffInputSerializer, responses={201: dict})
    @action(detail=True, methods=["post"], url_path="sign-off", permission_classes=[permissions.IsAuthenticated])
    def sign_off(self, request: Request, pk: str | None = None) -> Response:
        """Sign off the current decision: {decision, reason_code, comment, override_reason, capacity, tasks}."""
        from gates.api_gate import ticket_sign_off

        return ticket_sign_off(request, self.get_object())

    @extend_schema(request=None, responses={202: TicketSerializer})
    @action(detail=True, methods=["post"], permission_classes=[permissions.IsAuthenticated])
    def evaluate(self, request: Request, pk: str | None = None) -> Response:
        """Submit (if a draft) and evaluate on the GPU workers: baseline and candidate runs, then the judge.

        Evaluating a *needs evidence* ticket again measures both backends afresh.
        """
        from workers.services import evaluation_request

        ticket = evaluation_request(ticket=self.get_object(), actor=request.user)
        return Response(ticket_shown(ticket), status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: dict})
    @action(
        detail=True, methods=["post"], url_path="cancel-evaluation", permission_classes=[permissions.IsAuthenticated]
    )
    def cancel_evaluation(self, request: Request, pk: str | None = None) -> Response:
        """Cancel the ticket's unfinished runs; running engines are torn down."""
        from workers.services import evaluation_cancel

        runs = evaluation_cancel(ticket=self.get_object(), actor=request.user)
        return Response({"cancelled_runs": [run.pk for run in runs]})
