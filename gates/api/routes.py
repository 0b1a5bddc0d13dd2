"""REST API of the route table: the current table, its history and exports, cache salts, setting a route."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response

from backends.models import Backend
from backends.prefix_cache import cache_key_recipe, cache_salt
from core.api import Pagination, StrictInputSerializer
from core.errors import InvalidInput
from gates.selectors.routes import (
    route_history,
    route_json,
    route_name,
    route_resolve,
    route_table,
    route_version_current,
    routes_export_json,
    routes_export_litellm,
)
from gates.services import routing


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
        current = route_version_current()
        return Response(
            {
                "version": number if number is not None else (current.number if current else 0),
                "routes": [route_json(route) for route in route_table(version=number)],
            }
        )

    @extend_schema(responses=OpenApiTypes.OBJECT)
    @action(detail=False, methods=["get"])
    def history(self, request: Request) -> Response:
        """Every version of the table, newest first, with what changed and why."""
        paginator = Pagination()
        page = paginator.paginate_queryset(route_history(), request, view=self) or []
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
            return Response(routes_export_litellm())
        if wanted != "json":
            raise InvalidInput({"format": "must be json or litellm"})
        return Response(routes_export_json())

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
        route = route_resolve(task=task, tenant=tenant)
        if route is None:
            raise InvalidInput({"task": f"no route for {task!r}"})
        return Response(
            {
                "route": route_name(task, route.tenant),
                "backend": route.backend.name,
                "tenant": tenant or None,
                "cache_salt": cache_salt(route.backend, tenant),
                "recipe": cache_key_recipe(route.backend),
            }
        )

    @extend_schema(request=RouteSetSerializer, responses=OpenApiTypes.OBJECT)
    @action(detail=False, methods=["post"], url_path="set")
    def set_route(self, request: Request) -> Response:
        """Point one scope at a backend by hand (admins): seeding the table or an emergency."""
        body = RouteSetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version = routing.routes_set(actor=request.user, **body.validated_data)
        return Response(_version_json(version), status=status.HTTP_201_CREATED)
