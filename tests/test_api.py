"""The REST API: create, list, filter, detail, transitions and every error status."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from backends.models import Backend
from gates.api.tickets import TicketSerializer
from gates.models import ReleaseTicket, TicketStatus
from gates.services.tickets import ticket_transition
from ledger.models import LedgerEntry
from tests.factories import backend_fields

pytestmark = pytest.mark.django_db

ApiFor = Callable[[Any], APIClient]


def _backend_body(model_root: Path, name: str, **overrides: Any) -> dict[str, Any]:
    return backend_fields(model_root, name, **overrides)


def _ticket_body(baseline: str, candidate: str, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "title": "Low-bit weights for the fleet",
        "mechanisms": ["weight_quantization"],
        "bottleneck": "kv_memory",
        "bottleneck_evidence": "preemptions at 64 concurrent streams on the bf16 pool",
        "baseline": baseline,
        "candidate": candidate,
        "beneficiary_tasks": ["cs_summary"],
        "risk_tasks": ["dataagent_nl2sql", "tool_calling"],
        "benefit_metrics": ["output_throughput", "max_concurrency"],
        "guardrail_metrics": ["sql_accuracy", "tool_argument_validity", "fact_accuracy"],
        "rollback_target": baseline,
        "rollback_plan": {
            "sacrifices": "the memory headroom",
            "warmup": "bf16 weights stay resident on the canary pool",
            "inflight_streams": "drain on the candidate",
            "route_update": "cs_summary route back to kit-bf16",
        },
        "observation_window_hours": 48,
        "canary_scope": {"tenants": ["tenant-a"], "business_domain": "support"},
    }
    body.update(overrides)
    return body


@pytest.fixture
def backends(api_for: ApiFor, erin: Any, model_root: Path) -> tuple[str, str]:
    client = api_for(erin)
    assert client.post("/api/v1/backends/", _backend_body(model_root, "kit-bf16"), format="json").status_code == 201
    low_bit = _backend_body(
        model_root,
        "kit-w3",
        model_revision="sha256:" + "33" * 32,
        model_card={"quantization_method": "rtn-w3g32", "calibration_set": "none"},
    )
    assert client.post("/api/v1/backends/", low_bit, format="json").status_code == 201
    return "kit-bf16", "kit-w3"


@pytest.fixture
def ticket_id(api_for: ApiFor, erin: Any, backends: tuple[str, str]) -> int:
    response = api_for(erin).post("/api/v1/tickets/", _ticket_body(*backends), format="json")
    assert response.status_code == 201, response.data
    return int(response.data["id"])


def test_anonymous_requests_get_401(api_for: ApiFor, db: None) -> None:
    client = api_for(None)
    for url in ("/api/v1/tickets/", "/api/v1/backends/", "/api/v1/ledger/", "/api/v1/task-types/"):
        assert client.get(url).status_code == 401


def test_it_lists_the_six_seeded_task_types(api_for: ApiFor, olga: Any) -> None:
    response = api_for(olga).get("/api/v1/task-types/")
    assert response.status_code == 200
    assert [t["slug"] for t in response.data] == [
        "code_assistant",
        "compliance_qa",
        "cs_summary",
        "dataagent_nl2sql",
        "knowledge_qa",
        "tool_calling",
    ]
    assert api_for(olga).get("/api/v1/task-types/knowledge_qa/").data["risk_tier"] == "high"


def test_it_registers_a_backend_and_shows_its_fingerprint(api_for: ApiFor, erin: Any, model_root: Path) -> None:
    response = api_for(erin).post("/api/v1/backends/", _backend_body(model_root, "kit-bf16"), format="json")
    assert response.status_code == 201
    backend = Backend.objects.get(name="kit-bf16")
    assert response.data["fingerprint"] == backend.fingerprint
    detail = api_for(erin).get(f"/api/v1/backends/{backend.pk}/")
    assert detail.data["engine_args"] == {"max_model_len": 2048, "seed": 0}
    assert api_for(erin).get("/api/v1/backends/", {"fingerprint": backend.fingerprint}).data["count"] == 1


def test_it_has_no_way_to_update_or_delete_a_backend(api_for: ApiFor, ada: Any, backends: tuple[str, str]) -> None:
    backend = Backend.objects.get(name="kit-bf16")
    client = api_for(ada)
    assert client.patch(f"/api/v1/backends/{backend.pk}/", {"engine_version": "9"}, format="json").status_code == 405
    assert client.put(f"/api/v1/backends/{backend.pk}/", {}, format="json").status_code == 405
    assert client.delete(f"/api/v1/backends/{backend.pk}/").status_code == 405


def test_it_answers_400_naming_the_bad_engine_argument(api_for: ApiFor, erin: Any, model_root: Path) -> None:
    body = _backend_body(model_root, "bad", engine_args={"max_num_seqs": -4})
    response = api_for(erin).post("/api/v1/backends/", body, format="json")
    assert response.status_code == 400
    assert "engine_args.max_num_seqs" in response.data


def test_it_answers_400_for_a_model_outside_the_roots(api_for: ApiFor, erin: Any, model_root: Path) -> None:
    body = _backend_body(model_root, "escape", model_path=str(model_root / ".." / ".." / "etc"))
    response = api_for(erin).post("/api/v1/backends/", body, format="json")
    assert response.status_code == 400
    assert "model_path" in response.data


def test_it_answers_409_for_a_changed_config_under_a_taken_name(
    api_for: ApiFor, erin: Any, model_root: Path, backends: tuple[str, str]
) -> None:
    body = _backend_body(model_root, "kit-bf16", engine_args={"max_model_len": 512})
    response = api_for(erin).post("/api/v1/backends/", body, format="json")
    assert response.status_code == 409
    assert "needs a new name" in response.data["detail"]


def test_reviewers_cannot_register_backends(api_for: ApiFor, rita: Any, model_root: Path) -> None:
    response = api_for(rita).post("/api/v1/backends/", _backend_body(model_root, "kit-bf16"), format="json")
    assert response.status_code == 403
    assert not Backend.objects.exists()


def test_it_files_a_ticket_and_shows_it(api_for: ApiFor, erin: Any, ticket_id: int) -> None:
    detail = api_for(erin).get(f"/api/v1/tickets/{ticket_id}/")
    assert detail.status_code == 200
    assert detail.data["status"] == "draft"
    assert detail.data["owner"] == "erin"
    assert detail.data["candidate"]["name"] == "kit-w3"
    assert detail.data["risk_tasks"] == ["dataagent_nl2sql", "tool_calling"]
    assert detail.data["allowed_actions"] == ["submit"]


def test_it_answers_400_naming_each_bad_ticket_field(api_for: ApiFor, erin: Any, backends: tuple[str, str]) -> None:
    body = _ticket_body(
        backends[0],
        "missing-backend",
        mechanisms=["teleportation"],
        beneficiary_tasks=["no_such_task"],
        rollback_plan={"sacrifices": "x"},
    )
    response = api_for(erin).post("/api/v1/tickets/", body, format="json")
    assert response.status_code == 400
    assert {"mechanisms", "beneficiary_tasks", "candidate"} <= set(response.data)
    assert not ReleaseTicket.objects.exists()

    response = api_for(erin).post(
        "/api/v1/tickets/", _ticket_body(*backends, rollback_plan={"sacrifices": "x"}), format="json"
    )
    assert response.status_code == 400
    assert "rollback_plan.warmup" in response.data


def test_it_refuses_a_writable_status_and_unknown_fields(api_for: ApiFor, erin: Any, ticket_id: int) -> None:
    response = api_for(erin).patch(f"/api/v1/tickets/{ticket_id}/", {"status": "approved"}, format="json")
    assert response.status_code == 400
    assert "POST actions" in response.data["status"][0]
    response = api_for(erin).patch(f"/api/v1/tickets/{ticket_id}/", {"titel": "typo"}, format="json")
    assert response.status_code == 400 and response.data["titel"] == ["unknown field"]
    assert ReleaseTicket.objects.get(pk=ticket_id).status == "draft"


def test_it_edits_a_draft_and_409s_after_submission(api_for: ApiFor, erin: Any, ticket_id: int) -> None:
    client = api_for(erin)
    response = client.patch(f"/api/v1/tickets/{ticket_id}/", {"observation_window_hours": 96}, format="json")
    assert response.status_code == 200 and response.data["observation_window_hours"] == 96
    response = client.patch(f"/api/v1/tickets/{ticket_id}/", {"observation_window_hours": 0.005}, format="json")
    assert response.status_code == 400 and "observation_window_hours" in response.data
    response = client.patch(f"/api/v1/tickets/{ticket_id}/", {"observation_window_hours": 0.25}, format="json")
    assert response.status_code == 200 and response.data["observation_window_hours"] == 0.25

    assert client.post(f"/api/v1/tickets/{ticket_id}/submit/").status_code == 200
    response = client.patch(f"/api/v1/tickets/{ticket_id}/", {"title": "late edit"}, format="json")
    assert response.status_code == 409
    assert "only drafts" in response.data["detail"]


def test_an_illegal_transition_answers_409_with_a_message(api_for: ApiFor, erin: Any, ticket_id: int) -> None:
    assert api_for(erin).post(f"/api/v1/tickets/{ticket_id}/submit/").status_code == 200
    response = api_for(erin).post(f"/api/v1/tickets/{ticket_id}/submit/")
    assert response.status_code == 409
    assert response.data["detail"] == "cannot submit a ticket that is submitted (allowed from: draft)"


def test_only_the_owner_or_an_admin_submits(api_for: ApiFor, evan: Any, rita: Any, ticket_id: int) -> None:
    for other in (evan, rita):
        assert api_for(other).post(f"/api/v1/tickets/{ticket_id}/submit/").status_code == 403
    assert ReleaseTicket.objects.get(pk=ticket_id).status == TicketStatus.DRAFT


def test_verdicts_move_only_through_sign_off(api_for: ApiFor, rita: Any, ticket_id: int) -> None:
    ReleaseTicket.objects.filter(pk=ticket_id).update(status=TicketStatus.EVALUATED)
    for shortcut in ("approve", "restrict", "reject", "start-evaluation", "finish-evaluation"):
        response = api_for(rita).post(f"/api/v1/tickets/{ticket_id}/{shortcut}/", {"reason": "x"}, format="json")
        assert response.status_code == 404, shortcut
    assert ReleaseTicket.objects.get(pk=ticket_id).status == TicketStatus.EVALUATED


def test_unknown_ticket_is_404(api_for: ApiFor, erin: Any) -> None:
    assert api_for(erin).get("/api/v1/tickets/999999/").status_code == 404
    assert api_for(erin).post("/api/v1/tickets/999999/submit/").status_code == 404


def test_outsiders_cannot_file_tickets(api_for: ApiFor, olga: Any, backends: tuple[str, str]) -> None:
    response = api_for(olga).post("/api/v1/tickets/", _ticket_body(*backends), format="json")
    assert response.status_code == 403


@pytest.mark.database
def test_it_filters_tickets(api_for: ApiFor, erin: Any, evan: Any, backends: tuple[str, str], ticket_id: int) -> None:
    other = _ticket_body(
        *backends,
        title="Prefix caching",
        mechanisms=["prefix_cache"],
        beneficiary_tasks=["knowledge_qa"],
        risk_tasks=["compliance_qa"],
    )
    assert api_for(evan).post("/api/v1/tickets/", other, format="json").status_code == 201
    api_for(erin).post(f"/api/v1/tickets/{ticket_id}/submit/")
    client = api_for(erin)

    def titles(**params: str) -> list[str]:
        response = client.get("/api/v1/tickets/", params)
        assert response.status_code == 200, response.data
        return sorted(t["title"] for t in response.data["results"])

    assert titles() == ["Low-bit weights for the fleet", "Prefix caching"]
    assert titles(status="submitted") == ["Low-bit weights for the fleet"]
    assert titles(owner="evan") == ["Prefix caching"]
    assert titles(task="dataagent_nl2sql") == ["Low-bit weights for the fleet"]
    assert titles(task="knowledge_qa") == ["Prefix caching"]
    assert titles(mechanism="prefix_cache") == ["Prefix caching"]
    assert client.get("/api/v1/tickets/", {"status": "pending"}).status_code == 400


@pytest.mark.database
def test_the_ticket_list_uses_a_fixed_number_of_queries(api_for: ApiFor, erin: Any, backends: tuple[str, str]) -> None:
    client = api_for(erin)

    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/api/v1/tickets/").status_code == 200
        return len(queries)

    client.post("/api/v1/tickets/", _ticket_body(*backends), format="json")
    one = count_queries()
    for n in range(5):
        client.post("/api/v1/tickets/", _ticket_body(*backends, title=f"t{n}"), format="json")
    assert count_queries() == one


def test_the_ticket_list_and_detail_show_exactly_what_the_ticket_serializer_describes(
    api_for: ApiFor, erin: Any, evan: Any, backends: tuple[str, str], ticket_id: int
) -> None:
    # Responses are built from rows without the serializer (for speed); the serializer is the
    # schema clients read, so the two must not drift apart.
    # Tickets differ in owner, backends, task lists (none, one, several), JSON fields and which
    # times are set: a submitted one, decided and closed, and a retired one (set up directly).
    bare = _ticket_body(
        backends[1],
        backends[0],
        title="No risk tasks",
        risk_tasks=[],
        canary_scope={},
        description="ünïcode ✓",
        beneficiary_tasks=["tool_calling", "code_assistant", "knowledge_qa"],
    )
    bare_id = api_for(evan).post("/api/v1/tickets/", bare, format="json").data["id"]
    ReleaseTicket.objects.filter(pk=bare_id).update(status=TicketStatus.RETIRED, closed_at=timezone.now())
    assert api_for(erin).post(f"/api/v1/tickets/{ticket_id}/submit/").status_code == 200
    ReleaseTicket.objects.filter(pk=ticket_id).update(decided_at=timezone.now(), closed_at=timezone.now())
    client = api_for(erin)
    listed = client.get("/api/v1/tickets/", {"limit": 10}).json()["results"]
    assert [t["id"] for t in listed] == [bare_id, ticket_id]
    for ticket in listed:
        described = TicketSerializer(ReleaseTicket.objects.get(pk=ticket["id"])).data
        detail = client.get(f"/api/v1/tickets/{ticket['id']}/").json()
        assert detail.pop("provenance") == []  # the detail adds who produced its runs: none yet
        assert ticket == detail == json.loads(JSONRenderer().render(described))
    retired, submitted = listed
    assert retired["risk_tasks"] == [] and retired["beneficiary_tasks"] == [
        "code_assistant",
        "knowledge_qa",
        "tool_calling",
    ]
    assert retired["allowed_actions"] == [] and retired["closed_at"] and not retired["decided_at"]
    assert submitted["allowed_actions"] and submitted["decided_at"] and submitted["owner"] == "erin"
    assert submitted["baseline"]["name"] == "kit-bf16" and submitted["candidate"]["name"] == "kit-w3"


def test_a_repeated_create_with_the_same_idempotency_key_returns_the_first_result(
    api_for: ApiFor, erin: Any, backends: tuple[str, str]
) -> None:
    client = api_for(erin)
    body = _ticket_body(*backends)
    first = client.post("/api/v1/tickets/", body, format="json", HTTP_IDEMPOTENCY_KEY="ci-run-42")
    second = client.post("/api/v1/tickets/", body, format="json", HTTP_IDEMPOTENCY_KEY="ci-run-42")

    assert first.status_code == second.status_code == 201
    assert second.data["id"] == first.data["id"]
    assert second["Idempotent-Replayed"] == "true"
    assert ReleaseTicket.objects.count() == 1
    assert LedgerEntry.objects.filter(kind="ticket.filed").count() == 1

    changed = client.post(
        "/api/v1/tickets/", {**body, "title": "other"}, format="json", HTTP_IDEMPOTENCY_KEY="ci-run-42"
    )
    assert changed.status_code == 422
    assert ReleaseTicket.objects.count() == 1


def test_a_failed_create_does_not_burn_the_idempotency_key(
    api_for: ApiFor, erin: Any, backends: tuple[str, str]
) -> None:
    client = api_for(erin)
    bad = client.post(
        "/api/v1/tickets/", _ticket_body(*backends, mechanisms=[]), format="json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert bad.status_code == 400
    good = client.post("/api/v1/tickets/", _ticket_body(*backends), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert good.status_code == 201


@pytest.mark.database
def test_the_ledger_api_lists_filters_searches_and_verifies(
    api_for: ApiFor, erin: Any, rita: Any, ticket_id: int
) -> None:
    client = api_for(erin)
    client.post(f"/api/v1/tickets/{ticket_id}/submit/")
    ReleaseTicket.objects.filter(pk=ticket_id).update(status=TicketStatus.EVALUATED)
    ticket_transition(
        ticket=ReleaseTicket.objects.get(pk=ticket_id),
        action="reject",
        actor=rita,
        reason="3-bit weights broke SQL joins",
    )

    listed = client.get("/api/v1/ledger/")
    assert listed.status_code == 200
    assert listed.data["count"] == LedgerEntry.objects.count()
    assert listed.data["results"][0]["kind"] == "ticket.rejected"

    by_ticket = client.get("/api/v1/ledger/", {"subject_type": "ticket", "subject_id": str(ticket_id)})
    assert [e["kind"] for e in by_ticket.data["results"]] == ["ticket.rejected", "ticket.submitted", "ticket.filed"]
    assert client.get("/api/v1/ledger/", {"actor": "rita"}).data["count"] == 1

    plans = client.get("/api/v1/ledger/", {"not_adopted": "true", "search": "SQL joins"})
    assert [e["payload"]["plan"]["candidate"]["name"] for e in plans.data["results"]] == ["kit-w3"]
    assert client.get("/api/v1/ledger/", {"not_adopted": "true", "search": "prefix"}).data["count"] == 0

    entry_id = listed.data["results"][0]["id"]
    assert client.get(f"/api/v1/ledger/{entry_id}/").data["hash"] == LedgerEntry.objects.get(pk=entry_id).hash
    assert client.get("/api/v1/ledger/verify/").data["ok"] is True
    assert client.post("/api/v1/ledger/", {}, format="json").status_code == 405


def test_the_openapi_schema_and_docs_are_served(client: Any, db: None) -> None:
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    text = schema.content.decode()
    assert "/api/v1/tickets/{id}/sign-off/" in text
    assert "/api/v1/ledger/verify/" in text
    assert client.get("/api/docs/").status_code == 200
