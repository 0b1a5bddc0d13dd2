"""The ticket page's evidence (verdict matrix, charts, engine counters, failure samples), the
reviewer's restriction, and how the route table shows it."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils.html import escape

from evaluators.models import SampleRecord
from gates.models import RouteTableVersion, TicketStatus
from tests.ui_helpers import client_for, evaluated_ticket

pytestmark = pytest.mark.django_db


def test_the_page_shows_the_verdict_matrix_per_task(erin: Any, rita: Any, baseline: Any, candidate: Any) -> None:
    ticket, decision = evaluated_ticket("restrict", erin, baseline, candidate)
    response = client_for(rita).get(f"/tickets/{ticket.pk}/")
    assert response.status_code == 200
    rows = {row["task"]: row for row in response.context["decision"]["rows"]}
    assert set(rows) == {"cs_summary", "knowledge_qa"}
    assert rows["knowledge_qa"]["status"] == "fail" and rows["cs_summary"]["status"] == "pass"
    html = response.content.decode()
    assert "<caption>knowledge_qa (risk)" in html
    # The failing check's reason is printed once (in the summary's findings), not again in the
    # task header or its table row.
    finding = decision.verdicts["knowledge_qa"]["metrics"][0]
    assert finding["status"] == "fail"
    assert html.count(escape(finding["reason"])) == 1
    assert escape(decision.verdicts["knowledge_qa"]["reason"]) not in html
    # Baseline, candidate, change and interval columns are filled for judged metrics.
    judged = [m for m in rows["cs_summary"]["metrics"] if m["baseline"] is not None]
    assert judged and all(m["display"]["baseline"] != "—" for m in judged)


def test_latency_charts_are_server_rendered_svg(erin: Any, rita: Any, baseline: Any, candidate: Any) -> None:
    ticket, _ = evaluated_ticket("approve", erin, baseline, candidate)
    response = client_for(rita).get(f"/tickets/{ticket.pk}/")
    html = response.content.decode()
    assert html.count("<svg") == 12  # two tasks × (TTFT, TPOT, E2E) × (CDF, box plot)
    assert 'aria-labelledby="cs_summary-ttft_s-cdf-title' in html
    panel = response.context["evidence"].panels[0]
    ttft = panel.latency[0]
    assert ttft.label == "TTFT" and ttft.baseline.n == 200 and ttft.candidate.n == 200
    # The candidate was generated 30% faster; the P50s say so.
    assert ttft.candidate.p50 < ttft.baseline.p50


def test_failure_samples_sit_side_by_side_and_filter(erin: Any, rita: Any, baseline: Any, candidate: Any) -> None:
    ticket, _ = evaluated_ticket("restrict", erin, baseline, candidate)
    SampleRecord.objects.filter(run=ticket.candidate_run, task="knowledge_qa", passed=False).update(
        failure_reason="missing_citation", output="candidate says <b>no</b>"
    )
    client = client_for(rita)
    samples = client.get(f"/tickets/{ticket.pk}/").context["samples"]
    assert samples["total"] > 0
    regressions = client.get(f"/tickets/{ticket.pk}/?show=regressions&task=knowledge_qa").context["samples"]
    pairs = regressions["pairs"]
    assert pairs and all(p.baseline.passed and not p.candidate.passed for p in pairs)
    assert regressions["total"] == 20  # the scenario turns 10% of 200 samples from pass to fail
    by_reason = client.get(f"/tickets/{ticket.pk}/?reason=missing_citation").context["samples"]
    assert by_reason["total"] > 0 and all(p.candidate.failure_reason == "missing_citation" for p in by_reason["pairs"])
    assert client.get(f"/tickets/{ticket.pk}/?task=cs_summary&reason=missing_citation").context["samples"]["total"] == 0
    partial = client.get(f"/tickets/{ticket.pk}/samples/?show=regressions", HTTP_HX_REQUEST="true")
    assert partial.status_code == 200 and b"<html" not in partial.content
    assert b"candidate says &lt;b&gt;no&lt;/b&gt;" in partial.content


def test_a_reviewer_restricts_and_the_route_table_follows(erin: Any, rita: Any, baseline: Any, candidate: Any) -> None:
    ticket, decision = evaluated_ticket("restrict", erin, baseline, candidate)
    assert decision.outcome == "restrict" and decision.allowed_tasks == ["cs_summary"]
    client = client_for(rita)
    body = {
        "verdict": "restrict",
        "tasks": ["cs_summary"],
        "reason_code": "guardrail_regression",
        "comment": "citations regress on knowledge_qa",
    }
    assert client.post(f"/tickets/{ticket.pk}/sign-off/", body).status_code == 302
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.RESTRICTED

    routes = client.get("/routes/")
    pending = routes.context["pending"]
    assert [p["decision"].ticket_id for p in pending] == [ticket.pk]
    assert {c["task"]: c["moves"] for c in pending[0]["changes"]} == {"cs_summary": True, "knowledge_qa": False}

    response = client_for(erin).post(f"/tickets/{ticket.pk}/action/", {"action": "start_canary"})
    assert response.status_code == 302
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.CANARY
    version = RouteTableVersion.objects.get()
    assert version.changes == [{"task": "cs_summary", "tenant": "tenant-a", "from": None, "to": candidate.name}]
    table = client.get("/routes/")
    assert [(r.task.slug, r.tenant, r.backend.name) for r in table.context["routes"]] == [
        ("cs_summary", "tenant-a", candidate.name)
    ]
    assert table.context["pending"] == []
    backend_page = client.get(f"/backends/{candidate.name}/")
    assert [(r.task.slug, r.tenant) for r in backend_page.context["routes"]] == [("cs_summary", "tenant-a")]


def test_rolling_back_needs_a_reason_and_moves_the_route_back(
    erin: Any, rita: Any, baseline: Any, candidate: Any
) -> None:
    ticket, _ = evaluated_ticket("approve", erin, baseline, candidate)
    client_for(rita).post(
        f"/tickets/{ticket.pk}/sign-off/", {"verdict": "approve", "reason_code": "evidence_sufficient"}
    )
    client_for(erin).post(f"/tickets/{ticket.pk}/action/", {"action": "start_canary"})
    refused = client_for(erin).post(f"/tickets/{ticket.pk}/action/", {"action": "roll_back"})
    assert refused.status_code == 400 and b"a reason is required to roll back" in refused.content
    body = {"action": "roll_back", "reason_code": "canary_regression", "comment": "p99 up"}
    assert client_for(erin).post(f"/tickets/{ticket.pk}/action/", body).status_code == 302
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.ROLLED_BACK
    latest = RouteTableVersion.objects.order_by("-number").first()
    assert latest is not None and latest.kind == "rollback"
    assert {c["to"] for c in latest.changes} == {baseline.name}


def test_a_failed_samples_outputs_are_diffed_word_by_word(erin: Any, rita: Any, baseline: Any, candidate: Any) -> None:
    ticket, _ = evaluated_ticket("restrict", erin, baseline, candidate)
    pair = {"run__in": [ticket.baseline_run, ticket.candidate_run], "task": "knowledge_qa"}
    failed = SampleRecord.objects.filter(run=ticket.candidate_run, task="knowledge_qa", passed=False).first()
    assert failed is not None
    SampleRecord.objects.filter(**pair, sample_id=failed.sample_id, run=ticket.baseline_run).update(
        output="Paris is the capital [doc 3]"
    )
    SampleRecord.objects.filter(**pair, sample_id=failed.sample_id, run=ticket.candidate_run).update(
        output="Paris is the <b>capital</b>"
    )
    html = client_for(rita).get(f"/tickets/{ticket.pk}/samples/?show=regressions&task=knowledge_qa").content.decode()
    assert "Baseline → candidate, word by word" in html
    assert (
        '<pre class="diff">Paris is the <del>capital [doc 3]</del><ins>&lt;b&gt;capital&lt;/b&gt;</ins></pre>' in html
    )


def test_the_output_diff_keeps_whitespace_and_skips_huge_outputs() -> None:
    from gates.views.evidence import DIFF_MAX_CHARS, output_diff

    assert output_diff("a b\nc", "a x\nc") == [("equal", "a "), ("removed", "b"), ("added", "x"), ("equal", "\nc")]
    assert output_diff("x" * DIFF_MAX_CHARS, "y") == []
