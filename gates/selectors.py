"""Read paths of the gates app."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q, QuerySet

from gates.models import ReleaseTicket, TaskType
from optgate.errors import InvalidInput


def task_types_by_slug(slugs: Iterable[str], *, field: str = "tasks") -> list[TaskType]:
    """Resolve slugs to task types in the given order, naming any that do not exist."""
    wanted = list(dict.fromkeys(slugs))
    found = {t.slug: t for t in TaskType.objects.filter(slug__in=wanted)}
    missing = [slug for slug in wanted if slug not in found]
    if missing:
        raise InvalidInput({field: f"unknown task type(s): {', '.join(missing)}"})
    return [found[slug] for slug in wanted]


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
