"""The versioned route table: canary, promotion after the window, per-task rollback, exports."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
import time_machine
import yaml
from django.utils import timezone

from core.errors import DomainError, InvalidInput, NotAllowed
from gates.models import ReleaseTicket, Route, RouteTableVersion, TicketStatus
from gates.selectors.routes import route_history, route_table
from gates.services import routing, signoff
from ledger.models import LedgerEntry
from ledger.selectors import ledger_verify
from tests.factories import decided

pytestmark = pytest.mark.django_db


def table() -> dict[tuple[str, str], str]:
    return {(r.task.slug, r.tenant): r.backend.name for r in route_table()}


@pytest.fixture
def seeded(ada: Any, baseline: Any) -> None:
    """Every task of the tests starts on the baseline."""
    for task in ("cs_summary", "code_assistant", "knowledge_qa"):
        routing.routes_set(task=task, backend=baseline, actor=ada, reason="initial fleet")


@pytest.fixture
def approved(seeded: None, erin: Any, rita: Any, baseline: Any, candidate: Any) -> ReleaseTicket:
    ticket = decided("approve", erin, baseline, candidate)
    assert signoff.signoff_record(ticket=ticket, actor=rita, verdict="approve", reason_code="evidence_sufficient").moved
    ticket.refresh_from_db()
    return ticket


def in_default(ticket: ReleaseTicket, erin: Any, rita: Any) -> ReleaseTicket:
    routing.routes_start_canary(ticket=ticket, actor=erin)
    with time_machine.travel(timezone.now() + timedelta(hours=ticket.observation_window_hours + 1)):
        return routing.routes_promote(ticket=ticket, actor=rita, reason="window clean")


def test_each_change_is_a_new_readable_version(seeded: None, ada: Any, candidate: Any) -> None:
    assert RouteTableVersion.objects.count() == 3
    v1 = {(r.task.slug, r.tenant) for r in route_table(version=1)}
    assert v1 == {("cs_summary", "")}
    assert set(table()) == {("cs_summary", ""), ("code_assistant", ""), ("knowledge_qa", "")}
    history = route_history()[0]
    assert history.number == 3 and history.changes == [
        {"task": "knowledge_qa", "tenant": None, "from": None, "to": "kit-bf16"}
    ]
    with pytest.raises(DomainError, match="already says this"):
        routing.routes_set(
            task="knowledge_qa",
            backend=Route.objects.get(version__number=3, task__slug="knowledge_qa").backend,
            actor=ada,
            reason="again",
        )


def test_only_admins_set_routes_by_hand(db: None, rita: Any, erin: Any, baseline: Any) -> None:
    for person in (rita, erin):
        with pytest.raises(NotAllowed):
            routing.routes_set(task="cs_summary", backend=baseline, actor=person, reason="why not")
    assert not RouteTableVersion.objects.exists()


def test_canary_routes_the_signed_tasks_for_the_canary_tenants_only(approved: ReleaseTicket, erin: Any) -> None:
    ticket = routing.routes_start_canary(ticket=approved, actor=erin)
    assert ticket.status == TicketStatus.CANARY
    assert table() == {
        ("cs_summary", ""): "kit-bf16",
        ("code_assistant", ""): "kit-bf16",
        ("knowledge_qa", ""): "kit-bf16",
        ("cs_summary", "tenant-a"): "kit-bf16-prefix-cache",
        ("code_assistant", "tenant-a"): "kit-bf16-prefix-cache",
    }
    assert RouteTableVersion.objects.get(number=4).kind == "canary"


def test_promotion_waits_for_the_observation_window(approved: ReleaseTicket, erin: Any, rita: Any) -> None:
    routing.routes_start_canary(ticket=approved, actor=erin)
    with pytest.raises(DomainError, match="observation window"):
        routing.routes_promote(ticket=approved, actor=rita)
    with time_machine.travel(timezone.now() + timedelta(hours=73)):
        ticket = routing.routes_promote(ticket=approved, actor=rita, reason="window clean")
    assert ticket.status == TicketStatus.DEFAULT
    # The candidate is now the default; the canary's tenant routes are gone.
    assert table() == {
        ("cs_summary", ""): "kit-bf16-prefix-cache",
        ("code_assistant", ""): "kit-bf16-prefix-cache",
        ("knowledge_qa", ""): "kit-bf16",
    }


def test_rollback_moves_only_the_chosen_task(approved: ReleaseTicket, erin: Any, rita: Any) -> None:
    ticket = in_default(approved, erin, rita)
    before = LedgerEntry.objects.count()
    version = routing.routes_rollback(
        ticket=ticket, actor=erin, reason="code suggestions truncated", task="code_assistant"
    )
    assert version.changes == [
        {"task": "code_assistant", "tenant": None, "from": "kit-bf16-prefix-cache", "to": "kit-bf16"}
    ]
    assert table() == {
        ("cs_summary", ""): "kit-bf16-prefix-cache",
        ("code_assistant", ""): "kit-bf16",
        ("knowledge_qa", ""): "kit-bf16",
    }
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.DEFAULT  # cs_summary still runs on the candidate
    entry = LedgerEntry.objects.get(kind="route.rollback")
    assert entry.payload["reason"] == "code suggestions truncated" and entry.payload["ticket"] == ticket.pk
    assert LedgerEntry.objects.count() == before + 1
    assert ledger_verify().ok


def test_rolling_back_all_of_a_tickets_tasks_moves_the_ticket(approved: ReleaseTicket, erin: Any, rita: Any) -> None:
    routing.routes_start_canary(ticket=approved, actor=erin)
    version = routing.routes_rollback(ticket=approved, actor=rita, reason="tenant-a complaints")
    assert {(c["task"], c["tenant"]) for c in version.changes} == {
        ("cs_summary", "tenant-a"),
        ("code_assistant", "tenant-a"),
    }
    assert "kit-bf16-prefix-cache" not in table().values()
    approved.refresh_from_db()
    assert approved.status == TicketStatus.ROLLED_BACK
    assert LedgerEntry.objects.get(kind="ticket.rolled_back").payload["details"]["route_version"] == version.number
    assert ledger_verify().ok
    with pytest.raises(DomainError, match="rolled_back"):
        routing.routes_rollback(ticket=approved, actor=rita, reason="again")


def test_rollback_needs_a_reason_a_known_task_and_a_permitted_person(
    approved: ReleaseTicket, erin: Any, evan: Any, rita: Any
) -> None:
    ticket = in_default(approved, erin, rita)
    with pytest.raises(InvalidInput, match="reason"):
        routing.routes_rollback(ticket=ticket, actor=erin, reason=" ")
    with pytest.raises(InvalidInput, match="does not route"):
        routing.routes_rollback(ticket=ticket, actor=erin, reason="x", task="knowledge_qa")
    with pytest.raises(NotAllowed):
        routing.routes_rollback(ticket=ticket, actor=evan, reason="not my ticket")


def test_routes_cannot_start_without_a_signed_decision(seeded: None, erin: Any, baseline: Any, candidate: Any) -> None:
    ticket = decided("approve", erin, baseline, candidate)
    with pytest.raises(DomainError, match="no signed approval"):
        routing.routes_start_canary(ticket=ticket, actor=erin)


def test_a_restricted_ticket_routes_only_its_passing_tasks(
    seeded: None, erin: Any, rita: Any, baseline: Any, candidate: Any
) -> None:
    ticket = decided("restrict", erin, baseline, candidate)
    signoff.signoff_record(ticket=ticket, actor=rita, verdict="restrict", reason_code="guardrail_regression")
    routing.routes_start_canary(ticket=ticket, actor=erin)
    assert ("knowledge_qa", "tenant-a") not in table()
    assert table()[("cs_summary", "tenant-a")] == "kit-bf16-prefix-cache"


def test_the_routes_api_reads_history_and_rolls_back(
    api_for: Any, approved: ReleaseTicket, erin: Any, olga: Any, rita: Any
) -> None:
    ticket = in_default(approved, erin, rita)
    current = api_for(olga).get("/api/v1/routes/")
    assert current.status_code == 200 and current.data["version"] == 5
    assert {r["name"] for r in current.data["routes"]} == {"cs_summary", "code_assistant", "knowledge_qa"}
    old = api_for(olga).get("/api/v1/routes/?version=1")
    assert [r["name"] for r in old.data["routes"]] == ["cs_summary"]
    history = api_for(olga).get("/api/v1/routes/history/")
    assert [v["number"] for v in history.data["results"]] == [5, 4, 3, 2, 1]
    assert history.data["results"][0]["kind"] == "promote" and history.data["results"][0]["ticket"] == ticket.pk

    url, body = f"/api/v1/tickets/{ticket.pk}/roll-back/", {"task": "cs_summary", "reason": "summaries lost facts"}
    assert api_for(olga).post(url, body, format="json").status_code == 403
    rolled = api_for(erin).post(url, body, format="json")
    assert rolled.status_code == 200 and rolled.data["status"] == "default"  # its other tasks stay on the candidate
    latest = api_for(olga).get("/api/v1/routes/history/").data["results"][0]
    assert latest["kind"] == "rollback" and latest["number"] == 6
    assert latest["changes"] == [
        {"task": "cs_summary", "tenant": None, "from": "kit-bf16-prefix-cache", "to": "kit-bf16"}
    ]
    assert api_for(erin).post(url, body, format="json").status_code == 409


def test_the_canary_and_promote_api(api_for: Any, approved: ReleaseTicket, erin: Any, rita: Any) -> None:
    started = api_for(erin).post(f"/api/v1/tickets/{approved.pk}/start-canary/", format="json")
    assert started.status_code == 200 and started.data["status"] == "canary"
    early = api_for(rita).post(f"/api/v1/tickets/{approved.pk}/promote/", format="json")
    assert early.status_code == 409 and "observation window" in early.data["detail"]


def test_the_json_export_parses_and_names_every_route(
    api_for: Any, approved: ReleaseTicket, erin: Any, olga: Any
) -> None:
    routing.routes_start_canary(ticket=approved, actor=erin)
    response = api_for(olga).get("/api/v1/routes/export/?format=json")
    assert response.status_code == 200
    data = json.loads(response.content)
    assert data["format"] == "optgate.routes/v1" and data["version"] == 4
    names = {route["name"] for route in data["routes"]}
    assert names == {"cs_summary", "code_assistant", "knowledge_qa", "cs_summary@tenant-a", "code_assistant@tenant-a"}
    for route in data["routes"]:
        assert set(route) >= {"name", "task", "tenant", "backend", "served_model_name", "api_base", "prefix_cache"}
        assert route["backend"]["fingerprint"] and route["api_base"].startswith("http")
        assert route["served_model_name"] == route["backend"]["name"]


def test_the_litellm_export_has_the_router_config_shape(
    api_for: Any, approved: ReleaseTicket, erin: Any, olga: Any
) -> None:
    routing.routes_start_canary(ticket=approved, actor=erin)
    response = api_for(olga).get("/api/v1/routes/export/?format=litellm")
    assert response.status_code == 200
    config = yaml.safe_load(yaml.safe_dump(json.loads(response.content)))
    assert set(config) == {"model_list", "router_settings"}
    entries = {entry["model_name"]: entry for entry in config["model_list"]}
    assert set(entries) == {
        "cs_summary",
        "code_assistant",
        "knowledge_qa",
        "cs_summary@tenant-a",
        "code_assistant@tenant-a",
    }
    canary = entries["cs_summary@tenant-a"]["litellm_params"]
    assert canary["model"] == "openai/kit-bf16-prefix-cache"
    assert canary["api_base"] == "http://kit-bf16-prefix-cache:8000/v1"
    assert canary["api_key"].startswith("os.environ/")
    for entry in config["model_list"]:
        assert set(entry) == {"model_name", "litellm_params", "model_info"}
        assert entry["litellm_params"]["model"].startswith("openai/")
        assert isinstance(entry["model_info"]["id"], str)
    assert api_for(olga).get("/api/v1/routes/export/?format=xml").status_code == 400


@pytest.mark.database
def test_reading_the_table_costs_the_same_queries_however_long_it_is(
    api_for: Any, approved: ReleaseTicket, erin: Any, olga: Any
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = api_for(olga)
    client.get("/api/v1/routes/")  # warm the token lookup path
    with CaptureQueriesContext(connection) as short:
        assert len(client.get("/api/v1/routes/").data["routes"]) == 3
    routing.routes_start_canary(ticket=approved, actor=erin)
    with CaptureQueriesContext(connection) as longer:
        assert len(client.get("/api/v1/routes/").data["routes"]) == 5
    assert len(longer) == len(short)
