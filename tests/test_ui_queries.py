"""List pages run a fixed number of queries, however many rows they show (pinned here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from evaluators.models import EvaluationRun, RunStatus
from gates.models import ReleaseTicket
from gates.services import tickets as services
from gates.services.reviews import review_open
from tests.factories import ticket_fields
from tests.ui_helpers import client_for, evaluated_ticket

pytestmark = [pytest.mark.database, pytest.mark.django_db]

# Session and user loading (2) and the role lookup (1) come with every signed-in page.
PINNED = {
    "/": 11,
    "/runs/active/": 4,
    "/tickets/": 7,
    "/backends/": 4,
    "/ledger/": 5,
    "/routes/": 7,
    "/reviews/": 5,
    "/ledger/?not_adopted=on&q=plan": 5,
}


def _count(client: Any, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def _more_rows(erin: Any, baseline: Any, candidate: Any, make_backend: Callable[..., Any], start: int) -> None:
    for i in range(start, start + 4):
        services.ticket_create(owner=erin, **ticket_fields(baseline, candidate, title=f"ticket {i}"))
        make_backend(f"extra-{i}", model_revision=f"r{i}")
        EvaluationRun.objects.create(
            backend=baseline,
            tasks=["cs_summary"],
            engine_version="0.32.0",
            hardware_class="cpu",
            reuse_key=f"k{i}",
            status=RunStatus.RUNNING,
            progress=10 * i,
        )


def _signed_restriction_in_canary(erin: Any, rita: Any, baseline: Any, candidate: Any) -> ReleaseTicket:
    ticket, _ = evaluated_ticket("restrict", erin, baseline, candidate)
    body = {"verdict": "restrict", "tasks": ["cs_summary"], "reason_code": "guardrail_regression"}
    assert client_for(rita).post(f"/tickets/{ticket.pk}/sign-off/", body).status_code == 302
    assert client_for(erin).post(f"/tickets/{ticket.pk}/action/", {"action": "start_canary"}).status_code == 302
    return ticket


@pytest.mark.parametrize("url", sorted(PINNED))
def test_list_pages_run_a_pinned_number_of_queries(
    url: str, erin: Any, rita: Any, bella: Any, baseline: Any, candidate: Any, make_backend: Callable[..., Any]
) -> None:
    active = _signed_restriction_in_canary(erin, rita, baseline, candidate)
    review_open(ticket=active, reason="quarterly")
    rejected, _ = evaluated_ticket("reject", erin, baseline, candidate)
    client_for(bella).post(
        f"/tickets/{rejected.pk}/sign-off/", {"verdict": "reject", "reason_code": "business_risk", "comment": "plan"}
    )
    evaluated_ticket("approve", erin, baseline, candidate)  # waits for review
    erin.groups.add(*rita.groups.all())  # a reviewer-engineer sees every dashboard block
    _more_rows(erin, baseline, candidate, make_backend, start=0)
    client = client_for(erin)
    first = _count(client, url)
    _more_rows(erin, baseline, candidate, make_backend, start=10)
    review_open(ticket=active, reason="engine_changed")
    review_open(ticket=active, reason="hardware_changed")
    assert (first, _count(client, url)) == (PINNED[url], PINNED[url])
