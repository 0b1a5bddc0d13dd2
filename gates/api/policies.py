"""REST API of the gate policies: list, read, validate a policy text, and dry-run one on a ticket."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import StrictInputSerializer
from gates.models import ReleaseTicket
from gates.policy.parse import list_policies, validate_policy_text
from gates.policy.rules import Policy, PolicyError
from gates.services.decisions import decision_judge
from gates.services.policy import gate_policy


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
