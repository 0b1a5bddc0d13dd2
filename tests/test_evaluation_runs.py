"""Evaluation run bookkeeping: requests, reuse, claiming, cancellation and retries (no engine)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from backends.models import Backend
from core.errors import DomainError, InvalidInput
from evaluators import services
from evaluators.models import EvaluationAttempt, EvaluationRun, RunStatus
from ledger.models import LedgerEntry

pytestmark = [pytest.mark.database, pytest.mark.django_db]


def test_it_requests_a_run_with_suite_versions_and_a_ledger_entry(baseline: Backend) -> None:
    run, reused = services.run_request(backend=baseline, tasks=["knowledge_qa", "compliance_qa"])

    assert not reused
    assert run.status == RunStatus.QUEUED
    assert run.suite_versions == {"knowledge_qa": "1", "compliance_qa": "1"}
    assert run.engine_version == baseline.engine_version
    assert run.load_profile["concurrency"] >= 1
    entry = LedgerEntry.objects.get(kind="evaluation.requested")
    assert entry.payload["fingerprint"] == baseline.fingerprint


def test_it_reuses_a_matching_run_and_not_a_different_one(baseline: Backend, candidate: Backend) -> None:
    first, _ = services.run_request(backend=baseline, tasks=["knowledge_qa"])
    again, reused = services.run_request(backend=baseline, tasks=["knowledge_qa"])
    assert reused and again.pk == first.pk

    other_tasks, reused = services.run_request(backend=baseline, tasks=["cs_summary"])
    assert not reused
    other_backend, reused = services.run_request(backend=candidate, tasks=["knowledge_qa"])
    assert not reused
    other_profile, reused = services.run_request(
        backend=baseline, tasks=["knowledge_qa"], load_profile={"concurrency": 8}
    )
    assert not reused
    assert len({first.pk, other_tasks.pk, other_backend.pk, other_profile.pk}) == 4


def test_it_reuses_a_run_that_covers_more_tasks(baseline: Backend) -> None:
    fleet, _ = services.run_request(backend=baseline, tasks=["knowledge_qa", "cs_summary", "code_assistant"])
    subset, reused = services.run_request(backend=baseline, tasks=["code_assistant", "knowledge_qa"])
    assert reused and subset.pk == fleet.pk
    _, reused = services.run_request(backend=baseline, tasks=["code_assistant", "tool_calling"])
    assert not reused


def test_it_never_reuses_a_failed_run(baseline: Backend) -> None:
    failed, _ = services.run_request(backend=baseline, tasks=["knowledge_qa"])
    EvaluationRun.objects.filter(pk=failed.pk).update(status=RunStatus.ERROR)
    fresh, reused = services.run_request(backend=baseline, tasks=["knowledge_qa"])
    assert not reused and fresh.pk != failed.pk


def test_it_refuses_unknown_task_types(baseline: Backend) -> None:
    with pytest.raises(InvalidInput) as caught:
        services.run_request(backend=baseline, tasks=["poetry"])
    assert "tasks" in caught.value.errors


def test_only_one_caller_claims_a_queued_run(baseline: Backend) -> None:
    run, _ = services.run_request(backend=baseline, tasks=["knowledge_qa"])
    first = services._claim(run.pk, "worker-a")
    second = services._claim(run.pk, "worker-b")
    assert first is not None and second is None
    assert EvaluationAttempt.objects.filter(run=run).count() == 1
    assert EvaluationRun.objects.get(pk=run.pk).status == RunStatus.RUNNING


def test_executing_a_finished_run_again_does_nothing(baseline: Backend) -> None:
    run, _ = services.run_request(backend=baseline, tasks=["knowledge_qa"])
    EvaluationRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    again = services.run_execute(run_id=run.pk)
    assert again.status == RunStatus.SUCCEEDED
    assert not EvaluationAttempt.objects.filter(run=run).exists()


def test_cancelling_a_queued_run_ends_it_at_once(baseline: Backend) -> None:
    run, _ = services.run_request(backend=baseline, tasks=["knowledge_qa"])
    services.run_cancel(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.finished_at is not None
    assert services.run_execute(run_id=run.pk).status == RunStatus.CANCELLED
    assert LedgerEntry.objects.filter(kind="evaluation.cancelled").count() == 1


def test_a_failed_run_can_be_retried_but_a_succeeded_one_cannot(baseline: Backend) -> None:
    run, _ = services.run_request(backend=baseline, tasks=["knowledge_qa"])
    EvaluationRun.objects.filter(pk=run.pk).update(status=RunStatus.ERROR, error="engine died")
    retried = services.run_retry(run_id=run.pk, reason="operator retry")
    assert retried.status == RunStatus.QUEUED and retried.error == "engine died"

    EvaluationRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    with pytest.raises(DomainError, match="only failed, cancelled or stuck runs"):
        services.run_retry(run_id=run.pk)


def test_a_run_whose_engine_cannot_start_ends_in_error_with_the_reason(
    make_backend: Callable[..., Backend], model_root: Any
) -> None:
    # An empty model directory: the launcher or the engine refuses it; either way the run must end
    # in error (an infrastructure problem), never as a quality failure, and leave no process.
    (model_root / "empty").mkdir(exist_ok=True)
    broken = make_backend(
        "kit-missing-weights", model_path=str(model_root / "empty"), engine_args={"max_model_len": 64}
    )
    run, _ = services.run_request(backend=broken, tasks=["knowledge_qa"])
    run = services.run_execute(run_id=run.pk)
    assert run.status == RunStatus.ERROR
    assert "engine exited with code" in run.error
    assert "last" in run.error and "log lines" in run.error
    assert not run.task_results.exists()
    attempt = run.attempts.get()
    assert attempt.status == RunStatus.ERROR and attempt.finished_at is not None
