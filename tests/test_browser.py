"""End to end in a real browser: an engineer files a ticket through the form, a reviewer restricts it,
and the route table shows the change. Headless Debian Chromium driven by Playwright against the
live test server; screenshots land in ``artifacts/screenshots/`` (gitignored) for people to look at.

Chromium comes from ``scripts/install-browser.sh`` (Debian's package; Playwright cannot download
browsers here).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from core.queue import EVALUATE_TICKET
from gates.models import ReleaseTicket, RouteTableVersion, TicketStatus
from gates.services import decisions
from gates.services import tickets as services
from tests.factories import drop_passes, outcomes, store_run, task_spec

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Kept by CI (scripts/test.sh names the folder); OPTGATE_SCREENSHOTS_DIR puts them elsewhere.
SCREENSHOTS = Path(os.environ.get("OPTGATE_SCREENSHOTS_DIR") or Path(settings.BASE_DIR) / "artifacts" / "screenshots")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/install-browser.sh (as root) before the browser tests")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are still
    # plain synchronous code, so Django's async-safety guard would misfire.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def sign_in(browser: Any, base_url: str, username: str) -> Any:
    page = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=base_url).new_page()
    page.set_default_timeout(15_000)
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(f"pw-{username}")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base_url}/")
    return page


def judge_as_restrict(ticket: ReleaseTicket) -> None:
    """Test set-up standing in for the workers: evaluate, store both runs, let the judge rule."""
    services.ticket_transition(ticket=ticket, action="start_evaluation", actor=None)
    good = outcomes(200, 0.9, 1)
    base = store_run(ticket.baseline, {"cs_summary": task_spec(good, seed=1), "knowledge_qa": task_spec(good, seed=2)})
    cand = store_run(
        ticket.candidate,
        {"cs_summary": task_spec(good, speed=0.7, seed=1), "knowledge_qa": task_spec(drop_passes(good, 10), seed=2)},
    )
    ReleaseTicket.objects.filter(pk=ticket.pk).update(baseline_run=base, candidate_run=cand)
    decision = decisions.decision_make(ticket=ReleaseTicket.objects.get(pk=ticket.pk))
    assert decision.outcome == "restrict", decision.reasons


def test_an_engineer_files_a_reviewer_restricts_and_the_route_table_shows_it(
    browser: Any, live_server: Any, erin: Any, rita: Any, baseline: Any, candidate: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = live_server.url
    sent: list[int] = []
    # No worker in this test: the evaluation request is captured, and the set-up below plays the worker.
    monkeypatch.setattr(
        "core.queue.enqueue", lambda name, *args, task_id=None: sent.extend(args if name == EVALUATE_TICKET else [])
    )
    engineer = sign_in(browser, url, "erin")

    # File the ticket through the form, starting from the batching preset.
    engineer.goto("/tickets/new/")
    engineer.get_by_label("Optimization").select_option("batching")
    engineer.get_by_role("button", name="Apply preset").click()
    engineer.screenshot(path=str(SCREENSHOTS / "ticket-form.png"), full_page=True)
    assert engineer.locator("#id_mechanisms").get_by_label("batching", exact=True).is_checked()
    engineer.get_by_label("Title").fill("Larger batches for templated summaries")
    engineer.get_by_label("Bottleneck", exact=True).select_option("decode")
    engineer.get_by_label("Bottleneck evidence").fill("TPOT is 70% of E2E on summaries at peak")
    engineer.get_by_label("Baseline", exact=True).select_option(str(baseline.pk))
    engineer.get_by_label("Candidate", exact=True).select_option(str(candidate.pk))
    engineer.locator("#id_beneficiary_tasks").get_by_label("cs_summary", exact=False).check()
    engineer.locator("#id_risk_tasks").get_by_label("knowledge_qa", exact=False).check()
    engineer.get_by_label("Rollback target", exact=True).select_option(str(baseline.pk))
    engineer.get_by_label("What rolling back gives up").fill("the throughput gain")
    engineer.get_by_label("Warm-up the rollback target needs").fill("none: the baseline stays loaded")
    engineer.get_by_label("What happens to streams in flight").fill("finish on the candidate")
    engineer.get_by_label("How the gateway route changes").fill("cs_summary back to kit-bf16")
    engineer.get_by_label("Canary tenants").fill("tenant-a")
    engineer.get_by_role("button", name="File ticket").click()
    engineer.wait_for_url("**/tickets/*/")
    ticket = ReleaseTicket.objects.get()
    assert ticket.title == "Larger batches for templated summaries" and ticket.mechanisms == ["batching"]
    engineer.get_by_role("button", name="Submit for evaluation").click()
    engineer.wait_for_url("**/tickets/*/#status")
    assert "Submitted" in engineer.locator("#status").inner_text()
    assert sent == [ticket.pk]

    judge_as_restrict(ReleaseTicket.objects.get(pk=ticket.pk))

    # The reviewer reads the evidence and restricts the candidate to cs_summary.
    reviewer = sign_in(browser, url, "rita")
    assert "Larger batches for templated summaries" in reviewer.locator("#waiting-h + table").inner_text()
    reviewer.goto(f"/tickets/{ticket.pk}/")
    assert reviewer.locator("svg.chart").count() == 12
    # The evidence below the decision summary is folded; open every fold to read and photograph it.
    reviewer.evaluate("document.querySelectorAll('details.fold').forEach(d => d.open = true)")
    captions = reviewer.locator("section[aria-labelledby=verdicts] caption").all_inner_texts()
    assert any(text.startswith("knowledge_qa (risk): fail") for text in captions), captions
    reviewer.screenshot(path=str(SCREENSHOTS / "ticket-evaluated.png"), full_page=True)
    for section in ("plan", "verdicts", "samples", "review"):
        reviewer.locator(f"section[aria-labelledby={section}]").screenshot(
            path=str(SCREENSHOTS / f"ticket-{section}.png")
        )
    form = reviewer.locator("form[action$='/sign-off/']")
    form.get_by_label("Restrict").check()
    assert form.get_by_label("cs_summary").is_checked() and not form.get_by_label("knowledge_qa").is_checked()
    form.get_by_label("Reason code").select_option("guardrail_regression")
    form.get_by_label("Comment").fill("citations regress on knowledge_qa; keep it on the baseline")
    form.get_by_role("button", name="Sign off").click()
    reviewer.wait_for_url("**/tickets/*/#review")
    assert "Restricted" in reviewer.locator("#status").inner_text()
    assert ReleaseTicket.objects.get(pk=ticket.pk).status == TicketStatus.RESTRICTED

    # The route page shows the signed change waiting for its canary...
    reviewer.goto("/routes/")
    pending = reviewer.locator("#pending + table").inner_text()
    assert "cs_summary" in pending and candidate.name in pending and "stays on the baseline" in pending

    # ...and once the owner starts the canary, the table itself carries it.
    engineer.goto(f"/tickets/{ticket.pk}/")
    engineer.get_by_role("button", name="Start canary").click()
    engineer.wait_for_url("**/tickets/*/#status")
    reviewer.goto("/routes/")
    current = reviewer.locator("table").first.inner_text()
    assert "cs_summary" in current and "tenant-a" in current and candidate.name in current
    assert RouteTableVersion.objects.get().changes == [
        {"task": "cs_summary", "tenant": "tenant-a", "from": None, "to": candidate.name}
    ]
    reviewer.screenshot(path=str(SCREENSHOTS / "routes.png"), full_page=True)
    reviewer.goto(f"/tickets/{ticket.pk}/")
    reviewer.screenshot(path=str(SCREENSHOTS / "ticket-canary.png"), full_page=True)
    for name, path in (("dashboard", "/"), ("ledger", "/ledger/"), ("backend", f"/backends/{candidate.name}/")):
        reviewer.goto(path)
        reviewer.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    assert (SCREENSHOTS / "ticket-evaluated.png").stat().st_size > 10_000
    assert os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE") == "true"


def test_the_skip_link_is_the_first_stop_for_keyboard_users(browser: Any, live_server: Any, erin: Any) -> None:
    page = sign_in(browser, live_server.url, "erin")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"


@pytest.fixture
def served_static(settings: Any) -> None:
    # The project's vendored static/ folder (htmx); settings.STATICFILES_DIRS names it in production.
    folder = Path(settings.BASE_DIR) / "static"
    if folder not in [Path(p) for p in getattr(settings, "STATICFILES_DIRS", [])]:
        settings.STATICFILES_DIRS = [*getattr(settings, "STATICFILES_DIRS", []), folder]


def test_progress_and_sample_filters_refresh_in_place_with_htmx(
    browser: Any, live_server: Any, served_static: None, erin: Any, baseline: Any, candidate: Any
) -> None:
    from evaluators.models import EvaluationRun, RunStatus
    from tests.ui_helpers import evaluated_ticket

    ticket, _ = evaluated_ticket("restrict", erin, baseline, candidate)
    run = EvaluationRun.objects.create(
        backend=candidate,
        tasks=["cs_summary"],
        engine_version="0.32.0",
        hardware_class="cpu",
        reuse_key="live",
        status=RunStatus.RUNNING,
        phase="quality cs_summary",
        progress=10,
    )
    page = sign_in(browser, live_server.url, "erin")
    progress = page.locator("#runs progress")
    assert progress.get_attribute("value") == "10"
    assert page.evaluate("typeof window.htmx") == "object"
    EvaluationRun.objects.filter(pk=run.pk).update(progress=60, phase="performance cs_summary")
    page.wait_for_function("document.querySelector('#runs progress').value == 60", timeout=10_000)
    assert "performance cs_summary" in page.locator("#runs").inner_text()

    page.goto(f"/tickets/{ticket.pk}/#samples")
    page.evaluate("window.__marker = 'same page'")
    page.locator("#samples-block select[name=show]").select_option("any_failed")
    page.wait_for_function("document.querySelector('#samples-block [role=status]').textContent.includes('56')")
    # Swapped in place: the page (and its marker) survived, no full navigation happened.
    assert page.evaluate("window.__marker") == "same page"
