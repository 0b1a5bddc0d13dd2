"""Gate decisions from stored runs: every outcome reachable, errors never count as failures.

The helpers here build ``EvaluationRun`` rows the way the evaluation service stores them (per-task
results with raw request records, per-sample records), so the other gate tests reuse them.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import DomainError, NotAllowed
from evaluators.models import EvaluationRun, RunStatus
from gates.models import GateDecision, ReleaseTicket, TicketStatus
from gates.services import decisions
from gates.services import tickets as services
from ledger.models import LedgerEntry
from ledger.selectors import ledger_verify
from tests.factories import evaluating_ticket, outcomes, scenario, store_run, task_spec, tasks

pytestmark = pytest.mark.django_db


def test_it_approves_from_stored_runs_and_keeps_everything_it_judged(erin: Any, baseline: Any, candidate: Any) -> None:
    ticket = scenario("approve", erin, baseline, candidate)
    decision = decisions.decision_make(ticket=ticket)
    assert decision.outcome == "approve", decision.reasons
    assert decision.policy_version == "default@7" and decision.dry_run is False
    assert (decision.baseline_run_id, decision.candidate_run_id) == (ticket.baseline_run_id, ticket.candidate_run_id)
    assert set(decision.verdicts) == {"cs_summary", "code_assistant"}
    assert decision.verdicts["cs_summary"]["status"] == "pass" and decision.verdicts["cs_summary"]["metrics"]
    assert decision.proposed_routes == {"cs_summary": "candidate", "code_assistant": "candidate"}
    ticket.refresh_from_db()
    # Approval itself is the reviewers' sign-off; the system only finishes the evaluation.
    assert ticket.status == TicketStatus.EVALUATED
    assert decisions.decision_current(ticket=ticket) == decision


def test_it_restricts_to_the_passing_tasks(erin: Any, baseline: Any, candidate: Any) -> None:
    decision = decisions.decision_make(ticket=scenario("restrict", erin, baseline, candidate))
    assert decision.outcome == "restrict", decision.reasons
    assert decision.allowed_tasks == ["cs_summary"]
    assert decision.proposed_routes == {"cs_summary": "candidate", "knowledge_qa": "baseline"}
    assert any("knowledge_qa" in reason and "−10.0 points" in reason for reason in decision.reasons)


def test_it_rejects_a_quantized_candidate_that_breaks_sql(erin: Any, baseline: Any, candidate: Any) -> None:
    decision = decisions.decision_make(ticket=scenario("reject", erin, baseline, candidate))
    assert decision.outcome == "reject"
    assert set(decision.proposed_routes.values()) == {"baseline"}
    assert any(reason.startswith("Veto on dataagent_nl2sql") for reason in decision.reasons)


def test_a_failed_candidate_run_needs_evidence_not_a_rejection(erin: Any, baseline: Any, candidate: Any) -> None:
    good = outcomes(200, 0.9, 3)
    base = store_run(baseline, {"cs_summary": task_spec(good), "knowledge_qa": task_spec(good)})
    crashed = store_run(candidate, {}, status=RunStatus.ERROR, error="engine did not become healthy within 600 s")
    ticket = evaluating_ticket(
        erin,
        baseline,
        candidate,
        base,
        crashed,
        beneficiary_tasks=tasks("cs_summary"),
        risk_tasks=tasks("knowledge_qa"),
    )
    decision = decisions.decision_make(ticket=ticket)
    assert decision.outcome == "needs_evidence"
    assert {v["status"] for v in decision.verdicts.values()} == {"error"}
    assert any("engine did not become healthy" in reason for reason in decision.reasons)
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.NEEDS_EVIDENCE
    moved = LedgerEntry.objects.get(kind="ticket.needs_evidence")
    assert moved.payload["details"]["decision"] == decision.pk


def test_a_task_that_errored_inside_a_good_run_needs_evidence(erin: Any, baseline: Any, candidate: Any) -> None:
    good = outcomes(200, 0.9, 4)
    base = store_run(baseline, {"cs_summary": task_spec(good, seed=4), "knowledge_qa": task_spec(good, seed=5)})
    cand = store_run(
        candidate,
        {
            "cs_summary": task_spec(good, speed=0.7, seed=4),
            "knowledge_qa": task_spec([], error="suite crashed: tokenizer missing"),
        },
    )
    ticket = evaluating_ticket(
        erin, baseline, candidate, base, cand, beneficiary_tasks=tasks("cs_summary"), risk_tasks=tasks("knowledge_qa")
    )
    decision = decisions.decision_make(ticket=ticket)
    assert decision.outcome == "needs_evidence"
    assert decision.verdicts["knowledge_qa"]["status"] == "error"
    assert decision.verdicts["cs_summary"]["status"] == "pass"


def test_responses_held_up_between_engine_and_client_need_a_re_measurement(
    erin: Any, baseline: Any, candidate: Any, client: Any
) -> None:
    good = outcomes(200, 0.9, 6)
    # Stored TTFTs are ~300 ms (candidate ~210 ms): the engine saw the baseline's requests ~20 ms
    # earlier than the client did, and the candidate's ~150 ms earlier.
    base = store_run(baseline, {"cs_summary": task_spec(good, seed=6, engine={"engine_ttft_mean_ms": 290.0})})
    cand = store_run(
        candidate, {"cs_summary": task_spec(good, speed=0.7, seed=6, engine={"engine_ttft_mean_ms": 60.0})}
    )
    ticket = evaluating_ticket(
        erin, baseline, candidate, base, cand, beneficiary_tasks=tasks("cs_summary"), risk_tasks=[]
    )

    decision = decisions.decision_make(ticket=ticket)

    assert decision.outcome == "needs_evidence", decision.reasons
    assert decision.samples_needed == {}
    verdict = decision.verdicts["cs_summary"]
    timed = [m for m in verdict["metrics"] if m["metric"].startswith(("ttft", "tpot", "e2e"))]
    assert timed and {m["status"] for m in timed} == {"inconclusive"}
    assert all(m["details"]["delivery_ms_candidate"] > 100 for m in timed)
    assert any("Re-measure on a quiet worker" in reason for reason in decision.reasons)
    client.force_login(erin)
    page = client.get(f"/tickets/{ticket.pk}/")
    assert b"Re-measure on a quiet worker" in page.content


def test_each_decision_is_ledgered_and_the_chain_verifies(erin: Any, baseline: Any, candidate: Any) -> None:
    ticket = scenario("restrict", erin, baseline, candidate)
    decision = decisions.decision_make(ticket=ticket)
    entry = LedgerEntry.objects.get(kind="gate.decision")
    assert entry.payload["decision"] == decision.pk and entry.payload["outcome"] == "restrict"
    assert entry.payload["policy_version"] == "default@7"
    assert entry.payload["proposed_routes"] == {"cs_summary": "candidate", "knowledge_qa": "baseline"}
    kinds = list(LedgerEntry.objects.filter(subject_id=str(ticket.pk)).order_by("seq").values_list("kind", flat=True))
    assert kinds[-2:] == ["gate.decision", "ticket.evaluated"]
    assert ledger_verify().ok


def test_judging_the_same_runs_again_is_harmless(erin: Any, baseline: Any, candidate: Any) -> None:
    ticket = scenario("approve", erin, baseline, candidate)
    first = decisions.decision_make(ticket=ticket)
    again = decisions.decision_make(ticket=ticket)
    assert again.pk == first.pk and GateDecision.objects.count() == 1
    assert LedgerEntry.objects.filter(kind="gate.decision").count() == 1


def test_a_re_evaluation_adds_a_decision_and_the_latest_is_current(erin: Any, baseline: Any, candidate: Any) -> None:
    good = outcomes(200, 0.9, 6)
    base = store_run(baseline, {"cs_summary": task_spec(good[:8], seed=6)})
    cand = store_run(candidate, {"cs_summary": task_spec(good[:8], speed=0.7, seed=6)})
    ticket = evaluating_ticket(
        erin, baseline, candidate, base, cand, beneficiary_tasks=tasks("cs_summary"), risk_tasks=[]
    )
    first = decisions.decision_make(ticket=ticket)
    assert first.outcome == "needs_evidence" and first.samples_needed["cs_summary"] > 0
    services.ticket_transition(ticket=ticket, action="start_evaluation", actor=None)
    more_base = store_run(baseline, {"cs_summary": task_spec(good, seed=6)})
    more_cand = store_run(candidate, {"cs_summary": task_spec(good, speed=0.7, seed=6)})
    ReleaseTicket.objects.filter(pk=ticket.pk).update(baseline_run=more_base, candidate_run=more_cand)
    second = decisions.decision_make(ticket=ticket)
    assert second.outcome == "approve", second.reasons
    assert decisions.decision_current(ticket=ticket) == second
    assert list(GateDecision.objects.filter(ticket=ticket).order_by("id")) == [first, second]


def test_a_dry_run_policy_records_but_moves_nothing(erin: Any, baseline: Any, candidate: Any) -> None:
    from dataclasses import replace

    ticket = scenario("approve", erin, baseline, candidate)
    dry = replace(decisions.gate_policy(), dry_run=True)
    decision = decisions.decision_make(ticket=ticket, policy=dry)
    assert decision.dry_run is True and decision.outcome == "approve"
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.EVALUATING
    assert decisions.decision_current(ticket=ticket) is None


def test_it_refuses_to_judge_unfinished_or_missing_runs(erin: Any, baseline: Any, candidate: Any) -> None:
    ticket = scenario("approve", erin, baseline, candidate)
    assert ticket.candidate_run_id is not None
    EvaluationRun.objects.filter(pk=ticket.candidate_run_id).update(status=RunStatus.RUNNING)
    with pytest.raises(DomainError, match="still running"):
        decisions.decision_make(ticket=ticket)
    ReleaseTicket.objects.filter(pk=ticket.pk).update(candidate_run=None)
    with pytest.raises(DomainError, match="no candidate run"):
        decisions.decision_make(ticket=ticket)
    assert not GateDecision.objects.exists()


def test_it_refuses_runs_of_another_backend(erin: Any, baseline: Any, candidate: Any) -> None:
    ticket = scenario("approve", erin, baseline, candidate)
    ReleaseTicket.objects.filter(pk=ticket.pk).update(candidate_run=ticket.baseline_run)
    with pytest.raises(DomainError, match="measured another backend"):
        decisions.decision_make(ticket=ticket)


def test_only_the_system_or_an_admin_makes_decisions(
    erin: Any, rita: Any, ada: Any, baseline: Any, candidate: Any
) -> None:
    ticket = scenario("approve", erin, baseline, candidate)
    for person in (erin, rita):
        with pytest.raises(NotAllowed):
            decisions.decision_make(ticket=ticket, actor=person)
    assert decisions.decision_make(ticket=ticket, actor=ada).created_by == ada


def test_a_draft_is_not_judged(erin: Any, draft: ReleaseTicket) -> None:
    with pytest.raises(DomainError, match="is draft"):
        decisions.decision_make(ticket=draft)


def test_the_decision_reads_on_the_ticket_api(
    api_for: Any, erin: Any, olga: Any, baseline: Any, candidate: Any
) -> None:
    ticket = scenario("restrict", erin, baseline, candidate)
    assert api_for(olga).get(f"/api/v1/tickets/{ticket.pk}/decision/").status_code == 404
    decision = decisions.decision_make(ticket=ticket)
    response = api_for(olga).get(f"/api/v1/tickets/{ticket.pk}/decision/")
    assert response.status_code == 200
    assert response.data["id"] == decision.pk and response.data["outcome"] == "restrict"
    assert response.data["policy_version"] == "default@7"
    assert response.data["proposed_routes"]["knowledge_qa"] == "baseline"
    assert response.data["sign_offs"] == [] and response.data["history"] == []
    assert api_for(None).get(f"/api/v1/tickets/{ticket.pk}/decision/").status_code == 401
