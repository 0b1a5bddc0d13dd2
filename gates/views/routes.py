"""The route table page, and the routes a signed decision will set or a backend serves now."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from gates import routing
from gates.models import DecisionOutcome, GateDecision, Route, TicketStatus


@login_required
def route_table(request: HttpRequest) -> HttpResponse:
    """The current task → backend routes, signed decisions waiting for their canary, and history."""
    current = routing.route_version_current()
    pending = (
        GateDecision.objects.filter(
            dry_run=False,
            signed_verdict__in=[DecisionOutcome.APPROVE, DecisionOutcome.RESTRICT],
            ticket__status__in=[TicketStatus.APPROVED, TicketStatus.RESTRICTED],
        )
        .select_related("ticket__baseline", "ticket__candidate")
        .order_by("-signed_at")[:20]
    )
    context = {
        "current": current,
        "routes": list(routing.route_table()) if current else [],
        "pending": [{"decision": d, "changes": signed_route_changes(d)} for d in pending],
        "history": list(routing.route_history()[:30]),
    }
    return render(request, "routes.html", context)


def signed_route_changes(decision: GateDecision) -> list[dict[str, Any]]:
    """What a signed decision will route: signed tasks to the candidate, the others stay on the baseline."""
    ticket = decision.ticket
    return [
        {
            "task": task,
            "backend": ticket.candidate if task in decision.signed_tasks else ticket.baseline,
            "moves": task in decision.signed_tasks,
        }
        for task in decision.proposed_routes
    ]


def backend_routes(backend: Any) -> list[Route]:
    """The current routes that send traffic to ``backend`` (for its page)."""
    return list(routing.route_table().filter(backend=backend))
