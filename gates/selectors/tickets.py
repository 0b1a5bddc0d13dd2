"""Reading tickets and task types."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q, QuerySet

from backends.models import Backend
from gates.models import ReleaseTicket, TaskType, allowed_actions


def task_types() -> QuerySet[TaskType]:
    return TaskType.objects.all()


def ticket_list(
    *,
    status: str | None = None,
    owner: str | None = None,
    task: str | None = None,
    mechanism: str | None = None,
) -> QuerySet[ReleaseTicket]:
    """Tickets with everything the list view shows loaded in a fixed number of queries."""
    tickets = ReleaseTicket.objects.select_related(
        "baseline", "candidate", "rollback_target", "owner"
    ).prefetch_related("beneficiary_tasks", "risk_tasks")
    if status:
        tickets = tickets.filter(status=status)
    if owner:
        tickets = tickets.filter(owner__username=owner)
    if task:
        tickets = tickets.filter(Q(beneficiary_tasks__slug=task) | Q(risk_tasks__slug=task)).distinct()
    if mechanism:
        # JSON list membership, portable across SQLite and PostgreSQL: match the quoted item.
        tickets = tickets.filter(mechanisms__icontains=f'"{mechanism}"')
    return tickets


def ticket_get(*, pk: int) -> ReleaseTicket | None:
    """One ticket with its backends and owner loaded, or None."""
    return (
        ReleaseTicket.objects.select_related("baseline", "candidate", "rollback_target", "owner").filter(pk=pk).first()
    )


def ticket_run_ids(*, pk: int) -> list[int]:
    """The runs a ticket's current decision rests on (none for an unknown ticket)."""
    runs = ReleaseTicket.objects.filter(pk=pk).values_list("baseline_run_id", "candidate_run_id").first()
    return [run_id for run_id in runs or () if run_id is not None]


def tickets_of_backend(backend: Backend, *, limit: int = 50) -> list[ReleaseTicket]:
    """Tickets that name ``backend`` as baseline, candidate or rollback target (for its page)."""
    tickets = ReleaseTicket.objects.filter(Q(baseline=backend) | Q(candidate=backend) | Q(rollback_target=backend))
    return list(tickets.select_related("baseline", "candidate", "owner").distinct()[:limit])


# --- tickets as the API shows them --------------------------------------------------------------

# The API's ticket schema: ``gates.api.tickets.TicketSerializer`` declares these fields.
TICKET_FIELDS = [
    "id",
    "title",
    "description",
    "status",
    "allowed_actions",
    "mechanisms",
    "bottleneck",
    "bottleneck_evidence",
    "baseline",
    "candidate",
    "beneficiary_tasks",
    "risk_tasks",
    "benefit_metrics",
    "guardrail_metrics",
    "rollback_target",
    "rollback_plan",
    "observation_window_hours",
    "canary_scope",
    "owner",
    "created_at",
    "updated_at",
    "submitted_at",
    "decided_at",
    "closed_at",
]


def action_paths(status: str) -> list[str]:
    """The URL paths of the actions a ticket in ``status`` may take (``start_canary`` → ``start-canary``)."""
    return [name.replace("_", "-") for name in allowed_actions(status)]


TICKET_TIMES = ("created_at", "updated_at", "submitted_at", "decided_at", "closed_at")
BACKEND_REFS = ("baseline", "candidate", "rollback_target")
TASK_LISTS = ("beneficiary_tasks", "risk_tasks")
TICKET_PLAIN_FIELDS = [
    name
    for name in TICKET_FIELDS
    if name not in {"allowed_actions", "owner", "beneficiary_tasks", "risk_tasks", *BACKEND_REFS, *TICKET_TIMES}
]
TICKET_ROW_FIELDS = [
    *TICKET_PLAIN_FIELDS,
    *TICKET_TIMES,
    *(f"{backend}__{field}" for backend in BACKEND_REFS for field in ("id", "name", "fingerprint")),
    "owner__username",
]


def utc_iso(moment: datetime) -> str:
    """A stored time as DRF's DateTimeField writes it with ``TIME_ZONE = "UTC"``."""
    text = moment.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def ticket_rows(tickets: QuerySet[ReleaseTicket]) -> list[dict[str, Any]]:
    """What the API shows of ``tickets`` (``TicketSerializer(tickets, many=True).data``), from plain rows in
    two queries.

    Through the serializer a page of 50 tickets built some 350 model instances and made 1,200
    per-field calls, and one ticket paid for building the serializer's fields from the model:
    most of each request's time. ``TicketSerializer`` stays the schema; tests hold the two equal.
    """
    return [shown for shown, _ in ticket_rows_with(tickets)]


def ticket_rows_with(
    tickets: QuerySet[ReleaseTicket], also: Sequence[str] = ()
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``ticket_rows``, each with the values of the further fields ``also`` names, read in the same query
    (a caller that needs more of the ticket's row, such as its runs' provenance, saves a query)."""
    extra = [name for name in also if name not in TICKET_ROW_FIELDS]
    rows = list(tickets.values(*TICKET_ROW_FIELDS, *extra))
    # Both task lists in one query: a query's building costs the web process more CPU than the
    # database spends on the few rows of this join (two task lists of at most six each per ticket).
    tasks: dict[str, dict[int, set[str]]] = {relation: {row["id"]: set() for row in rows} for relation in TASK_LISTS}
    links = ReleaseTicket.objects.filter(pk__in=[row["id"] for row in rows]).order_by()
    for ticket_id, *slugs in links.values_list("id", *(f"{relation}__slug" for relation in TASK_LISTS)):
        for relation, slug in zip(TASK_LISTS, slugs, strict=True):
            if slug is not None:
                tasks[relation][ticket_id].add(slug)
    shown = []
    for row in rows:
        ticket: dict[str, Any] = {name: row[name] for name in TICKET_PLAIN_FIELDS}
        ticket["allowed_actions"] = action_paths(row["status"])
        for backend in BACKEND_REFS:
            ticket[backend] = {field: row[f"{backend}__{field}"] for field in ("id", "name", "fingerprint")}
        for relation, slugs in tasks.items():
            ticket[relation] = sorted(slugs[row["id"]])
        ticket["owner"] = row["owner__username"]
        for name in TICKET_TIMES:
            ticket[name] = None if row[name] is None else utc_iso(row[name])
        shown.append(({name: ticket[name] for name in TICKET_FIELDS}, {name: row[name] for name in also}))
    return shown


def ticket_shown(ticket: ReleaseTicket) -> dict[str, Any]:
    """One ticket as the API shows it, read afresh."""
    return ticket_rows(ReleaseTicket.objects.filter(pk=ticket.pk))[0]
