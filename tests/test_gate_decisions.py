"""Gate decisions from stored runs: every outcome reachable, errors never count as failures.

The helpers here build ``EvaluationRun`` rows the way the evaluation service stores them (per-task
results with raw request records, per-sample records), so the other gate tests reuse them.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User

from evaluators.models import EvaluationRun, RunStatus, SampleRecord, TaskResult
from gates import decisions, services
from gates.models import GateDecision, ReleaseTicket, TaskType, TicketStatus
from ledger.models import Backend, LedgerEntry
from ledger.selectors import ledger_verify
from optgate.errors import DomainError, NotAllowed
from tests.conftest import ticket_fields

pytestmark = pytest.mark.django_db


def outcomes(n: int, rate: float, seed: int) -> list[bool]:
    return [bool(x) for x in np.random.default_rng(seed).random(n) < rate]


def drop_passes(passed: list[bool], points: int) -> list[bool]:
    """Turn ``points`` percent of the samples from pass to fail."""
    out, left = list(passed), points * len(passed) // 100
    for i, ok in enumerate(out):
        if ok and left:
            out[i], left = False, left - 1
    return out


def task_spec(
    passed: list[bool], *, speed: float = 1.0, seed: int = 0, engine: dict[str, float] | None = None, error: str = ""
) -> dict[str, Any]:
    return {"passed": passed, "speed": speed, "seed": seed, "engine": engine or {}, "error": error}


def store_run(backend: Backend, tasks: dict[str, dict[str, Any]], *, status: str = RunStatus.SUCCEEDED,
              error: str = "") -> EvaluationRun:  # fmt: skip
    """A finished run of ``backend``: per task, requests whose latencies scale with ``speed``."""
    run = EvaluationRun.objects.create(
        backend=backend, tasks=list(tasks), engine_version="0.32.0", hardware_class="cpu-avx2",
        reuse_key=uuid.uuid4().hex, status=status, error=error,
    )  # fmt: skip
    for task, spec in tasks.items():
        rng = np.random.default_rng(spec["seed"])
        n, speed = len(spec["passed"]), spec["speed"]
        ttft, tpot = rng.lognormal(np.log(0.3), 0.3, n) * speed, rng.lognormal(np.log(0.04), 0.3, n) * speed
        e2e = rng.lognormal(np.log(4.0), 0.3, n) * speed
        requests = [
            {"ttft_s": float(a), "tpot_s": float(b), "itl_s": [float(b)], "e2e_s": float(c), "output_tokens": 100,
             "error": None}
            for a, b, c in zip(ttft, tpot, e2e, strict=True)
        ]  # fmt: skip
        TaskResult.objects.create(
            run=run, task=task, suite_version="1", requests=requests, engine_evidence=spec["engine"],
            performance={"output_token_throughput": 1000.0 / speed}, error=spec["error"],
        )  # fmt: skip
        SampleRecord.objects.bulk_create(
            SampleRecord(run=run, task=task, sample_id=f"{task}-{i:04d}", prompt="p", output="o", passed=ok,
                         score=1.0 if ok else 0.0)
            for i, ok in enumerate(spec["passed"])
        )  # fmt: skip
    return run


def tasks(*slugs: str) -> list[TaskType]:
    return [TaskType.objects.get(slug=slug) for slug in slugs]


def evaluating_ticket(
    owner: User, baseline: Backend, candidate: Backend, base_run: EvaluationRun, cand_run: EvaluationRun,
    **overrides: Any,
) -> ReleaseTicket:  # fmt: skip
    """A submitted ticket in ``evaluating`` with its two runs attached (what the workers leave)."""
    fields = ticket_fields(baseline, candidate, **{"mechanisms": ["batching"], "bottleneck": "decode", **overrides})
    ticket = services.ticket_create(owner=owner, **fields)
    services.ticket_submit(ticket=ticket, actor=owner)
    services.ticket_transition(ticket=ticket, action="start_evaluation", actor=None)
    # Test set-up: the evaluation orchestration attaches the runs.
    ReleaseTicket.objects.filter(pk=ticket.pk).update(baseline_run=base_run, candidate_run=cand_run)
    ticket.refresh_from_db()
    return ticket


def scenario(outcome: str, owner: User, baseline: Backend, candidate: Backend, **overrides: Any) -> ReleaseTicket:
    """An evaluating ticket whose stored evidence leads the default policy to ``outcome``."""
    n = 200
    good = outcomes(n, 0.9, 1)
    shape: dict[str, Any]
    if outcome == "approve":
        base = {"cs_summary": task_spec(good, seed=1), "code_assistant": task_spec(good, seed=2)}
        cand = {"cs_summary": task_spec(good, speed=0.7, seed=1), "code_assistant": task_spec(good, speed=0.7, seed=2)}
        shape = {"beneficiary_tasks": tasks("cs_summary"), "risk_tasks": tasks("code_assistant")}
    elif outcome == "approve_high_risk":
        base = {"cs_summary": task_spec(good, seed=1), "knowledge_qa": task_spec(good, seed=2)}
        cand = {"cs_summary": task_spec(good, speed=0.7, seed=1), "knowledge_qa": task_spec(good, speed=0.7, seed=2)}
        shape = {"beneficiary_tasks": tasks("cs_summary"), "risk_tasks": tasks("knowledge_qa")}
    elif outcome == "restrict":
        base = {"cs_summary": task_spec(good, seed=1), "knowledge_qa": task_spec(good, seed=2)}
        cand = {"cs_summary": task_spec(good, speed=0.7, seed=1),
                "knowledge_qa": task_spec(drop_passes(good, 10), seed=2)}  # fmt: skip
        shape = {"beneficiary_tasks": tasks("cs_summary"), "risk_tasks": tasks("knowledge_qa")}
    elif outcome == "reject":
        base = {"cs_summary": task_spec(good, seed=1), "dataagent_nl2sql": task_spec(good, seed=2)}
        cand = {"cs_summary": task_spec(good, speed=0.7, seed=1),
                "dataagent_nl2sql": task_spec(drop_passes(good, 10), speed=0.7, seed=2)}  # fmt: skip
        shape = {"beneficiary_tasks": tasks("cs_summary"), "risk_tasks": tasks("dataagent_nl2sql"),
                 "mechanisms": ["weight_quantization"]}  # fmt: skip
    else:
        raise ValueError(outcome)
    shape.update(overrides)
    return evaluating_ticket(owner, baseline, candidate, store_run(baseline, base), store_run(candidate, cand), **shape)


def test_it_approves_from_stored_runs_and_keeps_everything_it_judged(erin: Any, baseline: Any, candidate: Any) -> None:
    ticket = scenario("approve", erin, baseline, candidate)
    decision = decisions.decision_make(ticket=ticket)
    assert decision.outcome == "approve", decision.reasons
    assert decision.policy_version == "default@2" and decision.dry_run is False
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
    ticket = evaluating_ticket(erin, baseline, candidate, base, crashed, beneficiary_tasks=tasks("cs_summary"),
                               risk_tasks=tasks("knowledge_qa"))  # fmt: skip
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
    cand = store_run(candidate, {"cs_summary": task_spec(good, speed=0.7, seed=4),
                                 "knowledge_qa": task_spec([], error="suite crashed: tokenizer missing")})  # fmt: skip
    ticket = evaluating_ticket(erin, baseline, candidate, base, cand, beneficiary_tasks=tasks("cs_summary"),
                               risk_tasks=tasks("knowledge_qa"))  # fmt: skip
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
    cand = store_run(candidate, {"cs_summary": task_spec(good, speed=0.7, seed=6,
                                                         engine={"engine_ttft_mean_ms": 60.0})})  # fmt: skip
    ticket = evaluating_ticket(erin, baseline, candidate, base, cand, beneficiary_tasks=tasks("cs_summary"),
                               risk_tasks=[])  # fmt: skip

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
    assert entry.payload["policy_version"] == "default@2"
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
    ticket = evaluating_ticket(erin, baseline, candidate, base, cand, beneficiary_tasks=tasks("cs_summary"),
                               risk_tasks=[])  # fmt: skip
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


def test_only_the_system_or_an_admin_makes_decisions(erin: Any, rita: Any, ada: Any, baseline: Any,
                                                     candidate: Any) -> None:  # fmt: skip
    ticket = scenario("approve", erin, baseline, candidate)
    for person in (erin, rita):
        with pytest.raises(NotAllowed):
            decisions.decision_make(ticket=ticket, actor=person)
    assert decisions.decision_make(ticket=ticket, actor=ada).created_by == ada


def test_a_draft_is_not_judged(erin: Any, draft: ReleaseTicket) -> None:
    with pytest.raises(DomainError, match="is draft"):
        decisions.decision_make(ticket=draft)


def test_the_decision_reads_on_the_ticket_api(api_for: Any, erin: Any, olga: Any, baseline: Any,
                                              candidate: Any) -> None:  # fmt: skip
    ticket = scenario("restrict", erin, baseline, candidate)
    assert api_for(olga).get(f"/api/v1/tickets/{ticket.pk}/decision/").status_code == 404
    decision = decisions.decision_make(ticket=ticket)
    response = api_for(olga).get(f"/api/v1/tickets/{ticket.pk}/decision/")
    assert response.status_code == 200
    assert response.data["id"] == decision.pk and response.data["outcome"] == "restrict"
    assert response.data["policy_version"] == "default@2"
    assert response.data["proposed_routes"]["knowledge_qa"] == "baseline"
    assert response.data["sign_offs"] == [] and response.data["history"] == []
    assert api_for(None).get(f"/api/v1/tickets/{ticket.pk}/decision/").status_code == 401
