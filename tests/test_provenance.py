"""Provenance: who produced each run, and what the owner's own imported evidence may do."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from backends.models import Backend
from core.errors import DomainError, InvalidInput, NotAllowed
from evaluators.imports.services import run_open_for_import
from evaluators.models import EvaluationAttempt, EvaluationRun, RunSource, RunStatus, TaskResult
from evaluators.selectors import run_provenance
from gates.models import ReleaseTicket, TicketStatus
from gates.policy.parse import validate_policy_text
from gates.policy.rules import PolicyError
from gates.selectors.evidence import decision_provenance
from gates.services import decisions, provenance, signoff
from ledger.models import LedgerEntry
from ledger.selectors import ledger_verify
from tests.factories import scenario
from tests.ui_helpers import client_for

pytestmark = pytest.mark.django_db

SHA = "ab" * 32


def imported_by(run: EvaluationRun, user: User) -> None:
    """Test set-up: the candidate's evidence as an import by ``user`` leaves it (files by hash)."""
    EvaluationRun.objects.filter(pk=run.pk).update(source=RunSource.IMPORTED, imported_by=user)
    for result in TaskResult.objects.filter(run=run):
        result.quality = {**result.quality, "source": "lm-eval", "file_sha256": SHA}
        result.save(update_fields=["quality"])


def judged(owner: User, importer: User, baseline: Backend, candidate: Backend) -> ReleaseTicket:
    ticket = scenario("approve", owner, baseline, candidate)
    assert ticket.candidate_run is not None
    imported_by(ticket.candidate_run, importer)
    assert decisions.decision_make(ticket=ticket).outcome == "approve"  # it informs the decision
    ticket.refresh_from_db()
    return ticket


def sign(ticket: ReleaseTicket, reviewer: User) -> signoff.SignOffResult:
    return signoff.signoff_record(ticket=ticket, actor=reviewer, verdict="approve", reason_code="evidence_sufficient")


def test_an_import_run_records_who_imported_it(erin: User, baseline: Backend) -> None:
    run = run_open_for_import(backend=baseline, tasks=["cs_summary"], actor=erin)
    assert (run.source, run.imported_by) == (RunSource.IMPORTED, erin)
    TaskResult.objects.create(run=run, task="cs_summary", suite_version="1", quality={"file_sha256": SHA})
    assert run_provenance(run) == {"source": "import", "imported_by": "erin", "files": {"cs_summary": {"quality": SHA}}}


