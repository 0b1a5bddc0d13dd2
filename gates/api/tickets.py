"""REST API of task types and release tickets with their actions (dispatched through ``gates.services.actions``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import django_filters
from django.contrib.auth.models import User
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from backends.models import Backend
from core.api import IsEngineerOrReadOnly, StrictInputSerializer, idempotent_create
from core.errors import InvalidInput
from evaluators.models import EvaluationRun
from gates.api.decisions import SignOffInputSerializer, ticket_decision, ticket_sign_off
from gates.models import TRANSITIONS, Bottleneck, Mechanism, ReleaseTicket, TaskType, TicketStatus
from gates.models.tickets import MAX_WINDOW_HOURS, MIN_WINDOW_HOURS
from gates.policy.rules import REFUSE_UNSETTLEABLE_CHOICES
from gates.selectors.evidence import PROVENANCE_ROW_FIELDS, ticket_provenance
from gates.selectors.plan import stored_ticket_plan
from gates.selectors.tickets import (
    TICKET_FIELDS,
    action_paths,
    ticket_list,
    ticket_row_with,
    ticket_rows,
    ticket_shown,
    ticket_status_and_owner,
)
from gates.services.actions import ticket_action_take
from gates.services.policy import gate_policy
from gates.services.provenance import evidence_accept
from gates.services.tickets import ticket_create, ticket_update
from gates.vocabulary import METRICS


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
    observation_window_hours = serializers.FloatField(
        min_value=MIN_WINDOW_HOURS, max_value=MAX_WINDOW_HOURS, required=False
    )
    canary_scope = serializers.DictField(required=False)


class BackendRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Backend
        fields = ["id", "name", "fingerprint"]
        read_only_fields = fields


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
        fields = TICKET_FIELDS
        read_only_fields = fields

    def get_allowed_actions(self, ticket: ReleaseTicket) -> list[str]:
        return action_paths(ticket.status)


class ProvenanceSerializer(serializers.Serializer):
    """Who produced one of the ticket's runs (``gates.selectors.evidence.ticket_provenance``)."""

    role = serializers.ChoiceField(choices=["baseline", "candidate"])
    run = serializers.IntegerField()
    # DRF's metaclass takes declared fields off the class, so this does not shadow Field.source.
    source = serializers.ChoiceField(choices=["optgate_worker", "import"])  # type: ignore[assignment]
    imported_by = serializers.CharField(allow_null=True)
    files = serializers.DictField(
        child=serializers.DictField(child=serializers.CharField()), help_text="task → {quality|performance: sha256}"
    )
    owner_imported = serializers.BooleanField()
    accepted = serializers.DictField(allow_null=True, help_text="{by, reason, at} once another reviewer accepted it")


class TicketDetailSerializer(TicketSerializer):
    provenance = ProvenanceSerializer(many=True, read_only=True)

    class Meta(TicketSerializer.Meta):
        fields = [*TICKET_FIELDS, "provenance"]
        read_only_fields = fields


class TaskPlanSerializer(serializers.Serializer):
    """One task's power plan (``gates.selectors.plan.TaskPlan``); rates are fractions, margins absolute."""

    task = serializers.CharField()
    role = serializers.ChoiceField(choices=["beneficiary", "risk"])
    metric = serializers.CharField(help_text="the deciding pass-rate guardrail: the one needing the most pairs")
    label = serializers.CharField()  # type: ignore[assignment]  # a declared field (see ProvenanceSerializer.source)
    margin = serializers.FloatField()
    confidence = serializers.FloatField()
    power = serializers.FloatField()
    discordance = serializers.FloatField(help_text="share of paired samples assumed to differ")
    discordance_source = serializers.CharField(help_text='"default", or what measured it')
    fixed_n = serializers.IntegerField(help_text="pairs one fixed-size run needs")
    max_n = serializers.IntegerField(help_text="pairs the sequential design needs at most")
    look_sizes = serializers.ListField(
        child=serializers.IntegerField(), help_text="cumulative pairs at each look of the design sized to max_n"
    )
    stage_looks = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="cumulative pairs at which the policy's staged evaluation looks (sequential.stage_size); "
        "empty when it judges one fixed stage",
    )
    most_pairs = serializers.IntegerField(
        help_text="pairs the evaluation takes at most: the last of stage_looks, or max_n when it is not staged"
    )
    expected_n = serializers.FloatField(
        help_text="pairs the evaluation is expected to take on a truly neutral change (at stage_looks where staged)"
    )
    shipped_samples = serializers.IntegerField()
    suite_size = serializers.IntegerField(help_text="shipped plus held-out samples available")
    settleable = serializers.BooleanField(help_text="max_n fits in suite_size")
    refused = serializers.BooleanField(help_text="not settleable, and the policy refuses on this discordance source")
    seconds_per_pair = serializers.FloatField()
    seconds_source = serializers.CharField()
    expected_engine_s = serializers.FloatField()
    max_engine_s = serializers.FloatField()
    message = serializers.CharField()


