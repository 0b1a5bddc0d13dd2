"""Ticket pages: the list, the form (new and edit), the ticket page, its actions and the sign-off.

Views parse input with the forms in ``gates.forms`` and call the services; they never save models.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import ADMIN, ENGINEER, REVIEWER, user_roles
from evaluators.models import EvaluationRun
from gates.forms.base import apply_service_errors
from gates.forms.presets import PRESETS
from gates.forms.review import SignOffForm
from gates.forms.tickets import REASON_CODES, TICKET_ERROR_FIELDS, TicketForm, TransitionForm
from gates.models import Mechanism, ReleaseTicket, TicketStatus
from gates.selectors.canary import canary_timeline
from gates.selectors.decisions import decision_current
from gates.selectors.evidence import ticket_provenance
from gates.selectors.plan import stored_ticket_plan, ticket_plan, ticket_tasks_with_roles
from gates.selectors.summary import decision_summary, next_action
from gates.selectors.tickets import task_types, ticket_get, ticket_list
from gates.services import signoff
from gates.services import tickets as services
from gates.services.actions import TICKET_ACTIONS, ticket_action_take, ticket_actions_for
from gates.services.policy import gate_policy
from gates.services.provenance import evidence_accept
from gates.views.comparison import comparison_tasks, regression_examples
from gates.views.decision import latest_decision, proposed_route_changes, signoff_context, signoff_form_for
from gates.views.evidence import build_evidence, sample_pairs
from ledger.selectors import ledger_entries

LIST_PAGE_SIZE = 50
# Before evaluation the ticket page shows its power plan; afterwards the decision speaks for itself.
PLANNED_STATUSES = (TicketStatus.DRAFT, TicketStatus.SUBMITTED)
ACTION_LABELS = {"submit": "Submit for evaluation", "request_evidence": "Request more evidence"}


# --- ticket list -------------------------------------------------------------------------------


@login_required
def ticket_index(request: HttpRequest) -> HttpResponse:
    """All tickets, newest first, filtered by status, owner, task and mechanism (GET parameters)."""
    filters = {key: request.GET.get(key) or None for key in ("status", "owner", "task", "mechanism")}
    page = Paginator(ticket_list(**filters), LIST_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "filters": filters,
        "statuses": TicketStatus.values,
        "mechanisms": Mechanism.values,
        "tasks": [task.slug for task in task_types()],
        "query": request.GET.copy().urlencode() if "page" not in request.GET else "",
    }
    return render(request, "tickets/list.html", context)


# --- ticket form -------------------------------------------------------------------------------


def _can_file(user: Any) -> bool:
    return bool(user_roles(user) & {ENGINEER, ADMIN})


def _form_page(
    request: HttpRequest, form: TicketForm, *, ticket: ReleaseTicket | None, status: int = 200
) -> HttpResponse:
    preset = PRESETS.get(request.GET.get("preset", ""))
    context = {"form": form, "ticket": ticket, "presets": PRESETS.values(), "preset": preset}
    return render(request, "tickets/form.html", context, status=status)


@login_required
def ticket_new(request: HttpRequest) -> HttpResponse:
    """File a ticket. ``?preset=<slug>`` pre-fills mechanism, bottleneck, metrics and an args snippet."""
    if not _can_file(request.user):
        raise NotAllowed("only engineers file release tickets")
    if request.method != "POST":
        preset = PRESETS.get(request.GET.get("preset", ""))
        initial: dict[str, Any] = {"observation_window_hours": 168}
        if preset:
            initial.update(preset.initial())
        for name in ("baseline", "candidate", "rollback_target"):
            if request.GET.get(name):
                initial[name] = request.GET[name]
        return _form_page(request, TicketForm(initial=initial), ticket=None)
    form = TicketForm(request.POST)
    if form.is_valid():
        try:
            ticket = services.ticket_create(owner=request.user, **form.service_fields())  # type: ignore[arg-type]
        except InvalidInput as exc:
            apply_service_errors(form, exc.errors, TICKET_ERROR_FIELDS)
        else:
            messages.success(request, f"Ticket #{ticket.pk} filed as a draft. Submit it when it is complete.")
            return redirect("ui:ticket", pk=ticket.pk)
    return _form_page(request, form, ticket=None, status=400)


@login_required
def ticket_plan_preview(request: HttpRequest) -> HttpResponse:
    """The power plan of the form's baseline and tasks so far (htmx swaps it into the form)."""
    form = TicketForm(request.GET)
    form.is_valid()  # every field is optional: what is chosen is cleaned, the rest is left out
    data = form.cleaned_data
    plan = None
    if data.get("baseline"):
        tasks = ticket_tasks_with_roles(data.get("beneficiary_tasks") or [], data.get("risk_tasks") or [])
        plan = ticket_plan(policy=gate_policy(), baseline=data["baseline"], tasks=tasks).to_dict()
    return render(request, "partials/power_plan_preview.html", {"power_plan": plan})


