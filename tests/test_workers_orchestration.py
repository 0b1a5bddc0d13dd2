"""Orchestration without a broker: fan-out, reuse, the DB-driven completion check, recovery, sweeps.

These cover the sequential mode (``OPTGATE_INTERLEAVED=False``: two runs, the baseline's reusable);
the interleaved pairs that are the default are covered in ``tests/test_interleaved_pairs.py``.
"""

from __future__ import annotations

import os
import subprocess
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from core.errors import NotAllowed
from evaluators.models import EvaluationAttempt, EvaluationRun, RunStatus
from gates.models import Notification, ReleaseTicket, TicketStatus
from gates.services import evaluation
from ledger.models import LedgerEntry
from ledger.selectors import ledger_verify
from tests.factories import captured_tasks
from workers import services, sweeper

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=False)]


@pytest.fixture(autouse=True)
def sequential(settings: Any) -> None:
    settings.OPTGATE_INTERLEAVED = False


@pytest.fixture
def sent() -> Any:
    """Every task message the code publishes, captured instead of reaching a broker."""
    with captured_tasks() as published:
        yield published


def _finish(run: EvaluationRun, status: str = RunStatus.SUCCEEDED) -> None:
    run.refresh_from_db()
    if run.status == RunStatus.QUEUED:
        run.move(RunStatus.RUNNING)
    run.move(status)


