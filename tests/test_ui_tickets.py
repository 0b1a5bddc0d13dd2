"""Filing and editing tickets through the form, presets, inline validation, and who may do what."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group

from gates.forms.presets import PRESETS
from gates.models import GateDecision, ReleaseTicket, TicketStatus
from gates.services import tickets as services
from ledger.models import LedgerEntry
from tests.factories import form_body
from tests.ui_helpers import client_for, evaluated_ticket

pytestmark = pytest.mark.django_db


def test_an_engineer_files_a_ticket_through_the_form(erin: Any, baseline: Any, candidate: Any) -> None:
    response = client_for(erin).post("/tickets/new/", form_body(baseline, candidate))
    ticket = ReleaseTicket.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/tickets/{ticket.pk}/"
    assert (ticket.owner, ticket.status, ticket.observation_window_hours) == (erin, TicketStatus.DRAFT, 72)
    assert ticket.canary_scope == {"tenants": ["tenant-a", "tenant-b"], "business_domain": "support"}
    assert ticket.rollback_plan["route_update"] == "knowledge_qa back to kit-bf16"
    assert [t.slug for t in ticket.beneficiary_tasks.all()] == ["knowledge_qa"]
    assert LedgerEntry.objects.filter(kind="ticket.filed", subject_id=str(ticket.pk)).exists()


def test_service_errors_appear_next_to_their_fields(erin: Any, baseline: Any, candidate: Any) -> None:
    body = form_body(
        baseline, baseline, rollback_warmup="", bottleneck_evidence="", risk_tasks=["knowledge_qa"], benefit_metrics=[]
    )
    response = client_for(erin).post("/tickets/new/", body)
    assert response.status_code == 400
    assert ReleaseTicket.objects.count() == 0
    errors = response.context["form"].errors
    assert errors["candidate"] == ["the candidate must differ from the baseline"]
    assert errors["rollback_warmup"] == ["required: warm-up the rollback target needs (weights load, cache fill)"]
    assert "bottleneck_evidence" in errors and "benefit_metrics" in errors
    assert errors["risk_tasks"] == ["a task cannot be both beneficiary and risk: knowledge_qa"]
    html = response.content.decode()
    assert "the candidate must differ from the baseline" in html and 'role="alert"' in html
    # What the engineer typed is kept.
    assert "TTFT gain" in html


def test_a_preset_fills_mechanism_bottleneck_metrics_and_an_args_snippet(erin: Any) -> None:
    response = client_for(erin).get("/tickets/new/?preset=fp8_kv")
    form = response.context["form"]
    assert form.initial["mechanisms"] == ["kv_cache_quantization"]
    assert form.initial["bottleneck"] == "kv_memory"
    assert "citation_accuracy" in form.initial["guardrail_metrics"]
    html = response.content.decode()
    assert "&quot;kv_cache_dtype&quot;: &quot;fp8&quot;" in html
    assert "/backends/new/?preset=fp8_kv" in html


@pytest.mark.parametrize("slug", sorted(PRESETS))
def test_every_preset_names_known_metrics_and_valid_engine_args(slug: str) -> None:
    from backends.engine_args import validate_engine_args
    from gates.vocabulary import METRICS

    preset = PRESETS[slug]
    assert set(preset.benefit_metrics) | set(preset.guardrail_metrics) <= METRICS
    args = {k: v for k, v in preset.engine_args.items() if k != "speculative_config" or "<" not in str(v)}
    validate_engine_args(args)


def test_the_backend_form_prefills_a_presets_engine_args(erin: Any) -> None:
    response = client_for(erin).get("/backends/new/?preset=spec_ngram")
    assert response.context["form"].initial["engine_args"]["speculative_config"]["method"] == "ngram"


def test_the_owner_edits_a_draft_and_others_cannot(
    draft: ReleaseTicket, erin: Any, evan: Any, baseline: Any, candidate: Any
) -> None:
    page = client_for(erin).get(f"/tickets/{draft.pk}/edit/")
    assert page.context["form"].initial["title"] == draft.title
    body = form_body(baseline, candidate, title="Prefix caching, second try")
    assert client_for(evan).post(f"/tickets/{draft.pk}/edit/", body).status_code == 403
    assert client_for(erin).post(f"/tickets/{draft.pk}/edit/", body).status_code == 302
    draft.refresh_from_db()
    assert draft.title == "Prefix caching, second try"


def test_people_without_the_engineer_role_cannot_file(rita: Any, olga: Any) -> None:
    for user in (rita, olga):
        assert client_for(user).get("/tickets/new/").status_code == 403
        assert client_for(user).post("/tickets/new/", {"title": "x"}).status_code == 403
    assert ReleaseTicket.objects.count() == 0


def test_the_owner_submits_and_sees_only_their_actions(
    draft: ReleaseTicket, erin: Any, rita: Any, django_capture_on_commit_callbacks: Any
) -> None:
    assert [a["action"] for a in client_for(rita).get(f"/tickets/{draft.pk}/").context["actions"]] == []
    assert [a["action"] for a in client_for(erin).get(f"/tickets/{draft.pk}/").context["actions"]] == ["submit"]
    response = client_for(rita).post(f"/tickets/{draft.pk}/action/", {"action": "submit"})
    assert response.status_code == 403
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert client_for(erin).post(f"/tickets/{draft.pk}/action/", {"action": "submit"}).status_code == 302
    draft.refresh_from_db()
    assert draft.status == TicketStatus.SUBMITTED
    # Submitting also asks the workers for the evaluation, once the submission has committed.
    assert len(callbacks) == 1
    assert [a["action"] for a in client_for(erin).get(f"/tickets/{draft.pk}/").context["actions"]] == ["evaluate"]


def test_a_needs_evidence_ticket_offers_the_owner_a_fresh_evaluation(
    draft: ReleaseTicket, erin: Any, rita: Any
) -> None:
    services.ticket_submit(ticket=draft, actor=erin)
    services.ticket_transition(ticket=draft, action="start_evaluation", actor=None)
    services.ticket_transition(ticket=draft, action="finish_evaluation", actor=None)
    services.ticket_transition(ticket=draft, action="request_evidence", actor=rita, reason="too few samples")
    page = client_for(erin).get(f"/tickets/{draft.pk}/")
    evaluate = next(a for a in page.context["actions"] if a["action"] == "evaluate")
    assert evaluate["label"] == "Evaluate again"
    assert b"the runs this ticket was judged on are not reused" in page.content


def test_an_illegal_transition_answers_409(draft: ReleaseTicket, erin: Any) -> None:
    response = client_for(erin).post(f"/tickets/{draft.pk}/action/", {"action": "promote"})
    assert response.status_code in (403, 409)
    assert client_for(erin).post(f"/tickets/{draft.pk}/action/", {"action": "retire"}).status_code == 403
    client_for(erin).post(f"/tickets/{draft.pk}/action/", {"action": "submit"})
    response = client_for(erin).post(f"/tickets/{draft.pk}/action/", {"action": "submit"})
    assert response.status_code == 409 and b"cannot submit a ticket that is submitted" in response.content


def test_an_engineer_cannot_sign_off(erin: Any, evan: Any, baseline: Any, candidate: Any) -> None:
    ticket, decision = evaluated_ticket("approve", erin, baseline, candidate)
    page = client_for(evan).get(f"/tickets/{ticket.pk}/")
    assert page.context["signoff"]["form"] is None
    body = {"verdict": "approve", "reason_code": "evidence_sufficient"}
    assert client_for(evan).post(f"/tickets/{ticket.pk}/sign-off/", body).status_code == 403
    # Nor through the plain action endpoint.
    assert client_for(evan).post(f"/tickets/{ticket.pk}/action/", {"action": "approve"}).status_code == 403
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.EVALUATED and not decision.sign_offs.exists()


def test_an_owner_cannot_approve_their_own_ticket_even_as_a_reviewer(erin: Any, baseline: Any, candidate: Any) -> None:
    erin.groups.add(Group.objects.get_or_create(name="reviewer")[0])
    ticket, decision = evaluated_ticket("approve", erin, baseline, candidate)
    page = client_for(erin).get(f"/tickets/{ticket.pk}/")
    assert page.context["signoff"]["form"] is None
    assert b"You own this ticket, so you cannot sign it off." in page.content
    body = {"verdict": "approve", "reason_code": "evidence_sufficient"}
    response = client_for(erin).post(f"/tickets/{ticket.pk}/sign-off/", body)
    assert response.status_code == 403 and b"owner cannot sign off" in response.content
    assert client_for(erin).post(f"/tickets/{ticket.pk}/action/", {"action": "approve"}).status_code == 403
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.EVALUATED and not decision.sign_offs.exists()


def test_a_reviewer_approves_through_the_sign_off_form(erin: Any, rita: Any, baseline: Any, candidate: Any) -> None:
    ticket, decision = evaluated_ticket("approve", erin, baseline, candidate)
    assert client_for(rita).get(f"/tickets/{ticket.pk}/").context["signoff"]["form"] is not None
    body = {"verdict": "approve", "reason_code": "evidence_sufficient", "comment": "numbers hold"}
    response = client_for(rita).post(f"/tickets/{ticket.pk}/sign-off/", body)
    assert response.status_code == 302
    ticket.refresh_from_db()
    decision.refresh_from_db()
    assert ticket.status == TicketStatus.APPROVED
    assert decision.signed_verdict == "approve"


def test_an_override_without_a_reason_is_shown_on_the_form(erin: Any, rita: Any, baseline: Any, candidate: Any) -> None:
    ticket, _ = evaluated_ticket("approve", erin, baseline, candidate)
    body = {"verdict": "reject", "reason_code": "business_risk"}
    response = client_for(rita).post(f"/tickets/{ticket.pk}/sign-off/", body)
    assert response.status_code == 400
    assert "override_reason" in response.context["signoff"]["form"].errors
    assert GateDecision.objects.get(ticket=ticket).sign_offs.count() == 0


def test_a_reason_is_required_to_request_evidence(erin: Any, rita: Any, baseline: Any, candidate: Any) -> None:
    ticket, _ = evaluated_ticket("approve", erin, baseline, candidate)
    response = client_for(rita).post(f"/tickets/{ticket.pk}/action/", {"action": "request_evidence"})
    assert response.status_code == 400
    assert b"a reason is required to request evidence" in response.content
    body = {"action": "request_evidence", "reason_code": "missing_workload", "comment": "no peak-hour load"}
    assert client_for(rita).post(f"/tickets/{ticket.pk}/action/", body).status_code == 302
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.NEEDS_EVIDENCE
    entry = LedgerEntry.objects.filter(kind="ticket.needs_evidence").latest("seq")
    assert entry.payload["details"] == {"reason_code": "missing_workload"}
    assert entry.payload["reason"].startswith("missing_workload: ")
