"""How a view answers when a service says no.

Service errors come back as pages: ``InvalidInput`` as inline field errors (400, in each view),
``NotAllowed`` as 403 and ``DomainError`` as 409, each with the service's own message.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def refuse(request: HttpRequest, error: Exception, status: int) -> HttpResponse:
    """The page shown when a service says no (403) or the state forbids it (409)."""
    title = "Not allowed" if status == 403 else "Conflict"
    return render(request, "error.html", {"title": title, "message": str(error)}, status=status)