def test_it_enqueues_the_evaluation_only_after_commit(
    draft: ReleaseTicket, erin: User, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        ticket = evaluation.evaluation_request(ticket=draft, actor=erin)
        assert sent["ticket"].call_count == 0
    assert ticket.status == TicketStatus.SUBMITTED
    for callback in callbacks:
        callback()
    sent["ticket"].assert_called_once_with(ticket.pk)


def test_it_refuses_an_outsider_asking_for_evaluation(draft: ReleaseTicket, olga: User, sent: Any) -> None:
    with pytest.raises(NotAllowed):
        evaluation.evaluation_request(ticket=draft, actor=olga)


def test_it_fans_out_two_runs_and_ledgers_them(
    draft: ReleaseTicket, erin: User, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    evaluation.evaluation_request(ticket=draft, actor=erin)
    with django_capture_on_commit_callbacks(execute=True):
        ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.status == TicketStatus.EVALUATING
    assert ticket.baseline_run is not None and ticket.candidate_run is not None
    assert ticket.baseline_run.tasks == ["knowledge_qa", "compliance_qa"]
    task_ids = sorted(call.kwargs["task_id"] for call in sent["run"].call_args_list)
    assert task_ids == sorted(f"evaluate-run-{r.pk}-a1" for r in (ticket.baseline_run, ticket.candidate_run))
    entry = LedgerEntry.objects.get(kind="ticket.evaluation_requested", subject_id=str(ticket.pk))
    assert entry.payload["baseline"]["reused"] is False
    assert ledger_verify().ok


def test_it_reuses_a_finished_baseline_for_a_second_ticket(
    draft: ReleaseTicket, erin: User, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from gates.services import tickets as gate_services
    from tests.factories import ticket_fields

    evaluation.evaluation_request(ticket=draft, actor=erin)
    first = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert first is not None and first.baseline_run is not None
    _finish(first.baseline_run)
    second = gate_services.ticket_create(
        owner=erin, **ticket_fields(draft.baseline, draft.candidate, title="same baseline")
    )
    evaluation.evaluation_request(ticket=second, actor=erin)
    sent["run"].reset_mock()
    with django_capture_on_commit_callbacks(execute=True):
        evaluated = evaluation.ticket_evaluate(ticket_id=second.pk)
    assert evaluated is not None
    assert evaluated.baseline_run_id == first.baseline_run_id
    assert evaluated.candidate_run_id == first.candidate_run_id  # in flight: reused as well, not measured twice
    assert sent["run"].call_count == 0
    entry = LedgerEntry.objects.get(kind="ticket.evaluation_requested", subject_id=str(second.pk))
    assert entry.payload["baseline"] == {
        "backend": "kit-bf16",
        "run": first.baseline_run_id,
        "reused": True,
        "run_status": "succeeded",
    }


def test_it_fans_out_once_when_the_message_is_delivered_twice(draft: ReleaseTicket, erin: User, sent: Any) -> None:
    evaluation.evaluation_request(ticket=draft, actor=erin)
    first = evaluation.ticket_evaluate(ticket_id=draft.pk)
    again = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert first is not None and again is not None
    assert (again.baseline_run_id, again.candidate_run_id) == (first.baseline_run_id, first.candidate_run_id)
    assert EvaluationRun.objects.count() == 2
    assert LedgerEntry.objects.filter(kind="ticket.evaluation_requested").count() == 1


def test_it_judges_only_when_both_runs_are_finished(draft: ReleaseTicket, erin: User, sent: Any) -> None:
    evaluation.evaluation_request(ticket=draft, actor=erin)
    ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.baseline_run and ticket.candidate_run
    _finish(ticket.baseline_run)
    assert evaluation.ticket_check(ticket_id=ticket.pk) is None
    _finish(ticket.candidate_run, RunStatus.ERROR)
    outcome = evaluation.ticket_check(ticket_id=ticket.pk)
    # A run error is missing evidence, never a failure of the candidate.
    assert outcome == "needs_evidence"
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.NEEDS_EVIDENCE
    assert evaluation.ticket_check(ticket_id=ticket.pk) is None  # a second message judges nothing
    assert Notification.objects.filter(event="ticket.evaluated", ticket=ticket).count() == 1


def _judged_needs_evidence(draft: ReleaseTicket, erin: User) -> ReleaseTicket:
    """A ticket whose two runs succeeded without results for its tasks: judged *needs evidence*."""
    evaluation.evaluation_request(ticket=draft, actor=erin)
    ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.baseline_run and ticket.candidate_run
    _finish(ticket.baseline_run)
    _finish(ticket.candidate_run)
    assert evaluation.ticket_check(ticket_id=ticket.pk) == "needs_evidence"
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.NEEDS_EVIDENCE
    return ticket


def test_evaluating_a_needs_evidence_ticket_again_measures_both_backends_afresh(
    draft: ReleaseTicket, erin: User, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from gates.models import GateDecision
    from gates.services import tickets as gate_services
    from tests.factories import ticket_fields

    ticket = _judged_needs_evidence(draft, erin)
    assert ticket.baseline_run_id is not None and ticket.candidate_run_id is not None
    old = (ticket.baseline_run_id, ticket.candidate_run_id)
    sent["run"].reset_mock()

    evaluation.evaluation_request(ticket=ticket, actor=erin)
    with django_capture_on_commit_callbacks(execute=True):
        again = evaluation.ticket_evaluate(ticket_id=ticket.pk)

    assert again is not None and again.status == TicketStatus.EVALUATING
    assert again.baseline_run_id is not None and again.candidate_run_id is not None
    new = (again.baseline_run_id, again.candidate_run_id)
    assert not set(new) & set(old), "the judged runs were reused instead of measured again"
    assert sorted(call.kwargs["task_id"] for call in sent["run"].call_args_list) == sorted(
        f"evaluate-run-{pk}-a1" for pk in new
    )
    entry = LedgerEntry.objects.filter(kind="ticket.evaluation_requested", subject_id=str(ticket.pk)).first()
    assert entry is not None and entry.payload["judged_before"] == sorted(old)
    assert entry.payload["baseline"]["reused"] is False and entry.payload["candidate"]["reused"] is False
    assert evaluation.ticket_check(ticket_id=ticket.pk) is None  # the new runs have not finished

    # A redelivered message changes nothing; another ticket may still reuse the old evidence.
    assert evaluation.ticket_evaluate(ticket_id=ticket.pk) is not None
    assert EvaluationRun.objects.count() == 4
    other = gate_services.ticket_create(owner=erin, **ticket_fields(draft.baseline, draft.candidate, title="other"))
    evaluation.evaluation_request(ticket=other, actor=erin)
    reused = evaluation.ticket_evaluate(ticket_id=other.pk)
    assert reused is not None and reused.baseline_run_id in (old[0], new[0])

    for pk in new:
        _finish(EvaluationRun.objects.get(pk=pk))
    assert evaluation.ticket_check(ticket_id=ticket.pk) == "needs_evidence"
    latest = GateDecision.objects.filter(ticket=ticket).first()
    assert latest is not None and (latest.baseline_run_id, latest.candidate_run_id) == new
    assert GateDecision.objects.filter(ticket=ticket).count() == 2
    assert ledger_verify().ok


def test_an_interrupted_re_evaluation_is_fanned_out_by_the_sweep_not_judged_on_the_old_runs(
    draft: ReleaseTicket, erin: User, sent: Any
) -> None:
    from gates.models import GateDecision
    from gates.services import tickets as gate_services

    ticket = _judged_needs_evidence(draft, erin)
    # The worker moved the ticket to evaluating and died before asking for new runs.
    gate_services.ticket_transition(ticket=ticket, action="start_evaluation", actor=None)

    assert evaluation.ticket_check(ticket_id=ticket.pk) is None
    assert GateDecision.objects.filter(ticket=ticket).count() == 1
    sent["ticket"].reset_mock()
    report = sweeper.sweep(now=timezone.now())
    assert ticket.pk in report.dispatched and ticket.pk not in report.checked
    sent["ticket"].assert_any_call(ticket.pk)
    again = evaluation.ticket_evaluate(ticket_id=ticket.pk)
    assert again is not None and again.baseline_run_id not in (ticket.baseline_run_id, ticket.candidate_run_id)


def test_it_waits_for_a_new_request_when_a_run_was_cancelled(draft: ReleaseTicket, erin: User, sent: Any) -> None:
    evaluation.evaluation_request(ticket=draft, actor=erin)
    ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.baseline_run and ticket.candidate_run
    cancelled = evaluation.evaluation_cancel(ticket=ticket, actor=erin)
    assert sorted(r.status for r in cancelled) == ["cancelled", "cancelled"]
    assert evaluation.ticket_check(ticket_id=ticket.pk) is None
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.EVALUATING


def _attempt(run: EvaluationRun, worker: str, pgid: int | None = None) -> EvaluationAttempt:
    run.move(RunStatus.RUNNING)
    return EvaluationAttempt.objects.create(run=run, number=1, worker=worker, engine_pgid=pgid)


def test_it_kills_the_engine_of_a_dead_worker_process_and_requeues_its_run(
    draft: ReleaseTicket, erin: User, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    evaluation.evaluation_request(ticket=draft, actor=erin)
    ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.baseline_run
    dead = subprocess.Popen(["true"])
    dead.wait()
    engine = subprocess.Popen(["sleep", "60"], start_new_session=True)
    _attempt(ticket.baseline_run, f"gpu0@{os.uname().nodename}:{dead.pid}", pgid=engine.pid)
    sent["run"].reset_mock()
    with django_capture_on_commit_callbacks(execute=True):
        recovered = services.worker_recover(nodename=f"gpu0@{os.uname().nodename}")
    assert recovered == [ticket.baseline_run.pk]
    assert engine.wait(timeout=10) != 0  # killed
    ticket.baseline_run.refresh_from_db()
    assert ticket.baseline_run.status == RunStatus.QUEUED
    sent["run"].assert_called_once()
    assert sent["run"].call_args.kwargs["task_id"] == f"evaluate-run-{ticket.baseline_run.pk}-a2"


def test_a_dead_worker_process_left_as_a_zombie_counts_as_dead(
    draft: ReleaseTicket, erin: User, sent: Any, django_capture_on_commit_callbacks: Any, zombie: Any
) -> None:
    # Where the container's init reaps no orphans, a SIGKILLed pool process keeps its pid as a zombie.
    evaluation.evaluation_request(ticket=draft, actor=erin)
    ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.baseline_run
    _attempt(ticket.baseline_run, f"gpu0@{os.uname().nodename}:{zombie.pid}")
    with django_capture_on_commit_callbacks(execute=True):
        assert services.worker_recover(nodename=f"gpu0@{os.uname().nodename}") == [ticket.baseline_run.pk]


def test_it_leaves_a_run_alone_while_its_worker_process_lives(draft: ReleaseTicket, erin: User, sent: Any) -> None:
    evaluation.evaluation_request(ticket=draft, actor=erin)
    ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.baseline_run
    alive = subprocess.Popen(["sleep", "30"])
    try:
        _attempt(ticket.baseline_run, f"gpu0@{os.uname().nodename}:{alive.pid}")
        assert services.worker_recover(nodename=f"gpu0@{os.uname().nodename}") == []
        with mock.patch("evaluators.services.run_execute") as execute:
            services.run_execute_task(run_id=ticket.baseline_run.pk, nodename=f"gpu0@{os.uname().nodename}")
        execute.assert_not_called()
    finally:
        alive.kill()
        alive.wait()


def test_the_sweeper_requeues_then_fails_a_run_stuck_past_its_deadline(
    draft: ReleaseTicket, erin: User, sent: Any, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.OPTGATE_RUN_MAX_ATTEMPTS = 2
    evaluation.evaluation_request(ticket=draft, actor=erin)
    ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.baseline_run
    run = ticket.baseline_run
    _attempt(run, "gpu9@elsewhere:1")
    later = timezone.now() + timedelta(seconds=settings.OPTGATE_RUN_TIMEOUT_S + 1)
    with django_capture_on_commit_callbacks(execute=True):
        report = sweeper.sweep(now=later)
    assert report.requeued == [run.pk]
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    run.move(RunStatus.RUNNING)
    EvaluationAttempt.objects.create(run=run, number=2, worker="gpu9@elsewhere:2")
    report = sweeper.sweep(now=later + timedelta(seconds=settings.OPTGATE_RUN_TIMEOUT_S + 1))
    assert report.failed == [run.pk]
    run.refresh_from_db()
    assert run.status == RunStatus.ERROR
    assert "stuck past its deadline" in run.error and "no attempts left" in run.error


def test_the_sweeper_resends_a_queued_run_whose_message_was_lost(
    draft: ReleaseTicket, erin: User, sent: Any, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    evaluation.evaluation_request(ticket=draft, actor=erin)
    ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None
    sent["run"].reset_mock()
    later = timezone.now() + timedelta(seconds=settings.OPTGATE_RUN_TIMEOUT_S + 1)
    with django_capture_on_commit_callbacks(execute=True):
        first = sweeper.sweep(now=later)
        second = sweeper.sweep(now=later)
    assert set(first.resent) == {ticket.baseline_run_id, ticket.candidate_run_id}
    assert second.resent == []  # the deadline moved on: one re-send
    assert sent["run"].call_count == 2


def test_the_sweeper_resends_soon_a_queued_run_the_broker_never_accepted(
    draft: ReleaseTicket, erin: User, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    evaluation.evaluation_request(ticket=draft, actor=erin)
    sent["run"].side_effect = ConnectionError("broker down")
    with django_capture_on_commit_callbacks(execute=True):
        ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.baseline_run and ticket.candidate_run
    runs = [ticket.baseline_run, ticket.candidate_run]
    for run in runs:
        run.refresh_from_db()
        assert run.status == RunStatus.QUEUED and run.sent_at is None
    sent["run"].reset_mock(side_effect=True)

    assert sweeper.sweep(now=timezone.now() + timedelta(seconds=10)).resent == []  # within the grace
    later = timezone.now() + sweeper.SEND_GRACE + timedelta(seconds=1)
    with django_capture_on_commit_callbacks(execute=True):
        first = sweeper.sweep(now=later)
    assert sorted(first.resent) == sorted(run.pk for run in runs)
    assert sent["run"].call_count == 2
    for run in runs:
        run.refresh_from_db()
        assert run.sent_at is not None  # the broker took it this time
    much_later = later + sweeper.SEND_GRACE * 5
    assert sweeper.sweep(now=much_later).resent == []  # accepted messages wait for their deadline


def test_a_run_sent_to_the_broker_is_not_resent_before_its_deadline(
    draft: ReleaseTicket, erin: User, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    evaluation.evaluation_request(ticket=draft, actor=erin)
    with django_capture_on_commit_callbacks(execute=True):
        ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.baseline_run
    ticket.baseline_run.refresh_from_db()
    assert ticket.baseline_run.sent_at is not None
    assert sweeper.sweep(now=timezone.now() + sweeper.SEND_GRACE * 10).resent == []


def test_a_retried_run_needs_a_new_send(
    draft: ReleaseTicket, erin: User, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    evaluation.evaluation_request(ticket=draft, actor=erin)
    with django_capture_on_commit_callbacks(execute=True):
        ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.baseline_run
    run = ticket.baseline_run
    _finish(run, RunStatus.ERROR)
    run.move(RunStatus.QUEUED)
    run.refresh_from_db()
    assert run.sent_at is None and run.queued_at > run.created_at


def test_the_sweeper_dispatches_a_submitted_ticket_nobody_fanned_out(
    draft: ReleaseTicket, erin: User, sent: Any
) -> None:
    from gates.services import tickets as gate_services

    gate_services.ticket_submit(ticket=draft, actor=erin)
    report = sweeper.sweep(now=timezone.now() + timedelta(minutes=5))
    assert report.dispatched == [draft.pk]
    sent["ticket"].assert_called_once_with(draft.pk)
