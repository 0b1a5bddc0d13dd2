"""A failure of the candidate is a failure, not an error; an error names its root cause.

* a request the engine refuses (its own configuration: context length, validation) is a failed
  sample of that task, counted in its pass rate — lm-eval runs against a real HTTP server here;
* one task that breaks does not stop the others being measured and judged;
* a task that fails is not held open by metrics it could not measure (restrict, not needs evidence);
* an engine that cannot start is an ``error`` outcome carrying the root cause, not needs evidence.

The real-engine versions of these scenarios are in ``tests/test_measurement_engine.py``.
"""

from __future__ import annotations

import json
import statistics
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from backends.models import Backend
from core.errors import InvalidInput
from evaluators import pipeline, services
from evaluators.lm_eval_client import error_message, parse_refusal, refusal_answer
from evaluators.models import RunErrorKind, RunStatus, TaskResult
from evaluators.suites import get_suite
from gates.models import DecisionOutcome, ReleaseTicket, TicketStatus
from gates.selectors.evidence import run_task_evidence
from gates.services import decisions, signoff
from ledger.models import LedgerEntry
from tests.factories import drop_passes, evaluating_ticket, outcomes, store_run, task_spec, tasks

ROOT_CAUSE = "NotImplementedError: FP8 KV cache on CPU needs AVX-512"
CONTEXT_MESSAGE = "This model's maximum context length is 512 tokens. However, you requested 790 tokens."


# --- refused requests are failed samples --------------------------------------------------------


class _FakeOpenAI(BaseHTTPRequestHandler):
    """Chat completions that refuse prompts longer than ``limit`` characters the way vLLM does."""

    limit = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        if len(prompt) > self.limit:
            status = 400
            payload: dict[str, Any] = {"error": {"message": CONTEXT_MESSAGE, "type": "BadRequestError", "code": 400}}
        else:
            status = 200
            payload = {
                "id": "x",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "I cannot help."}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4},
            }
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[tuple[str, int]]:
    prompts = [sample["prompt"] for sample in get_suite("compliance_qa").load_samples()]
    limit = int(statistics.median(len(p) for p in prompts))
    handler = type("Handler", (_FakeOpenAI,), {"limit": limit})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", limit
    finally:
        server.shutdown()
        server.server_close()


def test_requests_the_engine_refuses_are_failed_samples_with_its_message(
    refusing_server: tuple[str, int], tmp_path: Path
) -> None:
    base_url, limit = refusing_server
    suite = get_suite("compliance_qa")
    outcomes_ = pipeline.quality_phase(suite, base_url=base_url, model="m", concurrency=4, workdir=tmp_path)

    assert len(outcomes_) == len(suite.load_samples())  # lm-eval did not stop at the first refusal
    refused = [o for o in outcomes_ if o.failure_reason == pipeline.REQUEST_REFUSED]
    answered = [o for o in outcomes_ if o.failure_reason != pipeline.REQUEST_REFUSED]
    assert {o.sample_id for o in refused} == {o.sample_id for o in outcomes_ if len(o.prompt) > limit}
    assert refused and answered
    assert all(not o.passed and o.score == 0 and o.output == "" for o in refused)
    assert all(o.detail == f"HTTP 400: {CONTEXT_MESSAGE}" for o in refused)
    # The answered ones went through the suite's scorer as usual.
    assert all(o.output == "I cannot help." for o in answered)
    summary = pipeline.quality_summary(outcomes_)
    assert summary["failure_reasons"][pipeline.REQUEST_REFUSED] == len(refused)
    assert summary["pass_rate"] <= len(answered) / len(outcomes_)


def test_refusal_markers_and_error_bodies() -> None:
    answer = refusal_answer(400, json.dumps({"object": "error", "message": "max_tokens must be at least 1"}))
    assert parse_refusal(answer) == "HTTP 400: max_tokens must be at least 1"
    assert parse_refusal("HTTP 400: an answer that merely looks like one") is None
    assert error_message("<html>bad gateway</html>") == "<html>bad gateway</html>"


# --- one task breaking does not stop the others -------------------------------------------------


