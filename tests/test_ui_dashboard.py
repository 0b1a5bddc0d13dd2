"""The dashboard: my tickets, waiting for my review, live evaluation progress, recent decisions."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Q

from evaluators.models import EvaluationRun, RunStatus
from gates.models import ReleaseTicket
from tests.ui_helpers import client_for, evaluated_ticket

pytestmark = pytest.mark.django_db


def test_an_engineer_sees_their_tickets_and_no_review_queue(draft: Any, erin: Any, evan: Any) -> None:
    mine = client_for(erin).get("/")
    assert [t.pk for t in mine.context["my_tickets"]] == [draft.pk]
    assert not mine.context["is_reviewer"] and b"Waiting for my review" not in mine.content
    assert client_for(evan).get("/").context["my_tickets"] == []


def test_a_reviewer_sees_evaluated_tickets_of_others_and_recent_decisions(
    erin: Any, rita: Any, baseline: Any, candidate: Any
) -> None:
    ticket, _ = evaluated_ticket("approve", erin, baseline, candidate)
    page = client_for(rita).get("/")
    assert [t.pk for t in page.context["waiting"]] == [ticket.pk]
    kinds = [e.kind for e in page.context["decisions"]]
    assert "gate.decision" in kinds
    assert b"Waiting for my review" in page.content


def test_running_evaluations_refresh_through_a_polled_partial(erin: Any, baseline: Any, candidate: Any) -> None:
    ticket, _ = evaluated_ticket("approve", erin, baseline, candidate)
    run = EvaluationRun.objects.create(
        backend=baseline,
        tasks=["cs_summary"],
        engine_version="0.32.0",
        hardware_class="cpu",
        reuse_key="r",
        status=RunStatus.RUNNING,
        phase="performance cs_summary",
        progress=40,
    )
    ReleaseTicket.objects.filter(Q(pk=ticket.pk)).update(candidate_run=run)
    page = client_for(erin).get("/")
    html = page.content.decode()
    assert 'hx-get="/runs/active/"' in html and 'hx-trigger="every 3s"' in html
    partial = client_for(erin).get("/runs/active/", HTTP_HX_REQUEST="true")
    body = partial.content.decode()
    assert "<html" not in body and 'value="40"' in body and "performance cs_summary" in body
    assert f'href="/tickets/{ticket.pk}/"' in body
    EvaluationRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, progress=100)
    assert b"No evaluation is running." in client_for(erin).get("/runs/active/").content
