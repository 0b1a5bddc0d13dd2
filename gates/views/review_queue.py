"""Reviews of active optimizations: the queue of due reviews and recording an outcome."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.errors import InvalidInput
from core.roles import ADMIN, REVIEWER, user_roles
from gates.forms.base import apply_service_errors
from gates.forms.review import ReviewOutcomeForm
from gates.models import Review
from gates.selectors.decisions import decision_current
from gates.selectors.reviews import review_get, reviews_due, signed_tasks_by_ticket
from gates.services.reviews import review_complete


def _review_form(review: Review, data: Any = None, signed: dict[int, list[str]] | None = None) -> ReviewOutcomeForm:
    if signed is None:
        decision = decision_current(ticket=review.ticket)
        tasks = list(decision.signed_tasks) if decision is not None else []
    else:
        tasks = signed.get(review.ticket_id, [])
    return ReviewOutcomeForm(data, tasks=tasks, prefix=f"review-{review.pk}")


@login_required
def reviews(request: HttpRequest, forms: dict[int, ReviewOutcomeForm] | None = None, status: int = 200) -> HttpResponse:
    """Reviews due, each with its outcome form (keep default, restrict, roll back, observe more)."""
    user: User = request.user  # type: ignore[assignment]
    can_review = bool(user_roles(user) & {REVIEWER, ADMIN})
    rows = []
    due = reviews_due(limit=200)
    signed = signed_tasks_by_ticket([review.ticket_id for review in due])
    for review in due:
        form = (forms or {}).get(review.pk) or _review_form(review, signed=signed)
        own = review.ticket.owner_id == user.pk
        rows.append({"review": review, "form": form if can_review and not own else None, "own": own})
    return render(request, "reviews.html", {"rows": rows, "can_review": can_review}, status=status)


@login_required
@require_POST
def review_outcome(request: HttpRequest, pk: int) -> HttpResponse:
    """Record a review's outcome through ``review_complete`` (which moves routes where it must)."""
    review = review_get(pk=pk)
    if review is None:
        raise Http404("no such review")
    form = _review_form(review, request.POST)
    if form.is_valid():
        try:
            review_complete(review=review, actor=request.user, **form.service_fields())  # type: ignore[arg-type]
        except InvalidInput as exc:
            apply_service_errors(form, exc.errors)
        else:
            messages.success(
                request, f"Review #{review.pk} of ticket #{review.ticket_id}: {form.cleaned_data['outcome']}."
            )
            return redirect("ui:reviews")
    return reviews(request, forms={review.pk: form}, status=400)
