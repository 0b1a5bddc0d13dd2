"""The versioned route table (task type, optionally per tenant → backend), its exports for the
gateway, and prefix-cache key governance.

Every change writes a new ``RouteTableVersion`` holding the complete table, so any past table can
be read back as it was; the version and its ledger entry commit together. A ticket's candidate
reaches tasks only through these services: canary (tenant-scoped routes for the canary tenants),
promotion after the observation window (the task's default route), and rollback of one task or
all of the ticket's tasks to its rollback target.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from gates.decisions import decision_current
from gates.models import DecisionOutcome, ReleaseTicket, Route, RouteTableVersion, TaskType, TicketStatus
from gates.services import check_actor, ticket_transition_within
from ledger.models import Backend, LedgerEntry
from ledger.services import ledger_append
from optgate.canonical import canonical_json, sha256_hex
from optgate.errors import DomainError, InvalidInput, NotAllowed
from optgate.roles import ADMIN, Actor, has_role, person

Scope = tuple[str, str]  # (task slug, tenant); tenant "" is the task's default route

# --- prefix-cache key governance (§7.3) --------------------------------------------------------

# Declared components a backend's ``prefix_cache_key_recipe`` may carry; the model version is
# always derived from the backend itself.
RECIPE_FIELDS = ("system_prompt_hash", "tool_version", "policy_version", "security_domain", "tenant")
CACHE_SALT_MAX = 128  # vLLM rejects longer salts
CROSS_TENANT = "prefix_cache_cross_tenant"


def prefix_caching_enabled(backend: Backend) -> bool:
    """Whether the backend may reuse cached prefixes.

    vLLM's V1 engine enables prefix caching unless told otherwise, so only an explicit
    ``enable_prefix_caching: false`` counts as off.
    """
    return backend.engine_args.get("enable_prefix_caching") is not False


def cache_key_recipe(backend: Backend) -> dict[str, Any]:
    """The components that must all match before two requests may share a cached prefix.

    ``tenant: true`` partitions the cache per tenant (the gateway sends a per-tenant salt);
    without it every tenant of the security domain shares one cache. ``missing`` names the
    components the recipe does not pin down.
    """
    declared = backend.prefix_cache_key_recipe or {}
    recipe: dict[str, Any] = {
        "model_version": f"{backend.model_id}@{backend.model_revision}",
        "system_prompt_hash": str(declared.get("system_prompt_hash") or ""),
        "tool_version": str(declared.get("tool_version") or ""),
        "policy_version": str(declared.get("policy_version") or ""),
        "security_domain": str(declared.get("security_domain") or ""),
        "tenant": declared.get("tenant") is True,
    }
    missing = [name for name in ("system_prompt_hash", "tool_version", "policy_version") if not recipe[name]]
    if not recipe["tenant"]:
        missing.append("tenant")
    recipe["missing"] = missing
    return recipe


def cache_salt(backend: Backend, tenant: str = "") -> str:
    """The ``cache_salt`` the gateway must send with a tenant's requests to this backend.

    A hex sha256 over the recipe (and the tenant, when the recipe partitions by tenant): 64
    characters, none of the ones vLLM refuses (``@ / \\`` or NUL). Requests with different salts
    never share cached blocks, so a changed model, prompt, tool or policy version starts cold.
    """
    recipe = cache_key_recipe(backend)
    if recipe["tenant"] and not tenant:
        raise InvalidInput({"tenant": f"backend {backend.name}'s cache is partitioned per tenant; name the tenant"})
    material = {key: recipe[key] for key in ("model_version", *RECIPE_FIELDS[:-1])}
    material["tenant"] = tenant if recipe["tenant"] else "*"
    salt = sha256_hex(canonical_json(material))
    assert len(salt) <= CACHE_SALT_MAX and not set(salt) & {"@", "/", "\\", "\x00"}
    return salt


def prefix_cache_findings(*, ticket: ReleaseTicket) -> list[dict[str, Any]]:
    """Governance findings for a prefix-cache ticket, worded for the decision's reasons.

    The blocking one (``prefix_cache_cross_tenant``) is a candidate whose key has no tenant
    component while the canary scope lists several tenants: they would read each other's
    cached prefixes. A sign-off on such a decision also needs a ``security`` reviewer.
    """
    candidate = ticket.candidate
    if "prefix_cache" not in ticket.mechanisms and candidate.engine_args.get("enable_prefix_caching") is not True:
        return []
    recipe = cache_key_recipe(candidate)
    tenants = sorted(set((ticket.canary_scope or {}).get("tenants") or []))
    findings: list[dict[str, Any]] = []
    if not recipe["tenant"] and len(tenants) > 1:
        findings.append({
            "code": CROSS_TENANT,
            "tenants": tenants,
            "message": (
                f"candidate {candidate.name}'s prefix-cache key has no tenant component, so the canary tenants "
                f"{', '.join(tenants)} would share one cache; set tenant: true in its prefix_cache_key_recipe "
                "(a new backend) so the gateway sends a per-tenant cache_salt."
            ),
        })  # fmt: skip
    elif not recipe["tenant"]:
        findings.append({
            "code": "prefix_cache_shared_on_promotion",
            "tenants": tenants,
            "message": (
                f"candidate {candidate.name}'s prefix-cache key has no tenant component: once promoted to default, "
                "every tenant would share one cache."
            ),
        })  # fmt: skip
    incomplete = [name for name in recipe["missing"] if name != "tenant"]
    if incomplete:
        findings.append({
            "code": "prefix_cache_key_incomplete",
            "missing": incomplete,
            "message": (
                f"candidate {candidate.name}'s prefix-cache key does not pin {', '.join(incomplete)}; a change to "
                "them would keep serving stale cached prefixes."
            ),
        })  # fmt: skip
    return findings


# --- reading the table -------------------------------------------------------------------------


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
        model_list.append({
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
        })  # fmt: skip
    return {"model_list": model_list, "router_settings": {"routing_strategy": "simple-shuffle"}}


# --- writing the table -------------------------------------------------------------------------


def _write_version(
    *, changes: dict[Scope, Backend | None], kind: str, actor: Actor, reason: str, ticket: ReleaseTicket | None
) -> RouteTableVersion:
    """Copy the current table, apply ``changes`` (None removes a scope), store it as the next version.

    Must run inside the caller's transaction, which also holds the ledger entry.
    """
    previous = RouteTableVersion.objects.select_for_update().order_by("-number").first()
    table: dict[Scope, Backend] = {}
    if previous is not None:
        for route in Route.objects.filter(version=previous).select_related("task", "backend"):
            table[(route.task.slug, route.tenant)] = route.backend
    diff = []
    for scope, backend in sorted(changes.items()):
        before = table.get(scope)
        if before == backend:
            continue
        diff.append({"task": scope[0], "tenant": scope[1] or None, "from": getattr(before, "name", None),
                     "to": getattr(backend, "name", None)})  # fmt: skip
        if backend is None:
            table.pop(scope, None)
        else:
            table[scope] = backend
    if not diff:
        raise DomainError("the route table already says this; nothing to change")
    number = (previous.number if previous else 0) + 1
    try:
        with transaction.atomic():
            version = RouteTableVersion.objects.create(
                number=number, kind=kind, reason=reason, ticket=ticket, changes=diff, actor=person(actor)
            )
    except IntegrityError:
        raise DomainError("the route table changed concurrently; reload and retry") from None
    tasks = {t.slug: t for t in TaskType.objects.filter(slug__in={task for task, _ in table})}
    Route.objects.bulk_create(
        Route(version=version, task=tasks[task], tenant=tenant, backend=backend)
        for (task, tenant), backend in table.items()
    )
    ledger_append(
        kind=f"route.{kind}",
        subject_type="route_table",
        subject_id=version.number,
        subject_name=f"route table v{version.number}",
        actor=actor,
        payload={"version": version.number, "kind": kind, "reason": reason,
                 "ticket": ticket.pk if ticket else None, "changes": diff},
    )  # fmt: skip
    return version


def routes_set(*, task: str, backend: Backend, actor: Actor, reason: str, tenant: str = "") -> RouteTableVersion:
    """Point one scope at a backend by hand (seeding the table, an emergency): admins only."""
    if not has_role(actor, ADMIN):
        raise NotAllowed("only admins set routes by hand; tickets move routes through canary, promote, rollback")
    if not reason.strip():
        raise InvalidInput({"reason": "say why the route changes"})
    if not TaskType.objects.filter(slug=task).exists():
        raise InvalidInput({"task": f"unknown task type {task!r}"})
    allowed = backend.model_card.get("allowed_tasks") or []
    if allowed and task not in allowed:
        raise InvalidInput({"backend": f"backend {backend.name}'s model card does not allow {task}"})
    with transaction.atomic(durable=True):
        return _write_version(changes={(task, tenant): backend}, kind="set", actor=actor, reason=reason, ticket=None)


def _signed_tasks(ticket: ReleaseTicket) -> list[str]:
    decision = decision_current(ticket=ticket)
    if decision is None or decision.signed_verdict not in (DecisionOutcome.APPROVE, DecisionOutcome.RESTRICT):
        raise DomainError(f"ticket #{ticket.pk} has no signed approval or restriction to route")
    return list(decision.signed_tasks)


def _locked(ticket: ReleaseTicket) -> ReleaseTicket:
    return (
        ReleaseTicket.objects.select_for_update()
        .select_related("baseline", "candidate", "rollback_target", "owner")
        .get(pk=ticket.pk)
    )


def routes_start_canary(*, ticket: ReleaseTicket, actor: Actor, reason: str = "") -> ReleaseTicket:
    """Start the canary: the ticket moves to ``canary`` and its signed tasks route to the candidate
    for the canary tenants only (tenant-scoped routes). A scope without tenants moves no route.
    """
    with transaction.atomic(durable=True):
        locked = _locked(ticket)
        tasks = _signed_tasks(locked)
        ticket_transition_within(ticket=locked, action="start_canary", actor=actor, reason=reason)
        tenants = sorted(set((locked.canary_scope or {}).get("tenants") or []))
        changes: dict[Scope, Backend | None] = {(task, t): locked.candidate for task in tasks for t in tenants}
        if changes:
            _write_version(changes=changes, kind="canary", actor=actor, ticket=locked,
                           reason=reason or f"canary of ticket #{locked.pk} for {', '.join(tenants)}")  # fmt: skip
    return locked


def _canary_started_at(ticket: ReleaseTicket) -> datetime | None:
    entry = (
        LedgerEntry.objects.filter(subject_type="ticket", subject_id=str(ticket.pk), kind="ticket.canary")
        .order_by("-seq")
        .first()
    )
    return entry.created_at if entry else None


def routes_promote(*, ticket: ReleaseTicket, actor: Actor, reason: str = "") -> ReleaseTicket:
    """After the observation window, make the candidate the default route of the ticket's signed tasks.

    The ticket moves ``canary`` → ``default``; the canary's tenant routes to the candidate are
    dropped, since the default route now covers them.
    """
    with transaction.atomic(durable=True):
        locked = _locked(ticket)
        if locked.status != TicketStatus.CANARY:
            raise DomainError(f"ticket #{locked.pk} is {locked.status}; only a canary is promoted")
        started = _canary_started_at(locked)
        ends = started + timedelta(hours=locked.observation_window_hours) if started else None
        if ends is not None and timezone.now() < ends:
            raise DomainError(f"the observation window of ticket #{locked.pk} runs until {ends.isoformat()}")
        tasks = _signed_tasks(locked)
        ticket_transition_within(ticket=locked, action="promote", actor=actor, reason=reason)
        changes: dict[Scope, Backend | None] = {(task, ""): locked.candidate for task in tasks}
        for route in route_table().filter(task__slug__in=tasks, backend=locked.candidate).exclude(tenant=""):
            changes[(route.task.slug, route.tenant)] = None
        _write_version(changes=changes, kind="promote", actor=actor, ticket=locked,
                       reason=reason or f"ticket #{locked.pk} promoted after its observation window")  # fmt: skip
    return locked


def routes_rollback(*, ticket: ReleaseTicket, actor: Actor, reason: str, task: str | None = None) -> RouteTableVersion:
    """Move one task type (or all of the ticket's) off the candidate to the ticket's rollback target.

    Every route of those tasks that points at the candidate — default and tenant-scoped — moves in
    one new table version; other tasks' routes are untouched. When no route of the ticket's
    tasks points at the candidate any more, the ticket itself moves to ``rolled_back``.
    """
    check_actor(ticket, "roll_back", actor)
    if not reason.strip():
        raise InvalidInput({"reason": "a reason is required to roll back"})
    with transaction.atomic(durable=True):
        locked = _locked(ticket)
        if locked.status not in (TicketStatus.CANARY, TicketStatus.DEFAULT):
            raise DomainError(f"ticket #{locked.pk} is {locked.status}; only a canary or default is rolled back")
        ticket_tasks = _signed_tasks(locked)
        if task is not None and task not in ticket_tasks:
            raise InvalidInput({"task": f"ticket #{locked.pk} does not route {task!r}"})
        tasks = [task] if task else ticket_tasks
        on_candidate = route_table().filter(task__slug__in=tasks, backend=locked.candidate)
        changes: dict[Scope, Backend | None] = {(r.task.slug, r.tenant): locked.rollback_target for r in on_candidate}
        if not changes:
            raise DomainError(f"no route of {', '.join(tasks)} points at {locked.candidate.name}; nothing to roll back")
        version = _write_version(changes=changes, kind="rollback", actor=actor, reason=reason, ticket=locked)
        still = Route.objects.filter(version=version, task__slug__in=ticket_tasks, backend=locked.candidate)
        if not still.exists():
            ticket_transition_within(ticket=locked, action="roll_back", actor=actor, reason=reason,
                                     details={"route_version": version.number, "tasks": tasks})  # fmt: skip
    return version
