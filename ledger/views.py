"""Web UI of the ledger app: the ledger browser and chain verification. Reads go through ``ledger.selectors``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.throttling import LedgerVerifyThrottle, web_refusals
from ledger.selectors import NOT_ADOPTED_KINDS, ledger_entries, ledger_kinds, ledger_verify

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
    kinds = ledger_kinds()
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
