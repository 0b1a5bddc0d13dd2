"""Writing the versioned route table: by hand (admins), and through a ticket's canary, promotion
and rollback.

Every change writes a new ``RouteTableVersion`` holding the complete table, so any past table can
be read back as it was; the version and its ledger entry commit together. A ticket's candidate
reaches tasks only through these services: canary (tenant-scoped routes for the canary tenants),
promotion after the observation window (the task's default route), and rollback of one task or
all of the ticket's tasks to its rollback target.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from backends.models import Backend
from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import ADMIN, Actor, has_role, person
from gates.models import DecisionOutcome, ReleaseTicket, Route, RouteTableVersion, TaskType, TicketStatus
from gates.selectors.decisions import decision_current
from gates.selectors.routes import route_table
from gates.services.tickets import check_actor, ticket_transition_within
from ledger.services import ledger_append

Scope = tuple[str, str]  # (task slug, tenant); tenant "" is the task's default route


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
        diff.append(
            {
                "task": scope[0],
                "tenant": scope[1] or None,
                "from": getattr(before, "name", None),
                "to": getattr(backend, "name", None),
            }
        )
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
        payload={
            "version": version.number,
            "kind": kind,
            "reason": reason,
            "ticket": ticket.pk if ticket else None,
            "changes": diff,
        },
    )
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
            _write_version(
                changes=changes,
                kind="canary",
                actor=actor,
                ticket=locked,
                reason=reason or f"canary of ticket #{locked.pk} for {', '.join(tenants)}",
            )
    return locked


def routes_promote(*, ticket: ReleaseTicket, actor: Actor, reason: str = "") -> ReleaseTicket:
    """After the observation window, make the candidate the default route of the ticket's signed tasks.

    The ticket moves ``canary`` → ``default``; the canary's tenant routes to the candidate are
    dropped, since the default route now covers them.
    """
    with transaction.atomic(durable=True):
        return routes_promote_within(ticket=ticket, actor=actor, reason=reason)


def routes_promote_within(*, ticket: ReleaseTicket, actor: Actor, reason: str = "") -> ReleaseTicket:
    """``routes_promote`` inside the caller's transaction (a canary round commits it with its record).

    Only the tasks still routed to the candidate move: a task a canary round rolled back stays on
    the rollback target.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("routes_promote_within must run inside the caller's transaction")
    locked = _locked(ticket)
    if locked.status != TicketStatus.CANARY:
        raise DomainError(f"ticket #{locked.pk} is {locked.status}; only a canary is promoted")
    ends = locked.observation_window_ends
    if ends is not None and timezone.now() < ends:
        raise DomainError(f"the observation window of ticket #{locked.pk} runs until {ends.isoformat()}")
    signed = _signed_tasks(locked)
    on_candidate = set(
        route_table().filter(task__slug__in=signed, backend=locked.candidate).values_list("task__slug", flat=True)
    )
    # A canary without tenants moved no route; then every signed task is promoted.
    tasks = [task for task in signed if task in on_candidate] or signed
    ticket_transition_within(ticket=locked, action="promote", actor=actor, reason=reason)
    changes: dict[Scope, Backend | None] = {(task, ""): locked.candidate for task in tasks}
    for route in route_table().filter(task__slug__in=tasks, backend=locked.candidate).exclude(tenant=""):
        changes[(route.task.slug, route.tenant)] = None
    _write_version(
        changes=changes,
        kind="promote",
        actor=actor,
        ticket=locked,
        reason=reason or f"ticket #{locked.pk} promoted after its observation window",
    )
    return locked


def routes_rollback(*, ticket: ReleaseTicket, actor: Actor, reason: str, task: str | None = None) -> RouteTableVersion:
    """Move one task type (or all of the ticket's) off the candidate to the ticket's rollback target.

    Every route of those tasks that points at the candidate — default and tenant-scoped — moves in
    one new table version; other tasks' routes are untouched. When no route of the ticket's
    tasks points at the candidate any more, the ticket itself moves to ``rolled_back``.
    """
    with transaction.atomic(durable=True):
        return routes_rollback_within(ticket=ticket, actor=actor, reason=reason, task=task)


def routes_rollback_within(
    *, ticket: ReleaseTicket, actor: Actor, reason: str, task: str | None = None
) -> RouteTableVersion:
    """``routes_rollback`` inside the caller's transaction, for an operation that commits the
    rollback together with its own changes (a review's outcome) or not at all.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("routes_rollback_within must run inside the caller's transaction")
    check_actor(ticket, "roll_back", actor)
    if not reason.strip():
        raise InvalidInput({"reason": "a reason is required to roll back"})
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
        ticket_transition_within(
            ticket=locked,
            action="roll_back",
            actor=actor,
            reason=reason,
            details={"route_version": version.number, "tasks": tasks},
        )
    return version
