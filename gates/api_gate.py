"""REST API of the gate: policies, decisions, reviewer sign-off and the route table.

Views parse and shape; the services in ``gates.decisions``, ``gates.signoff`` and
``gates.routing`` decide and write.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, prefetch_related_objects
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response

from gates import routing, signoff
from gates.decisions import decision_current, decision_judge, gate_policy
from gates.models import GateDecision, ReasonCode, ReleaseTicket, ReviewerCapacity, SignOff, SignOffVerdict
from gates.policy import Policy, PolicyError, list_policies, validate_policy_text
from ledger.models import Backend
from optgate.api import StrictInputSerializer
from optgate.errors import InvalidInput

# --- policies ----------------------------------------------------------------------------------


def _policy_summary(policy: Policy) -> dict[str, Any]:
    return {
        "name": policy.name,
        "version": policy.version,
        "version_label": policy.version_label,
        "dry_run": policy.dry_run,
        "description": policy.description.strip(),
        "tasks": sorted(policy.tasks),
    }


def _policy_errors(exc: PolicyError) -> Response:
    problems = [{"path": path, "problem": problem} for path, problem in exc.errors]
    return Response({"text": [str(exc)], "errors": problems}, status=status.HTTP_400_BAD_REQUEST)


class PolicyTextSerializer(StrictInputSerializer):
    text = serializers.CharField(trim_whitespace=False, max_length=200_000)


class DryRunSerializer(StrictInputSerializer):
    ticket = serializers.PrimaryKeyRelatedField(queryset=ReleaseTicket.objects.all())
    text = serializers.CharField(required=False, trim_whitespace=False, max_length=200_000)
    seed = serializers.IntegerField(required=False, min_value=0)


class PolicyViewSet(viewsets.ViewSet):
    """Gate policies: versioned YAML in the repository, validated on load."""

    permission_classes = [permissions.IsAuthenticated]
    lookup_field = "name"
    lookup_value_regex = r"[a-z][a-z0-9_-]*(@[0-9]+)?"

    # A plain ViewSet: the schema generator cannot tell list from retrieve without the operation id.
    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="v1_policies_list")
    def list(self, request: Request) -> Response:
        return Response([_policy_summary(policy) for policy in list_policies()])

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def retrieve(self, request: Request, name: str | None = None) -> Response:
        """One policy in full, by name (``default``) or version label (``default@2``)."""
        matches = [p for p in list_policies() if name in (p.name, p.version_label)]
        if not matches:
            return Response({"detail": f"no policy {name!r}"}, status=status.HTTP_404_NOT_FOUND)
        policy = max(matches, key=lambda p: p.version)
        data = policy.to_dict()
        data.pop("source", None)
        return Response(data)

    @extend_schema(request=PolicyTextSerializer, responses=OpenApiTypes.OBJECT)
    @action(detail=False, methods=["post"])
    def validate(self, request: Request) -> Response:
        """Validate YAML policy text: 200 with its summary, or 400 naming each path and problem."""
        body = PolicyTextSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            policy = validate_policy_text(body.validated_data["text"])
        except PolicyError as exc:
            return _policy_errors(exc)
        return Response({"valid": True, "policy": _policy_summary(policy)})

    @extend_schema(request=DryRunSerializer, responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["post"], url_path="dry-run")
    def dry_run(self, request: Request, name: str | None = None) -> Response:
        """Judge a ticket's stored runs under this policy (or the posted ``text``); stores and moves nothing."""
        body = DryRunSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if "text" in data:
            try:
                policy = validate_policy_text(data["text"])
            except PolicyError as exc:
                return _policy_errors(exc)
        else:
            policy = gate_policy(name)
        judged = decision_judge(ticket=data["ticket"], policy=policy, seed=data.get("seed"))
        return Response({**judged.to_dict(), "stored": False})


# --- decisions and sign-off on a ticket ----------------------------------------------------------


class SignOffSerializer(serializers.ModelSerializer):
    reviewer: serializers.SlugRelatedField = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = SignOff
        fields = ["id", "reviewer", "capacity", "verdict", "tasks", "reason_code", "comment", "override",
                  "override_reason", "created_at"]  # fmt: skip
        read_only_fields = fields


class DecisionSerializer(serializers.ModelSerializer):
    sign_offs = SignOffSerializer(many=True, read_only=True)
    sign_off_state = serializers.SerializerMethodField()

    class Meta:
        model = GateDecision
        fields = [
            "id", "ticket", "policy_version", "dry_run", "baseline_run", "candidate_run", "outcome", "reasons",
            "verdicts", "proposed_routes", "allowed_tasks", "samples_needed", "warnings", "seed", "created_at",
            "signed_verdict", "signed_tasks", "signed_at", "sign_offs", "sign_off_state",
        ]  # fmt: skip
        read_only_fields = fields

    def get_sign_off_state(self, decision: GateDecision) -> list[dict[str, Any]]:
        return signoff.signoff_summary(decision, decision.sign_offs.all())  # prefetched by the read