class UnplannedTaskSerializer(serializers.Serializer):
    task = serializers.CharField()
    reason = serializers.CharField()


class TicketPlanSerializer(serializers.Serializer):
    """The power plan of a ticket's tasks under the policy in force (``gates.selectors.plan``)."""

    policy = serializers.CharField()
    design = serializers.CharField(
        help_text="the policy's sequential design the plan sizes with: looks, spending, power"
    )
    discordance_default = serializers.FloatField()
    refuse_unsettleable = serializers.ChoiceField(choices=list(REFUSE_UNSETTLEABLE_CHOICES))
    tasks = TaskPlanSerializer(many=True)
    unplanned = UnplannedTaskSerializer(many=True)
    expected_engine_s = serializers.FloatField()
    max_engine_s = serializers.FloatField()
    refused = serializers.BooleanField(help_text="the policy would refuse this ticket at submission now")


class EvidenceAcceptSerializer(StrictInputSerializer):
    run = serializers.IntegerField(min_value=1, max_value=2**62, help_text="the owner-imported run to accept")
    reason = serializers.CharField(max_length=2000, help_text="why this imported evidence can be trusted")


class TransitionSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)


class TicketResumeSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=4000, help_text="why the canary may go on")


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
        return queryset & ticket_list(owner=value)

    def filter_task(self, queryset: Any, name: str, value: str) -> Any:
        return queryset.filter(pk__in=ticket_list(task=value).values("pk"))

    def filter_mechanism(self, queryset: Any, name: str, value: str) -> Any:
        return queryset & ticket_list(mechanism=value)


def _transition_action(name: str) -> Any:
    sources, target = TRANSITIONS[name]

    def take(self: TicketViewSet, request: Request, pk: str | None = None) -> Response:
        ticket = self.get_object()
        body = TransitionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        moved = ticket_action_take(ticket=ticket, action=name, actor=request.user, **body.validated_data)
        return Response(ticket_shown(moved))

    take.__doc__ = f"{name.replace('_', ' ').capitalize()}: {' | '.join(sorted(sources))} → {target}."
    take.__name__ = name
    # extend_schema goes on top: @action replaces the function's kwargs, where the schema is kept.
    routed = action(detail=True, methods=["post"], url_path=name.replace("_", "-"))(take)
    return extend_schema(request=TransitionSerializer, responses={200: TicketSerializer})(routed)


_NO_TICKET = "No ReleaseTicket matches the given query."


def _ticket_id(value: str | None) -> int | None:
    """The ticket id a read's URL names; None for anything that is not an integer."""
    try:
        return int(value or "")
    except ValueError:
        return None


