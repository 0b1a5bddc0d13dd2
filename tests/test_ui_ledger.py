"""The ledger browser (search, filters, not-adopted plans), chain verification, backend pages."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from gates.services import tickets as services
from ledger.models import LedgerEntry
from tests.factories import ticket_fields
from tests.ui_helpers import client_for, evaluated_ticket

pytestmark = [pytest.mark.database, pytest.mark.django_db]


def test_filters_narrow_the_ledger(draft: Any, erin: Any, rita: Any, baseline: Any) -> None:
    client = client_for(rita)
    every = client.get("/ledger/").context["page"].paginator.count
    assert every == LedgerEntry.objects.count() == 3  # two backends registered, one ticket filed
    kinds = lambda url: [e.kind for e in client.get(url).context["page"].object_list]  # noqa: E731
    assert kinds("/ledger/?kind=ticket.filed") == ["ticket.filed"]
    assert kinds(f"/ledger/?ticket={draft.pk}") == ["ticket.filed"]
    assert kinds("/ledger/?actor=erin") == ["ticket.filed", "backend.registered", "backend.registered"]
    assert kinds("/ledger/?actor=rita") == []
    assert kinds(f"/ledger/?backend={baseline.name}") == ["ticket.filed", "backend.registered"]
    assert kinds("/ledger/?q=knowledge+assistant") == ["ticket.filed"]
    today = dt.date.today().isoformat()
    assert len(kinds(f"/ledger/?since={today}&until={today}")) == 3
    assert kinds("/ledger/?until=2000-01-01") == []


def test_a_bad_filter_value_says_so(rita: Any) -> None:
    response = client_for(rita).get("/ledger/?ticket=abc&since=yesterday")
    assert response.status_code == 400
    assert set(response.context["form"].errors) == {"ticket", "since"}


def test_rejected_plans_stay_searchable_with_their_reason(
    erin: Any, rita: Any, bella: Any, baseline: Any, candidate: Any
) -> None:
    ticket, _ = evaluated_ticket("reject", erin, baseline, candidate)
    body = {"verdict": "reject", "reason_code": "guardrail_regression", "comment": "SQL accuracy drops"}
    assert client_for(rita).post(f"/tickets/{ticket.pk}/sign-off/", body).status_code == 302
    services.ticket_create(owner=erin, **ticket_fields(baseline, candidate, title="Adopted later"))
    response = client_for(bella).get("/ledger/?not_adopted=on")
    entries = list(response.context["page"].object_list)
    assert [e.kind for e in entries] == ["ticket.rejected"]
    html = response.content.decode()
    assert "Not adopted." in html and "SQL accuracy drops" in html
    assert "weight_quantization on kit-bf16-prefix-cache" in html
    found = client_for(bella).get("/ledger/?not_adopted=on&q=weight_quantization").context["page"].object_list
    assert [e.pk for e in found] == [entries[0].pk]


def test_verify_reports_an_intact_chain_and_a_broken_one(draft: Any, rita: Any) -> None:
    response = client_for(rita).get("/ledger/verify/")
    assert response.context["report"].ok and b"The hash chain holds: 3 entries" in response.content
    # Tamper with an entry behind the model's back (the model refuses edits).
    LedgerEntry.objects.filter(seq=2).values("id")  # the entry exists
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_ledgerentry SET subject_name = 'forged' WHERE seq = 2")
    response = client_for(rita).get("/ledger/verify/")
    assert not response.context["report"].ok
    assert b"entry #2" in response.content and b"does not match its hash" in response.content


def test_a_backend_page_shows_its_card_config_and_tickets(draft: Any, rita: Any, make_backend: Any) -> None:
    quant = make_backend(
        "kit-w4",
        model_revision="sha256:" + "44" * 32,
        engine_args={"quantization": "awq"},
        model_card={
            "quantization_method": "awq-w4g128",
            "calibration_set": "pile-512",
            "allowed_tasks": ["cs_summary"],
        },
    )
    response = client_for(rita).get(f"/backends/{quant.name}/")
    html = response.content.decode()
    assert "awq-w4g128" in html and "pile-512" in html and quant.fingerprint in html
    assert "&quot;quantization&quot;: &quot;awq&quot;" in html
    assert "No route sends traffic here." in html
    page = client_for(rita).get(f"/backends/{draft.candidate.name}/")
    assert [t.pk for t in page.context["tickets"]] == [draft.pk]
    assert client_for(rita).get("/backends/nope/").status_code == 404


def test_registering_a_backend_through_the_form(erin: Any, model_root: Any) -> None:
    (model_root / "kit-base").mkdir(exist_ok=True)
    body = {
        "name": "kit-fp8kv",
        "model_id": "optgate/kit-base",
        "model_path": str(model_root / "kit-base"),
        "model_revision": "r1",
        "engine_version": "0.32.0",
        "hardware_class": "cpu",
        "engine_args": '{"kv_cache_dtype": "fp8", "max_model_len": 2048}',
        "sampling_params": "{}",
        "prefix_cache_key_recipe": "",
        "allowed_tasks": ["cs_summary"],
        "quantization_method": "none",
        "next": "/tickets/new/?preset=fp8_kv",
    }
    response = client_for(erin).post("/backends/new/", body)
    assert response.status_code == 302 and response["Location"] == "/tickets/new/?preset=fp8_kv"
    entry = LedgerEntry.objects.get(kind="backend.registered")
    assert entry.payload["config"]["engine_args"] == {"kv_cache_dtype": "fp8", "max_model_len": 2048}
    assert entry.payload["model_card"]["allowed_tasks"] == ["cs_summary"]


def test_bad_engine_args_and_paths_are_named_on_the_form(erin: Any, rita: Any, model_root: Any) -> None:
    (model_root / "kit-base").mkdir(exist_ok=True)
    body = {
        "name": "kit-bad",
        "model_id": "m",
        "model_path": str(model_root / "kit-base"),
        "model_revision": "r1",
        "engine_version": "0.32.0",
        "hardware_class": "cpu",
        "engine_args": '{"kv_cache_dtype": "fp3"}',
    }
    response = client_for(erin).post("/backends/new/", body)
    assert response.status_code == 400
    assert response.context["form"].errors["engine_args"][0].startswith("kv_cache_dtype: ")
    response = client_for(erin).post("/backends/new/", {**body, "model_path": "/etc", "engine_args": "{}"})
    assert response.status_code == 400 and "model_path" in response.context["form"].errors
    response = client_for(erin).post("/backends/new/", {**body, "engine_args": "[1, 2]"})
    assert response.context["form"].errors["engine_args"] == ["must be a JSON object"]
    assert client_for(rita).get("/backends/new/").status_code == 403
