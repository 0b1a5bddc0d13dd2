"""The dashboard, its live evaluation-progress partial, and the health probe.

The dashboard answers "what needs me now": my tickets, tickets waiting for my review, evaluations
running (refreshed by htmx polling a partial; a plain reload works without JavaScript), reviews
due, and recent gate decisions. Each block is one bounded query (pinned in the tests).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from evaluators.models import EvaluationRun, RunStatus
from gates import views as gate_views
from gates.models import ReleaseTicket, TicketStatus
from gates.selectors import ticket_list
from ledger.selectors import ledger_entries
from optgate.roles import ADMIN, REVIEWER, user_roles

# Ledger kinds that record a gate outcome or a reviewer's decision on a ticket.
DECISION_KINDS = (
    "gate.decision",
    "gate.sign_off",
    "ticket.approved",
    "ticket.restricted",
    "ticket.rejected",
    "ticket.needs_evidence",
)
DASHBOARD_LIMIT = 10


def running_runs() -> list[dict[str, Any]]:
    """Queued and running evaluations, each with the tickets it serves (two queries)."""
    runs = list(
        EvaluationRun.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING])
        .select_related("backend")
        .order_by("created_at", "id")[:20]
    )
    ids = [run.pk for run in runs]
    serving: dict[int, list[ReleaseTicket]] = {}
    if ids:
        for ticket in ReleaseTicket.objects.filter(baseline_run_id__in=ids) | ReleaseTicket.objects.filter(
            candidate_run_id__in=ids
        ):
            for run_id in (ticket.baseline_run_id, ticket.candidate_run_id):
                if run_id in ids:
                    serving.setdefault(run_id, []).append(ticket)
    return [{"run": run, "tickets": serving.get(run.pk, [])} for run in runs]


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
        "runs": running_runs(),
        "reviews_due": gate_views.reviews_due(limit=DASHBOARD_LIMIT),
        "decisions": list(ledger_entries().filter(kind__in=DECISION_KINDS)[:DASHBOARD_LIMIT]),
    }
    return render(request, "dashboard.html", context)


@login_required
def runs_partial(request: HttpRequest) -> HttpResponse:
    """The running-evaluations block alone, polled by htmx every few seconds."""
    return render(request, "partials/runs.html", {"runs": running_runs()})


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})
