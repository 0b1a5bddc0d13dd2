"""Backend pages: the list, registration, and a backend's page with its routes, tickets and A/A
calibrations (and the button that asks for one).

The backends app owns the model, the form and the register service; these pages live here because a
backend's page shows what the gate made of it (routes, tickets) and its form offers the task types.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from backends.forms import BackendForm, backend_error_fields
from backends.models import Backend
from backends.prefix_cache import cache_key_recipe
from backends.selectors import backend_get, backend_list
from backends.services import backend_register
from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import ADMIN, ENGINEER, user_roles
from gates.display import FLOOR_COLUMNS, calibration_rows, metric_label
from gates.forms.base import apply_service_errors
from gates.forms.presets import PRESETS
from gates.models import CalibrationStatus
from gates.selectors.calibrations import backend_calibrations
from gates.selectors.routes import routes_of_backend
from gates.selectors.tickets import task_types, tickets_of_backend
from gates.services.calibration import calibration_request
from ledger.selectors import ledger_entries

PAGE_SIZE = 50


def _task_choices() -> list[tuple[str, str]]:
    return [(t.slug, f"{t.slug} — {t.name} ({t.risk_tier} risk)") for t in task_types()]


@login_required
def backend_index(request: HttpRequest) -> HttpResponse:
    page = Paginator(backend_list(), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "backends/list.html", {"page": page})


@login_required
def backend_detail(request: HttpRequest, name: str) -> HttpResponse:
    """A backend's serving config, fingerprint, model card, routes, tickets and ledger history."""
    backend = backend_get(name=name)
    if backend is None:
        raise Http404("no such backend")
    context = {
        "backend": backend,
        "tickets": tickets_of_backend(backend),
        "routes": routes_of_backend(backend),
        "engine_args_json": json.dumps(backend.engine_args, indent=2, sort_keys=True),
        "sampling_json": json.dumps(backend.sampling_params, indent=2, sort_keys=True),
        "recipe_json": json.dumps(backend.prefix_cache_key_recipe, indent=2, sort_keys=True),
        "cache_missing": cache_key_recipe(backend)["missing"],
        "args_check": getattr(backend, "args_check", None),
        "history": list(ledger_entries(subject_type="backend", subject_id=str(backend.pk)).order_by("seq")[:50]),
        **_calibration_context(request, backend),
    }
    return render(request, "backends/detail.html", context)


def _calibration_context(request: HttpRequest, backend: Backend) -> dict[str, Any]:
    """The newest calibration speaking for the backend (its floors when finished), older ones in a list."""
    rows = backend_calibrations(backend)
    latest = rows[0] if rows else None
    table = []
    if latest is not None and latest.calibration.status == CalibrationStatus.FINISHED:
        c = latest.calibration
        table = calibration_rows(c.tasks, c.floors, c.discordance, c.task_errors)
    return {
        "calibrations": rows,
        "calibration": latest,
        "calibration_table": table,
        "floor_labels": [metric_label(m) for m in FLOOR_COLUMNS],
        "may_calibrate": bool(user_roles(request.user) & {ENGINEER, ADMIN}),
        "task_choices": _task_choices(),
    }


@login_required
@require_POST
def backend_calibrate(request: HttpRequest, name: str) -> HttpResponse:
    """Ask for an A/A calibration of the backend on the chosen task types (engineers and admins)."""
    backend = backend_get(name=name)
    if backend is None:
        raise Http404("no such backend")
    try:
        calibration = calibration_request(backend=backend, tasks=request.POST.getlist("tasks"), actor=request.user)
    except InvalidInput as exc:
        messages.error(request, "; ".join(f"{field}: {message}" for field, message in exc.errors.items()))
    else:
        messages.success(
            request,
            f"Calibration #{calibration.pk} requested: a worker measures two engines of {backend.name} together "
            f"(runs #{calibration.baseline_run_id} and #{calibration.candidate_run_id}).",
        )
    return redirect(reverse("ui:backend", kwargs={"name": backend.name}) + "#calibration")


def _safe_next(request: HttpRequest) -> str | None:
    target = request.POST.get("next") or request.GET.get("next")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return None


@login_required
def backend_new(request: HttpRequest) -> HttpResponse:
    """Register a backend (engineers and admins). ``?preset=`` pre-fills a candidate's engine args."""
    if not user_roles(request.user) & {ENGINEER, ADMIN}:
        raise NotAllowed("only engineers register backends")
    if request.method != "POST":
        preset = PRESETS.get(request.GET.get("preset", ""))
        initial = {"engine_args": preset.engine_args if preset else {}, "engine": "vllm"}
        form = BackendForm(initial=initial, task_choices=_task_choices())
        return render(request, "backends/form.html", {"form": form, "next": _safe_next(request), "preset": preset})
    form = BackendForm(request.POST, task_choices=_task_choices())
    if form.is_valid():
        try:
            backend, created = backend_register(actor=request.user, **form.service_fields())
        except InvalidInput as exc:
            named = {
                k: f"{k.removeprefix('engine_args.')}: {v}" if k.startswith("engine_args.") else v
                for k, v in exc.errors.items()
            }
            apply_service_errors(form, named, backend_error_fields(exc.errors))
        except DomainError as exc:
            form.add_error(None, str(exc))
        else:
            verb = "registered" if created else "already registered with this exact configuration"
            messages.success(request, f"Backend {backend.name} {verb}.")
            target = _safe_next(request)
            return redirect(target) if target else redirect("ui:backend", name=backend.name)
    return render(request, "backends/form.html", {"form": form, "next": _safe_next(request)}, status=400)
