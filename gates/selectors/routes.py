"""Reading the versioned route table, and its exports for the gateway (JSON and a LiteLLM config)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from backends.models import Backend
from backends.prefix_cache import cache_key_recipe, cache_salt, prefix_caching_enabled
from gates.models import Route, RouteTableVersion


def route_version_current() -> RouteTableVersion | None:
    return RouteTableVersion.objects.order_by("-number").first()


def route_table(*, version: int | None = None) -> QuerySet[Route]:
    """The routes of ``version`` (default: the current one), with task and backend loaded."""
    if version is None:
        current = route_version_current()
        if current is None:
            return Route.objects.none()
        version = current.number
    return Route.objects.filter(version__number=version).select_related("task", "backend", "version")


def route_history() -> QuerySet[RouteTableVersion]:
    return RouteTableVersion.objects.select_related("actor", "ticket").order_by("-number")


def route_resolve(*, task: str, tenant: str = "") -> Route | None:
    """The current route a tenant's request for ``task`` takes: the tenant's own route, else the
    task's default (what the gateway does with ``<task>@<tenant>`` and ``<task>``)."""
    routes = {route.tenant: route for route in route_table().filter(task__slug=task)}
    return routes.get(tenant) or routes.get("")


def route_name(task: str, tenant: str = "") -> str:
    """The name a client asks the gateway for: the task slug, ``<task>@<tenant>`` for a tenant route."""
    return f"{task}@{tenant}" if tenant else task


def _api_base(backend: Backend) -> str:
    template = settings.OPTGATE_ROUTE_API_BASE
    return str(backend.model_card.get("api_base") or template.format(backend=backend.name))


def route_json(route: Route) -> dict[str, Any]:
    backend = route.backend
    recipe = cache_key_recipe(backend)
    salt = cache_salt(backend, route.tenant) if route.tenant or not recipe["tenant"] else None
    return {
        "name": route_name(route.task.slug, route.tenant),
        "task": route.task.slug,
        "tenant": route.tenant or None,
        "backend": {"name": backend.name, "fingerprint": backend.fingerprint, "model_id": backend.model_id},
        "served_model_name": backend.name,
        "api_base": _api_base(backend),
        "prefix_cache": {
            "enabled": prefix_caching_enabled(backend),
            "recipe": recipe,
            # A tenant-partitioned key on a default route needs the tenant: ask /routes/cache-salt/.
            "cache_salt": salt,
        },
    }


def routes_export_json() -> dict[str, Any]:
    """The current table for the gateway, one entry per (task, tenant) scope."""
    current = route_version_current()
    return {
        "format": "optgate.routes/v1",
        "version": current.number if current else 0,
        "created_at": current.created_at.isoformat() if current else None,
        "routes": [route_json(route) for route in route_table()],
    }


def routes_export_litellm() -> dict[str, Any]:
    """The current table as a LiteLLM proxy ``config.yaml`` document (serialise it as YAML or JSON).

    Shape per LiteLLM's documented config: ``model_list`` of ``{model_name, litellm_params:
    {model, api_base, api_key}, model_info}``. ``openai/<served name>`` targets vLLM's
    OpenAI-compatible server; the openai client needs some key, read from the gateway's
    environment. The prefix-cache salt travels in ``model_info`` for the gateway's request hook
    to send as ``cache_salt`` (LiteLLM itself does not know the field).
    """
    exported = routes_export_json()
    model_list = []
    for entry in exported["routes"]:
        model_list.append(
            {
                "model_name": entry["name"],
                "litellm_params": {
                    "model": f"openai/{entry['served_model_name']}",
                    "api_base": entry["api_base"],
                    "api_key": "os.environ/OPTGATE_BACKEND_API_KEY",
                },
                "model_info": {
                    "id": f"optgate-v{exported['version']}-{entry['name']}",
                    "optgate_task": entry["task"],
                    "optgate_tenant": entry["tenant"],
                    "optgate_backend": entry["backend"]["name"],
                    "optgate_fingerprint": entry["backend"]["fingerprint"],
                    "optgate_cache_salt": entry["prefix_cache"]["cache_salt"],
                    "optgate_route_version": exported["version"],
                },
            }
        )
    return {"model_list": model_list, "router_settings": {"routing_strategy": "simple-shuffle"}}


def routes_of_backend(backend: Backend) -> list[Route]:
    """The current routes that send traffic to ``backend`` (for its page)."""
    return list(route_table().filter(backend=backend))
