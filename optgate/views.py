"""The landing page and the health probe; the full engineer UI lives in the apps' views."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from gates.selectors import ticket_list
from ledger.selectors import backend_list


def home(request: HttpRequest) -> HttpResponse:
    context = {
        "tickets": ticket_list()[:50] if request.user.is_authenticated else [],
        "backends": backend_list()[:50] if request.user.is_authenticated else [],
    }
    return render(request, "home.html", context)


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})