class _Engine:
    base_url, model, pid, pgid, log_path = "http://127.0.0.1:9", "m", None, None, None

    def is_alive(self) -> bool:
        return True

    def stop(self) -> None:
        pass

    def last_log_lines(self, n: int = 30) -> list[str]:
        return []


def test_a_task_that_breaks_is_stored_with_its_error_and_the_others_are_measured(
    baseline: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    def evaluate(slug: str, **kwargs: Any) -> pipeline.TaskOutcome:
        if slug == "knowledge_qa":
            raise RuntimeError("lm-eval lost its connection")
        sample = pipeline.SampleOutcome("s1", "p", "t", "o", True, 1.0, "", "")
        return pipeline.TaskOutcome(task=slug, suite_version="1", samples=[sample], quality={"n": 1})

    monkeypatch.setattr(services, "_open_engine", lambda run, attempt, warm_engine=None: _Engine())
    monkeypatch.setattr(services.pipeline, "evaluate_task", evaluate)
    run, _ = services.run_request(backend=baseline, tasks=["knowledge_qa", "compliance_qa"])
    run = services.run_execute(run_id=run.pk)

    assert run.status == RunStatus.SUCCEEDED, run.error
    broken = TaskResult.objects.get(run=run, task="knowledge_qa")
    assert broken.error == "RuntimeError: lm-eval lost its connection"
    assert TaskResult.objects.get(run=run, task="compliance_qa").error == ""
    assert run_task_evidence(run, "knowledge_qa").error == broken.error
    assert run_task_evidence(run, "compliance_qa").passed == {"s1": True}
    entry = LedgerEntry.objects.get(kind="evaluation.succeeded", subject_id=str(run.pk))
    assert entry.payload["task_errors"] == {"knowledge_qa": broken.error}
    # A run with a broken task is measured again rather than reused.
    again, reused = services.run_request(backend=baseline, tasks=["compliance_qa"])
    assert not reused and again.pk != run.pk


def test_a_run_whose_every_task_breaks_is_an_error(baseline: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    def evaluate(slug: str, **kwargs: Any) -> pipeline.TaskOutcome:
        raise ValueError(f"no samples for {slug}")

    monkeypatch.setattr(services, "_open_engine", lambda run, attempt, warm_engine=None: _Engine())
    monkeypatch.setattr(services.pipeline, "evaluate_task", evaluate)
    run, _ = services.run_request(backend=baseline, tasks=["knowledge_qa"])
    run = services.run_execute(run_id=run.pk)
    assert run.status == RunStatus.ERROR and run.error_kind == RunErrorKind.OTHER
    assert "knowledge_qa: ValueError: no samples for knowledge_qa" in run.error


# --- the judge: failures settle, start failures are errors --------------------------------------


def _refused(run: Any, task: str) -> None:
    """Every load request of ``task`` refused, as vLLM answers a prompt beyond max_model_len."""
    result = TaskResult.objects.get(run=run, task=task)
    result.requests = [
        {**r, "ttft_s": None, "tpot_s": None, "e2e_s": None, "itl_s": [], "error": "HTTP 400: too long"}
        for r in result.requests
    ]
    result.save()


def test_a_risk_task_the_candidate_refuses_fails_and_the_task_that_fits_is_still_judged(
    erin: User, baseline: Backend, candidate: Backend
) -> None:
    good = outcomes(200, 0.9, 1)
    base = store_run(baseline, {"cs_summary": task_spec(good, seed=1), "knowledge_qa": task_spec(good, seed=2)})
    cand = store_run(
        candidate,
        {"cs_summary": task_spec(good, speed=0.7, seed=1), "knowledge_qa": task_spec([False] * 200, seed=2)},
    )
    _refused(cand, "knowledge_qa")
    ticket = evaluating_ticket(
        erin, baseline, candidate, base, cand, beneficiary_tasks=tasks("cs_summary"), risk_tasks=tasks("knowledge_qa")
    )
    decision = decisions.decision_make(ticket=ticket)

    assert decision.outcome == DecisionOutcome.RESTRICT, decision.reasons
    assert decision.allowed_tasks == ["cs_summary"]
    assert decision.verdicts["knowledge_qa"]["status"] == "fail"
    assert decision.verdicts["cs_summary"]["status"] == "pass"
    # The latency it could not measure on the refused task is not an open question.
    assert not any(reason.startswith("Inconclusive") for reason in decision.reasons)


def test_a_failing_beneficiary_task_rejects_even_with_unmeasured_latency(
    erin: User, baseline: Backend, candidate: Backend
) -> None:
    good = outcomes(200, 0.9, 1)
    base = store_run(baseline, {"knowledge_qa": task_spec(good, seed=2), "cs_summary": task_spec(good, seed=1)})
    cand = store_run(
        candidate,
        {"knowledge_qa": task_spec(drop_passes(good, 60), seed=2), "cs_summary": task_spec(good, seed=1)},
    )
    _refused(cand, "knowledge_qa")
    ticket = evaluating_ticket(
        erin, baseline, candidate, base, cand, beneficiary_tasks=tasks("knowledge_qa"), risk_tasks=tasks("cs_summary")
    )
    decision = decisions.decision_make(ticket=ticket)
    assert decision.outcome == DecisionOutcome.REJECT, decision.reasons


@pytest.fixture
def unstartable(erin: User, baseline: Backend, candidate: Backend) -> ReleaseTicket:
    good = outcomes(200, 0.9, 3)
    base = store_run(baseline, {"cs_summary": task_spec(good), "knowledge_qa": task_spec(good)})
    crashed = store_run(
        candidate,
        {},
        status=RunStatus.ERROR,
        error=f"engine exited with code 1 during start-up: {ROOT_CAUSE}\n--- last 30 log lines of engine.log ---\n...",
        error_kind=RunErrorKind.START_FAILED,
    )
    return evaluating_ticket(
        erin,
        baseline,
        candidate,
        base,
        crashed,
        beneficiary_tasks=tasks("cs_summary"),
        risk_tasks=tasks("knowledge_qa"),
    )


def test_an_engine_that_cannot_start_is_an_error_naming_the_root_cause(unstartable: ReleaseTicket) -> None:
    decision = decisions.decision_make(ticket=unstartable)

    assert decision.outcome == DecisionOutcome.ERROR
    assert ROOT_CAUSE in decision.reasons[1]
    assert sum(ROOT_CAUSE in reason for reason in decision.reasons) == 1  # once, not once per task
    assert "log lines" not in decision.reasons[1]  # the headline, not the whole log tail
    assert {v["status"] for v in decision.verdicts.values()} == {"error"}
    assert decision.samples_needed == {}
    unstartable.refresh_from_db()
    assert unstartable.status == TicketStatus.EVALUATED  # waiting for reviewers, not for more evidence
    entry = LedgerEntry.objects.filter(kind="gate.decision", subject_id=str(unstartable.pk)).get()
    assert entry.payload["outcome"] == "error"


def test_an_error_decision_can_only_be_signed_as_reject_and_that_is_no_override(
    unstartable: ReleaseTicket, rita: User
) -> None:
    decisions.decision_make(ticket=unstartable)
    with pytest.raises(InvalidInput, match="the only sign-off is reject"):
        signoff.signoff_record(ticket=unstartable, actor=rita, verdict="approve", reason_code="evidence_sufficient")
    result = signoff.signoff_record(ticket=unstartable, actor=rita, verdict="reject", reason_code="evidence_sufficient")
    assert not result.sign_off.override


def test_a_transient_run_error_still_asks_for_evidence(erin: User, baseline: Backend, candidate: Backend) -> None:
    good = outcomes(200, 0.9, 3)
    base = store_run(baseline, {"cs_summary": task_spec(good)})
    crashed = store_run(candidate, {}, status=RunStatus.ERROR, error="engine not healthy after 600s")
    ticket = evaluating_ticket(
        erin, baseline, candidate, base, crashed, beneficiary_tasks=tasks("cs_summary"), risk_tasks=[]
    )
    assert decisions.decision_make(ticket=ticket).outcome == DecisionOutcome.NEEDS_EVIDENCE
