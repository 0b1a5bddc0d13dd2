"""Staged evaluation (issue 18): stages of held-out samples until every task's look settles.

No engines: the first pair is stored as the workers leave it (``tests.factories.store_run``), and
each stage the orchestration asks for is answered here the way ``pair_execute`` stores a
quality-only pair — a result and per-sample records per task on both runs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from backends.models import Backend
from evaluators import pipeline
from evaluators import services as run_services
from evaluators.interleave import BASELINE, CANDIDATE
from evaluators.models import EvaluationRun, RunStatus, SampleRecord, TaskResult
from gates.judge.records import LOAD_NOT_MEASURED, MetricVerdict
from gates.judge.staged import may_continue, staged_guardrails, staged_verdict, task_looks, task_stage_sizes
from gates.models import EvaluationStage, GateDecision, ReleaseTicket, TicketStatus
from gates.policy.metrics import METRIC_SPECS, is_quality
from gates.policy.parse import load_policy, validate_policy_text
from gates.policy.rules import POLICY_DIR, PolicyError
from gates.selectors.decisions import decision_current
from gates.selectors.summary import blocking_findings, deciding_metrics, decision_summary, numbers_text
from gates.services import evaluation
from ledger.models import LedgerEntry
from ledger.selectors import ledger_verify
from optgate_cli.tickets import _numbers as cli_numbers
from tests.factories import (
    captured_tasks,
    drop_passes,
    evaluating_ticket,
    staged_policy_file,
    store_run,
    task_spec,
    tasks,
    timed_requests,
)
from workers import services as worker_services

pytestmark = pytest.mark.django_db

SQL, SUMMARY = "dataagent_nl2sql", "cs_summary"
# 90 of the 100 shipped samples pass on both sides: a seed-only change, no discordant pair.
GOOD = [True] * 90 + [False] * 10
# The looks of five stages of the shipped size (the default policy's `stage_size: shipped`).
SHIPPED_SIZES = (100, 200, 300, 400, 500)


@pytest.fixture
def sent() -> Any:
    with captured_tasks() as published:
        yield published


def _ticket(
    owner: User, baseline: Backend, candidate: Backend, sql_candidate: list[bool] = GOOD, speed: float = 0.7
) -> ReleaseTicket:
    """An evaluating ticket whose first pair has finished: a candidate taking ``speed`` times the
    baseline's time (faster by default; cs_summary, beneficiary) with SQL as a risk task, answered
    as ``sql_candidate`` says."""
    base = {SUMMARY: task_spec(GOOD, seed=1), SQL: task_spec(GOOD, seed=2)}
    cand = {SUMMARY: task_spec(GOOD, speed=speed, seed=1), SQL: task_spec(sql_candidate, speed=speed, seed=2)}
    return evaluating_ticket(
        owner,
        baseline,
        candidate,
        store_run(baseline, base),
        store_run(candidate, cand),
        beneficiary_tasks=tasks(SUMMARY),
        risk_tasks=tasks(SQL),
    )


def _answer(stage: EvaluationStage, candidate: dict[str, list[bool]] | None = None) -> None:
    """Finish the stage's pair as the worker would: per task, as many held-out answers on each side
    as the stage's profile names (9 in 10 passing on both sides unless ``candidate`` says)."""
    for run, side in ((stage.baseline_run, "baseline"), (stage.candidate_run, "candidate")):
        run.refresh_from_db()
        run.move(RunStatus.RUNNING)
        for task in stage.tasks:
            size = run.load_profile["stage_sizes"][task]
            good = GOOD if size == len(GOOD) else [i % 10 != 9 for i in range(size)]
            passed = (candidate or {}).get(task, good) if side == "candidate" else good
            TaskResult.objects.create(run=run, task=task, suite_version=run.suite_versions[task])
            SampleRecord.objects.bulk_create(
                SampleRecord(run=run, task=task, sample_id=f"{task}-h{stage.number}{i:04d}", passed=ok, score=float(ok))
                for i, ok in enumerate(passed)
            )
        run.move(RunStatus.SUCCEEDED)


def _check(ticket: ReleaseTicket, capture: Any) -> str | None:
    with capture(execute=True):
        return evaluation.ticket_check(ticket_id=ticket.pk)


def _last_stage(ticket: ReleaseTicket) -> EvaluationStage:
    stage = EvaluationStage.objects.filter(ticket=ticket).order_by("-number").first()
    assert stage is not None
    return stage


@pytest.fixture(autouse=True)
def staged_policy(tmp_path: Path, settings: Any) -> None:
    """The mechanics are walked under O'Brien–Fleming spending, whose published boundaries (4.88,
    3.36, 2.68, 2.29, 2.03 at five looks) the comments quote; the default policy's Pocock-type
    design has its own tests below."""
    staged_policy_file(
        tmp_path, settings, "alpha_spending: pocock", "alpha_spending: obrien_fleming", stage_size="shipped"
    )


