"""Web UI access rules: sign-in required, CSRF enforced on every POST, user text rendered inert."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from gates.models import ReleaseTicket, TicketStatus
from gates.services import tickets as services
from tests.factories import ticket_fields
from tests.ui_helpers import client_for

pytestmark = pytest.mark.django_db

PAGES = (
    "/",
    "/tickets/",
    "/tickets/new/",
    "/backends/",
    "/backends/new/",
    "/routes/",
    "/reviews/",
    "/ledger/",
    "/ledger/verify/",
    "/kv-calculator/",
    "/runs/active/",
)


@pytest.mark.parametrize("url", PAGES)
def test_anonymous_visitors_are_sent_to_sign_in(url: str, db: None) -> None:
    response = client_for(None).get(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


def test_ticket_pages_need_sign_in_too(draft: ReleaseTicket) -> None:
    for url in (f"/tickets/{draft.pk}/", f"/tickets/{draft.pk}/edit/", f"/backends/{draft.baseline.name}/"):
        assert client_for(None).get(url).status_code == 302
    response = client_for(None).post(f"/tickets/{draft.pk}/action/", {"action": "submit"})
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    draft.refresh_from_db()
    assert draft.status == TicketStatus.DRAFT


def test_sign_in_page_signs_a_user_in(erin: Any) -> None:
    client = client_for(None, csrf=True)
    page = client.get(reverse("login"))
    assert page.status_code == 200 and b'<label for="id_username">' in page.content
    token = page.cookies["csrftoken"].value
    response = client.post(reverse("login"), {"username": "erin", "password": "pw-erin", "csrfmiddlewaretoken": token})
    assert response.status_code == 302 and response["Location"] == "/"
    assert b"My tickets" in client.get("/").content


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/tickets/new/", {"title": "x"}),
        ("/tickets/{pk}/action/", {"action": "submit"}),
        ("/tickets/{pk}/edit/", {"title": "changed"}),
        ("/tickets/{pk}/sign-off/", {"verdict": "approve", "reason_code": "evidence_sufficient"}),
        ("/backends/new/", {"name": "x"}),
    ],
)
def test_posts_without_a_csrf_token_are_refused(
    path: str, body: dict[str, str], draft: ReleaseTicket, erin: Any
) -> None:
    before = ReleaseTicket.objects.count()
    response = client_for(erin, csrf=True).post(path.format(pk=draft.pk), body)
    assert response.status_code == 403
    assert b"CSRF" in response.content
    draft.refresh_from_db()
    assert (draft.status, draft.title, ReleaseTicket.objects.count()) == (TicketStatus.DRAFT, draft.title, before)


def test_a_post_with_the_csrf_token_goes_through(draft: ReleaseTicket, erin: Any) -> None:
    client = client_for(erin, csrf=True)
    page = client.get(f"/tickets/{draft.pk}/")
    token = page.cookies["csrftoken"].value
    response = client.post(f"/tickets/{draft.pk}/action/", {"action": "submit", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.status == TicketStatus.SUBMITTED


def test_a_script_in_a_title_renders_inert_everywhere(erin: Any, rita: Any, baseline: Any, candidate: Any) -> None:
    evil = "<script>alert(1)</script>"
    fields = ticket_fields(
        baseline,
        candidate,
        title=evil,
        bottleneck_evidence=f"see {evil}",
        description=f"<img src=x onerror=alert(2)> {evil}",
    )
    ticket = services.ticket_create(owner=erin, **fields)
    client = client_for(rita)
    for url in (f"/tickets/{ticket.pk}/", "/tickets/", "/ledger/", "/ledger/?q=script", f"/backends/{baseline.name}/"):
        content = client.get(url).content.decode()
        assert evil not in content, url
        assert "<img src=x" not in content, url
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    mine = client_for(erin).get("/").content.decode()
    assert evil not in mine and "&lt;script&gt;" in mine


def test_a_redirect_after_registering_a_backend_stays_on_this_site(erin: Any, model_root: Any) -> None:
    (model_root / "kit-base").mkdir(exist_ok=True)
    body = {
        "name": "kit-x",
        "model_id": "optgate/kit-base",
        "model_path": str(model_root / "kit-base"),
        "model_revision": "r1",
        "engine_version": "0.32.0",
        "hardware_class": "cpu",
        "engine_args": "{}",
        "sampling_params": "{}",
        "prefix_cache_key_recipe": "{}",
        "next": "https://evil.example/",
    }
    response = client_for(erin).post("/backends/new/", body)
    assert response.status_code == 302 and response["Location"] == "/backends/kit-x/"
