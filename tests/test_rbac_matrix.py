"""Who may do what: every API action and every page, for every role, pinned in one table.

The table ``MATRIX`` is the access contract. Each row is one endpoint (by URL name) and method,
sometimes with a variant (the ticket page's action form takes several actions); each column is
one member of the cast:

* ``anon``  — nobody signed in;
* ``out``   — olga, signed in with no role (a gateway's or CI's service account looks like this);
* ``eng``   — evan, an engineer who does not own the ticket;
* ``own``   — erin, the engineer who owns the ticket;
* ``rev``   — rita, a platform reviewer;
* ``adm``   — ada, in the ``admin`` group (not Django staff).

Cells are the answer expected for a request that is otherwise valid, made against a ticket in the
state the row names (so "allowed" means the permission check passed and the action happened):

* ``200 201 202`` — allowed; ``302`` — allowed, a page redirecting after its work;
* ``login`` — a page sent the visitor to sign in; ``401`` — the API asked for credentials;
* ``403`` — refused; ``405`` — the method is not served; ``staff`` — sent to the admin's sign-in.

A row's path is its URL name reversed with the state's id (``PATHS`` has the few that need more).
Every write row sends a complete, valid body (``BODIES``), so no cell counts a 400 as "allowed".

Every refused write also leaves the ledger untouched. ``test_the_matrix_covers_every_endpoint``
walks the URL resolver and the API router: an endpoint, page or method missing from the table
fails it, so a new endpoint must be added here with its access rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.urls import NoReverseMatch, URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from django.views.generic.edit import ProcessFormView
from rest_framework.test import APIClient

import gates
from backends.models import Backend
from evaluators.imports.services import run_open_for_import
from evaluators.models import EvaluationRun, RunStatus, TaskResult
from gates.models import GateDecision, ReleaseTicket, Review, TicketStatus
from gates.services import routing, signoff
from gates.services import tickets as services
from gates.services.reviews import review_open
from ledger.models import LedgerEntry
from optgate.urls import router
from tests.factories import backend_fields, evaluating_ticket, outcomes, store_run, task_spec, tasks, ticket_fields
from tests.ui_helpers import client_for

pytestmark = pytest.mark.django_db

ROLES = ("anon", "out", "eng", "own", "rev", "adm")
CAST = {"anon": None, "out": "olga", "eng": "evan", "own": "erin", "rev": "rita", "adm": "ada"}


@dataclass(frozen=True)
class Row:
    name: str  # the URL name, namespaced (``ui:ticket``) for the web UI
    method: str
    state: str  # what the request acts on; see ``World``
    expected: dict[str, str]
    variant: str = ""

    @property
    def key(self) -> str:
        return " ".join(filter(None, (self.name, self.method, self.variant)))


def row(name: str, method: str, state: str, cells: str, variant: str = "") -> Row:
    codes = cells.split()
    assert len(codes) == len(ROLES), f"{name} {method}: one cell per role"
    return Row(name, method, state, dict(zip(ROLES, codes, strict=True)), variant)


# State: "-" none; "draft"; "evaluated" (judged "approve", awaiting sign-off); "approved" (signed);
# "canary" (its observation window over); "default" (promoted); "review" (an open review of a
# default ticket); "backend"; "entry" (a ledger entry); "routes" (a seeded route table);
# "run" (a finished native run); "importing" (an open import run); "imported" (one with quality
# evidence for its task, ready to close); "token" (an API token of the owner's, issued through the API).
#
# Notes per row, where the answer is not plain role-based:
# - ticket-detail PATCH: engineers pass the API permission; the service allows only owner/admin.
# - ticket-sign-off: the owner never signs; admins are not reviewers, so they do not sign either.
# - ticket-promote: promotion is for reviewers and admins, not the owner.
# - ticket-accept-evidence: reviewers other than the owner; the "evaluated" ticket's runs were measured
#   by OptGate, so a reviewer gets 409 (nothing to accept) where others are refused (403).
# - start-canary / promote / roll-back (API and page): the routing services check the ticket's state
#   before the actor, so on a ticket in the wrong state everyone gets 409; the rows use the right state.
# - resume-canary (API and page): reviewers and admins, checked before the state; the "canary" ticket's
#   rounds never paused it, so they get 409 (nothing to resume) where others are refused (403).
# - policy-validate / policy-dry-run: read-only checks that store nothing: every signed-in user.
# - run-evidence / run-close: import runs have no owner; engineers and admins attach evidence.
# - review-complete: reviewers and admins; the ticket's owner (an engineer here) never reviews their own.
# - token-*: everyone manages their own API tokens; admins anyone's. The "token" state is a token of
#   the owner's; others get 404, since they cannot see it.
# - user-*: an admin sees and changes everyone's roles; anyone else sees only themselves (others: 404)
#   and changes nothing (403). The "person" state is the owner.
# - flagger: a gateway's token only (header or metadata.token); a session is not accepted.
# - github: an HMAC signature only; without one every caller gets 401.
# - canary-outcomes POST: business-signal counts come from engineers' and admins' tokens (a gateway's).
# - metrics: aggregate counts for Prometheus, open unless OPTGATE_METRICS_TOKEN is set (row
#   "metrics GET token" pins that a configured token shuts everyone else out).
# - schema / api-docs: the API description, public by design (no data).
# - admin site: Django staff only; the admin *role* does not make a user staff.
#
# fmt: off
MATRIX: tuple[Row, ...] = (
    #   URL name                        method   state        anon  out   eng   own   rev   adm
    # ---- REST API: /api/v1/ ----------------------------------------------------------------------
    row("api-root",                     "GET",   "-",         "401   200   200   200   200   200"),
    row("task-type-list",               "GET",   "-",         "401   200   200   200   200   200"),
    row("task-type-detail",             "GET",   "-",         "401   200   200   200   200   200"),
    row("backend-list",                 "GET",   "-",         "401   200   200   200   200   200"),
    row("backend-list",                 "POST",  "-",         "401   403   201   201   403   201"),
    row("backend-detail",               "GET",   "backend",   "401   200   200   200   200   200"),
    row("backend-calibrate",            "POST",  "backend",   "401   403   202   202   403   202"),
    row("backend-calibrations",         "GET",   "backend",   "401   200   200   200   200   200"),
    row("ticket-list",                  "GET",   "draft",     "401   200   200   200   200   200"),
    row("ticket-list",                  "POST",  "-",         "401   403   201   201   403   201"),
    row("ticket-detail",                "GET",   "draft",     "401   200   200   200   200   200"),
    row("ticket-detail",                "PATCH", "draft",     "401   403   403   200   403   200"),
    row("ticket-submit",                "POST",  "draft",     "401   403   403   200   403   200"),
    row("ticket-request-evidence",      "POST",  "evaluated", "401   403   403   403   200   200"),
    row("ticket-retire",                "POST",  "default",   "401   403   403   403   200   200"),
    row("ticket-start-canary",          "POST",  "approved",  "401   403   403   200   200   200"),
    row("ticket-promote",               "POST",  "canary",    "401   403   403   403   200   200"),
    row("ticket-roll-back",             "POST",  "canary",    "401   403   403   200   200   200"),
    row("ticket-resume-canary",         "POST",  "canary",    "401   403   403   403   409   409"),
    row("ticket-canary-rounds",         "GET",   "canary",    "401   200   200   200   200   200"),
    row("canary-outcomes",              "GET",   "-",         "401   200   200   200   200   200"),
    row("canary-outcomes",              "POST",  "-",         "401   403   201   201   403   201"),
    row("ticket-decision",              "GET",   "evaluated", "401   200   200   200   200   200"),
    row("ticket-plan",                  "GET",   "draft",     "401   200   200   200   200   200"),
    row("ticket-sign-off",              "POST",  "evaluated", "401   403   403   403   201   403"),
    row("ticket-accept-evidence",       "POST",  "evaluated", "401   403   403   403   409   403"),
    row("ticket-evaluate",              "POST",  "draft",     "401   403   403   202   403   202"),
    row("ticket-cancel-evaluation",     "POST",  "draft",     "401   403   403   200   403   200"),
    row("ledger-list",                  "GET",   "entry",     "401   200   200   200   200   200"),
    row("ledger-detail",                "GET",   "entry",     "401   200   200   200   200   200"),
    row("ledger-verify",                "GET",   "entry",     "401   200   200   200   200   200"),
    row("policy-list",                  "GET",   "-",         "401   200   200   200   200   200"),
    row("policy-detail",                "GET",   "-",         "401   200   200   200   200   200"),
    row("policy-validate",              "POST",  "-",         "401   200   200   200   200   200"),
    row("policy-dry-run",               "POST",  "evaluated", "401   200   200   200   200   200"),
    row("route-list",                   "GET",   "routes",    "401   200   200   200   200   200"),
    row("route-history",                "GET",   "routes",    "401   200   200   200   200   200"),
    row("route-export",                 "GET",   "routes",    "401   200   200   200   200   200"),
    row("route-cache-salt",             "GET",   "routes",    "401   200   200   200   200   200"),
    row("route-set-route",              "POST",  "routes",    "401   403   403   403   403   201"),
    row("run-list",                     "GET",   "run",       "401   200   200   200   200   200"),
    row("run-list",                     "POST",  "-",         "401   403   201   201   403   201"),
    row("run-detail",                   "GET",   "run",       "401   200   200   200   200   200"),
    row("review-list",                  "GET",   "review",    "401   200   200   200   200   200"),
    row("review-detail",                "GET",   "review",    "401   200   200   200   200   200"),
    row("review-complete",              "POST",  "review",    "401   403   403   403   200   200"),
    row("run-evidence",                 "POST",  "importing", "401   403   201   201   403   201"),
    row("run-close",                    "POST",  "imported",  "401   403   200   200   403   200"),
    row("token-list",                   "GET",   "token",     "401   200   200   200   200   200"),
    row("token-list",                   "POST",  "-",         "401   201   201   201   201   201"),
    row("token-detail",                 "GET",   "token",     "401   404   404   200   404   200"),
    row("token-detail",                 "DELETE", "token",    "401   404   404   204   404   204"),
    row("token-rotate",                 "POST",  "token",     "401   404   404   201   404   201"),
    row("user-list",                    "GET",   "-",         "401   200   200   200   200   200"),
    row("user-detail",                  "GET",   "person",    "401   404   404   200   404   200"),
    row("user-grant",                   "POST",  "person",    "401   404   404   403   404   200"),
    row("user-revoke",                  "POST",  "person",    "401   404   404   403   404   200"),
    # ---- integrations, probes, API description ---------------------------------------------------
    row("argo-verdict",                 "GET",   "backend",   "401   200   200   200   200   200"),
    row("flagger-confirm-promotion",    "POST",  "backend",   "401   401   401   401   401   401"),
    row("github-deployment-protection", "POST",  "-",         "401   401   401   401   401   401"),
    row("metrics",                      "GET",   "-",         "200   200   200   200   200   200"),
    row("metrics",                      "GET",   "-",         "401   401   401   401   401   401", "token"),
    row("healthz",                      "GET",   "-",         "200   200   200   200   200   200"),
    row("schema",                       "GET",   "-",         "200   200   200   200   200   200"),
    row("api-docs",                     "GET",   "-",         "200   200   200   200   200   200"),
    # ---- sign-in and password pages (django.contrib.auth) ----------------------------------------
    row("login",                        "GET",   "-",         "200   200   200   200   200   200"),
    row("login",                        "POST",  "-",         "200   200   200   200   200   200"),
    row("logout",                       "POST",  "-",         "302   302   302   302   302   302"),
    row("password_change",              "GET",   "-",         "login 200   200   200   200   200"),
    row("password_change",              "POST",  "-",         "login 200   200   200   200   200"),
    row("password_change_done",         "GET",   "-",         "login 200   200   200   200   200"),
    row("password_reset",               "GET",   "-",         "200   200   200   200   200   200"),
    row("password_reset",               "POST",  "-",         "302   302   302   302   302   302"),
    row("password_reset_done",          "GET",   "-",         "200   200   200   200   200   200"),
    row("password_reset_confirm",       "GET",   "-",         "200   200   200   200   200   200"),
    row("password_reset_confirm",       "POST",  "-",         "200   200   200   200   200   200"),
    row("password_reset_complete",      "GET",   "-",         "200   200   200   200   200   200"),
    # ---- Django admin: every admin:* URL is staff-only; two stand for the rest -------------------
    row("admin:index",                  "GET",   "-",         "staff staff staff staff staff staff"),
    row("admin:gates_releaseticket_changelist", "GET", "-",  "staff staff staff staff staff staff"),
    # ---- web UI ----------------------------------------------------------------------------------
    row("ui:dashboard",                 "GET",   "draft",     "login 200   200   200   200   200"),
    row("ui:runs-partial",              "GET",   "run",       "login 200   200   200   200   200"),
    row("ui:tickets",                   "GET",   "draft",     "login 200   200   200   200   200"),
    row("ui:ticket-new",                "GET",   "-",         "login 403   200   200   403   200"),
    row("ui:ticket-new",                "POST",  "-",         "login 403   302   302   403   302"),
    row("ui:ticket",                    "GET",   "evaluated", "login 200   200   200   200   200"),
    row("ui:ticket-edit",               "GET",   "draft",     "login 403   403   200   403   200"),
    row("ui:ticket-edit",               "POST",  "draft",     "login 403   403   302   403   302"),
    row("ui:ticket-action",             "GET",   "draft",     "login 405   405   405   405   405"),
    row("ui:ticket-action",             "POST",  "draft",     "login 403   403   302   403   302", "submit"),
    row("ui:ticket-action",             "POST",  "evaluated", "login 403   403   403   302   302", "request_evidence"),
    row("ui:ticket-action",             "POST",  "evaluated", "login 403   403   403   403   403", "approve"),
    row("ui:ticket-action",             "POST",  "approved",  "login 403   403   302   302   302", "start_canary"),
    row("ui:ticket-action",             "POST",  "canary",    "login 403   403   403   302   302", "promote"),
    row("ui:ticket-action",             "POST",  "canary",    "login 403   403   302   302   302", "roll_back"),
    row("ui:ticket-action",             "POST",  "canary",    "login 403   403   403   409   409", "resume_canary"),
    row("ui:ticket-action",             "POST",  "default",   "login 403   403   403   302   302", "retire"),
    row("ui:ticket-signoff",            "POST",  "evaluated", "login 403   403   403   302   403"),
    row("ui:ticket-accept-evidence",    "POST",  "evaluated", "login 403   403   403   409   403"),
    row("ui:ticket-samples",            "GET",   "evaluated", "login 200   200   200   200   200"),
    row("ui:ticket-plan-preview",       "GET",   "-",         "login 200   200   200   200   200"),
    row("ui:kv-calculator",             "GET",   "-",         "login 200   200   200   200   200"),
    row("ui:routes",                    "GET",   "routes",    "login 200   200   200   200   200"),
    row("ui:reviews",                   "GET",   "review",    "login 200   200   200   200   200"),
    row("ui:review-outcome",            "POST",  "review",    "login 403   403   403   302   302"),
    row("ui:backends",                  "GET",   "backend",   "login 200   200   200   200   200"),
    row("ui:backend-new",               "GET",   "-",         "login 403   200   200   403   200"),
    row("ui:backend-new",               "POST",  "-",         "login 403   302   302   403   302"),
    row("ui:backend",                   "GET",   "backend",   "login 200   200   200   200   200"),
    row("ui:backend-calibrate",         "POST",  "backend",   "login 403   302   302   403   302"),
    row("ui:ledger",                    "GET",   "entry",     "login 200   200   200   200   200"),
    row("ui:ledger-verify",             "GET",   "entry",     "login 200   200   200   200   200"),
)
# fmt: on

# Paths that need more than the state's id: other URL arguments, or a query string.
PATHS = {
    "task-type-detail": "/api/v1/task-types/knowledge_qa/",
    "policy-detail": "/api/v1/policies/default/",
    "policy-dry-run": "/api/v1/policies/default/dry-run/",
    "route-export": "/api/v1/routes/export/?format=litellm",
    "route-cache-salt": "/api/v1/routes/cache-salt/?task=cs_summary",
    "argo-verdict": "/api/v1/integrations/argo/verdict/?backend={name}",
    "password_reset_confirm": "/accounts/reset/MQ/bad-token/",
    "ui:backend": "/backends/{name}/",
    "ui:backend-calibrate": "/backends/{name}/calibrate/",
    "backend-calibrate": "/api/v1/backends/{name}/calibrate/",
    "backend-calibrations": "/api/v1/backends/{name}/calibrations/",
    "user-detail": "/api/v1/users/{name}/",
    "user-grant": "/api/v1/users/{name}/grant/",
    "user-revoke": "/api/v1/users/{name}/revoke/",
}


def path_of(row: Row, target: Any) -> str:
    pk, name = getattr(target, "pk", ""), getattr(target, "name", "")
    if row.name in PATHS:
        return PATHS[row.name].format(pk=pk, name=name)
    try:
        return reverse(row.name)
    except NoReverseMatch:
        return reverse(row.name, kwargs={"pk": pk})


# --- the world a row acts on ---------------------------------------------------------------------


def judged_ticket(owner: User, baseline: Backend, candidate: Backend) -> ReleaseTicket:
    """A ticket judged "approve" over cs_summary and code_assistant (medium risk: one platform reviewer signs).

    The runs are small and the decision is stored as ``decision_make`` stores one: judging 200
    real samples per case would make this table slow, and who may act does not depend on it.
    """
    passed = outcomes(20, 0.9, 1)
    specs = {task: task_spec(passed) for task in ("cs_summary", "code_assistant")}
    ticket = evaluating_ticket(
        owner,
        baseline,
        candidate,
        store_run(baseline, specs),
        store_run(candidate, specs),
        beneficiary_tasks=tasks("cs_summary"),
        risk_tasks=tasks("code_assistant"),
    )
    assert ticket.baseline_run is not None and ticket.candidate_run is not None
    GateDecision.objects.create(
        ticket=ticket,
        policy_version="default@1",
        baseline_run=ticket.baseline_run,
        candidate_run=ticket.candidate_run,
        outcome="approve",
        reasons=["every task passes"],
        verdicts={task: {"status": "pass", "role": "beneficiary", "metrics": []} for task in specs},
        proposed_routes=dict.fromkeys(specs, "candidate"),
        allowed_tasks=list(specs),
    )
    return services.ticket_transition(ticket=ticket, action="finish_evaluation", actor=None)


class World:
    """Objects in the states the rows name, each built only when a row asks for it."""

    def __init__(self, users: dict[str, User], baseline: Backend, candidate: Backend, model_root: Path) -> None:
        self.users, self.baseline, self.candidate, self.model_root = users, baseline, candidate, model_root
        self.owner, self.reviewer, self.admin = users["own"], users["rev"], users["adm"]

    def get(self, state: str) -> Any:
        return None if state == "-" else getattr(self, state)

    @cached_property
    def draft(self) -> ReleaseTicket:
        return services.ticket_create(owner=self.owner, **ticket_fields(self.baseline, self.candidate))

    @cached_property
    def backend(self) -> Backend:
        return self.baseline

    @cached_property
    def entry(self) -> LedgerEntry:
        return LedgerEntry.objects.earliest("seq")  # registering the cast's backends wrote it

    @cached_property
    def routes(self) -> None:
        for task in ("cs_summary", "code_assistant"):
            routing.routes_set(task=task, backend=self.baseline, actor=self.admin, reason="initial fleet")

    @cached_property
    def run(self) -> EvaluationRun:
        return EvaluationRun.objects.create(
            backend=self.baseline,
            tasks=["cs_summary"],
            reuse_key="native",
            engine_version="0.32.0",
            hardware_class="cpu",
            status=RunStatus.SUCCEEDED,
        )

    @cached_property
    def evaluated(self) -> ReleaseTicket:
        return judged_ticket(self.owner, self.baseline, self.candidate)

    def _approved(self) -> ReleaseTicket:
        ticket = judged_ticket(self.owner, self.baseline, self.candidate)
        assert signoff.signoff_record(
            ticket=ticket, actor=self.reviewer, verdict="approve", reason_code="evidence_sufficient"
        ).moved
        return ReleaseTicket.objects.get(pk=ticket.pk)

    @cached_property
    def approved(self) -> ReleaseTicket:
        return self._approved()

    @cached_property
    def canary(self) -> ReleaseTicket:
        self.routes  # noqa: B018 - the canary moves tenant routes of a seeded table
        # Started long enough ago that its observation window is over and it may be promoted now.
        with time_machine.travel(timezone.now() - timedelta(hours=100), tick=False):
            ticket = self._approved()
            routing.routes_start_canary(ticket=ticket, actor=self.owner)
        return ReleaseTicket.objects.get(pk=ticket.pk)

    @cached_property
    def default(self) -> ReleaseTicket:
        promoted = routing.routes_promote(ticket=self.canary, actor=self.reviewer, reason="window clean")
        assert promoted.status == TicketStatus.DEFAULT
        return promoted

    @cached_property
    def review(self) -> Review:
        review = review_open(ticket=self.default, reason="quarterly")
        assert review is not None
        return review

    @cached_property
    def token(self) -> SimpleNamespace:
        # Issued through the API, so these rows depend on the tokens API, not on how tokens are stored.
        response = _client(self.owner).post("/api/v1/tokens/", {"name": "ci"}, format="json")
        assert response.status_code == 201, response.content
        return SimpleNamespace(pk=response.json()["id"])

    @cached_property
    def person(self) -> SimpleNamespace:
        return SimpleNamespace(pk=self.owner.pk, name=self.owner.get_username())

    @cached_property
    def importing(self) -> EvaluationRun:
        return run_open_for_import(backend=self.baseline, tasks=["cs_summary"], actor=self.owner)

    @cached_property
    def imported(self) -> EvaluationRun:
        run = self.importing
        # Test set-up: quality evidence as an lm-eval import leaves it, so the run may be closed.
        TaskResult.objects.create(
            run=run,
            task="cs_summary",
            suite_version=run.suite_versions["cs_summary"],
            quality={"n": 1, "pass_rate": 1.0, "source": "lm-eval"},
        )
        return run


def _bench_document(backend: Backend) -> dict[str, Any]:
    """A minimal ``vllm bench serve`` result for ``backend`` (two requests)."""
    return {
        "date": "20261129-101010",
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": backend.model_path,
        "tokenizer_id": backend.model_path,
        "num_prompts": 2,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 4,
        "duration": 2.0,
        "completed": 2,
        "failed": 0,
        "total_input_tokens": 20,
        "total_output_tokens": 8,
        "request_throughput": 1.0,
        "output_throughput": 4.0,
        "input_lens": [10, 10],
        "output_lens": [4, 4],
        "ttfts": [0.1, 0.2],
        "itls": [[0.05, 0.05, 0.05], [0.05, 0.05, 0.05]],
        "latencies": [0.25, 0.35],
        "errors": ["", ""],
        "start_times": [100.0, 100.5],
    }


def _ticket_form(world: World) -> dict[str, Any]:
    from tests.factories import form_body

    return form_body(world.baseline, world.candidate, title="Filed through the form")


def _backend_form(world: World) -> dict[str, Any]:
    fields = backend_fields(world.model_root, "kit-form", model_revision="r-form")
    return {
        **{
            k: fields[k]
            for k in ("name", "model_id", "model_path", "model_revision", "engine_version", "hardware_class")
        },
        "engine_args": "{}",
        "sampling_params": "{}",
        "prefix_cache_key_recipe": "{}",
    }


def _api_ticket(world: World) -> dict[str, Any]:
    return {
        "title": "Filed through the API",
        "mechanisms": ["prefix_cache"],
        "bottleneck": "prefill",
        "bottleneck_evidence": "TTFT p95 3.1 s",
        "baseline": world.baseline.name,
        "candidate": world.candidate.name,
        "beneficiary_tasks": ["knowledge_qa"],
        "risk_tasks": ["compliance_qa"],
        "benefit_metrics": ["ttft_p95"],
        "guardrail_metrics": ["citation_accuracy"],
        "rollback_target": world.baseline.name,
        "rollback_plan": {
            "sacrifices": "TTFT gain",
            "warmup": "none",
            "inflight_streams": "finish",
            "route_update": "back to the baseline",
        },
    }


# Request bodies by row key; a row without one sends no body.
Body = Callable[[World, Any], dict[str, Any]]
BODIES: dict[str, Body] = {
    "backend-list POST": lambda w, _: backend_fields(w.model_root, "kit-api", model_revision="r-api"),
    "backend-calibrate POST": lambda w, _: {"tasks": ["code_assistant"]},
    "ui:backend-calibrate POST": lambda w, _: {"tasks": ["code_assistant"]},
    "ticket-list POST": lambda w, _: _api_ticket(w),
    "canary-outcomes POST": lambda w, _: {
        "counts": [{"task": "cs_summary", "backend": w.baseline.name, "tenant": "acme", "outcome": "ok", "count": 1}]
    },
    "ticket-detail PATCH": lambda w, _: {"title": "Renamed"},
    "ticket-request-evidence POST": lambda w, _: {"reason": "run 200 more samples"},
    "ticket-roll-back POST": lambda w, _: {"reason": "p95 regressed on tenant-a"},
    "ticket-resume-canary POST": lambda w, _: {"reason": "traffic doubles tonight"},
    "ticket-accept-evidence POST": lambda w, ticket: {"run": ticket.candidate_run_id, "reason": "spot-checked"},
    "ticket-sign-off POST": lambda w, _: {"decision": "approve", "reason_code": "evidence_sufficient"},
    "policy-validate POST": lambda w, _: {"text": (Path(gates.__file__).parent / "policies/default.yaml").read_text()},
    "policy-dry-run POST": lambda w, ticket: {"ticket": ticket.pk},
    "route-set-route POST": lambda w, _: {"task": "tool_calling", "backend": w.baseline.name, "reason": "seed"},
    "token-list POST": lambda w, _: {"name": "deploy"},
    "user-grant POST": lambda w, _: {"group": "reviewer:sre", "reason": "on call"},
    "user-revoke POST": lambda w, _: {"group": "engineer", "reason": "moved teams"},
    "run-list POST": lambda w, _: {"backend": w.baseline.name, "tasks": ["cs_summary"]},
    "review-complete POST": lambda w, _: {"outcome": "keep_default"},
    "run-evidence POST": lambda w, _: {"kind": "vllm_bench", "task": "cs_summary", "file": _bench_document(w.baseline)},
    "flagger-confirm-promotion POST": lambda w, backend: {"name": "c", "metadata": {"backend": backend.name}},
    "github-deployment-protection POST": lambda w, _: {"action": "requested"},
    "login POST": lambda w, _: {"username": "erin", "password": "wrong"},
    "password_change POST": lambda w, _: {"old_password": "wrong"},
    "password_reset POST": lambda w, _: {"email": "nobody@example.com"},
    "password_reset_confirm POST": lambda w, _: {"new_password1": "x", "new_password2": "x"},
    "ui:ticket-new POST": lambda w, _: _ticket_form(w),
    "ui:ticket-edit POST": lambda w, _: _ticket_form(w),
    "ui:ticket-action POST submit": lambda w, _: {"action": "submit"},
    "ui:ticket-action POST request_evidence": lambda w, _: {"action": "request_evidence", "comment": "more samples"},
    "ui:ticket-action POST approve": lambda w, _: {"action": "approve"},
    "ui:ticket-action POST start_canary": lambda w, _: {"action": "start_canary"},
    "ui:ticket-action POST promote": lambda w, _: {"action": "promote"},
    "ui:ticket-action POST roll_back": lambda w, _: {"action": "roll_back", "comment": "p95 regressed"},
    "ui:ticket-action POST resume_canary": lambda w, _: {"action": "resume_canary", "comment": "traffic doubles"},
    "ui:ticket-action POST retire": lambda w, _: {"action": "retire"},
    "ui:ticket-accept-evidence POST": lambda w, ticket: {"run": ticket.candidate_run_id, "reason": "spot-checked"},
    "ui:ticket-signoff POST": lambda w, _: {"verdict": "approve", "reason_code": "evidence_sufficient"},
    "ui:review-outcome POST": lambda w, review: {f"review-{review.pk}-outcome": "keep_default"},
    "ui:backend-new POST": lambda w, _: _backend_form(w),
}


@pytest.fixture(autouse=True)
def _fast_passwords_and_fresh_rate_limits(settings: Any) -> None:
    # Six users per case: the production hasher would spend most of the run hashing passwords.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Rate-limit counters live in the cache; each case starts with none spent.
    cache.clear()


@pytest.fixture
def world(request: pytest.FixtureRequest, baseline: Backend, candidate: Backend, model_root: Path) -> World:
    users = {role: request.getfixturevalue(name) for role, name in CAST.items() if name}
    return World(users, baseline, candidate, model_root)


def _client(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_login(user)  # a session, for the API as for the pages: no token model involved
    return client


def _send(row: Row, world: World, user: User | None) -> Any:
    target = world.get(row.state)
    path = path_of(row, target)
    body = BODIES.get(row.key)
    data = body(world, target) if body else None
    client = _client(user)
    if row.method == "GET":
        return client.get(path)
    # The API and the webhooks take JSON; the pages take form posts, as a browser sends them.
    json_body = path.startswith("/api/")
    send = getattr(client, row.method.lower())
    return send(path, data, format="json") if json_body else send(path, data or {})


def _outcome(response: Any) -> str:
    if response.status_code == 302:
        location = response["Location"]
        if location.startswith("/accounts/login/"):
            return "login"
        if location.startswith("/admin/login/"):
            return "staff"
    return str(response.status_code)


CASES = [pytest.param(r, role, id=f"{r.key}-{role}") for r in MATRIX for role in ROLES]


@pytest.mark.parametrize(("row", "role"), CASES)
def test_each_role_gets_the_answer_the_matrix_pins(row: Row, role: str, world: World, settings: Any) -> None:
    settings.OPTGATE_GITHUB_WEBHOOK_SECRET = "webhook-secret"
    if row.variant == "token":
        settings.OPTGATE_METRICS_TOKEN = "scrape-token"
    user = world.users.get(role)
    world.get(row.state)  # build the state before counting ledger entries
    before = LedgerEntry.objects.count()
    response = _send(row, world, user)
    detail = getattr(response, "data", None) or response.content[:300]
    assert _outcome(response) == row.expected[role], detail
    if row.method != "GET" and not 200 <= response.status_code < 400:
        assert LedgerEntry.objects.count() == before, "a refused write left a ledger entry"


# --- separation of duties beyond the cast -------------------------------------------------------------


@pytest.fixture
def rex(db: None) -> User:
    """An engineer who is also a reviewer: may file tickets, never sign off or review their own."""
    user = User.objects.create_user(username="rex", password="pw-rex")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0], Group.objects.get_or_create(name="reviewer")[0])
    return user


def test_a_reviewer_never_signs_off_their_own_ticket(
    rex: User, rita: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged_ticket(rex, baseline, candidate)
    decision = GateDecision.objects.get(ticket=ticket)
    body = {"decision": "approve", "reason_code": "evidence_sufficient"}
    assert _client(rex).post(f"/api/v1/tickets/{ticket.pk}/sign-off/", body, format="json").status_code == 403
    form = {"verdict": "approve", "reason_code": "evidence_sufficient"}
    assert client_for(rex).post(f"/tickets/{ticket.pk}/sign-off/", form).status_code == 403
    assert client_for(rex).post(f"/tickets/{ticket.pk}/action/", {"action": "approve"}).status_code == 403
    page = client_for(rex).get(f"/tickets/{ticket.pk}/")
    assert page.context["signoff"]["form"] is None
    assert "You own this ticket" in page.context["signoff"]["why_not"]
    assert not decision.sign_offs.exists()
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.EVALUATED
    # Another reviewer signs it.
    assert _client(rita).post(f"/api/v1/tickets/{ticket.pk}/sign-off/", body, format="json").status_code == 201


def test_a_reviewer_never_reviews_their_own_optimization(
    rex: User, rita: User, ada: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged_ticket(rex, baseline, candidate)
    signoff.signoff_record(ticket=ticket, actor=rita, verdict="approve", reason_code="evidence_sufficient")
    routing.routes_start_canary(ticket=ticket, actor=rex)
    review = review_open(ticket=ticket, reason="quarterly")
    assert review is not None
    form = {f"review-{review.pk}-outcome": "keep_default"}
    assert client_for(rex).post(f"/reviews/{review.pk}/", form).status_code == 403
    assert client_for(rita).post(f"/reviews/{review.pk}/", form).status_code == 302


def test_django_staff_read_the_admin_but_change_nothing(draft: ReleaseTicket) -> None:
    staff = User.objects.create_superuser(username="root", password="pw-root", email="root@example.com")
    client = client_for(staff)
    assert client.get("/admin/").status_code == 200
    assert client.get("/admin/gates/releaseticket/").status_code == 200
    assert client.get(f"/admin/gates/releaseticket/{draft.pk}/change/").status_code == 200  # a read-only view
    assert client.post(f"/admin/gates/releaseticket/{draft.pk}/change/", {"title": "x"}).status_code == 403
    assert client.get("/admin/gates/releaseticket/add/").status_code == 403
    assert client.post(f"/admin/gates/releaseticket/{draft.pk}/delete/", {"post": "yes"}).status_code == 403
    draft.refresh_from_db()
    assert draft.title != "x"


# --- the matrix covers every endpoint ---------------------------------------------------------------------


IGNORED_METHODS = {"HEAD", "OPTIONS"}


def _view_methods(callback: Any) -> set[str]:
    """The methods a view dispatches, where the view says so (viewsets, API views, class-based views)."""
    actions = getattr(callback, "actions", None)
    if actions:
        return {method.upper() for method in actions} - IGNORED_METHODS
    view_class = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if view_class is None:
        return set()  # a function view: the matrix names its methods
    methods = {m.upper() for m in view_class.http_method_names if hasattr(view_class, m)}
    if getattr(view_class, "put", None) is ProcessFormView.put:
        methods.discard("PUT")  # Django's form views answer PUT as POST
    return methods - IGNORED_METHODS


def _walk(patterns: list[Any], namespace: str = "", prefix: str = "") -> Iterator[tuple[str, set[str]]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = ":".join(filter(None, (namespace, pattern.namespace)))
            yield from _walk(pattern.url_patterns, inner, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            name = pattern.name or f"<unnamed {prefix}{pattern.pattern}>"
            yield ":".join(filter(None, (namespace, name))), _view_methods(pattern.callback)


def endpoints() -> dict[str, set[str]]:
    """Every URL name the project serves → the methods its view dispatches (empty when unknown)."""
    found: dict[str, set[str]] = {}
    for name, methods in _walk(get_resolver().url_patterns):
        found.setdefault(name, set()).update(methods)
    # The router's own view of its viewsets: every mapped (route, method) pair.
    for prefix, viewset, basename in router.registry:
        for route in router.get_routes(viewset):
            mapped = {m.upper() for m, action in route.mapping.items() if hasattr(viewset, action)}
            if mapped:
                name = route.name.format(basename=basename)
                assert name in found, f"router route {name} ({prefix}) is not in the URL resolver"
                found[name].update(mapped - IGNORED_METHODS)
    return found


def test_the_matrix_covers_every_endpoint() -> None:
    covered: dict[str, set[str]] = {}
    for r in MATRIX:
        covered.setdefault(r.name, set()).add(r.method)
    served = endpoints()
    missing = []
    for name, methods in sorted(served.items()):
        if name.startswith("admin:"):
            continue  # the Django admin: staff only as a whole, pinned by its rows and the staff test
        if name not in covered:
            missing.append(f"{name} (no row)")
        elif methods - covered[name]:
            missing.append(f"{name} {sorted(methods - covered[name])}")
    assert not missing, "endpoints the RBAC matrix does not cover: " + ", ".join(missing)
    stale = sorted(set(covered) - set(served))
    assert not stale, f"matrix rows for endpoints that no longer exist: {stale}"


def test_the_matrix_rows_are_unique_and_their_bodies_are_used() -> None:
    keys = [r.key for r in MATRIX]
    assert len(keys) == len(set(keys))
    assert set(BODIES) <= set(keys), sorted(set(BODIES) - set(keys))
