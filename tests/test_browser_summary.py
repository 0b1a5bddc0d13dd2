"""In a real browser at 1400×1000: the decision summary of three judged tickets (approve, restrict,
reject) says what the decision rests on, and a reviewer signs off without scrolling past it.
Screenshots land in ``artifacts/screenshots/`` (``OPTGATE_SCREENSHOTS_DIR`` overrides) for CI to
keep. Set-up and Chromium as in ``tests/test_browser.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from gates.models import ReleaseTicket, TicketStatus
from tests.test_browser import browser  # noqa: F401  (the Chromium fixture)
from tests.ui_helpers import evaluated_ticket

VIEWPORT = {"width": 1400, "height": 1000}
SCREENSHOTS = Path(os.environ.get("OPTGATE_SCREENSHOTS_DIR") or Path(settings.BASE_DIR) / "artifacts" / "screenshots")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

# Per scenario: the outcome, each task's verdict, and the tasks with blocking findings.
EXPECTED = {
    "approve": ("approve", {"cs_summary": "pass", "code_assistant": "pass"}, []),
    "restrict": ("restrict", {"cs_summary": "pass", "knowledge_qa": "fail"}, ["knowledge_qa"]),
    "reject": ("reject", {"cs_summary": "pass", "dataagent_nl2sql": "fail"}, ["dataagent_nl2sql"]),
}


def reviewer_page(chromium: Any, base_url: str, username: str) -> Any:
    page = chromium.new_context(viewport=VIEWPORT, base_url=base_url).new_page()
    page.set_default_timeout(15_000)
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(f"pw-{username}")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base_url}/")
    return page


def test_the_summary_says_what_each_decision_rests_on_and_sign_off_is_in_the_first_screen(
    browser: Any,  # noqa: F811
    live_server: Any,
    erin: Any,
    rita: Any,
    baseline: Any,
    candidate: Any,
) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    tickets = {name: evaluated_ticket(name, erin, baseline, candidate)[0] for name in EXPECTED}
    page = reviewer_page(browser, live_server.url, "rita")
    for name, ticket in tickets.items():
        outcome, verdicts, blocked = EXPECTED[name]
        page.goto(f"/tickets/{ticket.pk}/")
        summary = page.locator("#summary")
        assert summary.is_visible()
        assert summary.locator("[data-testid=outcome]").inner_text() == outcome
        for task, status in verdicts.items():
            row = summary.locator(f"table.summary-tasks tr[data-task={task}]")  # not the stages' looks
            assert row.locator(".badge").first.inner_text() == status
            # The numbers that decided it, in their units: an arrow between the two sides.
            assert "→" in row.inner_text()
        findings = summary.locator("ul.findings li").all_inner_texts()
        assert [text.split(":")[0] for text in findings] == blocked
        # Everything else waits folded below: no chart is on screen until a fold is opened.
        assert page.locator("details.fold[open]").count() == 0
        assert not page.locator("svg.chart").first.is_visible()
        # A reviewer signs off from the first screen: the form's button is inside the viewport.
        button = page.locator("form[action$='/sign-off/'] button[type=submit]")
        box = button.bounding_box()
        assert box is not None and box["y"] + box["height"] <= VIEWPORT["height"], box
        assert page.evaluate("window.scrollY") == 0
        page.screenshot(path=str(SCREENSHOTS / f"summary-{name}.png"))

    # Sign the restriction off from that first screen, without scrolling.
    page.goto(f"/tickets/{tickets['restrict'].pk}/")
    form = page.locator("form[action$='/sign-off/']")
    form.get_by_label("Restrict").check()
    form.get_by_label("Reason code").select_option("guardrail_regression")
    assert page.evaluate("window.scrollY") == 0
    form.get_by_role("button", name="Sign off").click()
    page.wait_for_url("**/tickets/*/#review")
    assert ReleaseTicket.objects.get(pk=tickets["restrict"].pk).status == TicketStatus.RESTRICTED
    assert page.locator("#summary .next-action").get_attribute("data-action") == "start_canary"
    page.screenshot(path=str(SCREENSHOTS / "summary-restrict-signed.png"))
    assert (SCREENSHOTS / "summary-restrict.png").stat().st_size > 10_000
