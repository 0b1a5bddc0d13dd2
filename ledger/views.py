"""Web UI of the ledger app: the ledger browser, chain verification, and backend pages.

Reads go through ``ledger.selectors``; registering a backend goes through ``backend_register``.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme

from gates.forms import PRESETS, BackendForm, apply_service_errors, backend_error_fields
from gates.models import ReleaseTicket
from ledger.models import Backend, LedgerEntry
from ledger.selectors import NOT_ADOPTED_KINDS, backend_list, ledger_entries, ledger_verify
from ledger.services import backend_register
from optgate.errors import DomainError, InvalidInput, NotAllowed
from optgate.roles import ADMIN, ENGINEER, user_roles
from optgate.throttling import LedgerVerifyThrottle, web_refusals

PAGE_SIZE = 50


class LedgerFilterForm(forms.Form):
    """Filters of the ledger browser; every field is optional and travels in the query string."""

    q = forms.CharField(required=False, label="Search", help_text="Words in the subject or the recorded payload.")
    kind = forms.ChoiceField(required=False)
    backend = forms.CharField(required=False, help_text="Backend name")
    ticket = forms.IntegerField(required=False, min_value=1, label="Ticket #")
    actor = forms.CharField(required=False, help_text="Username, or 'system'")
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}), label="From")
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}), label="Until")
    not_adopted = forms.BooleanField(required=False, label="Only plans not adopted (rejected, with reasons)")

    def __init__(self, *args: Any, kinds: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["kind"].choices = [("", "any kind"), *[(k, k) for k in kinds]]  # type: ignore[attr-defined]


def filtered_entries(data: dict[str, Any]) -> Any:
    """Ledger entries matching the cleaned filter form, newest first."""
    entries = ledger_entries(
        kind=data.get("kind") or None,
        subject_type="ticket" if data.get("ticket") else None,
        subject_id=str(data["ticket"]) if data.get("ticket") else None,
        actor=data.get("actor") or None,
        not_adopted=bool(data.get("not_adopted")),
        search=data.get("q") or None,
    )
    if data.get("backend"):
        # The backend's own entries, and any entry whose payload names it (tickets, routes).
        name = data["backend"]
        entries = entries.filter(Q(subject_type="backend", subject_name=name) | Q(payload__icontains=f'"{name}"'))
    if data.get("since"):
        entries = entries.filter(created_at__date__gte=data["since"])
    if data.get("until"):
        entries = entries.filter(created_at__date__lte=data["until"])
    return entries


@login_required
def ledger_index(request: HttpRequest) -> HttpResponse:
    """Search and filter the ledger; not-adopted plans show the reason they were turned down."""
    kinds = list(LedgerEntry.objects.order_by("kind").values_list("kind", flat=True).distinct())
    form = LedgerFilterForm(request.GET or None, kinds=kinds)
    data = form.cleaned_data if form.is_bound and form.is_valid() else {}
    page = Paginator(filtered_entries(data), PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "not_adopted_kinds": NOT_ADOPTED_KINDS,
    }
    return render(request, "ledger/list.html", context, status=400 if form.is_bound and form.errors else 200)


@login_required
def ledger_verify_view(request: HttpRequest) -> HttpResponse:
    """Recompute the hash chain and say whether it holds, or where it first breaks."""
    refused, wait = web_refusals(request, LedgerVerifyThrottle())
    if refused:
        response = render(request, "ledger/verify.html", {"retry_after": wait}, status=429)
        response["Retry-After"] = str(wait)
        return response
    return render(request, "ledger/verify.html", {"report": ledger_verify()})


# --- backends -----------------------------------------------------------------------------------


@login_required
def backend_index(request: HttpRequest) -> HttpResponse:
    page = Paginator(backend_list().select_related("created_by"), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "backends/list.html", {"page": page})


@login_required
def backend_detail(request: HttpRequest, name: str) -> HttpResponse:
    """A backend's serving config, fingerprint, model card, routes, tickets and ledger history."""
    from gates.routing import cache_key_recipe  # the route table and cache governance live in gates
    from gates.views import backend_routes

    backend = get_object_or_404(Backend.objects.select_related("created_by"), name=name)
    tickets = (
        ReleaseTicket.objects.filter(Q(baseline=backend) | Q(candidate=backend) | Q(rollback_target=backend))
        .select_related("baseline", "candidate", "owner")
        .distinct()[:50]
    )
    context = {
        "backend": backend,
        "tickets": list(tickets),
        "routes": backend_routes(backend),
        "engine_args_json": json.dumps(backend.engine_args, indent=2, sort_keys=True),
        "sampling_json": json.dumps(backend.sampling_params, indent=2, sort_keys=True),
        "recipe_json": json.dumps(backend.prefix_cache_key_recipe, indent=2, sort_keys=True),
        "cache_missing": cache_key_recipe(backend)["missing"],
        "history": list(ledger_entries(subject_type="backend", subject_id=str(backend.pk)).order_by("seq")[:50]),
    }
    return render(request, "backends/detail.html", context)


def _safe_next(request: HttpRequest) -> str | None:
    target = request.POST.get("next") or request.GET.get("next")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return None


@login_required
def backend_new(request: HttpRequest) -> HttpResponse:
    """Register a backend (engineers and admins). ``?preset=`` pre-fills a candidate's engine args."""
    if not user_roles(request.user) & {ENGINEER, ADMIN}:
        return render(
            request, "error.html", {"title": "Not allowed", "message": "only engineers register backends"}, status=403
        )
    if request.method != "POST":
        preset = PRESETS.get(request.GET.get("preset", ""))
        initial = {"engine_args": preset.engine_args if preset else {}, "engine": "vllm"}
        form = BackendForm(initial=initial)
        return render(request, "backends/form.html", {"form": form, "next": _safe_next(request), "preset": preset})
    form = BackendForm(request.POST)
    if form.is_valid():
        try:
            backend, created = backend_register(actor=request.user, **form.service_fields())
        except InvalidInput as exc:
            named = {
                k: f"{k.removeprefix('engine_args.')}: {v}" if k.startswith("engine_args.") else v
                for k, v in exc.errors.items()
            }
            apply_service_errors(form, named, backend_error_fields(exc.errors))
        except NotAllowed as exc:
            return render(request, "error.html", {"title": "Not allowed", "message": str(exc)}, status=403)
        except DomainError as exc:
            form.add_error(None, str(exc))
        else:
            verb = "registered" if created else "already registered with this exact configuration"
            messages.success(request, f"Backend {backend.name} {verb}.")
            target = _safe_next(request)
            return redirect(target) if target else redirect("ui:backend", name=backend.name)
    return render(request, "backends/form.html", {"form": form, "next": _safe_next(request)}, status=400)