def test_the_owners_imported_evidence_cannot_approve_the_owners_ticket(
    erin: User, rita: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged(erin, erin, baseline, candidate)
    with pytest.raises(DomainError, match="informs but approves nothing"):
        sign(ticket, rita)
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.EVALUATED
    assert not LedgerEntry.objects.filter(kind="gate.sign_off").exists()
    # A rejection needs no acceptance: imported evidence may still stop a change.
    assert signoff.signoff_record(
        ticket=ticket,
        actor=rita,
        verdict="reject",
        reason_code="guardrail_regression",
        override_reason="copied numbers",
    )


def test_another_reviewers_acceptance_lets_it_approve_and_is_ledgered(
    erin: User, rita: User, bella: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged(erin, erin, baseline, candidate)
    run = ticket.candidate_run
    assert run is not None
    with pytest.raises(NotAllowed):
        provenance.evidence_accept(ticket=ticket, run=run, actor=erin, reason="trust me")
    with pytest.raises(InvalidInput, match="reason"):
        provenance.evidence_accept(ticket=ticket, run=run, actor=bella, reason=" ")
    provenance.evidence_accept(ticket=ticket, run=run, actor=bella, reason="re-ran 20 samples by hand: same answers")
    entry = LedgerEntry.objects.get(kind="ticket.evidence_accepted")
    assert (entry.actor, entry.subject_id) == (bella, str(ticket.pk))
    assert entry.payload == {
        "run": run.pk,
        "role": "candidate",
        "imported_by": "erin",
        "reason": "re-ran 20 samples by hand: same answers",
    }
    with pytest.raises(DomainError, match="accepted already"):
        provenance.evidence_accept(ticket=ticket, run=run, actor=rita, reason="again")
    assert sign(ticket, rita).moved
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.APPROVED
    assert ledger_verify().ok


def test_evidence_someone_else_imported_needs_no_acceptance(
    erin: User, evan: User, rita: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged(erin, evan, baseline, candidate)
    assert ticket.candidate_run is not None
    with pytest.raises(DomainError, match="needs no acceptance"):
        provenance.evidence_accept(ticket=ticket, run=ticket.candidate_run, actor=rita, reason="fine")
    assert sign(ticket, rita).moved


def test_a_policy_may_let_the_owners_imports_approve(
    erin: User, rita: User, baseline: Backend, candidate: Backend, settings: Any, tmp_path: Path
) -> None:
    default = Path(decisions.gate_policy().source or "").read_text()
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text(default.replace("owner_imported: inform", "owner_imported: approve"))
    settings.OPTGATE_GATE_POLICY = str(lenient)
    ticket = judged(erin, erin, baseline, candidate)
    assert sign(ticket, rita).moved


def test_an_unknown_evidence_rule_is_refused(tmp_path: Path) -> None:
    default = Path(decisions.gate_policy().source or "").read_text()
    with pytest.raises(PolicyError, match=r"evidence\.owner_imported"):
        validate_policy_text(default.replace("owner_imported: inform", "owner_imported: always"))


def test_the_api_shows_provenance_and_takes_an_acceptance(
    api_for: Callable[[User | None], APIClient], erin: User, bella: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged(erin, erin, baseline, candidate)
    assert ticket.candidate_run is not None and ticket.baseline_run is not None
    rows = api_for(erin).get(f"/api/v1/tickets/{ticket.pk}/").json()["provenance"]
    assert rows == [
        {
            "role": "baseline",
            "run": ticket.baseline_run.pk,
            "source": "optgate_worker",
            "imported_by": None,
            "files": {},
            "owner_imported": False,
            "accepted": None,
        },
        {
            "role": "candidate",
            "run": ticket.candidate_run.pk,
            "source": "import",
            "imported_by": "erin",
            "files": {"cs_summary": {"quality": SHA}, "code_assistant": {"quality": SHA}},
            "owner_imported": True,
            "accepted": None,
        },
    ]
    url = f"/api/v1/tickets/{ticket.pk}/accept-evidence/"
    body = {"run": ticket.candidate_run.pk, "reason": "spot-checked the samples"}
    assert api_for(erin).post(url, body, format="json").status_code == 403
    accepted = api_for(bella).post(url, body, format="json")
    assert accepted.status_code == 201, accepted.content
    assert accepted.json()["provenance"][1]["accepted"]["by"] == "bella"


def test_the_ticket_page_shows_who_produced_the_numbers(
    erin: User, rita: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged(erin, erin, baseline, candidate)
    page = client_for(rita).get(f"/tickets/{ticket.pk}/")
    text = page.content.decode()
    assert "measured by OptGate" in text and "imported by erin" in text
    assert "not yet accepted by another reviewer" in text and "Accept this evidence" in text
    assert "Accept this evidence" not in client_for(erin).get(f"/tickets/{ticket.pk}/").content.decode()


def test_a_reviewer_accepts_the_owners_evidence_on_the_ticket_page(
    erin: User, rita: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged(erin, erin, baseline, candidate)
    assert ticket.candidate_run is not None
    url = f"/tickets/{ticket.pk}/accept-evidence/"
    body = {"run": ticket.candidate_run.pk, "reason": ""}
    assert client_for(rita).post(url, body).status_code == 400
    assert client_for(erin).post(url, {**body, "reason": "mine"}).status_code == 403
    done = client_for(rita).post(url, {**body, "reason": "compared against our own canary logs"})
    assert done.status_code == 302
    assert LedgerEntry.objects.get(kind="ticket.evidence_accepted").actor == rita
    page = client_for(rita).get(f"/tickets/{ticket.pk}/").content.decode()
    assert "accepted by rita: compared against our own canary logs" in page


def measured_by(run: EvaluationRun, worker: str) -> None:
    """Test set-up: the attempt a worker process leaves on the run it measured."""
    EvaluationAttempt.objects.create(run=run, number=1, worker=worker, status=RunStatus.SUCCEEDED)


def test_the_decision_api_names_the_producer_of_each_tasks_numbers(
    api_for: Callable[[User | None], APIClient], erin: User, rita: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged(erin, erin, baseline, candidate)
    assert ticket.baseline_run is not None and ticket.candidate_run is not None
    measured_by(ticket.baseline_run, "gpu@node-7:4242")
    summary = api_for(rita).get(f"/api/v1/tickets/{ticket.pk}/decision/").json()["summary"]
    assert [t["task"] for t in summary["tasks"]] == ["cs_summary", "code_assistant"]
    for task in summary["tasks"]:
        assert task["provenance"] == {
            "baseline": {
                "run": ticket.baseline_run.pk,
                "source": "optgate_worker",
                "worker": "gpu@node-7:4242",
                "imported_by": None,
                "files": {},
                "quality_from_run": None,
                "producer": "OptGate worker gpu@node-7:4242",
            },
            "candidate": {
                "run": ticket.candidate_run.pk,
                "source": "import",
                "worker": None,
                "imported_by": "erin",
                "files": {"quality": SHA},
                "quality_from_run": None,
                "producer": f"imported by erin (quality sha256 {SHA[:12]}…)",
            },
        }


def test_a_reused_baseline_names_the_run_its_answers_came_from(
    erin: User, rita: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = scenario("approve", erin, baseline, candidate)
    assert ticket.baseline_run is not None
    # Test set-up: what an interleaved pair stores when the baseline's greedy answers were reused.
    result = TaskResult.objects.get(run=ticket.baseline_run, task="cs_summary")
    result.quality = {**result.quality, "reused_from_run": 7}
    result.save(update_fields=["quality"])
    decision = decisions.decision_make(ticket=ticket)
    shown = decision_provenance(decision)
    assert shown["cs_summary"]["baseline"]["quality_from_run"] == 7
    assert shown["cs_summary"]["baseline"]["producer"] == "OptGate worker (quality answers reused from run #7)"
    assert shown["code_assistant"]["baseline"]["producer"] == "OptGate worker"


def test_the_summary_on_the_ticket_page_shows_each_sides_producer(
    erin: User, rita: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged(erin, erin, baseline, candidate)
    assert ticket.baseline_run is not None and ticket.candidate_run is not None
    measured_by(ticket.baseline_run, "gpu@node-7:4242")
    page = client_for(rita).get(f"/tickets/{ticket.pk}/").content.decode()
    summary = page.split('id="summary"', 1)[1].split("</section>", 1)[0]
    row = summary.split('data-task="cs_summary"', 1)[1].split("</tr>", 1)[0]
    base, cand = ticket.baseline_run.pk, ticket.candidate_run.pk
    assert f'title="Baseline numbers: run #{base}, OptGate worker gpu@node-7:4242"' in row
    assert f"B #{base} · worker" in row
    assert f'title="Candidate numbers: run #{cand}, imported by erin (quality sha256 {SHA[:12]}…)"' in row
    assert f"C #{cand} · imported by erin" in row
