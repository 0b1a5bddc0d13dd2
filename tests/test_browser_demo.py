"""In a real browser at 1400×1000, on the demo's own measured evidence: each of its three tickets'
pages says in the first screen what the decision rests on (the outcome, one row per task with the
numbers that decided it, the blocking findings once, the next action for the person looking), and a
reviewer signs off without scrolling.

The evidence is the demo's (``tests/demo_evidence.py``): this session's demo run, shared with the
real-engine tests and started by whichever of them comes first, or an earlier demo's folder named by
``OPTGATE_DEMO_VAR_DIR``. Hence the ``engine`` marker beside ``browser``: both put the test in the
slow half of ``scripts/test.sh``, one process after the fast tests, so in CI it always reads the
demo's database and never skips. The pages come from the project's web server (as the demo serves
them) on a copy of that database, since signing in writes to it. Screenshots of each first screen
land in ``artifacts/screenshots/demo-*.png`` for CI to keep.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from evaluators.processes import find_free_port
from gates.display import metric_display
from gates.selectors.summary import blocking_findings, deciding_metrics, not_measured
from tests.demo_evidence import DEMO_DATABASE, SERVICE_VARIABLES
from tests.test_browser import browser  # noqa: F401  (the Chromium fixture)
from tests.test_browser_summary import SCREENSHOTS, VIEWPORT
from tools.demo.fleet import DEMO_PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.engine]

# The demo's tickets: a name for the screenshot, and the outcomes tests/test_demo.py accepts for each.
DEMO_TICKETS = {
    # Approve, or needs evidence on timing alone (tests/factories.assert_prefix_cache_judged).
    "prefix-cache": ("Prefix caching for the knowledge assistant", {"approve", "needs_evidence"}),
    "low-bit": ("Low-bit weights for the whole fleet", {"reject"}),
    "ngram": (
        "N-gram speculative decoding for templated summaries",
        {"approve", "restrict", "reject", "needs_evidence"},
    ),
}
SERVER_START_S = 60.0


@pytest.fixture
def demo_server(demo_database_copy: Path, tmp_path: Path) -> Iterator[str]:
    """The project's web server on the copy of the demo's database, as ``manage.py demo`` starts it."""
    port = find_free_port()
    env = {key: value for key, value in os.environ.items() if key not in SERVICE_VARIABLES}
    env["OPTGATE_VAR_DIR"] = str(demo_database_copy)
    command = [sys.executable, "manage.py", "runserver", "--noreload", "--insecure", f"127.0.0.1:{port}"]
    log_path = tmp_path / "web.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(command, cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            assert server.poll() is None, f"the web server exited:\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no answer within {SERVER_START_S:.0f} s:\n{log_path.read_text()}"
            with (
                contextlib.suppress(urllib.error.URLError, ConnectionError),
                urllib.request.urlopen(f"{url}/accounts/login/", timeout=5) as answer,
            ):
                if answer.status == 200:
                    break
            time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def demo_ticket(var_dir: Path, title: str) -> dict[str, Any]:
    """The demo ticket with this title and its current decision (the latest binding one), as stored."""
    with contextlib.closing(sqlite3.connect(var_dir / DEMO_DATABASE)) as db:
        db.row_factory = sqlite3.Row
        ticket = db.execute("SELECT id, status FROM gates_releaseticket WHERE title = ? ORDER BY id DESC", (title,))
        row = ticket.fetchone()
        assert row is not None, f"the demo filed no ticket {title!r}"
        decision = db.execute(
            "SELECT outcome, verdicts, samples_needed FROM gates_gatedecision"
            " WHERE ticket_id = ? AND dry_run = 0 ORDER BY id DESC",
            (row["id"],),
        ).fetchone()
        assert decision is not None, f"the demo's ticket #{row['id']} {title!r} has no decision"
    return {
        "id": row["id"],
        "status": row["status"],
        "outcome": decision["outcome"],
        "verdicts": json.loads(decision["verdicts"]),
        "samples_needed": json.loads(decision["samples_needed"]),
    }


def signed_in(chromium: Any, base_url: str, username: str) -> Any:
    page = chromium.new_context(viewport=VIEWPORT, base_url=base_url).new_page()
    page.set_default_timeout(15_000)
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base_url}/")
    return page


def in_first_screen(page: Any, locator: Any) -> None:
    box = locator.bounding_box()
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"], box
    assert page.evaluate("window.scrollY") == 0


def test_each_demo_ticket_says_what_it_rests_on_and_a_reviewer_signs_off_from_the_first_screen(
    browser: Any,  # noqa: F811
    demo_server: str,
    demo_database_copy: Path,
) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    reviewer = signed_in(browser, demo_server, "rita")
    owner = signed_in(browser, demo_server, "erin")
    for name, (title, outcomes) in DEMO_TICKETS.items():
        stored = demo_ticket(demo_database_copy, title)
        verdicts: dict[str, Any] = stored["verdicts"]
        assert stored["outcome"] in outcomes, (title, stored["outcome"])
        reviewer.goto(f"/tickets/{stored['id']}/")
        summary = reviewer.locator("#summary")
        assert summary.is_visible()
        assert summary.locator("[data-testid=outcome]").inner_text() == stored["outcome"]

        # One row per judged task, in the decision's order: its verdict and the numbers that decided it.
        rows = summary.locator("table.summary-tasks tr[data-task]")
        assert [rows.nth(i).get_attribute("data-task") for i in range(rows.count())] == list(verdicts)
        for task, verdict in verdicts.items():
            row = summary.locator(f"table.summary-tasks tr[data-task={task}]")
            assert row.locator(".badge").first.inner_text() == verdict["status"]
            text = row.inner_text()
            deciding = deciding_metrics(verdict)
            # A task whose load was skipped (its ticket already rejected) says so instead of "— → —".
            unmeasured = not_measured(verdict)
            assert deciding or unmeasured, (task, verdict)
            for metric in deciding:
                shown = metric_display(metric)
                assert f"{shown['label']}: {shown['baseline']} → {shown['candidate']}" in text, (task, text)
            if unmeasured:
                said = row.locator("[data-testid=not-measured]").inner_text()
                assert said == f"Timing not measured: {unmeasured}", (task, said)
                assert "— → —" not in text, (task, text)
            needed = verdict.get("samples_needed") or stored["samples_needed"].get(task)
            if needed:
                assert f"+{needed:,} needed" in text, (task, text)

        # The blocking findings, each once on the screen a reviewer reads (the folds below are closed).
        findings = blocking_findings(verdicts)
        assert summary.locator("ul.findings li").all_inner_texts() == [f"{f['task']}: {f['text']}" for f in findings]
        if stored["outcome"] in ("reject", "restrict", "needs_evidence"):
            assert findings, (title, verdicts)
        assert reviewer.locator("details.fold[open]").count() == 0
        page_text = reviewer.locator("main").inner_text()
        for finding in findings:
            assert page_text.count(finding["text"]) == 1, finding

        # The next action for the person looking, and their control for it in the first screen.
        next_action = summary.locator(".next-action")
        if stored["status"] == "evaluated":
            assert next_action.get_attribute("data-action") == "sign_off"
            assert f"the policy proposes {stored['outcome']}" in next_action.inner_text()
            in_first_screen(reviewer, reviewer.locator("form[action$='/sign-off/'] button[type=submit]"))
        elif stored["status"] == "default":
            # The approved ticket went through its canary in the demo: nothing waits; its rounds, one
            # line each, end with the one that proposed the promotion.
            assert next_action.get_attribute("data-action") == "none"
            reviewer.locator("#canary-fold summary").click()
            rounds = reviewer.locator("ol.canary-rounds li")
            assert rounds.count() >= 2
            assert "pass, propose promote" in rounds.last.inner_text().lower()
            reviewer.screenshot(path=str(SCREENSHOTS / f"demo-{name}-canary.png"), full_page=True)
            reviewer.locator("#canary-fold summary").click()
        else:
            # Needs evidence: nothing to sign yet; the owner evaluates again with the samples named.
            assert stored["status"] == "needs_evidence", stored["status"]
            assert next_action.get_attribute("data-action") == "evaluate_again"
            assert reviewer.locator("form[action$='/sign-off/']").count() == 0
            for task, more in stored["samples_needed"].items():
                assert f"{task} about {more:,} more" in next_action.inner_text()
            owner.goto(f"/tickets/{stored['id']}/")
            assert owner.locator("#summary .next-action").get_attribute("data-action") == "evaluate_again"
            in_first_screen(owner, owner.get_by_role("button", name="Evaluate again"))
            owner.screenshot(path=str(SCREENSHOTS / f"demo-{name}-owner.png"))
        reviewer.screenshot(path=str(SCREENSHOTS / f"demo-{name}.png"))
        assert (SCREENSHOTS / f"demo-{name}.png").stat().st_size > 10_000