@login_required
def ticket_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Edit a draft (owner or admin); the service refuses any other status with 409."""
    ticket = get_object_or_404(ticket_list(), pk=pk)
    # Refuse before showing the form: nobody else may edit, so the form would only mislead.
    if ticket.owner_id != request.user.pk and ADMIN not in user_roles(request.user):
        raise NotAllowed("only the ticket's owner or an admin edits it")
    if request.method != "POST":
        return _form_page(request, TicketForm(initial=TicketForm.initial_from_ticket(ticket)), ticket=ticket)
    form = TicketForm(request.POST)
    if form.is_valid():
        try:
            services.ticket_update(ticket=ticket, actor=request.user, **form.service_fields())
        except InvalidInput as exc:
            apply_service_errors(form, exc.errors, TICKET_ERROR_FIELDS)
        else:
            messages.success(request, "Draft saved.")
            return redirect("ui:ticket", pk=ticket.pk)
    return _form_page(request, form, ticket=ticket, status=400)


# --- ticket page -------------------------------------------------------------------------------


def _action_forms(ticket: ReleaseTicket, user: User, bound: TransitionForm | None) -> list[dict[str, Any]]:
    forms: list[dict[str, Any]] = []
    for action in ticket_actions_for(ticket, user):
        if action == "evaluate":
            forms.append(
                {
                    "action": action,
                    "label": "Evaluate again" if ticket.status != TicketStatus.SUBMITTED else "Evaluate",
                    "help": "Measures the baseline and the candidate again, one after the other: the runs this ticket "
                    "was judged on are not reused."
                    if ticket.status == TicketStatus.NEEDS_EVIDENCE
                    else "",
                    "codes": [],
                    "reason_required": False,
                    "form": None,
                }
            )
            continue
        form = bound if bound is not None and bound.data.get("action") == action else None
        forms.append(
            {
                "action": action,
                "label": ACTION_LABELS.get(action, action.replace("_", " ").capitalize()),
                "codes": REASON_CODES.get(action, []),
                "reason_required": TICKET_ACTIONS[action].reason_required,
                "form": form,
            }
        )
    return forms


def _ticket_page(
    request: HttpRequest,
    ticket: ReleaseTicket,
    *,
    bound: TransitionForm | None = None,
    signoff_form: SignOffForm | None = None,
    status: int = 200,
) -> HttpResponse:
    user: User = request.user  # type: ignore[assignment]
    roles = user_roles(user)
    evidence = build_evidence(ticket)
    samples = sample_pairs(ticket, request.GET)
    decision = latest_decision(ticket)
    record = decision["record"] if decision else None
    signoff_state = signoff_context(ticket, decision, user, signoff_form)
    provenance = ticket_provenance(ticket.pk)
    context = {
        "ticket": ticket,
        "timeline": list(ledger_entries(subject_type="ticket", subject_id=str(ticket.pk)).order_by("seq")),
        "evidence": evidence,
        "samples": samples,
        "decision": decision,
        "comparison": comparison_tasks(
            decision["rows"] if decision else [],
            evidence,
            regression_examples(ticket, decision["rows"]) if decision else {},
        ),
        "route_changes": proposed_route_changes(ticket, decision),
        "canary": canary_timeline(ticket),
        # Reviewers and admins resume a canary its rounds paused (the form sits in the canary section).
        "can_resume_canary": ticket.status == TicketStatus.CANARY and bool(roles & {REVIEWER, ADMIN}),
        "resume_form": bound if bound is not None and bound.data.get("action") == "resume_canary" else None,
        "actions": _action_forms(ticket, user, bound),
        "can_edit": ticket.status == TicketStatus.DRAFT and (ticket.owner_id == user.pk or ADMIN in roles),
        "provenance": provenance,
        # Open only while the owner's own imported evidence waits for another reviewer's acceptance.
        "provenance_open": any(row["owner_imported"] and not row["accepted"] for row in provenance),
        # Only a reviewer other than the owner accepts the owner's imported evidence.
        "can_accept_evidence": REVIEWER in roles and ticket.owner_id != user.pk,
        "signoff": signoff_state,
        "summary": decision_summary(record) if record else None,
        "power_plan": stored_ticket_plan(ticket=ticket, policy=gate_policy()).to_dict()
        if ticket.status in PLANNED_STATUSES
        else None,
        "next_action": next_action(
            status=ticket.status,
            decision=record,
            may_sign=bool(signoff_state.get("form")),
            is_owner=ticket.owner_id == user.pk,
        ),
    }
    return render(request, "tickets/detail.html", context, status=status)


@login_required
def ticket_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """Everything about one ticket: plan, timeline, verdicts, charts, evidence, samples, actions."""
    return _ticket_page(request, get_object_or_404(ticket_list(), pk=pk))


@login_required
def ticket_samples(request: HttpRequest, pk: int) -> HttpResponse:
    """The failure-samples block alone, for htmx filtering (the full page serves the same filters)."""
    ticket = ticket_get(pk=pk)
    if ticket is None:
        raise Http404("no such ticket")
    return render(request, "partials/samples.html", {"ticket": ticket, "samples": sample_pairs(ticket, request.GET)})


@login_required
@require_POST
def ticket_action(request: HttpRequest, pk: int) -> HttpResponse:
    """Take one lifecycle action (submit, approve, restrict, reject, …) through the service."""
    ticket = get_object_or_404(ticket_list(), pk=pk)
    form = TransitionForm(request.POST)
    if not form.is_valid():
        return _ticket_page(request, ticket, bound=form, status=400)
    action = form.cleaned_data["action"]
    code = form.cleaned_data.get("reason_code") or ""
    reason = form.reason()
    # The form's Submit button on a draft asks for the evaluation too (which submits it first).
    if action == "submit" and ticket.status == TicketStatus.DRAFT:
        action = "evaluate"
    try:
        ticket_action_take(
            ticket=ticket,
            action=action,
            actor=request.user,
            reason=reason,
            details={"reason_code": code} if code else None,
        )
    except InvalidInput as exc:
        apply_service_errors(form, {("comment" if k == "reason" else k): v for k, v in exc.errors.items()})
        return _ticket_page(request, ticket, bound=form, status=400)
    messages.success(request, f"Ticket #{ticket.pk}: {action.replace('_', ' ')} done.")
    return redirect(reverse("ui:ticket", kwargs={"pk": ticket.pk}) + "#status")


@login_required
@require_POST
def ticket_accept_evidence(request: HttpRequest, pk: int) -> HttpResponse:
    """A reviewer other than the owner accepts evidence the owner imported, saying why."""
    ticket = get_object_or_404(ticket_list(), pk=pk)
    run_id = request.POST.get("run", "")
    run = get_object_or_404(EvaluationRun, pk=int(run_id)) if run_id.isdigit() and len(run_id) < 18 else None
    if run is None:
        raise Http404("no such run")
    try:
        evidence_accept(ticket=ticket, run=run, actor=request.user, reason=request.POST.get("reason", ""))
    except InvalidInput as exc:
        messages.error(request, "; ".join(exc.errors.values()))
        return _ticket_page(request, ticket, status=400)
    messages.success(request, f"Accepted the owner's imported evidence of run #{run.pk} for this ticket.")
    return redirect(reverse("ui:ticket", kwargs={"pk": ticket.pk}) + "#provenance")


@login_required
@require_POST
def ticket_signoff(request: HttpRequest, pk: int) -> HttpResponse:
    """A reviewer signs the current decision: approve, restrict to some tasks, or reject."""
    ticket = get_object_or_404(ticket_list(), pk=pk)
    user: User = request.user  # type: ignore[assignment]
    decision = decision_current(ticket=ticket)
    if decision is None:
        raise DomainError(f"ticket #{ticket.pk} has no gate decision to sign off")
    form = signoff_form_for(decision, user, request.POST)
    if form.is_valid():
        try:
            result = signoff.signoff_record(ticket=ticket, actor=user, **form.service_fields())
        except InvalidInput as exc:
            apply_service_errors(form, {("verdict" if k == "decision" else k): v for k, v in exc.errors.items()})
        else:
            if result.moved:
                messages.success(request, f"Signed: ticket #{ticket.pk} is now {result.ticket.status}.")
            else:
                missing = "; ".join(result.state.missing)
                messages.success(request, f"Signed. Before the ticket moves it still needs: {missing}.")
            return redirect(reverse("ui:ticket", kwargs={"pk": ticket.pk}) + "#review")
    return _ticket_page(request, ticket, signoff_form=form, status=400)
