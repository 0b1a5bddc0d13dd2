"""Reading tickets and task types."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q, QuerySet

from backends.models import Backend
from core.compiled import CompiledQuery
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


# In the model's field order, as ``Model.from_db`` takes them.
_STATUS_AND_OWNER = [
    f.attname for f in ReleaseTicket._meta.concrete_fields if f.attname in ("id", "status", "owner_id")
]
_status_and_owner = CompiledQuery(lambda pk: ReleaseTicket.objects.filter(pk=pk).order_by().values(*_STATUS_AND_OWNER))


def ticket_status_and_owner(pk: int) -> ReleaseTicket | None:
    """The ticket ``pk`` with only its status and owner loaded (what the decision read needs of it), or None.

    Through a query this web process compiled once (``core.compiled``), as the decision read's others.
    """
    rows = _status_and_owner.rows(pk)
    if not rows:
        return None
    return ReleaseTicket.from_db(_status_and_owner.db, _STATUS_AND_OWNER, [rows[0][name] for name in _STATUS_AND_OWNER])


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
    rows = list(tickets.values(*_row_fields(also)))
    # Both task lists in one query: a query's building costs the web process more CPU than the
    # database spends on the few rows of this join (two task lists of at most six each per ticket).
    links = ReleaseTicket.objects.filter(pk__in=[row["id"] for row in rows]).order_by().values(*_TASK_LINKS)
    return _shown_rows(rows, links, also)


def ticket_row_with(pk: int, also: Sequence[str] = ()) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``ticket_rows_with`` of the one ticket ``pk`` (None when there is none), through queries this
    web process compiled once: the ticket detail's read, where building and compiling its row's
    query cost ten times what the database spent on it."""
    queries = _ONE_TICKET.get(tuple(also))
    if queries is None:
        queries = _ONE_TICKET[tuple(also)] = _one_ticket_queries(tuple(also))
    row_query, links_query = queries
    rows = row_query.rows(pk)
    return _shown_rows(rows, links_query.rows(pk), also)[0] if rows else None


_TASK_LINKS = ("id", *(f"{relation}__slug" for relation in TASK_LISTS))
_ONE_TICKET: dict[tuple[str, ...], tuple[CompiledQuery, CompiledQuery]] = {}


def _one_ticket_queries(also: tuple[str, ...]) -> tuple[CompiledQuery, CompiledQuery]:
    fields = _row_fields(also)
    return (
        CompiledQuery(lambda pk: ReleaseTicket.objects.filter(pk=pk).order_by().values(*fields)),
        CompiledQuery(lambda pk: ReleaseTicket.objects.filter(pk=pk).order_by().values(*_TASK_LINKS)),
    )


def _row_fields(also: Sequence[str]) -> list[str]:
    return [*TICKET_ROW_FIELDS, *(name for name in also if name not in TICKET_ROW_FIELDS)]


def _shown_rows(
    rows: list[dict[str, Any]], links: Iterable[dict[str, Any]], also: Sequence[str]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    tasks: dict[str, dict[int, set[str]]] = {relation: {row["id"]: set() for row in rows} for relation in TASK_LISTS}
    for link in links:
        for relation in TASK_LISTS:
            slug = link[f"{relation}__slug"]
            if slug is not None:
                tasks[relation][link["id"]].add(slug)
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
