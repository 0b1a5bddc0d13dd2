"""Every list endpoint and list page runs a pinned number of queries, for 2 rows as for 15.

A crowd of tickets grows from 2 to 15 of everything the lists show: tickets at every stage with
their runs, per-task results, decisions and sign-offs, backends, ledger entries, route versions,
open reviews, running evaluations and API tokens. Each endpoint must answer with the same,
pinned, number of queries at both sizes, so an N+1 shows up as a changed count. The ticket
detail and the decision read (with a growing decision history and sign-offs) are pinned too.

Every signed-in request pays for its session and user (2 queries); pages also look up the
user's roles (1).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from backends import services as backend_services
from backends.models import Backend
from evaluators.models import EvaluationRun, RunStatus, TaskResult
from gates.models import GateDecision, ReleaseTicket, SignOff, TaskType, TicketStatus
from gates.services import routing
from gates.services import tickets as gate_services
from gates.services.reviews import review_open
from ledger import services as ledger_services
from tests.factories import backend_fields, ticket_fields

pytestmark = [pytest.mark.database, pytest.mark.django_db]

SMALL, LARGE = 2, 15

# Session and user (2) come with every request; "+count" is the paginator's count query.
PINNED = {
    # REST API lists
    "/api/v1/task-types/": 3,  # + the task types (one page, no count)
    "/api/v1/backends/": 4,  # + count, backends with their creators
    "/api/v1/tickets/": 6,  # + count, the page's ids, its rows with owners and backends, both task lists
    "/api/v1/tickets/?status=evaluated": 6,
    "/api/v1/ledger/": 4,  # + count, entries
    "/api/v1/policies/": 2,  # the policies are files
    "/api/v1/routes/": 5,  # + current version (twice: the table and its number), routes with task and backend
    "/api/v1/routes/history/": 4,  # + count, versions with actor and ticket
    "/api/v1/routes/export/?format=litellm": 5,
    "/api/v1/runs/": 5,  # + count, runs with backend, their task results
    "/api/v1/reviews/": 4,  # + count, reviews with their tickets and reviewers
    "/api/v1/tokens/": 5,  # + the viewer's roles (admins see every token), count, tokens
    # web UI list pages (+1: the user's roles)
    "/": 13,
    "/tickets/": 7,
    "/ledger/": 5,
    "/backends/": 4,
    "/routes/": 7,
    "/reviews/": 5,
    "/runs/active/": 4,
}
# + the ticket's row with owner, backends and its runs with their importers, its two task lists in one
# query (the acceptances and file hashes only when a run was imported)
PINNED_TICKET_DETAIL = 4
# + the ticket's row, the decision, its sign-offs with reviewers, one per signed verdict, history, and
# the caller's roles (whether the summary's next action is theirs to sign off)
PINNED_DECISION = 8
# A decision's first read in a web process also formats its verdicts and summary, whose numbers
# name their runs' producers: + the verdicts (deferred otherwise), the runs with their last
# attempts' workers, and the task results' provenance keys.
PINNED_DECISION_FIRST_READ = PINNED_DECISION + 3


def _person(username: str, *roles: str) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    user.groups.add(*(Group.objects.get_or_create(name=role)[0] for role in roles))
    return user


def _run(backend: Backend, key: str, status: str = RunStatus.SUCCEEDED) -> EvaluationRun:
    # Test set-up: a run as the evaluation service leaves it, with two per-task results.
    run = EvaluationRun.objects.create(
        backend=backend,
        tasks=["knowledge_qa", "compliance_qa"],
        reuse_key=key,
        engine_version="0.32.0",
        hardware_class="cpu-avx2",
        status=status,
    )
    for task in run.tasks:
        TaskResult.objects.create(
            run=run,
            task=task,
            suite_version="1",
            quality={"n": 2, "pass_rate": 1.0},
            requests=[{"ttft_s": 0.1}, {"ttft_s": 0.2}],
        )
    return run


def _decision(ticket: ReleaseTicket, *, outcome: str = "approve", signed: str = "") -> GateDecision:
    # Test set-up: a stored judgement of the ticket's runs, as ``decision_make`` leaves it.
    tasks = ["knowledge_qa", "compliance_qa"]
    assert ticket.baseline_run is not None and ticket.candidate_run is not None
    return GateDecision.objects.create(
        ticket=ticket,
        policy_version="default@1",
        baseline_run=ticket.baseline_run,
        candidate_run=ticket.candidate_run,
        outcome=outcome,
        verdicts={t: {"status": "pass", "role": "beneficiary", "metrics": []} for t in tasks},
        reasons=["every guardrail holds"],
        proposed_routes=dict.fromkeys(tasks, "candidate"),
        allowed_tasks=tasks,
        signed_verdict=signed,
        signed_tasks=tasks if signed == "approve" else [],
    )


class Crowd:
    """Grows to ``n`` of everything the list endpoints and pages show."""

    def __init__(self, *, viewer: User, reviewer: User, admin: User, baseline: Backend, model_root: Path) -> None:
        self.viewer, self.reviewer, self.admin, self.baseline, self.model_root = (
            viewer,
            reviewer,
            admin,
            baseline,
            model_root,
        )
        self.other = _person("evan", "engineer")
        self.size = 0
        self.first_ticket: ReleaseTicket | None = None

    def grow(self, n: int) -> None:
        for i in range(self.size, n):
            self._add(i)
        self.size = n

    def _add(self, i: int) -> None:
        owner = self.viewer if i % 2 else self.other
        candidate, _ = backend_services.backend_register(
            actor=owner, **backend_fields(self.model_root, f"crowd-{i}", model_revision=f"r{i}")
        )
        extra = TaskType.objects.create(
            slug=f"crowd_task_{i}",
            name=f"Crowd task {i}",
            risk_tier="low",
            suite_ref=f"evaluators/suites/crowd_{i}",
            suite_version="1",
        )
        # One ticket at each stage the lists show differently, so every block has rows at both sizes.
        for stage in (TicketStatus.EVALUATING, TicketStatus.EVALUATED, TicketStatus.DEFAULT, TicketStatus.REJECTED):
            self._ticket(i, stage, owner, candidate)
        assert self.first_ticket is not None
        self.first_ticket.risk_tasks.add(extra)
        routing.routes_set(
            task="knowledge_qa",
            tenant=f"tenant-{i}",
            backend=candidate,
            actor=self.admin,
            reason=f"tenant {i} on its own build",
        )
        client = APIClient()
        client.force_login(self.viewer)
        assert client.post("/api/v1/tokens/", {"name": f"ci-{i}"}, format="json").status_code == 201

    def _ticket(self, i: int, stage: str, owner: User, candidate: Backend) -> None:
        fields = ticket_fields(self.baseline, candidate, title=f"ticket {i} {stage}")
        ticket = gate_services.ticket_create(owner=owner, **fields)
        self.first_ticket = self.first_ticket or ticket
        status = RunStatus.RUNNING if stage == TicketStatus.EVALUATING else RunStatus.SUCCEEDED
        runs = {
            "baseline_run": _run(self.baseline, f"b{ticket.pk}", status),
            "candidate_run": _run(candidate, f"c{ticket.pk}", status),
        }
        # Test set-up: the stage the workers and reviewers would have moved it to.
        ReleaseTicket.objects.filter(pk=ticket.pk).update(status=stage, **runs)
        ticket.refresh_from_db()
        if stage == TicketStatus.EVALUATING:
            return
        signed = {str(TicketStatus.DEFAULT): "approve", str(TicketStatus.REJECTED): "reject"}.get(stage, "")
        decision = _decision(ticket, signed=signed)
        if signed:
            SignOff.objects.create(
                ticket=ticket,
                decision=decision,
                reviewer=self.reviewer,
                capacity="platform",
                verdict=signed,
                tasks=decision.signed_tasks,
                reason_code="evidence_sufficient",
            )
        with transaction.atomic():
            ledger_services.ledger_append(
                kind="gate.decision",
                subject_type="ticket",
                subject_id=ticket.pk,
                subject_name=ticket.title,
                actor=None,
                payload={"decision": decision.pk, "outcome": decision.outcome},
            )
        if stage == TicketStatus.DEFAULT:
            review_open(ticket=ticket, reason="quarterly")


@pytest.fixture(autouse=True)
def _fast_passwords_and_no_rate_limits(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.OPTGATE_RATE_LIMITS = dict.fromkeys(settings.OPTGATE_RATE_LIMITS)  # the crowd issues many tokens
    cache.clear()


@pytest.fixture
def viewer(db: None) -> User:
    """An engineer who also reviews: every dashboard block has rows for them."""
    return _person("vera", "engineer", "reviewer")


@pytest.fixture
def crowd(viewer: User, rita: User, ada: User, baseline: Backend, model_root: Path) -> Crowd:
    return Crowd(viewer=viewer, reviewer=rita, admin=ada, baseline=baseline, model_root=model_root)


def _client(user: User) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def _get(client: APIClient, url: str, expected: int, django_assert_num_queries: Callable[..., Any]) -> bytes:
    with django_assert_num_queries(expected):
        response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return bytes(response.content)


def _count(client: APIClient, url: str) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, (url, response.content[:300])
    return len(queries), len(response.content)


def test_list_endpoints_and_pages_run_a_pinned_number_of_queries(crowd: Crowd, viewer: User) -> None:
    # One crowd for every endpoint (building it is the slow part); all differences are reported at once.
    client = _client(viewer)
    crowd.grow(SMALL)
    small = {url: _count(client, url) for url in PINNED}
    crowd.grow(LARGE)
    large = {url: _count(client, url) for url in PINNED}
    counts = {url: (small[url][0], large[url][0]) for url in PINNED}
    assert counts == {url: (pinned, pinned) for url, pinned in PINNED.items()}
    # The larger crowd shows more rows (the policies are files in the repository, not rows).
    assert [url for url in PINNED if large[url][1] <= small[url][1]] == ["/api/v1/policies/"]


def test_the_ticket_detail_runs_a_pinned_number_of_queries(
    crowd: Crowd, viewer: User, django_assert_num_queries: Callable[..., Any]
) -> None:
    client = _client(viewer)
    crowd.grow(SMALL)
    assert crowd.first_ticket is not None
    url = f"/api/v1/tickets/{crowd.first_ticket.pk}/"
    small = _get(client, url, PINNED_TICKET_DETAIL, django_assert_num_queries)
    crowd.grow(LARGE)  # the first ticket's risk tasks grow with the crowd
    large = _get(client, url, PINNED_TICKET_DETAIL, django_assert_num_queries)
    assert len(large) > len(small)


def _decided_ticket(n: int, *, owner: User, baseline: Backend, model_root: Path) -> ReleaseTicket:
    """An evaluated ticket with ``n`` earlier decisions and ``n`` sign-offs on its current one."""
    candidate, _ = backend_services.backend_register(
        actor=owner, **backend_fields(model_root, f"decided-{n}", model_revision=f"d{n}")
    )
    ticket = gate_services.ticket_create(owner=owner, **ticket_fields(baseline, candidate))
    runs = {"baseline_run": _run(baseline, f"db{n}"), "candidate_run": _run(candidate, f"dc{n}")}
    ReleaseTicket.objects.filter(pk=ticket.pk).update(status=TicketStatus.EVALUATED, **runs)
    ticket.refresh_from_db()
    for _ in range(n):
        _decision(ticket, outcome="needs_evidence")
    current = _decision(ticket, outcome="restrict")
    for i in range(n):
        # Test set-up: disagreeing reviewers (a restriction needs none of them to move the ticket yet).
        reviewer = _person(f"reviewer-{n}-{i}", "reviewer")
        verdict = ("approve", "restrict")[i % 2]
        SignOff.objects.create(
            ticket=ticket,
            decision=current,
            reviewer=reviewer,
            capacity="platform",
            verdict=verdict,
            tasks=["knowledge_qa"] if verdict == "restrict" else [],
            reason_code="policy_override",
            override=verdict != "restrict",
            override_reason="second opinion",
        )
    return ticket


def test_the_decision_read_runs_a_pinned_number_of_queries(
    viewer: User, baseline: Backend, model_root: Path, django_assert_num_queries: Callable[..., Any]
) -> None:
    owner = _person("owen", "engineer")
    client = _client(viewer)
    sizes = []
    for n in (SMALL, LARGE):
        ticket = _decided_ticket(n, owner=owner, baseline=baseline, model_root=model_root)
        url = f"/api/v1/tickets/{ticket.pk}/decision/"
        first = _get(client, url, PINNED_DECISION_FIRST_READ, django_assert_num_queries)
        content = _get(client, url, PINNED_DECISION, django_assert_num_queries)
        assert content == first
        sizes.append(len(content))
    assert sizes[1] > sizes[0]
