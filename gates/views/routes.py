"""The route table page."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from gates.selectors import routes
from gates.selectors.decisions import decisions_awaiting_canary, signed_route_changes


@login_required
def route_table(request: HttpRequest) -> HttpResponse:
    """The current task → backend routes, signed decisions waiting for their canary, and history."""
    current = routes.route_version_current()
    context = {
        "current": current,
        "routes": list(routes.route_table()) if current else [],
        "pending": [{"decision": d, "changes": signed_route_changes(d)} for d in decisions_awaiting_canary()],
        "history": list(routes.route_history()[:30]),
    }
    return render(request, "routes.html", context)