def test_a_neutral_change_continues_after_stage_one_and_approves_once_the_pooled_pairs_cross_the_boundary(
    erin: User, baseline: Backend, candidate: Backend, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    ticket = _ticket(erin, baseline, candidate)

    # Look 1 at n = 100: SQL's score 1.43 and the summary's 2.29 are short of 4.88, so both continue.
    assert _check(ticket, django_capture_on_commit_callbacks) is None
    stage = _last_stage(ticket)
    assert (stage.number, stage.tasks, stage.first_run_id) == (2, [SUMMARY, SQL], ticket.candidate_run_id)
    profile = stage.candidate_run.load_profile
    assert profile["stage"] == 2 and profile["quality_only"] is True
    assert stage.candidate_run.suite_versions == {SUMMARY: "1+h1", SQL: "1+h1"}
    assert stage.baseline_run.paired_run_id == stage.candidate_run_id
    # The pair's one message goes with the candidate once the stage is stored.
    sent["run"].assert_called_once_with(stage.candidate_run_id, task_id=f"evaluate-run-{stage.candidate_run_id}-a1")
    requested = LedgerEntry.objects.get(kind="ticket.stage_requested", subject_id=str(ticket.pk))
    assert requested.payload["stage"] == 2 and requested.payload["looks"][SQL]["pass_rate"]["outcome"] == "continue"
    assert requested.payload["looks"][SQL]["pass_rate"]["n"] == 100
    assert not GateDecision.objects.filter(ticket=ticket).exists()
    assert evaluation.tickets_for_run(stage.candidate_run_id) == [ticket.pk]
    assert _check(ticket, django_capture_on_commit_callbacks) is None  # the stage has not finished: no new stage
    assert EvaluationStage.objects.filter(ticket=ticket).count() == 1

    _answer(stage)
    assert _check(ticket, django_capture_on_commit_callbacks) is None
    assert (_last_stage(ticket).number, _last_stage(ticket).tasks) == (3, [SUMMARY, SQL])

    # Look 3 at n = 300: the summary's 5-point margin settles (3.97 ≥ 2.68); SQL's 2 points do not
    # (2.47 < 2.68), so only SQL is asked again.
    _answer(_last_stage(ticket))
    assert _check(ticket, django_capture_on_commit_callbacks) is None
    assert (_last_stage(ticket).number, _last_stage(ticket).tasks) == (4, [SQL])

    _answer(_last_stage(ticket))
    assert _check(ticket, django_capture_on_commit_callbacks) == "approve"
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.EVALUATED
    decision = decision_current(ticket=ticket)
    assert decision is not None
    assert decision.outcome == "approve", decision.reasons
    sql = next(m for m in decision.verdicts[SQL]["metrics"] if m["metric"] == "pass_rate")
    assert sql["status"] == "pass" and sql["n"] == 400 and sql["test"].startswith("group-sequential")
    assert (sql["details"]["look"], sql["details"]["look_outcome"], sql["details"]["fixed_status"]) == (
        4,
        "approve",
        "inconclusive",
    )
    summary = next(m for m in decision.verdicts[SUMMARY]["metrics"] if m["metric"] == "pass_rate")
    assert (summary["n"], summary["details"]["look"]) == (300, 3)

    # The decision keeps the stages, every look's boundaries and the alpha spent; so does the ledger.
    assert decision.stages["count"] == 4
    assert [p["stage"] for p in decision.stages["pairs"]] == [1, 2, 3, 4]
    looks = decision.stages["tasks"][SQL]["guardrails"]["pass_rate"]["looks"]
    assert [round(look["efficacy_bound"], 3) for look in looks] == [4.877, 3.357, 2.68, 2.29]
    assert [look["outcome"] for look in looks] == ["continue", "continue", "continue", "approve"]
    # O'Brien–Fleming spending at 400 of 500 pairs: 2 − 2Φ(z_0.0125 / √0.8) of the one-sided 0.025.
    assert looks[-1]["alpha_spent"] == pytest.approx(0.01222, abs=1e-5)
    assert [look["n"] for look in decision.stages["tasks"][SUMMARY]["guardrails"]["pass_rate"]["looks"]] == [
        100,
        200,
        300,
    ]
    entry = LedgerEntry.objects.get(kind="gate.decision", subject_id=str(ticket.pk))
    assert entry.payload["stages"] == decision.stages
    assert ledger_verify().ok


class _Engine:
    """An engine that is up: the worker's pair path talks to it only through ``quality_phase``."""

    def __init__(self, name: str) -> None:
        self.base_url, self.model = f"http://127.0.0.1:9/{name}", name

    def is_alive(self) -> bool:
        return True

    def stop(self) -> None:
        pass

    def last_log_lines(self, n: int = 30) -> list[str]:
        return []


def test_the_worker_executes_each_stage_on_its_held_out_samples_until_the_ticket_is_judged(
    erin: User,
    baseline: Backend,
    candidate: Backend,
    sent: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's own path (``run_execute`` → ``pair_execute`` → ``pair_quality``), with the
    engines and lm-eval stood in for: every held-out answer right on both sides."""
    asked: list[tuple[str, str]] = []

    def quality(suite: Any, *, base_url: str, model: str, concurrency: int, workdir: Any, samples: Any) -> Any:
        asked.append((model, samples[0]["id"]))
        return [pipeline.SampleOutcome(s["id"], s["prompt"], "t", "o", True, 1.0, "", "") for s in samples]

    monkeypatch.setattr(run_services, "_open_engine", lambda run, attempt, warm_engine=None: _Engine(run.pair_side))
    monkeypatch.setattr(pipeline, "quality_phase", quality)
    ticket = _ticket(erin, baseline, candidate)
    outcome = _check(ticket, django_capture_on_commit_callbacks)
    while outcome is None:
        run_services.run_execute(run_id=_last_stage(ticket).candidate_run_id, worker="w1")
        outcome = _check(ticket, django_capture_on_commit_callbacks)
    assert outcome == "approve"
    stages = list(EvaluationStage.objects.filter(ticket=ticket).order_by("number"))
    assert [(s.number, s.tasks) for s in stages] == [(2, [SUMMARY, SQL]), (3, [SUMMARY, SQL]), (4, [SQL])]
    # Each stage answered its own block of held-out samples, the candidate first, then the baseline.
    assert (CANDIDATE, f"{SQL}-h0201") in asked and (BASELINE, f"{SQL}-h0201") in asked
    assert SampleRecord.objects.filter(run=stages[-1].candidate_run, task=SQL).count() == 100
    assert TaskResult.objects.get(run=stages[-1].candidate_run, task=SQL).performance == {}


def test_a_harmful_change_is_rejected_at_the_first_look_without_another_stage(
    erin: User, baseline: Backend, candidate: Backend, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # 30 of the 90 passing SQL answers now fail: the score at −2 points is −5.24, past −4.88.
    ticket = _ticket(erin, baseline, candidate, sql_candidate=drop_passes(GOOD, 30))
    assert _check(ticket, django_capture_on_commit_callbacks) == "reject"
    assert not EvaluationStage.objects.filter(ticket=ticket).exists()
    decision = decision_current(ticket=ticket)
    assert decision is not None
    sql = next(m for m in decision.verdicts[SQL]["metrics"] if m["metric"] == "pass_rate")
    assert sql["status"] == "fail" and (sql["details"]["look"], sql["details"]["look_outcome"]) == (1, "reject")
    assert decision.stages["count"] == 1


def test_a_ticket_rejected_on_evidence_no_stage_measures_again_is_judged_without_another_stage(
    erin: User, baseline: Backend, candidate: Backend, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # Both pass-rate looks continue (no discordant pair in 100), but the beneficiary's candidate is
    # 60 % slower: its promised speed-up confidently failed, and held-out answers cannot change that.
    ticket = _ticket(erin, baseline, candidate, speed=1.6)
    assert _check(ticket, django_capture_on_commit_callbacks) == "reject"
    assert not EvaluationStage.objects.filter(ticket=ticket).exists()
    decision = decision_current(ticket=ticket)
    assert decision is not None
    assert any(reason.startswith(f"Beneficiary task {SUMMARY}") for reason in decision.reasons), decision.reasons
    [look] = decision.stages["tasks"][SQL]["guardrails"]["pass_rate"]["looks"]
    assert look["outcome"] == "continue" and decision.stages["count"] == 1


def test_evaluate_again_on_a_needs_evidence_ticket_adds_a_stage_and_the_next_decision_pools_both(
    erin: User,
    baseline: Backend,
    candidate: Backend,
    sent: Any,
    django_capture_on_commit_callbacks: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    # One stage per evaluation: the first ends needs-evidence with both tasks still open.
    staged_policy_file(tmp_path, settings, "stages_per_evaluation: 5", "stages_per_evaluation: 1", stage_size="shipped")
    ticket = _ticket(erin, baseline, candidate)
    first = (ticket.baseline_run_id, ticket.candidate_run_id)
    assert _check(ticket, django_capture_on_commit_callbacks) == "needs_evidence"
    assert not EvaluationStage.objects.filter(ticket=ticket).exists()

    evaluation.evaluation_request(ticket=ReleaseTicket.objects.get(pk=ticket.pk), actor=erin)
    with django_capture_on_commit_callbacks(execute=True):
        again = evaluation.ticket_evaluate(ticket_id=ticket.pk)
        evaluation.ticket_evaluate(ticket_id=ticket.pk)  # a redelivered message adds nothing
    assert again is not None and again.status == TicketStatus.EVALUATING
    assert (again.baseline_run_id, again.candidate_run_id) == first  # the same paired evidence, extended
    stage = _last_stage(ticket)
    assert (stage.number, stage.tasks) == (2, [SUMMARY, SQL])
    assert EvaluationStage.objects.filter(ticket=ticket).count() == 1
    assert EvaluationRun.objects.count() == 4
    assert _check(ticket, django_capture_on_commit_callbacks) is None  # its pair has not finished

    _answer(stage)
    assert _check(ticket, django_capture_on_commit_callbacks) == "needs_evidence"
    decision = decision_current(ticket=ticket)
    assert decision is not None and decision.stages["count"] == 2
    sql = next(m for m in decision.verdicts[SQL]["metrics"] if m["metric"] == "pass_rate")
    assert sql["n"] == 200 and sql["status"] == "inconclusive" and "stage budget is spent" in sql["reason"]
    assert sql["samples_needed"] == 100 and decision.samples_needed[SQL] == 100
    assert GateDecision.objects.filter(ticket=ticket).count() == 2


def test_a_stage_whose_run_failed_needs_evidence_and_evaluating_again_measures_afresh(
    erin: User,
    baseline: Backend,
    candidate: Backend,
    sent: Any,
    django_capture_on_commit_callbacks: Any,
    settings: Any,
) -> None:
    settings.OPTGATE_INTERLEAVED = True
    ticket = _ticket(erin, baseline, candidate)
    first = (ticket.baseline_run_id, ticket.candidate_run_id)
    assert _check(ticket, django_capture_on_commit_callbacks) is None
    stage = _last_stage(ticket)
    for run in (stage.baseline_run, stage.candidate_run):
        run.refresh_from_db()
        run.move(RunStatus.RUNNING)
        run.move(RunStatus.ERROR, error="the engine died")

    # A stage that could not answer is a run error, never judged as if it had not been asked for.
    assert _check(ticket, django_capture_on_commit_callbacks) == "needs_evidence"
    decision = decision_current(ticket=ticket)
    assert decision is not None and decision.verdicts[SQL]["status"] == "error"
    assert "the engine died" in decision.verdicts[SQL]["reason"]

    evaluation.evaluation_request(ticket=ReleaseTicket.objects.get(pk=ticket.pk), actor=erin)
    with django_capture_on_commit_callbacks(execute=True):
        again = evaluation.ticket_evaluate(ticket_id=ticket.pk)
    assert again is not None and not {again.baseline_run_id, again.candidate_run_id} & set(first)
    assert EvaluationStage.objects.filter(ticket=ticket).count() == 1  # the new pair starts a new series
    assert evaluation.ticket_check(ticket_id=ticket.pk) is None  # waits for the new pair


def test_evaluate_again_measures_afresh_when_a_latency_check_is_open_too(
    erin: User,
    baseline: Backend,
    candidate: Backend,
    sent: Any,
    django_capture_on_commit_callbacks: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    settings.OPTGATE_INTERLEAVED = True
    staged_policy_file(tmp_path, settings, "stages_per_evaluation: 5", "stages_per_evaluation: 1", stage_size="shipped")
    # 60 requests are fewer than the 100 latency samples cs_summary's policy asks for.
    few = GOOD[:54] + [False] * 6
    base = {SUMMARY: task_spec(few, seed=1), SQL: task_spec(drop_passes(GOOD, 30), seed=2)}
    cand = {SUMMARY: task_spec(few, speed=0.7, seed=1), SQL: task_spec(GOOD, speed=0.7, seed=2)}
    ticket = evaluating_ticket(
        erin,
        baseline,
        candidate,
        store_run(baseline, base),
        store_run(candidate, cand),
        beneficiary_tasks=tasks(SUMMARY),
        risk_tasks=tasks(SQL),
    )
    assert _check(ticket, django_capture_on_commit_callbacks) == "needs_evidence"
    decision = decision_current(ticket=ticket)
    assert decision is not None
    open_checks = {m["metric"] for m in decision.verdicts[SUMMARY]["metrics"] if m["status"] == "inconclusive"}
    assert open_checks - {"pass_rate"}, open_checks
    evaluation.evaluation_request(ticket=ReleaseTicket.objects.get(pk=ticket.pk), actor=erin)
    with django_capture_on_commit_callbacks(execute=True):
        again = evaluation.ticket_evaluate(ticket_id=ticket.pk)
    assert again is not None and again.candidate_run_id != ticket.candidate_run_id
    assert not EvaluationStage.objects.filter(ticket=ticket).exists()


def test_evaluate_again_adds_a_stage_beside_a_claimed_bottleneck_the_workload_never_met(
    erin: User,
    baseline: Backend,
    candidate: Backend,
    sent: Any,
    django_capture_on_commit_callbacks: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    """A kv_memory claim on a load that never filled the cache stays inconclusive, but the same
    load measured afresh would not fill it either: the open pass rates still get their stage."""
    settings.OPTGATE_INTERLEAVED = True
    staged_policy_file(tmp_path, settings, "stages_per_evaluation: 5", "stages_per_evaluation: 1", stage_size="shipped")
    roomy = {"preemptions": 0.0, "kv_cache_usage_peak": 0.3, "kv_waiting_peak": 0.0}
    base = {SUMMARY: task_spec(GOOD, seed=1, engine=roomy), SQL: task_spec(GOOD, seed=2)}
    cand = {SUMMARY: task_spec(GOOD, speed=0.7, seed=1, engine=roomy), SQL: task_spec(GOOD, speed=0.7, seed=2)}
    ticket = evaluating_ticket(
        erin,
        baseline,
        candidate,
        store_run(baseline, base),
        store_run(candidate, cand),
        beneficiary_tasks=tasks(SUMMARY),
        risk_tasks=tasks(SQL),
        bottleneck="kv_memory",
    )
    first = (ticket.baseline_run_id, ticket.candidate_run_id)
    assert _check(ticket, django_capture_on_commit_callbacks) == "needs_evidence"
    decision = decision_current(ticket=ticket)
    assert decision is not None
    kv = next(m for m in decision.verdicts[SUMMARY]["metrics"] if m["metric"] == "bottleneck:kv_memory")
    assert kv["status"] == "inconclusive" and "not exercised" in kv["reason"]

    evaluation.evaluation_request(ticket=ReleaseTicket.objects.get(pk=ticket.pk), actor=erin)
    with django_capture_on_commit_callbacks(execute=True):
        again = evaluation.ticket_evaluate(ticket_id=ticket.pk)
    assert again is not None and (again.baseline_run_id, again.candidate_run_id) == first
    assert _last_stage(ticket).number == 2


def test_a_policy_with_the_sequential_section_off_judges_the_first_pair_once(
    erin: User,
    baseline: Backend,
    candidate: Backend,
    sent: Any,
    django_capture_on_commit_callbacks: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    staged_policy_file(tmp_path, settings, "sequential:\n  enabled: true", "sequential:\n  enabled: false")
    ticket = _ticket(erin, baseline, candidate)
    assert _check(ticket, django_capture_on_commit_callbacks) == "needs_evidence"  # SQL's fixed interval is too wide
    assert not EvaluationStage.objects.filter(ticket=ticket).exists()
    decision = decision_current(ticket=ticket)
    assert decision is not None and decision.stages == {}
    sql = next(m for m in decision.verdicts[SQL]["metrics"] if m["metric"] == "pass_rate")
    assert not sql["test"].startswith("group-sequential")


def test_the_ticket_page_and_the_api_show_the_stages(
    erin: User,
    baseline: Backend,
    candidate: Backend,
    sent: Any,
    django_capture_on_commit_callbacks: Any,
    client: Any,
    api_for: Any,
) -> None:
    ticket = _ticket(erin, baseline, candidate, sql_candidate=drop_passes(GOOD, 30))
    assert _check(ticket, django_capture_on_commit_callbacks) == "reject"
    client.force_login(erin)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert 'data-testid="stages"' in page and "1/5: 100 · -5.24 / ±4.88 → reject" in page
    assert "&lt;0.01%" in page  # O'Brien–Fleming spends almost nothing of alpha at the first look
    data = api_for(erin).get(f"/api/v1/tickets/{ticket.pk}/decision/").json()
    assert data["stages"]["count"] == 1 and data["stages"]["tasks"][SQL]["guardrails"]["pass_rate"]["looks"]


# --- the looks themselves, and the policy section ---------------------------------------------------


def obrien_fleming_default() -> Any:
    """The default policy with its staged design on O'Brien–Fleming spending over stages of the
    shipped size (the numbers below)."""
    policy = load_policy("default")
    sequential = replace(policy.sequential, alpha_spending="obrien_fleming", stage_size="shipped")
    return replace(policy, sequential=sequential)


def test_looks_pool_stages_by_sample_id_and_replan_a_short_stage_on_its_observed_information() -> None:
    policy = obrien_fleming_default()
    guardrail = staged_guardrails(policy.tasks[SQL])[0]
    same = [({f"s{k}-{i}": True for i in range(100)}, {f"s{k}-{i}": True for i in range(100)}) for k in range(4)]
    looks = task_looks(policy.sequential, guardrail, same, SHIPPED_SIZES)
    assert [look.outcome for look in looks.looks] == ["continue", "continue", "continue", "approve"]
    assert looks.design.info == (0.2, 0.4, 0.6, 0.8, 1.0)
    # A second stage that answered 50 samples: look 2 sits at 150 of 500 pairs, the later looks stay.
    short = [same[0], ({f"t{i}": True for i in range(50)}, {f"t{i}": True for i in range(50)})]
    replanned = task_looks(policy.sequential, guardrail, short, SHIPPED_SIZES)
    assert replanned.design.info == (0.2, 0.3, 0.6, 0.8, 1.0) and replanned.last.n == 150
    assert replanned.design.drift == pytest.approx(looks.design.drift)
    assert replanned.design.efficacy[0] == pytest.approx(looks.design.efficacy[0])
    # Samples answered on one side only do not pair.
    with pytest.raises(ValueError, match="stage 2 has no paired sample"):
        task_looks(policy.sequential, guardrail, [same[0], ({"a": True}, {"b": True})], SHIPPED_SIZES)


def test_observed_information_settles_a_seed_only_change_no_later_than_counting_pairs() -> None:
    """No discordant pair: the score's information grows 2–3 times as fast per pair as at the
    planned 5 % discordance, so the looks come further along and their boundaries are lower: a
    5-point margin settles a stage earlier, the 2- and 3-point ones at the same stage."""
    policy = obrien_fleming_default()
    observed = replace(policy.sequential, information="observed")
    same = [({f"s{k}-{i}": True for i in range(100)}, {f"s{k}-{i}": True for i in range(100)}) for k in range(5)]
    for task, pairs_stage, observed_stage in (("cs_summary", 3, 2), ("tool_calling", 3, 3), (SQL, 4, 4)):
        guardrail = staged_guardrails(policy.tasks[task])[0]
        by_pairs = [task_looks(policy.sequential, guardrail, same[:k], SHIPPED_SIZES).last.outcome for k in range(1, 6)]
        by_information = [
            task_looks(observed, guardrail, same[:k], SHIPPED_SIZES).last for k in range(1, observed_stage + 1)
        ]
        assert by_pairs.index("approve") + 1 == pairs_stage, task
        assert [look.outcome for look in by_information] == ["continue"] * (observed_stage - 1) + ["approve"], task
    # cs_summary's second stage: 200 pairs carry 200 / (0.05 · 0.95) of information, past the plan's
    # maximum (283 pairs at 5 % discordance): the last look, at the last grid level.
    summary = task_looks(observed, staged_guardrails(policy.tasks["cs_summary"])[0], same[:2], SHIPPED_SIZES)
    assert summary.last.information == 1.0 and summary.last.looks == 2 and not may_continue(summary)
    assert summary.last.alpha_spent == pytest.approx(0.025)


def test_with_observed_information_a_change_losing_many_answers_is_rejected_a_stage_later() -> None:
    """The price: 30 lost of 100 is discordance, which carries little information at −margin, so
    stage one sits at the first grid level (boundary −9.96) where counting pairs puts it at 0.2
    (−4.88): the score −5.24 rejects there, but only at stage two (−7.41 ≤ −6.99) here."""
    policy = obrien_fleming_default()
    guardrail = staged_guardrails(policy.tasks[SQL])[0]
    losing = [({f"s{k}-{i}": True for i in range(100)}, {f"s{k}-{i}": i >= 30 for i in range(100)}) for k in range(2)]
    assert task_looks(policy.sequential, guardrail, losing[:1], SHIPPED_SIZES).last.outcome == "reject"
    observed = replace(policy.sequential, information="observed")
    first, second = (task_looks(observed, guardrail, losing[:k], SHIPPED_SIZES).last for k in (1, 2))
    assert (first.outcome, first.information) == ("continue", 0.05)
    assert first.harm_bound == pytest.approx(-9.96, abs=0.01) and first.statistic == pytest.approx(-5.24, abs=0.01)
    assert second.outcome == "reject" and second.statistic <= second.harm_bound


@pytest.mark.parametrize(
    ("section", "path"),
    [
        ("looks: 9", "sequential.looks"),
        ("looks: 3\n  stages_per_evaluation: 4", "sequential.stages_per_evaluation"),
        ("alpha_spending: haybittle", "sequential.alpha_spending"),
        ("futility: sometimes", "sequential.futility"),
        ("power: 1.5", "sequential.power"),
        ("information: estimated", "sequential.information"),
        ("stages: 3", "sequential.stages"),
    ],
)
def test_a_bad_sequential_section_is_refused_naming_the_field(section: str, path: str) -> None:
    text = (POLICY_DIR / "default.yaml").read_text()
    start = text.index("sequential:\n")
    end = text.index("\n\n", start)
    with pytest.raises(PolicyError, match=path.replace(".", r"\.")):
        validate_policy_text(text[:start] + f"sequential:\n  {section}" + text[end:])


# --- the default policy's design: Pocock-type spending ---------------------------------------------


@pytest.fixture
def default_design(tmp_path: Path, settings: Any) -> None:
    settings.OPTGATE_GATE_POLICY = "default"


@pytest.fixture
def shipped_stages(tmp_path: Path, settings: Any) -> None:
    """default@6's design: Pocock-type spending over five stages of the shipped size."""
    staged_policy_file(tmp_path, settings, stage_size="shipped")


def test_under_shipped_size_stages_a_seed_only_change_settles_its_5_point_margin_at_look_2(
    shipped_stages: None,
    erin: User,
    baseline: Backend,
    candidate: Backend,
    sent: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    ticket = _ticket(erin, baseline, candidate)
    # Look 1 at n = 100: the summary's 2.29 and SQL's 1.43 are short of Pocock's 2.41.
    assert _check(ticket, django_capture_on_commit_callbacks) is None
    _answer(_last_stage(ticket))
    # Look 2 at n = 200: the summary's 3.24 settles; SQL's 2.02 does not, so only SQL goes on.
    assert _check(ticket, django_capture_on_commit_callbacks) is None
    assert (_last_stage(ticket).number, _last_stage(ticket).tasks) == (3, [SQL])
    _answer(_last_stage(ticket))
    # Look 3 at n = 300: SQL's 2.47 crosses 2.44 — a look sooner than O'Brien–Fleming (look 4).
    assert _check(ticket, django_capture_on_commit_callbacks) == "approve"
    decision = decision_current(ticket=ticket)
    assert decision is not None
    looks = decision.stages["tasks"][SQL]["guardrails"]["pass_rate"]["looks"]
    assert [look["outcome"] for look in looks] == ["continue", "continue", "approve"]
    # Pocock-type spending: nearly the same boundary at every look (2.41, 2.43, 2.44 here).
    assert all(2.40 < look["efficacy_bound"] < 2.45 for look in looks), looks


def test_under_the_default_design_ten_lost_sql_answers_in_a_hundred_are_rejected_at_look_1(
    default_design: None,
    erin: User,
    baseline: Backend,
    candidate: Backend,
    sent: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Pocock-type spending's first boundary at 100 of the 1,100 planned pairs is 2.69 (with stages
    # of the shipped size 2.41); O'Brien–Fleming's (4.88) would let this harm (score −2.80) run a stage more.
    ticket = _ticket(erin, baseline, candidate, sql_candidate=drop_passes(GOOD, 10))
    assert _check(ticket, django_capture_on_commit_callbacks) == "reject"
    assert not EvaluationStage.objects.filter(ticket=ticket).exists()
    decision = decision_current(ticket=ticket)
    assert decision is not None
    sql = next(m for m in decision.verdicts[SQL]["metrics"] if m["metric"] == "pass_rate")
    assert sql["status"] == "fail" and sql["details"]["look"] == 1 and sql["details"]["look_outcome"] == "reject"
    # Rejected because the loss is significant against half the margin, with its estimate beyond it.
    harm = sql["details"]["harm_statistic"]
    assert harm <= -sql["details"]["efficacy_bound"] and sql["effect"] < -0.02
    assert "worse than half the margin (score against a 1-point loss −" in sql["reason"], sql["reason"]


# --- stages sized from the power plan (sequential.stage_size: planned) ----------------------------


@pytest.fixture
def planned_stages(tmp_path: Path, settings: Any) -> None:
    """The default policy's Pocock-type design, its stages after the first sized from the plan
    (default@7's ``stage_size: planned``)."""
    staged_policy_file(tmp_path, settings)


def test_planned_stages_ask_each_task_for_its_own_block_and_settle_a_seed_only_change_at_look_2(
    planned_stages: None,
    erin: User,
    baseline: Backend,
    candidate: Backend,
    sent: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """At 5 % planned discordance the 2-point SQL plan needs 1,577 pairs (the pool holds 1,100: four
    stages of 250), the 5-point summary's 318 (four of 55). Shipped-size stages would take SQL to
    look 3 at 300 pairs and never past 500."""
    ticket = _ticket(erin, baseline, candidate)
    assert _check(ticket, django_capture_on_commit_callbacks) is None
    stage = _last_stage(ticket)
    assert (stage.number, stage.tasks) == (2, [SUMMARY, SQL])
    assert stage.candidate_run.load_profile["stage_sizes"] == {SUMMARY: 55, SQL: 250}
    assert stage.baseline_run.load_profile["stage_sizes"] == {SUMMARY: 55, SQL: 250}
    requested = LedgerEntry.objects.get(kind="ticket.stage_requested", subject_id=str(ticket.pk))
    assert requested.payload["stage_sizes"] == {SUMMARY: 55, SQL: 250}
    assert requested.payload["looks"][SQL]["pass_rate"]["outcome"] == "continue"
    # The worker draws exactly those blocks of held-out samples for the stage.
    profile = stage.candidate_run.load_profile
    assert len(pipeline.profile_samples(pipeline.get_suite(SQL), profile) or []) == 250

    _answer(stage)
    # Look 2: SQL at 350 pairs and the summary at 155, no discordant pair: both approve at once.
    assert _check(ticket, django_capture_on_commit_callbacks) == "approve"
    assert EvaluationStage.objects.filter(ticket=ticket).count() == 1
    decision = decision_current(ticket=ticket)
    assert decision is not None
    sql = decision.stages["tasks"][SQL]["guardrails"]["pass_rate"]
    assert sql["planned_sizes"] == [100, 350, 600, 850, 1100]
    assert [(look["n"], look["outcome"]) for look in sql["looks"]] == [(100, "continue"), (350, "approve")]
    summary = decision.stages["tasks"][SUMMARY]["guardrails"]["pass_rate"]
    assert summary["planned_sizes"] == [100, 155, 210, 265, 320]
    assert [(look["n"], look["outcome"]) for look in summary["looks"]] == [(100, "continue"), (155, "approve")]
    assert ledger_verify().ok


def test_under_planned_stages_a_needs_evidence_ticket_asks_for_the_planned_stage_and_settles_on_it(
    erin: User,
    baseline: Backend,
    candidate: Backend,
    sent: Any,
    django_capture_on_commit_callbacks: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    design = "stages_per_evaluation: 5\n  alpha_spending: pocock\n  futility: pocock\n  power: 0.8\n"
    one_stage = design.replace("per_evaluation: 5", "per_evaluation: 1")
    staged_policy_file(tmp_path, settings, design, one_stage)
    ticket = _ticket(erin, baseline, candidate)
    assert _check(ticket, django_capture_on_commit_callbacks) == "needs_evidence"
    decision = decision_current(ticket=ticket)
    assert decision is not None
    # Look 1 would continue: the first stage's fixed judgement stands (decides()), still open.
    sql = next(m for m in decision.verdicts[SQL]["metrics"] if m["metric"] == "pass_rate")
    assert sql["n"] == 100 and sql["status"] == "inconclusive"

    evaluation.evaluation_request(ticket=ReleaseTicket.objects.get(pk=ticket.pk), actor=erin)
    with django_capture_on_commit_callbacks(execute=True):
        evaluation.ticket_evaluate(ticket_id=ticket.pk)
    stage = _last_stage(ticket)
    assert stage.number == 2 and stage.candidate_run.load_profile["stage_sizes"] == {SUMMARY: 55, SQL: 250}
    _answer(stage)
    assert _check(ticket, django_capture_on_commit_callbacks) == "approve"
    settled = decision_current(ticket=ticket)
    assert settled is not None
    sql = next(m for m in settled.verdicts[SQL]["metrics"] if m["metric"] == "pass_rate")
    assert sql["status"] == "pass" and sql["n"] == 350 and sql["details"]["look"] == 2


def test_planned_stages_need_the_pairs_information() -> None:
    text = (POLICY_DIR / "default.yaml").read_text()
    assert validate_policy_text(text).sequential.stage_size == "planned"
    with pytest.raises(PolicyError, match=r"sequential\.stage_size.*information: pairs"):
        validate_policy_text(
            text.replace("  stage_size: planned\n", "  stage_size: planned\n  information: observed\n")
        )
    with pytest.raises(PolicyError, match=r"sequential\.stage_size: must be one of shipped, planned"):
        validate_policy_text(text.replace("  stage_size: planned\n", "  stage_size: huge\n"))


def test_a_planned_look_that_continues_names_the_next_planned_stage() -> None:
    """SQL with 3 losses and 3 gains per stage: look 2 at 350 pairs (score 1.81 against 2.41)
    continues, and the verdict asks for the 250 samples of stage 3, not the shipped 100."""
    policy = load_policy("default")
    rule = policy.sequential
    assert rule.stage_size == "planned"
    guardrails = staged_guardrails(policy.tasks[SQL])
    sizes = task_stage_sizes(rule, guardrails, shipped=100, pool=1100, discordance=0.05)
    assert sizes == (100, 350, 600, 850, 1100)

    def stage(k: int, n: int) -> tuple[dict[str, bool], dict[str, bool]]:
        base = {f"s{k}-{i}": i not in (3, 4, 5) for i in range(n)}
        return base, {f"s{k}-{i}": i not in (0, 1, 2) for i in range(n)}

    looks = task_looks(rule, guardrails[0], [stage(1, 100), stage(2, 250)], sizes)
    assert [(look.n, look.outcome) for look in looks.looks] == [(100, "continue"), (350, "continue")]
    assert looks.last.statistic == pytest.approx(1.81, abs=0.01) and looks.last.efficacy_bound == pytest.approx(
        2.41, abs=0.01
    )
    assert looks.design.info == pytest.approx([n / 1100 for n in sizes]) and looks.stage_size == 250
    fixed = MetricVerdict(
        task=SQL,
        metric="pass_rate",
        kind="guardrail",
        status="inconclusive",
        n=100,
        baseline=0.97,
        candidate=0.97,
        effect=0.0,
        interval=(-0.03, 0.03),
        test="the fixed design's",
        reason="the fixed design's",
    )
    verdict = staged_verdict(fixed, looks, budget_spent=True)
    assert verdict.samples_needed == 250 and "the next stage would add 250 samples" in verdict.reason
    # Shipped-size stages would have stopped this task at 500 pairs: its fifth look is the last.
    shipped_rule = replace(rule, stage_size="shipped")
    shipped = task_stage_sizes(shipped_rule, guardrails, shipped=100, pool=1100, discordance=0.05)
    assert shipped == (100, 200, 300, 400, 500)


def _first_pair(ticket: ReleaseTicket) -> tuple[int, int]:
    assert ticket.baseline_run_id is not None and ticket.candidate_run_id is not None
    return ticket.baseline_run_id, ticket.candidate_run_id


def _from_answers(metric: str) -> bool:
    return metric in METRIC_SPECS and is_quality(metric)


def _answers(candidate_sql: list[bool]) -> dict[str, tuple[dict[str, bool], dict[str, bool]]]:
    """Both tasks' answers as the worker hands them over before the load: pass/fail by sample id."""
    base = {task: {f"{task}-{i:04d}": ok for i, ok in enumerate(GOOD)} for task in (SUMMARY, SQL)}
    cand = {**base, SQL: {f"{SQL}-{i:04d}": ok for i, ok in enumerate(candidate_sql)}}
    return {task: (base[task], cand[task]) for task in (SUMMARY, SQL)}


def test_answers_that_already_reject_the_candidate_skip_the_load_and_the_decision_says_what_was_not_measured(
    erin: User, baseline: Backend, candidate: Backend, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # The harmful change above: SQL (critical under the policy) rejects at look 1 of the answers.
    harmful = drop_passes(GOOD, 30)
    ticket = _ticket(erin, baseline, candidate, sql_candidate=harmful)
    reason = evaluation.load_not_needed(_first_pair(ticket)[1], _answers(harmful))
    assert reason is not None and f"{SQL}'s pass_rate" in reason and "look 1" in reason and SUMMARY not in reason
    skipped = LedgerEntry.objects.get(kind="ticket.load_skipped", subject_id=str(ticket.pk))
    assert skipped.payload["candidate_run"] == ticket.candidate_run_id and skipped.payload["reason"] == reason
    assert skipped.payload["looks"][SQL]["pass_rate"]["outcome"] == "reject"
    assert skipped.payload["looks"][SUMMARY]["pass_rate"]["outcome"] == "continue"

    # The runs as the worker then stores them: answers, no load.
    TaskResult.objects.filter(run__in=[ticket.baseline_run_id, ticket.candidate_run_id]).update(
        performance={pipeline.LOAD_SKIPPED: reason}, requests=[], engine_evidence={}
    )
    assert _check(ticket, django_capture_on_commit_callbacks) == "reject"
    decision = decision_current(ticket=ticket)
    assert decision is not None
    sql = next(m for m in decision.verdicts[SQL]["metrics"] if m["metric"] == "pass_rate")
    assert sql["status"] == "fail" and sql["details"]["look"] == 1
    answers_only = [m for v in decision.verdicts.values() for m in v["metrics"] if _from_answers(m["metric"])]
    timing = [m for v in decision.verdicts.values() for m in v["metrics"] if not _from_answers(m["metric"])]
    assert {m["metric"] for m in answers_only} >= {"pass_rate", "score"}
    assert all(m["test"] != LOAD_NOT_MEASURED for m in answers_only)
    assert timing, "the policy names timing metrics for both tasks"
    for metric in timing:
        assert metric["status"] == "inconclusive" and metric["test"] == LOAD_NOT_MEASURED, metric
        assert metric["baseline"] is None and reason in metric["reason"], metric
    # The beneficiary's answers held, so it is open on its timing, not failing; the ticket rejects on SQL alone.
    assert decision.verdicts[SUMMARY]["status"] == "inconclusive"
    assert any(r.startswith(f"Veto on {SQL}") for r in decision.reasons), decision.reasons
    # One line for the task the skipped load left open (the failing task's open checks do not
    # matter), not one per check; none of them is a finding.
    open_lines = [r for r in decision.reasons if r.startswith("Open on ")]
    assert [r.split(":")[0] for r in open_lines] == [f"Open on {SUMMARY}"], decision.reasons
    assert all(reason in line for line in open_lines)
    assert not any(LOAD_NOT_MEASURED in str(r) or "not measured" in r for r in decision.reasons if r not in open_lines)
    findings = blocking_findings(decision.verdicts)
    assert findings and all("not measured" not in f["text"] for f in findings)
    # A task's row shows the checks with numbers; one open only on unmeasured checks says why instead.
    assert [m["metric"] for m in deciding_metrics(decision.verdicts[SQL])] == ["pass_rate"]
    assert deciding_metrics(decision.verdicts[SUMMARY]) == []
    rows = {row["task"]: row for row in decision_summary(decision)["tasks"]}
    why = reason.removeprefix("not measured: ")
    # Said once, on the task it leaves open: SQL fails whatever its timing.
    assert (rows[SUMMARY]["not_measured"], rows[SQL]["not_measured"]) == (why, "")
    assert numbers_text(rows[SUMMARY]["numbers"], rows[SUMMARY]["not_measured"]) == f"timing not measured: {why}"
    assert ledger_verify().ok


def test_answers_that_leave_the_outcome_open_keep_the_load(erin: User, baseline: Backend, candidate: Backend) -> None:
    ticket = _ticket(erin, baseline, candidate)
    assert evaluation.load_not_needed(_first_pair(ticket)[1], _answers(GOOD)) is None
    # A few lost answers on SQL: its look continues, more evidence could still settle it either way.
    assert evaluation.load_not_needed(_first_pair(ticket)[1], _answers(drop_passes(GOOD, 3))) is None
    # A run that is not an evaluating ticket's first pair (here the baseline's) is never asked about.
    assert evaluation.load_not_needed(_first_pair(ticket)[0], _answers(drop_passes(GOOD, 30))) is None
    assert not LedgerEntry.objects.filter(kind="ticket.load_skipped").exists()


@pytest.mark.parametrize("case", ["answers reject", "first load rejects", "open"])
def test_the_worker_measures_every_tasks_answers_first_and_each_load_only_while_the_outcome_is_open(
    erin: User, baseline: Backend, candidate: Backend, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """The worker's own path (``run_execute_task`` → ``pair_execute``), engines and lm-eval stood in
    for: SQL's answers lost (rejected before any load), the beneficiary's load slower than the
    baseline's (rejected before SQL's load), or a faster candidate answering as the baseline does."""
    events: list[tuple[str, str]] = []

    def quality(suite: Any, *, base_url: str, model: str, concurrency: int, workdir: Any, samples: Any) -> Any:
        events.append(("quality", suite.slug))
        shipped = samples or suite.load_samples()
        lost = case == "answers reject" and model == CANDIDATE and suite.slug == SQL
        right = drop_passes([True] * len(shipped), 30) if lost else [True] * len(shipped)
        pairs = zip(shipped, right, strict=True)
        return [pipeline.SampleOutcome(s["id"], s["prompt"], "t", "o", ok, 1.0, "", "") for s, ok in pairs]

    def load(base: Any, cand: Any, **kwargs: Any) -> None:
        events.append(("load", cand.task))
        kwargs["on_phase"]("load (interleaved)")
        speed = 1.5 if case == "first load rejects" else 0.7
        base.requests, base.performance = timed_requests(100, 1.0, seed=1)
        cand.requests, cand.performance = timed_requests(100, speed, seed=1)

    monkeypatch.setattr(run_services, "_open_engine", lambda run, attempt, warm_engine=None: _Engine(run.pair_side))
    monkeypatch.setattr(pipeline, "quality_phase", quality)
    monkeypatch.setattr(pipeline, "pair_load", load)
    shown: list[int] = []
    progress = run_services._progress

    def record(run: EvaluationRun, phase: str, pct: int) -> None:
        shown.append(pct)
        progress(run, phase, pct)

    monkeypatch.setattr(run_services, "_progress", record)
    base_run, cand_run = run_services.pair_request(baseline=baseline, candidate=candidate, tasks=[SUMMARY, SQL])
    evaluating_ticket(
        erin, baseline, candidate, base_run, cand_run, beneficiary_tasks=tasks(SUMMARY), risk_tasks=tasks(SQL)
    )

    worker_services.run_execute_task(run_id=cand_run.pk, nodename="w1")

    cand_run.refresh_from_db()
    assert cand_run.status == RunStatus.SUCCEEDED
    # Every task's answers come before any load.
    assert events[:4] == [("quality", SUMMARY), ("quality", SUMMARY), ("quality", SQL), ("quality", SQL)]
    results = {(r.run_id, r.task): r for r in TaskResult.objects.filter(run__in=[base_run, cand_run])}
    assert len(results) == 4 and SampleRecord.objects.filter(run=cand_run, task=SQL).count() == 100
    assert shown == sorted(shown) and shown[-1] < 100, shown  # the answers first, then the loads: it never goes back
    loads = [task for kind, task in events if kind == "load"]
    skipped = {task: r.performance[pipeline.LOAD_SKIPPED] for (_, task), r in results.items() if not r.requests}
    if case == "answers reject":
        assert loads == [] and set(skipped) == {SUMMARY, SQL} and "look 1" in skipped[SQL]
        assert all(set(r.performance) == {pipeline.LOAD_SKIPPED} for r in results.values())
    elif case == "first load rejects":
        assert loads == [SUMMARY] and set(skipped) == {SQL}
        assert f"rejected the candidate on the load of {SUMMARY}," in skipped[SQL]
        assert all(len(results[run.pk, SUMMARY].requests) == 100 for run in (base_run, cand_run))
    else:
        assert loads == [SUMMARY, SQL] and not skipped
    entries = LedgerEntry.objects.filter(kind="ticket.load_skipped")
    assert entries.count() == (0 if case == "open" else 1)


def _measuring(backend: Backend, specs: dict[str, dict[str, Any]]) -> EvaluationRun:
    """A run still measuring: ``specs``' tasks stored (answers and load), the others to come."""
    return store_run(backend, specs, status=RunStatus.RUNNING)


def _finish(run: EvaluationRun, task: str, passed: list[bool], reason: str) -> None:
    """The worker's last steps: ``task`` stored with its answers and the skipped load, the run done."""
    TaskResult.objects.create(run=run, task=task, suite_version="1", performance={pipeline.LOAD_SKIPPED: reason})
    SampleRecord.objects.bulk_create(
        SampleRecord(run=run, task=task, sample_id=f"{task}-{i:04d}", passed=ok, score=float(ok))
        for i, ok in enumerate(passed)
    )
    EvaluationRun.objects.filter(pk=run.pk).update(tasks=[*run.tasks, task], status=RunStatus.SUCCEEDED)


def test_a_load_that_already_rejects_the_candidate_skips_the_loads_still_to_come_and_the_decision_rejects_on_it(
    erin: User,
    baseline: Backend,
    candidate: Backend,
    sent: Any,
    django_capture_on_commit_callbacks: Any,
    client: Any,
) -> None:
    # The beneficiary measured first, the candidate half again as slow: its promised gain failed.
    base_run = _measuring(baseline, {SUMMARY: task_spec(GOOD, seed=1)})
    cand_run = _measuring(candidate, {SUMMARY: task_spec(GOOD, speed=1.5, seed=1)})
    ticket = evaluating_ticket(
        erin, baseline, candidate, base_run, cand_run, beneficiary_tasks=tasks(SUMMARY), risk_tasks=tasks(SQL)
    )
    reason = evaluation.load_rest_not_needed(cand_run.pk, [SUMMARY])
    assert reason is not None and f"rejected the candidate on the load of {SUMMARY}," in reason, reason
    assert reason.startswith(f"not measured: {SUMMARY}'s ") and "output_throughput" in reason, reason
    # A worker that retries the pair asks again: the same answer, one ledger entry.
    assert evaluation.load_rest_not_needed(cand_run.pk, [SUMMARY]) == reason
    (skipped,) = LedgerEntry.objects.filter(kind="ticket.load_skipped", subject_id=str(ticket.pk))
    assert skipped.payload["candidate_run"] == cand_run.pk and skipped.payload["reason"] == reason
    assert skipped.payload["measured"] == [SUMMARY] and skipped.payload["rejected_by"]

    # SQL's answers stored, its load not sent: the decision rejects on the beneficiary's failure,
    # the finding the check named, and says what was not measured on SQL.
    for run in (base_run, cand_run):
        _finish(run, SQL, GOOD, reason)
    assert _check(ticket, django_capture_on_commit_callbacks) == "reject"
    decision = decision_current(ticket=ticket)
    assert decision is not None
    assert decision.verdicts[SUMMARY]["status"] == "fail"
    failing = {f"{SUMMARY}'s {m['metric']}" for m in decision.verdicts[SUMMARY]["metrics"] if m["status"] == "fail"}
    assert set(skipped.payload["rejected_by"]) <= failing, (skipped.payload, failing)
    assert any(r.startswith(f"Beneficiary task {SUMMARY}") for r in decision.reasons), decision.reasons
    timing = [m for m in decision.verdicts[SQL]["metrics"] if not _from_answers(m["metric"])]
    assert timing and all(m["test"] == LOAD_NOT_MEASURED and reason in m["reason"] for m in timing)
    assert [r.split(":")[0] for r in decision.reasons if r.startswith("Open on ")] == [f"Open on {SQL}"]
    assert ledger_verify().ok

    # The first screen, the CLI and the demo's printout say it in the task's row: SQL's open pass
    # rate with its numbers, then why its timing was not measured, never a timing check's "— → —".
    rows = {row["task"]: row for row in decision_summary(decision)["tasks"]}
    why = reason.removeprefix("not measured: ")
    assert [n["metric"] for n in rows[SQL]["numbers"]] == ["pass_rate"]
    assert (rows[SQL]["not_measured"], rows[SUMMARY]["not_measured"]) == (why, "")
    assert cli_numbers(rows[SQL]).endswith(f"; timing not measured: {why}")
    assert numbers_text(rows[SQL]["numbers"], why) == cli_numbers(rows[SQL])
    client.force_login(erin)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    row = page.split(f'<tr data-task="{SQL}">', 1)[1].split("</tr>", 1)[0]
    assert 'data-testid="not-measured"' in row and "rejected the candidate on the load of" in row, row
    assert "— → —" not in row, row


def test_a_load_that_leaves_the_outcome_open_keeps_the_loads_still_to_come(
    erin: User, baseline: Backend, candidate: Backend
) -> None:
    # The beneficiary faster as promised: the risk task's load may still restrict or reject.
    base_run = _measuring(baseline, {SUMMARY: task_spec(GOOD, seed=1), SQL: task_spec(GOOD, seed=2)})
    cand_run = _measuring(candidate, {SUMMARY: task_spec(GOOD, speed=0.7, seed=1), SQL: task_spec(GOOD, seed=2)})
    evaluating_ticket(
        erin, baseline, candidate, base_run, cand_run, beneficiary_tasks=tasks(SUMMARY), risk_tasks=tasks(SQL)
    )
    assert evaluation.load_rest_not_needed(cand_run.pk, [SUMMARY]) is None
    # A risk task three times slower fails its latency guardrails, which restricts the ticket to the
    # other tasks: it rejects nothing alone, so the beneficiary's load still runs.
    slower = _measuring(candidate, {SQL: task_spec(GOOD, speed=3.0, seed=2)})
    evaluating_ticket(
        erin, baseline, candidate, base_run, slower, beneficiary_tasks=tasks(SUMMARY), risk_tasks=tasks(SQL)
    )
    assert evaluation.load_rest_not_needed(slower.pk, [SQL]) is None
    # A run that is not an evaluating ticket's first pair (the baseline's) is never asked about.
    assert evaluation.load_rest_not_needed(base_run.pk, [SUMMARY]) is None
    assert not LedgerEntry.objects.filter(kind="ticket.load_skipped").exists()
    # The same slower SQL on a ticket that promises SQL the gain: its broken guardrail rejects.
    promised = _measuring(candidate, {SQL: task_spec(GOOD, speed=3.0, seed=2)})
    evaluating_ticket(
        erin, baseline, candidate, base_run, promised, beneficiary_tasks=tasks(SQL), risk_tasks=tasks(SUMMARY)
    )
    reason = evaluation.load_rest_not_needed(promised.pk, [SQL])
    assert reason is not None and f"{SQL}'s " in reason and f"on the load of {SQL}," in reason, reason
