"""Reading reviews of active optimizations."""

from __future__ import annotations

from gates.models import GateDecision, Review, ReviewStatus


def reviews_due(*, limit: int = 50) -> list[Review]:
    """Open reviews of active optimizations, the soonest due first."""
    return list(Review.objects.filter(status=ReviewStatus.OPEN).select_related("ticket__candidate")[:limit])


def review_get(*, pk: int) -> Review | None:
    return Review.objects.select_related("ticket__owner").filter(pk=pk).first()


def signed_tasks_by_ticket(ticket_ids: list[int]) -> dict[int, list[str]]:
    """Each ticket's current binding decision's signed tasks, in one query."""
    signed: dict[int, list[str]] = {}
    decisions = GateDecision.objects.filter(ticket_id__in=ticket_ids, dry_run=False).order_by("ticket_id", "-id")
    for ticket_id, tasks in decisions.values_list("ticket_id", "signed_tasks"):
        signed.setdefault(ticket_id, list(tasks or []))
    return signed