def _with_provenance(ticket: ReleaseTicket) -> dict[str, Any]:
    """The ticket as the API shows it, with who produced each of its runs."""
    shown = ticket_shown(ticket)
    shown["provenance"] = ticket_provenance(ticket.pk)
    return shown


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
        # Responses are built by ``ticket_rows``; the reads by id (``retrieve``, ``decision``) read
        # nothing through this queryset, the other actions the ticket itself.
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

    @extend_schema(responses={200: TicketDetailSerializer})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # The ticket's row is the only read: no separate lookup of the ticket before it.
        # Its runs' provenance comes from the same row.
        pk = _ticket_id(kwargs["pk"])
        found = None if pk is None else ticket_row_with(pk, also=PROVENANCE_ROW_FIELDS)
        if found is None:
            raise Http404(_NO_TICKET)
        shown, row = found
        shown["provenance"] = ticket_provenance(shown["id"], row=row)
        return Response(shown)

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
            ticket = ticket_create(owner=cast(User, request.user), **data.validated_data)
            return Response(ticket_shown(ticket), status=status.HTTP_201_CREATED)

        return idempotent_create(request, "tickets", file_ticket)

    @extend_schema(request=TicketInputSerializer, responses={200: TicketSerializer})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Edit a draft ticket; any other status answers 409."""
        ticket = self.get_object()
        data = TicketInputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        ticket_update(ticket=ticket, actor=request.user, **data.validated_data)
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
        body = TransitionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ticket = ticket_action_take(
            ticket=self.get_object(), action="start_canary", actor=request.user, **body.validated_data
        )
        return Response(ticket_shown(ticket))

    @extend_schema(request=TransitionSerializer, responses={200: TicketSerializer})
    @action(detail=True, methods=["post"])
    def promote(self, request: Request, pk: str | None = None) -> Response:
        """Promote after the observation window: canary → default; the tasks' default routes move to the candidate."""
        body = TransitionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ticket = ticket_action_take(
            ticket=self.get_object(), action="promote", actor=request.user, **body.validated_data
        )
        return Response(ticket_shown(ticket))

    @extend_schema(request=TicketRollbackSerializer, responses={200: TicketSerializer})
    @action(detail=True, methods=["post"], url_path="roll-back")
    def roll_back(self, request: Request, pk: str | None = None) -> Response:
        """Move one task type (or all of the ticket's) back to the rollback target in one route version."""
        ticket = self.get_object()
        body = TicketRollbackSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ticket_action_take(
            ticket=ticket,
            action="roll_back",
            actor=request.user,
            reason=body.validated_data["reason"],
            task=body.validated_data.get("task") or None,
        )
        return Response(ticket_shown(ticket))

    @extend_schema(request=TicketResumeSerializer, responses={200: TicketSerializer})
    @action(detail=True, methods=["post"], url_path="resume-canary", permission_classes=[permissions.IsAuthenticated])
    def resume_canary(self, request: Request, pk: str | None = None) -> Response:
        """Resume a canary its analysis rounds paused (reviewers, admins); 409 when it is not paused."""
        body = TicketResumeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ticket = ticket_action_take(
            ticket=self.get_object(), action="resume_canary", actor=request.user, reason=body.validated_data["reason"]
        )
        return Response(ticket_shown(ticket))

    # --- the gate (gates.api.decisions): the current decision and reviewer sign-off ---

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"], permission_classes=[permissions.IsAuthenticated])
    def decision(self, request: Request, pk: str | None = None) -> Response:
        """The ticket's current gate decision, its sign-offs and earlier decisions."""
        # The summary's next action reads the ticket's status and owner, nothing else of it.
        ticket_id = _ticket_id(pk)
        if ticket_id is None:
            raise Http404  # as DRF's get_object answers a malformed id
        ticket = ticket_status_and_owner(ticket_id)
        if ticket is None:
            raise Http404(_NO_TICKET)
        return ticket_decision(ticket, request.user)

    @extend_schema(responses={200: TicketPlanSerializer})
    @action(detail=True, methods=["get"], permission_classes=[permissions.IsAuthenticated])
    def plan(self, request: Request, pk: str | None = None) -> Response:
        """The power plan: per task the paired samples its margin needs, the suite size and the engine time."""
        ticket = self.get_object()
        return Response(stored_ticket_plan(ticket=ticket, policy=gate_policy()).to_dict())

    @extend_schema(request=SignOffInputSerializer, responses={201: dict})
    @action(detail=True, methods=["post"], url_path="sign-off", permission_classes=[permissions.IsAuthenticated])
    def sign_off(self, request: Request, pk: str | None = None) -> Response:
        """Sign off the current decision: {decision, reason_code, comment, override_reason, capacity, tasks}."""
        return ticket_sign_off(request, self.get_object())

    @extend_schema(request=EvidenceAcceptSerializer, responses={201: TicketDetailSerializer})
    @action(detail=True, methods=["post"], url_path="accept-evidence", permission_classes=[permissions.IsAuthenticated])
    def accept_evidence(self, request: Request, pk: str | None = None) -> Response:
        """Accept evidence the owner imported so it may approve (reviewers other than the owner; ledgered)."""
        body = EvidenceAcceptSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ticket = self.get_object()
        run = EvaluationRun.objects.filter(pk=body.validated_data["run"]).select_related("imported_by").first()
        if run is None:
            raise InvalidInput({"run": f"no run #{body.validated_data['run']}"})
        evidence_accept(ticket=ticket, run=run, actor=request.user, reason=body.validated_data["reason"])
        return Response(_with_provenance(ticket), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={202: TicketSerializer})
    @action(detail=True, methods=["post"], permission_classes=[permissions.IsAuthenticated])
    def evaluate(self, request: Request, pk: str | None = None) -> Response:
        """Submit (if a draft) and evaluate on the GPU workers: baseline and candidate runs, then the judge.

        Evaluating a *needs evidence* ticket again measures both backends afresh.
        """
        ticket = ticket_action_take(ticket=self.get_object(), action="evaluate", actor=request.user)
        return Response(ticket_shown(ticket), status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: dict})
    @action(
        detail=True, methods=["post"], url_path="cancel-evaluation", permission_classes=[permissions.IsAuthenticated]
    )
    def cancel_evaluation(self, request: Request, pk: str | None = None) -> Response:
        """Cancel the ticket's unfinished runs; running engines are torn down."""
        runs = ticket_action_take(ticket=self.get_object(), action="cancel_evaluation", actor=request.user)
        return Response({"cancelled_runs": [run.pk for run in runs]})
