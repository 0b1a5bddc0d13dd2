"""How the web UI answers when a service says no.

``InvalidInput`` comes back as inline field errors on the form (400, in each view). ``NotAllowed``
(403) and ``DomainError`` (409) need nothing from the view: ``ServiceRefusalMiddleware`` turns them
into the refusal page with the service's own message, for every page of the UI (namespace ``ui``).
The REST API maps the same errors in ``core.api.exception_handler``.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.errors import DomainError, NotAllowed


def refuse(request: HttpRequest, error: Exception, status: int) -> HttpResponse:
    """The page shown when a service says no (403) or the state forbids it (409)."""
    title = "Not allowed" if status == 403 else "Conflict"
    return render(request, "error.html", {"title": title, "message": str(error)}, status=status)


class ServiceRefusalMiddleware:
    """Answer a UI view's ``NotAllowed`` with 403 and its ``DomainError`` with 409, as a page."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        match = request.resolver_match
        if match is None or match.namespace != "ui":
            return None
        if isinstance(exception, NotAllowed):
            return refuse(request, exception, 403)
        if isinstance(exception, DomainError):
            return refuse(request, exception, 409)
        return None