def ticket_decision(ticket: ReleaseTicket) -> Response:
    """The ticket's current decision with its sign-offs, and the earlier decisions in brief."""
    current = decision_current(ticket=ticket)
    if current is None:
        return Response({"detail": f"ticket #{ticket.pk} has no gate decision yet"}, status=status.HTTP_404_NOT_FOUND)
    # The sign-offs with their reviewers in one query, not one per sign-off.
    prefetch_related_objects([current], Prefetch("sign_offs", queryset=SignOff.objects.select_related("reviewer")))
    earlier = GateDecision.objects.filter(ticket=ticket).exclude(pk=current.pk).order_by("-id")
    history = earlier.values("id", "outcome", "policy_version", "dry_run", "created_at")
    return Response({**DecisionSerializer(current).data, "history": list(history)})


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


# --- routes ------------------------------------------------------------------------------------


class ExportFormatNegotiation(DefaultContentNegotiation):
    """On the routes API ``?format=`` names the export format (json | litellm), not a renderer."""

    def select_renderer(self, request: Request, renderers: Any, format_suffix: str | None = None) -> Any:
        return super().select_renderer(request, renderers, format_suffix=format_suffix or "json")


class CacheSaltQuerySerializer(serializers.Serializer):
    task = serializers.SlugField()
    tenant = serializers.CharField(required=False, allow_blank=True, default="", max_length=100)


class RouteSetSerializer(StrictInputSerializer):
    task = serializers.SlugField()
    tenant = serializers.CharField(required=False, allow_blank=True, default="", max_length=100)
    backend = serializers.SlugRelatedField(slug_field="name", queryset=Backend.objects.all())
    reason = serializers.CharField(max_length=4000)


def _version_json(version: Any) -> dict[str, Any]:
    return {
        "number": version.number,
        "kind": version.kind,
        "reason": version.reason,
        "ticket": version.ticket_id,
        "actor": version.actor.get_username() if version.actor else "system",
        "changes": version.changes,
        "created_at": version.created_at,
    }


class RouteViewSet(viewsets.ViewSet):
    """The versioned route table. Reads for every signed-in user; each write is a service that
    checks its actor and adds a table version and a ledger entry.
    """

    permission_classes = [permissions.IsAuthenticated]
    content_negotiation_class = ExportFormatNegotiation

    @extend_schema(parameters=[OpenApiParameter("version", int, required=False)], responses=OpenApiTypes.OBJECT)
    def list(self, request: Request) -> Response:
        """The current table (or ``?version=N``)."""
        raw = request.query_params.get("version")
        if raw is not None and not (raw.isascii() and raw.isdigit()):  # int() refuses "²", which isdigit() accepts
            raise InvalidInput({"version": "must be a version number"})
        number = int(raw) if raw is not None else None
        current = routing.route_version_current()
        return Response({
            "version": number if number is not None else (current.number if current else 0),
            "routes": [routing.route_json(route) for route in routing.route_table(version=number)],
        })  # fmt: skip

    @extend_schema(responses=OpenApiTypes.OBJECT)
    @action(detail=False, methods=["get"])
    def history(self, request: Request) -> Response:
        """Every version of the table, newest first, with what changed and why."""
        paginator = LimitOffsetPagination()
        page = paginator.paginate_queryset(routing.route_history(), request, view=self) or []
        return paginator.get_paginated_response([_version_json(v) for v in page])

    @extend_schema(
        parameters=[OpenApiParameter("format", str, enum=["json", "litellm"], required=False)],
        responses=OpenApiTypes.OBJECT,
    )
    @action(detail=False, methods=["get"])
    def export(self, request: Request) -> Response:
        """The current table for the gateway: OptGate JSON, or a LiteLLM proxy config (``?format=litellm``)."""
        wanted = request.query_params.get("format", "json")
        if wanted == "litellm":
            return Response(routing.routes_export_litellm())
        if wanted != "json":
            raise InvalidInput({"format": "must be json or litellm"})
        return Response(routing.routes_export_json())

    @extend_schema(
        parameters=[OpenApiParameter("task", str, required=True), OpenApiParameter("tenant", str)],
        responses=OpenApiTypes.OBJECT,
    )
    @action(detail=False, methods=["get"], url_path="cache-salt")
    def cache_salt(self, request: Request) -> Response:
        """The ``cache_salt`` the gateway sends for a tenant's requests on a task's route."""
        query = CacheSaltQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        task, tenant = query.validated_data["task"], query.validated_data["tenant"]
        routes = {r.tenant: r for r in routing.route_table().filter(task__slug=task)}
        route = routes.get(tenant) or routes.get("")
        if route is None:
            raise InvalidInput({"task": f"no route for {task!r}"})
        return Response({
            "route": routing.route_name(task, route.tenant),
            "backend": route.backend.name,
            "tenant": tenant or None,
            "cache_salt": routing.cache_salt(route.backend, tenant),
            "recipe": routing.cache_key_recipe(route.backend),
        })  # fmt: skip

    @extend_schema(request=RouteSetSerializer, responses=OpenApiTypes.OBJECT)
    @action(detail=False, methods=["post"], url_path="set")
    def set_route(self, request: Request) -> Response:
        """Point one scope at a backend by hand (admins): seeding the table or an emergency."""
        body = RouteSetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version = routing.routes_set(actor=request.user, **body.validated_data)
        return Response(_version_json(version), status=status.HTTP_201_CREATED)
