"""Web UI of the gates app: tickets (list, form, page, actions), the KV calculator, routes, reviews.

Views parse input with the forms in ``gates.forms`` and call the services; they never save models.
Service errors come back as pages: ``InvalidInput`` as inline field errors (400), ``NotAllowed``
as 403 and ``DomainError`` as 409, each with the service's own message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from evaluators.charts import Summary, box_svg, cdf_svg, summarise
from evaluators.models import EvaluationRun, SampleRecord, TaskResult
from gates import routing, services, signoff
from gates.decisions import decision_current
from gates.forms import (
    PRESETS,
    REASON_CODES,
    TICKET_ERROR_FIELDS,
    KvCalculatorForm,
    ReviewOutcomeForm,
    SampleFilterForm,
    SignOffForm,
    TicketForm,
    TransitionForm,
    apply_service_errors,
)
from gates.kv_calculator import GIB, Capacity, KvShape, compare
from gates.models import DecisionOutcome, GateDecision, Mechanism, ReleaseTicket, Route, TaskType, TicketStatus
from gates.selectors import ticket_list
from ledger.selectors import ledger_entries
from optgate.errors import DomainError, InvalidInput, NotAllowed
from optgate.roles import ADMIN, ENGINEER, REVIEWER, user_roles
from workers.models import Review, ReviewStatus
from workers.reviews import review_complete
from workers.services import evaluation_request

LIST_PAGE_SIZE = 50
EVALUABLE = (TicketStatus.SUBMITTED, TicketStatus.NEEDS_EVIDENCE)
ACTION_LABELS = {"submit": "Submit for evaluation", "request_evidence": "Request more evidence"}


def refuse(request: HttpRequest, error: Exception, status: int) -> HttpResponse:
    """The page shown when a service says no (403) or the state forbids it (409)."""
    title = "Not allowed" if status == 403 else "Conflict"
    return render(request, "error.html", {"title": title, "message": str(error)}, status=status)


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
        "tasks": list(TaskType.objects.values_list("slug", flat=True)),
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
        return refuse(request, NotAllowed("only engineers file release tickets"), 403)
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
        except NotAllowed as exc:
            return refuse(request, exc, 403)
        else:
            messages.success(request, f"Ticket #{ticket.pk} filed as a draft. Submit it when it is complete.")
            return redirect("ui:ticket", pk=ticket.pk)
    return _form_page(request, form, ticket=None, status=400)


@login_required
def ticket_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Edit a draft (owner or admin); the service refuses any other status with 409."""
    ticket = get_object_or_404(ticket_list(), pk=pk)
    if request.method != "POST":
        return _form_page(request, TicketForm(initial=TicketForm.initial_from_ticket(ticket)), ticket=ticket)
    form = TicketForm(request.POST)
    if form.is_valid():
        try:
            services.ticket_update(ticket=ticket, actor=request.user, **form.service_fields())
        except InvalidInput as exc:
            apply_service_errors(form, exc.errors, TICKET_ERROR_FIELDS)
        except NotAllowed as exc:
            return refuse(request, exc, 403)
        except DomainError as exc:
            return refuse(request, exc, 409)
        else:
            messages.success(request, "Draft saved.")
            return redirect("ui:ticket", pk=ticket.pk)
    return _form_page(request, form, ticket=ticket, status=400)


# --- ticket page -------------------------------------------------------------------------------


def _could_take(ticket: ReleaseTicket, action: str, user: User, roles: set[str]) -> bool:
    """Whether the action's button is worth showing; mirrors the service's rule, which still decides."""
    allowed = services.ACTION_ROLES[action]
    is_owner = ticket.owner_id == user.pk
    if action in services.SIGN_OFF_ACTIONS and is_owner:
        return False
    return (is_owner and "owner" in allowed) or bool(roles & (allowed - {"owner", "system"}))


