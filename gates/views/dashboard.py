"""The dashboard and its live evaluation-progress partial.

The dashboard answers "what needs me now": my tickets, tickets waiting for my review, evaluations
running (refreshed by htmx polling a partial; a plain reload works without JavaScript), reviews
due, and recent gate decisions. Each block is one bounded query (pinned in the tests).
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.roles import ADMIN, REVIEWER, user_roles
from gates.models import ReleaseTicket, TicketStatus
from gates.selectors.decisions import decision_entries
from gates.selectors.reviews import reviews_due
from gates.selectors.runs import runs_in_progress
from gates.selectors.tickets import ticket_list

DASHBOARD_LIMIT = 10


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """The signed-in user's starting page."""
    user = request.user
    roles = user_roles(user)
    is_reviewer = bool(roles & {REVIEWER, ADMIN})
    waiting: list[ReleaseTicket] = []
    if is_reviewer:
        waiting = list(ticket_list(status=TicketStatus.EVALUATED).exclude(owner_id=user.pk)[:DASHBOARD_LIMIT])
    context = {
        "roles": sorted(roles),
        "is_reviewer": is_reviewer,
        "my_tickets": list(ticket_list(owner=user.get_username())[:DASHBOARD_LIMIT]),
        "waiting": waiting,
        "runs": runs_in_progress(),
        "reviews_due": reviews_due(limit=DASHBOARD_LIMIT),
        "decisions": list(decision_entries()[:DASHBOARD_LIMIT]),
    }
    return render(request, "dashboard.html", context)


@login_required
def runs_partial(request: HttpRequest) -> HttpResponse:
    """The running-evaluations block alone, polled by htmx every few seconds."""
    return render(request, "partials/runs.html", {"runs": runs_in_progress()})
