"""The decision summary at the top of the ticket page (and its API/CLI shape), and numbers as
people read them everywhere on the page."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.utils.html import escape
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from gates.api.decisions import DecisionSerializer
from gates.models import TicketStatus
from gates.services import decisions
from tests.factories import evaluating_ticket, outcomes, store_run, task_spec, tasks
from tests.ui_helpers import client_for, evaluated_ticket

pytestmark = pytest.mark.django_db

# A number with four or more decimals, or an interval of raw fractions: what used to leak.
RAW_FLOAT = re.compile(r"\d\.\d{4,}|\[-?0\.\d+, -?0\.\d+\]")


def _visible_text(html: str) -> str:
    """The page's text as a reader sees it: no charts' coordinates, styles, scripts or attributes."""
    html = re.sub(r"<svg.*?</svg>|<style.*?</style>|<script.*?</script>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def _page(user: Any, ticket: Any) -> tuple[Any, str]:
    response = client_for(user).get(f"/tickets/{ticket.pk}/")
    assert response.status_code == 200
    return response, response.content.decode()


def test_the_summary_comes_first_and_everything_else_is_folded(
    erin: Any, rita: Any, baseline: Any, candidate: Any
) -> None:
    ticket, _ = evaluated_ticket("restrict", erin, baseline, candidate)
    _, html = _page(rita, ticket)
    summary_at = html.index('id="summary"')
    # The summary and the reviewer's form come before any of the detail sections ...
    assert summary_at < html.index('id="review"') < html.index('<details class="fold"')
    # ... and every detail section is a closed <details> that opens on demand.
    folds = re.findall(r'<details class="fold" id="([a-z]+)-fold"\s*(open)?>', html)
    names = ["provenance", "verdicts", "engine", "samples", "routes", "plan", "timeline"]
    assert [name for name, _ in folds] == names
    assert not any(is_open for _, is_open in folds)
    assert html.index("<svg") > html.index('<details class="fold" id="verdicts-fold"')


def test_the_summary_names_each_task_its_verdict_and_the_numbers_that_decided_it(
    erin: Any, rita: Any, baseline: Any, candidate: Any
) -> None:
    ticket, decision = evaluated_ticket("restrict", erin, baseline, candidate)
    response, html = _page(rita, ticket)
    summary = response.context["summary"]
    assert summary["outcome"] == "restrict"
    rows = {row["task"]: row for row in summary["tasks"]}
    assert (rows["knowledge_qa"]["role"], rows["knowledge_qa"]["status"]) == ("risk", "fail")
    assert (rows["cs_summary"]["role"], rows["cs_summary"]["status"]) == ("beneficiary", "pass")
    assert rows["knowledge_qa"]["samples_used"] == 200
    [deciding] = rows["knowledge_qa"]["numbers"]
    assert deciding["metric"] == "pass_rate"
    assert (deciding["baseline"], deciding["candidate"]) == ("91.0%", "81.0%")
    assert (deciding["change"], deciding["interval"]) == ("−10.0 pts", "−16.0 to −6.1 pts")
    # A passing beneficiary is shown by what it promised (objectives first), at most two numbers.
    assert [n["metric"] for n in rows["cs_summary"]["numbers"]] == ["output_throughput", "e2e_p50"]
    block = html[html.index('id="summary"') : html.index('id="review"')]
    assert "Pass rate: 91.0% → 81.0% (−10.0 pts, CI −16.0 to −6.1 pts)" in block
    assert "E2E latency P50: 4,095 ms → 2,867 ms (−30.0%, CI −34.6% to −25.1%)" in block
    # One blocking finding, printed once on the whole page; warnings are not findings.
    assert [f["task"] for f in summary["findings"]] == ["knowledge_qa"]
    reason = decision.verdicts["knowledge_qa"]["metrics"][0]["reason"]
    assert html.count(escape(reason)) == 1 and escape(reason) in block
    assert len(summary["warnings"]) == 2 and not any(w.startswith("Warning") for w in summary["warnings"])


def test_the_next_action_is_the_viewers_own(erin: Any, rita: Any, baseline: Any, candidate: Any) -> None:
    ticket, _ = evaluated_ticket("restrict", erin, baseline, candidate)
    assert _page(rita, ticket)[0].context["next_action"]["action"] == "sign_off"
    owner_view = _page(erin, ticket)[0].context["next_action"]
    assert owner_view == {
        "action": "await_sign_off",
        "text": "You own this ticket: a reviewer signs off the policy's restrict next.",
    }
    body = {"verdict": "restrict", "tasks": ["cs_summary"], "reason_code": "guardrail_regression"}
    assert client_for(rita).post(f"/tickets/{ticket.pk}/sign-off/", body).status_code == 302
    response, html = _page(erin, ticket)
    assert response.context["next_action"]["action"] == "start_canary"
    assert 'data-action="start_canary"' in html


def test_a_rejection_asks_to_fix_the_config(erin: Any, rita: Any, baseline: Any, candidate: Any) -> None:
    ticket, _ = evaluated_ticket("reject", erin, baseline, candidate)
    body = {"verdict": "reject", "reason_code": "guardrail_regression", "comment": "SQL regressed"}
    assert client_for(rita).post(f"/tickets/{ticket.pk}/sign-off/", body).status_code == 302
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.REJECTED
    assert _page(erin, ticket)[0].context["next_action"]["action"] == "fix_config"


def test_too_few_samples_ask_to_evaluate_again_with_the_number_needed(
    erin: Any, rita: Any, baseline: Any, candidate: Any
) -> None:
    few = outcomes(40, 0.9, 1)
    ticket = evaluating_ticket(
        erin,
        baseline,
        candidate,
        store_run(baseline, {"cs_summary": task_spec(few, seed=1)}),
        store_run(candidate, {"cs_summary": task_spec(few, speed=0.7, seed=1)}),
        beneficiary_tasks=tasks("cs_summary"),
        risk_tasks=[],
    )
    decision = decisions.decision_make(ticket=ticket)
    assert decision.outcome == "needs_evidence", decision.reasons
    ticket.refresh_from_db()
    response, _ = _page(rita, ticket)
    action = response.context["next_action"]
    assert action["action"] == "evaluate_again"
    needed = decision.samples_needed["cs_summary"]
    assert f"cs_summary about {needed:,} more" in action["text"]
    row = response.context["summary"]["tasks"][0]
    assert (row["samples_used"], row["samples_needed"]) == (40, decision.verdicts["cs_summary"]["samples_needed"])


def test_no_raw_floats_reach_the_page(erin: Any, rita: Any, baseline: Any, candidate: Any) -> None:
    ticket, _ = evaluated_ticket("restrict", erin, baseline, candidate, bottleneck="kv_memory")
    # Engine counters as vLLM's /metrics deltas leave them: floats with many digits.
    for run, value in ((ticket.baseline_run, 512.6095390319824), (ticket.candidate_run, 0.016734919945520232)):
        assert run is not None
        run.engine_evidence = {"prompt_tokens": value, "kv_cache_usage_peak": 0.016734919945520232}
        run.save(update_fields=["engine_evidence"])
    _, html = _page(rita, ticket)
    text = _visible_text(html)
    assert not RAW_FLOAT.findall(text)
    assert "513" in text and "1.7%" in text  # the counters, as a count and a percentage
    assert "KV memory" in text and "Kv Memory" not in text


def test_the_api_decision_carries_the_summary_and_display_fields(
    erin: Any, rita: Any, baseline: Any, candidate: Any
) -> None:
    ticket, _ = evaluated_ticket("restrict", erin, baseline, candidate)
    client = APIClient()
    client.force_authenticate(rita)
    data = client.get(f"/api/v1/tickets/{ticket.pk}/decision/").json()
    pass_rate = data["verdicts"]["knowledge_qa"]["metrics"][0]
    assert pass_rate["interval"][0] < 0  # the raw numbers stay for machines
    assert pass_rate["display"]["interval"] == "−16.0 to −6.1 pts"
    summary = data["summary"]
    assert summary["outcome"] == "restrict"
    assert {t["task"]: t["status"] for t in summary["tasks"]} == {"cs_summary": "pass", "knowledge_qa": "fail"}
    assert summary["next_action"]["action"] == "sign_off"
    assert [f["metric"] for f in summary["findings"]] == ["pass_rate"]


def test_the_ticket_form_names_the_kv_memory_bottleneck_as_people_write_it(erin: Any) -> None:
    html = client_for(erin).get("/tickets/new/").content.decode()
    assert '<option value="kv_memory">KV memory</option>' in html and "Kv Memory" not in html


def test_the_decision_read_keeps_the_serializers_fields_and_values(
    erin: Any, rita: Any, bella: Any, baseline: Any, candidate: Any
) -> None:
    ticket, decision = evaluated_ticket("restrict", erin, baseline, candidate)
    body = {"verdict": "restrict", "tasks": ["cs_summary"], "reason_code": "guardrail_regression", "comment": "ok"}
    assert client_for(rita).post(f"/tickets/{ticket.pk}/sign-off/", body).status_code == 302
    client = APIClient()
    client.force_authenticate(bella)
    read = client.get(f"/api/v1/tickets/{ticket.pk}/decision/").json()
    decision.refresh_from_db()
    # The read is built by hand for speed; the serializer stays its schema, field for field.
    schema = json.loads(JSONRenderer().render(DecisionSerializer(decision).data))
    assert read["sign_offs"] and read["signed_verdict"] == "restrict"
    for metrics in (v["metrics"] for v in read["verdicts"].values()):
        for metric in metrics:
            assert metric.pop("display")
    assert {k: v for k, v in read.items() if k not in ("summary", "history")} == schema
    assert (
        read["summary"]["signed_verdict"] == "restrict" and read["summary"]["next_action"]["action"] == "start_canary"
    )


def test_the_demo_terminal_prints_the_same_summary(erin: Any, baseline: Any, candidate: Any) -> None:
    from io import StringIO

    from tools.management.commands.demo import Command

    ticket, decision = evaluated_ticket("reject", erin, baseline, candidate)
    out = StringIO()
    Command(stdout=out, no_color=True).print_decisions([ticket])
    text = out.getvalue()
    assert f"#{ticket.pk} {ticket.title}: reject" in text.splitlines()
    assert "    dataagent_nl2sql (risk): fail — Pass rate 91.0% → 81.0% (−10.0 pts, CI −17.2 to −5.6 pts)" in text
    finding = next(m for m in decision.verdicts["dataagent_nl2sql"]["metrics"] if m["status"] == "fail")
    assert text.count(finding["reason"]) == 1
    assert "    next: A reviewer signs off the policy's reject next." in text


def test_an_engine_that_could_not_start_asks_to_fix_its_configuration(
    erin: Any, rita: Any, baseline: Any, candidate: Any
) -> None:
    from evaluators.models import RunErrorKind, RunStatus

    cause = "ValueError: User-specified max_model_len (8192) is greater than the derived max_model_len (2048)"
    base = store_run(baseline, {"cs_summary": task_spec(outcomes(200, 0.9, 3))})
    crashed = store_run(
        candidate,
        {},
        status=RunStatus.ERROR,
        error=f"engine exited with code 1 during start-up: {cause}",
        error_kind=RunErrorKind.START_FAILED,
    )
    ticket = evaluating_ticket(
        erin, baseline, candidate, base, crashed, beneficiary_tasks=tasks("cs_summary"), risk_tasks=[]
    )
    assert decisions.decision_make(ticket=ticket).outcome == "error"
    response, html = _page(rita, ticket)
    action = response.context["next_action"]
    assert action["action"] == "fix_config" and "max_model_len (8192)" in action["text"]
    assert "reject" in action["text"]  # the reviewer may close it
    assert escape(cause) in html