def _action_forms(
    ticket: ReleaseTicket, user: User, roles: set[str], bound: TransitionForm | None
) -> list[dict[str, Any]]:
    forms: list[dict[str, Any]] = []
    actions = ticket.allowed_actions()
    # The owner asks for (re-)evaluation; the system's start_evaluation follows on a worker.
    if ticket.status in EVALUABLE and (ticket.owner_id == user.pk or ADMIN in roles):
        actions = ["evaluate", *[a for a in actions if a != "start_evaluation"]]
    for action in actions:
        if action == "evaluate":
            forms.append(
                {
                    "action": action,
                    "label": "Evaluate again" if ticket.status != TicketStatus.SUBMITTED else "Evaluate",
                    "codes": [],
                    "reason_required": False,
                    "form": None,
                }
            )
            continue
        # Approve, restrict and reject are reviewer sign-offs on the decision: see the sign-off form.
        if action in services.SIGN_OFF_ACTIONS or not _could_take(ticket, action, user, roles):
            continue
        form = bound if bound is not None and bound.data.get("action") == action else None
        forms.append(
            {
                "action": action,
                "label": ACTION_LABELS.get(action, action.replace("_", " ").capitalize()),
                "codes": REASON_CODES.get(action, []),
                "reason_required": action in services.REASON_REQUIRED,
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
    context = {
        "ticket": ticket,
        "timeline": list(ledger_entries(subject_type="ticket", subject_id=str(ticket.pk)).order_by("seq")),
        "evidence": evidence,
        "samples": samples,
        "decision": decision,
        "route_changes": proposed_route_changes(ticket, decision),
        "actions": _action_forms(ticket, user, roles, bound),
        "can_edit": ticket.status == TicketStatus.DRAFT and (ticket.owner_id == user.pk or ADMIN in roles),
        "signoff": signoff_context(ticket, decision, user, roles, signoff_form),
    }
    return render(request, "tickets/detail.html", context, status=status)


@login_required
def ticket_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """Everything about one ticket: plan, timeline, verdicts, charts, evidence, samples, actions."""
    return _ticket_page(request, get_object_or_404(ticket_list(), pk=pk))


@login_required
def ticket_samples(request: HttpRequest, pk: int) -> HttpResponse:
    """The failure-samples block alone, for htmx filtering (the full page serves the same filters)."""
    ticket = get_object_or_404(ReleaseTicket.objects.select_related("baseline_run", "candidate_run"), pk=pk)
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
    try:
        # Canary, promotion and rollback move routes too, so they go through the routing services.
        if action == "evaluate" or (action == "submit" and ticket.status == TicketStatus.DRAFT):
            # Submitting asks for the evaluation too: both runs are requested on the workers.
            evaluation_request(ticket=ticket, actor=request.user)
        elif action == "start_canary":
            routing.routes_start_canary(ticket=ticket, actor=request.user, reason=reason)
        elif action == "promote":
            routing.routes_promote(ticket=ticket, actor=request.user, reason=reason)
        elif action == "roll_back":
            routing.routes_rollback(ticket=ticket, actor=request.user, reason=reason)
        elif action in services.SIGN_OFF_ACTIONS:
            raise NotAllowed("approve, restrict and reject are reviewer sign-offs: use the sign-off form")
        else:
            services.ticket_transition(
                ticket=ticket,
                action=action,
                actor=request.user,
                reason=reason,
                details={"reason_code": code} if code else None,
            )
    except InvalidInput as exc:
        apply_service_errors(form, {("comment" if k == "reason" else k): v for k, v in exc.errors.items()})
        return _ticket_page(request, ticket, bound=form, status=400)
    except NotAllowed as exc:
        return refuse(request, exc, 403)
    except DomainError as exc:
        return refuse(request, exc, 409)
    messages.success(request, f"Ticket #{ticket.pk}: {action.replace('_', ' ')} done.")
    return redirect(reverse("ui:ticket", kwargs={"pk": ticket.pk}) + "#status")


def _signoff_form(decision: GateDecision, user: User, data: Any = None) -> SignOffForm:
    return SignOffForm(
        data,
        tasks=list(decision.proposed_routes),
        allowed=list(decision.allowed_tasks),
        capacities=sorted(signoff.user_capacities(user)),
    )


@login_required
@require_POST
def ticket_signoff(request: HttpRequest, pk: int) -> HttpResponse:
    """A reviewer signs the current decision: approve, restrict to some tasks, or reject."""
    ticket = get_object_or_404(ticket_list(), pk=pk)
    user: User = request.user  # type: ignore[assignment]
    decision = decision_current(ticket=ticket)
    if decision is None:
        return refuse(request, DomainError(f"ticket #{ticket.pk} has no gate decision to sign off"), 409)
    form = _signoff_form(decision, user, request.POST)
    if form.is_valid():
        try:
            result = signoff.signoff_record(ticket=ticket, actor=user, **form.service_fields())
        except InvalidInput as exc:
            apply_service_errors(form, {("verdict" if k == "decision" else k): v for k, v in exc.errors.items()})
        except NotAllowed as exc:
            return refuse(request, exc, 403)
        except DomainError as exc:
            return refuse(request, exc, 409)
        else:
            if result.moved:
                messages.success(request, f"Signed: ticket #{ticket.pk} is now {result.ticket.status}.")
            else:
                missing = "; ".join(result.state.missing)
                messages.success(request, f"Signed. Before the ticket moves it still needs: {missing}.")
            return redirect(reverse("ui:ticket", kwargs={"pk": ticket.pk}) + "#review")
    return _ticket_page(request, ticket, signoff_form=form, status=400)


# --- KV-cache calculator ------------------------------------------------------------------------


def _capacity_row(capacity: Capacity) -> dict[str, Any]:
    return {
        "dtype": capacity.dtype,
        "bytes_per_element": f"{capacity.bytes_per_element:g}",
        "mib_per_sequence": f"{capacity.bytes_per_sequence / 2**20:,.1f}",
        "batch_gib": f"{capacity.batch_bytes / GIB:,.2f}",
        "batch_fits": capacity.batch_fits,
        "max_sequences": f"{capacity.max_sequences:,}",
    }


@login_required
def kv_calculator(request: HttpRequest) -> HttpResponse:
    """How many sequences of a given length fit in a KV budget, baseline vs candidate precision."""
    form = KvCalculatorForm(request.GET or None)
    context: dict[str, Any] = {"form": form, "result": None}
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        try:
            shape = KvShape(data["layers"], data["kv_heads"], data["head_dim"])
            result = compare(
                baseline_dtype=data["baseline_dtype"],
                candidate_dtype=data["candidate_dtype"],
                batch=data["batch"],
                seq_len=data["seq_len"],
                shape=shape,
                budget_bytes=data["budget_gib"] * GIB,
            )
        except ValueError as exc:
            form.add_error(None, str(exc))
        else:
            context["result"] = result
            context["result_rows"] = [
                ("Baseline", _capacity_row(result.baseline)),
                ("Candidate", _capacity_row(result.candidate)),
            ]
            context["ratio_text"] = f"{result.ratio:.2f}" if result.ratio is not None else ""
    return render(request, "kv_calculator.html", context, status=400 if form.is_bound and form.errors else 200)


# --- route table and reviews --------------------------------------------------------------------


@login_required
def route_table(request: HttpRequest) -> HttpResponse:
    """The current task → backend routes, signed decisions waiting for their canary, and history."""
    current = routing.route_version_current()
    pending = (
        GateDecision.objects.filter(
            dry_run=False,
            signed_verdict__in=[DecisionOutcome.APPROVE, DecisionOutcome.RESTRICT],
            ticket__status__in=[TicketStatus.APPROVED, TicketStatus.RESTRICTED],
        )
        .select_related("ticket__baseline", "ticket__candidate")
        .order_by("-signed_at")[:20]
    )
    context = {
        "current": current,
        "routes": list(routing.route_table()) if current else [],
        "pending": [{"decision": d, "changes": signed_route_changes(d)} for d in pending],
        "history": list(routing.route_history()[:30]),
    }
    return render(request, "routes.html", context)


def signed_route_changes(decision: GateDecision) -> list[dict[str, Any]]:
    """What a signed decision will route: signed tasks to the candidate, the others stay on the baseline."""
    ticket = decision.ticket
    return [
        {
            "task": task,
            "backend": ticket.candidate if task in decision.signed_tasks else ticket.baseline,
            "moves": task in decision.signed_tasks,
        }
        for task in decision.proposed_routes
    ]


def backend_routes(backend: Any) -> list[Route]:
    """The current routes that send traffic to ``backend`` (for its page)."""
    return list(routing.route_table().filter(backend=backend))


def reviews_due(*, limit: int = 50) -> list[Review]:
    """Open reviews of active optimizations, the soonest due first."""
    return list(Review.objects.filter(status=ReviewStatus.OPEN).select_related("ticket__candidate")[:limit])


def _review_form(review: Review, data: Any = None, signed: dict[int, list[str]] | None = None) -> ReviewOutcomeForm:
    if signed is None:
        decision = decision_current(ticket=review.ticket)
        tasks = list(decision.signed_tasks) if decision is not None else []
    else:
        tasks = signed.get(review.ticket_id, [])
    return ReviewOutcomeForm(data, tasks=tasks, prefix=f"review-{review.pk}")


def _signed_tasks_by_ticket(ticket_ids: list[int]) -> dict[int, list[str]]:
    """Each ticket's current binding decision's signed tasks, in one query."""
    signed: dict[int, list[str]] = {}
    decisions = GateDecision.objects.filter(ticket_id__in=ticket_ids, dry_run=False).order_by("ticket_id", "-id")
    for ticket_id, tasks in decisions.values_list("ticket_id", "signed_tasks"):
        signed.setdefault(ticket_id, list(tasks or []))
    return signed


@login_required
def reviews(request: HttpRequest, forms: dict[int, ReviewOutcomeForm] | None = None, status: int = 200) -> HttpResponse:
    """Reviews due, each with its outcome form (keep default, restrict, roll back, observe more)."""
    user: User = request.user  # type: ignore[assignment]
    can_review = bool(user_roles(user) & {REVIEWER, ADMIN})
    rows = []
    due = reviews_due(limit=200)
    signed = _signed_tasks_by_ticket([review.ticket_id for review in due])
    for review in due:
        form = (forms or {}).get(review.pk) or _review_form(review, signed=signed)
        own = review.ticket.owner_id == user.pk
        rows.append({"review": review, "form": form if can_review and not own else None, "own": own})
    return render(request, "reviews.html", {"rows": rows, "can_review": can_review}, status=status)


@login_required
@require_POST
def review_outcome(request: HttpRequest, pk: int) -> HttpResponse:
    """Record a review's outcome through ``review_complete`` (which moves routes where it must)."""
    review = get_object_or_404(Review.objects.select_related("ticket__owner"), pk=pk)
    form = _review_form(review, request.POST)
    if form.is_valid():
        try:
            review_complete(review=review, actor=request.user, **form.service_fields())  # type: ignore[arg-type]
        except InvalidInput as exc:
            apply_service_errors(form, exc.errors)
        except NotAllowed as exc:
            return refuse(request, exc, 403)
        except DomainError as exc:
            return refuse(request, exc, 409)
        else:
            messages.success(
                request, f"Review #{review.pk} of ticket #{review.ticket_id}: {form.cleaned_data['outcome']}."
            )
            return redirect("ui:reviews")
    return reviews(request, forms={review.pk: form}, status=400)


# --- evidence shown on the ticket page ----------------------------------------------------------

# Engine counters worth a reviewer's eye, in display order; other numeric keys follow.
ENGINE_KEYS = (
    "prefix_cache_hit_rate",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "saved_prefill_tokens",
    "spec_decode_acceptance_rate",
    "spec_decode_mean_accepted_length",
    "spec_decode_draft_tokens",
    "spec_decode_accepted_tokens",
    "kv_cache_usage_peak",
    "preemptions",
)
LATENCY_METRICS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"))
SAMPLE_LIMIT = 25


@dataclass
class LatencyPanel:
    """One latency metric of one task: summaries, CDF and box plot, baseline vs candidate."""

    label: str
    baseline: Summary
    candidate: Summary
    cdf: str
    box: str

    @property
    def rows(self) -> list[tuple[str, Summary]]:
        return [("Baseline", self.baseline), ("Candidate", self.candidate)]


@dataclass
class TaskPanel:
    task: str
    role: str
    quality: dict[str, Any]
    latency: list[LatencyPanel]
    engine: list[tuple[str, Any, Any]]
    errors: list[str]


@dataclass
class Evidence:
    tasks: list[str]
    baseline_run: EvaluationRun | None
    candidate_run: EvaluationRun | None
    panels: list[TaskPanel] = field(default_factory=list)
    run_engine: list[tuple[str, Any, Any]] = field(default_factory=list)


def _task_roles(ticket: ReleaseTicket) -> dict[str, str]:
    roles = {t.slug: "beneficiary" for t in ticket.beneficiary_tasks.all()}
    for task in ticket.risk_tasks.all():
        roles.setdefault(task.slug, "risk")
    return roles


def _engine_rows(base: dict[str, Any], cand: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    keys = [k for k in ENGINE_KEYS if k in base or k in cand]
    keys += sorted(k for k in {*base, *cand} - set(ENGINE_KEYS) if isinstance((base | cand).get(k), int | float))
    return [(key, base.get(key), cand.get(key)) for key in keys]


def _ms(records: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) * 1000.0 for r in records if r.get("error") is None and isinstance(r.get(key), int | float)]


def build_evidence(ticket: ReleaseTicket) -> Evidence:
    """Per-task latency charts, quality aggregates and engine counters of the ticket's two runs."""
    roles = _task_roles(ticket)
    base_run, cand_run = ticket.baseline_run, ticket.candidate_run
    evidence = Evidence(list(roles), base_run, cand_run)
    if base_run is None and cand_run is None:
        return evidence
    results: dict[tuple[int, str], TaskResult] = {
        (r.run_id, r.task): r
        for r in TaskResult.objects.filter(run_id__in=[r.pk for r in (base_run, cand_run) if r], task__in=roles)
    }
    evidence.run_engine = _engine_rows(
        base_run.engine_evidence if base_run else {}, cand_run.engine_evidence if cand_run else {}
    )
    for task, role in roles.items():
        base = results.get((base_run.pk, task)) if base_run else None
        cand = results.get((cand_run.pk, task)) if cand_run else None
        if base is None and cand is None:
            continue
        latency = []
        for key, label in LATENCY_METRICS:
            series = {
                "baseline": _ms(base.requests if base else [], key),
                "candidate": _ms(cand.requests if cand else [], key),
            }
            chart_id = f"{task}-{key}"
            latency.append(
                LatencyPanel(
                    label,
                    summarise(series["baseline"]),
                    summarise(series["candidate"]),
                    cdf_svg(series, title=f"{task} {label} CDF", chart_id=f"{chart_id}-cdf"),
                    box_svg(series, title=f"{task} {label} distribution", chart_id=f"{chart_id}-box"),
                )
            )
        evidence.panels.append(
            TaskPanel(
                task,
                role,
                {"baseline": base.quality if base else {}, "candidate": cand.quality if cand else {}},
                latency,
                _engine_rows(base.engine_evidence if base else {}, cand.engine_evidence if cand else {}),
                [f"{side}: {r.error}" for side, r in (("baseline", base), ("candidate", cand)) if r and r.error],
            )
        )
    return evidence


@dataclass
class SamplePair:
    task: str
    sample_id: str
    baseline: SampleRecord | None
    candidate: SampleRecord | None

    @property
    def prompt(self) -> str:
        record = self.candidate or self.baseline
        return record.prompt if record else ""

    @property
    def sides(self) -> list[tuple[str, SampleRecord | None]]:
        return [("Baseline", self.baseline), ("Candidate", self.candidate)]

    @property
    def target(self) -> str:
        record = self.candidate or self.baseline
        return record.target if record else ""


def sample_pairs(ticket: ReleaseTicket, params: Any) -> dict[str, Any]:
    """Failing samples with the baseline's and candidate's outputs side by side, filtered.

    ``show`` picks regressions (baseline passed, candidate failed), every candidate failure, or a
    failure on either side; ``task`` and ``reason`` narrow further. At most ``SAMPLE_LIMIT`` pairs.
    """
    base_run, cand_run = ticket.baseline_run_id, ticket.candidate_run_id
    runs = [r for r in (base_run, cand_run) if r]
    if not runs:
        return {"available": False}
    failing = SampleRecord.objects.filter(run_id__in=runs, passed=False)
    tasks = sorted(set(SampleRecord.objects.filter(run_id__in=runs).values_list("task", flat=True).distinct()))
    reasons = sorted(set(failing.exclude(failure_reason="").values_list("failure_reason", flat=True).distinct()))
    form = SampleFilterForm(params or None, tasks=tasks, reasons=reasons)
    filters = form.cleaned_data if form.is_bound and form.is_valid() else {}
    show = filters.get("show") or "regressions"
    if filters.get("task"):
        failing = failing.filter(task=filters["task"])
    if filters.get("reason"):
        failing = failing.filter(failure_reason=filters["reason"])
    if show in ("candidate_failed", "regressions"):
        failing = failing.filter(run_id=cand_run)
    all_keys = list(dict.fromkeys(failing.order_by("task", "sample_id").values_list("task", "sample_id")))
    # Regressions drop pairs whose baseline failed too, so look at a few pages' worth of keys.
    keys = all_keys[: SAMPLE_LIMIT * (4 if show == "regressions" else 1)]
    records = SampleRecord.objects.filter(
        run_id__in=runs, task__in={t for t, _ in keys}, sample_id__in={s for _, s in keys}
    )
    by_key: dict[tuple[str, str, int], SampleRecord] = {(r.task, r.sample_id, r.run_id): r for r in records}
    pairs = []
    for task, sample_id in keys:
        pair = SamplePair(
            task, sample_id, by_key.get((task, sample_id, base_run or 0)), by_key.get((task, sample_id, cand_run or 0))
        )
        if show == "regressions" and not (pair.baseline and pair.baseline.passed):
            continue
        pairs.append(pair)
    total = len(pairs) if show == "regressions" else len(all_keys)
    return {"available": True, "form": form, "pairs": pairs[:SAMPLE_LIMIT], "total": total, "limit": SAMPLE_LIMIT}


# --- the gate decision: verdict matrix and proposed routes --------------------------------------


def _num(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:.4g}"


def _interval(value: Any) -> str:
    if not value or len(value) != 2 or value[0] is None:
        return "—"
    return f"[{_num(value[0])}, {_num(value[1])}]"


def verdict_rows(verdicts: dict[str, Any]) -> list[dict[str, Any]]:
    """The stored per-task verdicts (``TaskVerdict.to_dict()``) as display rows, numbers formatted."""
    rows = []
    for task, verdict in verdicts.items():
        metrics = [
            {
                **metric,
                "baseline_text": _num(metric.get("baseline")),
                "candidate_text": _num(metric.get("candidate")),
                "effect_text": _num(metric.get("effect")),
                "interval_text": _interval(metric.get("interval")),
            }
            for metric in verdict.get("metrics", [])
        ]
        rows.append(
            {
                "task": task,
                "role": verdict.get("role", ""),
                "status": verdict.get("status", ""),
                "reason": verdict.get("reason", ""),
                "samples_needed": verdict.get("samples_needed"),
                "metrics": metrics,
            }
        )
    return rows


def latest_decision(ticket: ReleaseTicket) -> dict[str, Any] | None:
    """The ticket's current binding decision with its verdict matrix rows, or None before judging."""
    record = decision_current(ticket=ticket)
    if record is None:
        return None
    return {"record": record, "rows": verdict_rows(record.verdicts or {})}


def proposed_route_changes(ticket: ReleaseTicket, decision: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per task of the decision: where it routes now (default route) and where the gate proposes."""
    if decision is None:
        return []
    record: GateDecision = decision["record"]
    current = {r.task.slug: r.backend for r in routing.route_table().filter(tenant="")}
    rows = []
    for task, side in record.proposed_routes.items():
        target = ticket.candidate if side == "candidate" else ticket.baseline
        signed = record.signed_verdict and task in record.signed_tasks
        rows.append(
            {
                "task": task,
                "now": current.get(task),
                "proposed": target,
                "side": side,
                "signed": bool(signed),
                "changes": current.get(task) != target,
            }
        )
    return rows


def signoff_context(
    ticket: ReleaseTicket, decision: dict[str, Any] | None, user: User, roles: set[str], form: SignOffForm | None
) -> dict[str, Any]:
    """Sign-offs so far, what is still missing, and the form when this user may sign now."""
    if decision is None:
        return {"decision": None}
    record: GateDecision = decision["record"]
    sign_offs = list(record.sign_offs.select_related("reviewer"))
    can_sign = (
        ticket.status == TicketStatus.EVALUATED
        and record.outcome != DecisionOutcome.NEEDS_EVIDENCE
        and not record.signed_verdict
        and REVIEWER in roles
        and ticket.owner_id != user.pk
        and all(s.reviewer_id != user.pk for s in sign_offs)
    )
    why_not = ""
    if not can_sign and ticket.status == TicketStatus.EVALUATED and not record.signed_verdict:
        if ticket.owner_id == user.pk:
            why_not = "You own this ticket, so you cannot sign it off."
        elif REVIEWER not in roles:
            why_not = "Sign-off is for reviewers."
        elif any(s.reviewer_id == user.pk for s in sign_offs):
            why_not = "You have signed this decision."
    return {
        "decision": record,
        "sign_offs": sign_offs,
        "summary": signoff.signoff_summary(record) if sign_offs else [],
        "form": (form or _signoff_form(record, user)) if can_sign else None,
        "why_not": why_not,
    }
