"""Filing and editing release tickets: validation, draft-only edits, ledger entries."""

from __future__ import annotations

from typing import Any

import pytest

from backends.models import Backend
from core.errors import DomainError, InvalidInput, NotAllowed
from gates.models import ReleaseTicket, TaskType, TicketStatus
from gates.services import tickets as services
from ledger.models import LedgerEntry
from tests.factories import ticket_fields

pytestmark = pytest.mark.django_db


def test_it_files_a_draft_with_a_complete_ledger_snapshot(erin: Any, baseline: Backend, candidate: Backend) -> None:
    ticket = services.ticket_create(owner=erin, **ticket_fields(baseline, candidate))

    assert ticket.status == TicketStatus.DRAFT
    entry = LedgerEntry.objects.get(kind="ticket.filed", subject_id=str(ticket.pk))
    snapshot = entry.payload["ticket"]
    assert snapshot["baseline"]["fingerprint"] == baseline.fingerprint
    assert snapshot["candidate"]["name"] == candidate.name
    assert snapshot["risk_tasks"] == ["compliance_qa"]
    assert snapshot["rollback_plan"]["route_update"].startswith("knowledge_qa route")
    assert entry.actor_name == "erin"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"title": "  "}, "title"),
        ({"mechanisms": []}, "mechanisms"),
        ({"mechanisms": ["magic"]}, "mechanisms"),
        ({"bottleneck": "vibes"}, "bottleneck"),
        ({"bottleneck_evidence": ""}, "bottleneck_evidence"),
        ({"benefit_metrics": ["speediness"]}, "benefit_metrics"),
        ({"guardrail_metrics": []}, "guardrail_metrics"),
        ({"beneficiary_tasks": []}, "beneficiary_tasks"),
        ({"rollback_plan": {"sacrifices": "x", "warmup": "y", "inflight_streams": "z"}}, "rollback_plan.route_update"),
        ({"rollback_plan": "just revert"}, "rollback_plan"),
        ({"observation_window_hours": 0}, "observation_window_hours"),
        ({"observation_window_hours": 0.001}, "observation_window_hours"),
        ({"observation_window_hours": float("nan")}, "observation_window_hours"),
        ({"observation_window_hours": True}, "observation_window_hours"),
        ({"canary_scope": {"tenants": "all"}}, "canary_scope.tenants"),
        ({"canary_scope": {"tenants": [], "regions": ["eu"]}}, "canary_scope"),
    ],
)
def test_it_names_the_field_of_a_bad_ticket(
    erin: Any, baseline: Backend, candidate: Backend, overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        services.ticket_create(owner=erin, **ticket_fields(baseline, candidate, **overrides))
    assert field in caught.value.errors, caught.value.errors
    assert not ReleaseTicket.objects.exists()
    assert not LedgerEntry.objects.filter(subject_type="ticket").exists()


def test_a_canary_window_may_be_minutes_long(erin: Any, baseline: Backend, candidate: Backend) -> None:
    ticket = services.ticket_create(owner=erin, **ticket_fields(baseline, candidate, observation_window_hours=0.05))
    ticket.refresh_from_db()
    assert ticket.observation_window_hours == 0.05  # three minutes: a demo's or a staging fleet's canary


def test_it_refuses_a_candidate_equal_to_the_baseline(erin: Any, baseline: Backend) -> None:
    with pytest.raises(InvalidInput) as caught:
        services.ticket_create(owner=erin, **ticket_fields(baseline, baseline))
    assert "candidate" in caught.value.errors


def test_it_refuses_a_task_that_is_both_beneficiary_and_risk(erin: Any, baseline: Backend, candidate: Backend) -> None:
    both = list(TaskType.objects.filter(slug="knowledge_qa"))
    with pytest.raises(InvalidInput) as caught:
        services.ticket_create(owner=erin, **ticket_fields(baseline, candidate, risk_tasks=both))
    assert "knowledge_qa" in caught.value.errors["risk_tasks"]


def test_it_refuses_beneficiary_tasks_outside_the_candidates_model_card(
    erin: Any, baseline: Backend, make_backend: Any
) -> None:
    sql_only = make_backend(
        "kit-int4", model_card={"allowed_tasks": ["dataagent_nl2sql"]}, engine_args={"max_model_len": 1024}
    )
    with pytest.raises(InvalidInput) as caught:
        services.ticket_create(owner=erin, **ticket_fields(baseline, sql_only))
    assert "knowledge_qa" in caught.value.errors["beneficiary_tasks"]


def test_it_lets_only_engineers_file_tickets(rita: Any, olga: Any, baseline: Backend, candidate: Backend) -> None:
    for person in (rita, olga):
        with pytest.raises(NotAllowed):
            services.ticket_create(owner=person, **ticket_fields(baseline, candidate))


def test_it_edits_a_draft_and_records_what_changed(draft: ReleaseTicket, erin: Any) -> None:
    code = TaskType.objects.get(slug="code_assistant")
    services.ticket_update(ticket=draft, actor=erin, title="Prefix caching v2", risk_tasks=[code])

    draft.refresh_from_db()
    assert draft.title == "Prefix caching v2"
    assert list(draft.risk_tasks.values_list("slug", flat=True)) == ["code_assistant"]
    entry = LedgerEntry.objects.get(kind="ticket.updated")
    assert entry.payload["changed"]["title"] == {
        "before": "Prefix caching for the knowledge assistant",
        "after": "Prefix caching v2",
    }
    assert entry.payload["changed"]["risk_tasks"]["after"] == ["code_assistant"]


def test_it_keeps_a_draft_whole_when_an_edit_is_invalid(draft: ReleaseTicket, erin: Any) -> None:
    with pytest.raises(InvalidInput):
        services.ticket_update(ticket=draft, actor=erin, title="New title", mechanisms=[])
    draft.refresh_from_db()
    assert draft.title == "Prefix caching for the knowledge assistant"
    assert draft.mechanisms == ["prefix_cache"]
    assert not LedgerEntry.objects.filter(kind="ticket.updated").exists()


def test_it_edits_only_drafts(draft: ReleaseTicket, erin: Any) -> None:
    services.ticket_submit(ticket=draft, actor=erin)
    with pytest.raises(DomainError, match="only drafts can be edited"):
        services.ticket_update(ticket=draft, actor=erin, title="Sneaky change")


def test_it_lets_only_the_owner_edit(draft: ReleaseTicket, evan: Any) -> None:
    with pytest.raises(NotAllowed):
        services.ticket_update(ticket=draft, actor=evan, title="Not mine")
