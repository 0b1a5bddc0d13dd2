"""The demo's terminal: one progress line per phase, rewritten in place on a terminal, sparse in a log."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest

from tests.ui_helpers import evaluated_ticket
from tools.demo.progress import CLEAR_LINE, ProgressLine, evaluation_text


class Clock:
    """Seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_on_a_terminal_a_phase_is_one_line_rewritten_in_place() -> None:
    out, clock = StringIO(), Clock()
    progress = ProgressLine(out, tty=True, clock=clock)
    progress.start("evaluations")
    for pct in (10, 20, 20, 30):
        clock.now += 5
        progress.update(f"#4 {pct}% quality cs_summary (task 1 of 2)")
    clock.now += 70
    progress.done("#4 needs evidence")
    text = out.getvalue()
    assert text.count("\n") == 1  # the whole phase ends as one line
    assert text.endswith(f"{CLEAR_LINE}evaluations: #4 needs evidence (1 min 30 s)\n")
    # Each change redraws the line once; a repeated state is not redrawn.
    assert text.count(CLEAR_LINE) == 1 + 3 + 1
    assert f"{CLEAR_LINE}evaluations: #4 30% quality cs_summary (task 1 of 2)" in text


def test_in_a_log_a_phase_prints_its_start_rare_updates_and_its_end() -> None:
    out, clock = StringIO(), Clock()
    progress = ProgressLine(out, tty=False, quiet_s=30, clock=clock)
    progress.start("kit")
    for _ in range(12):  # a minute of updates every five seconds
        clock.now += 5
        progress.update(f"checking {clock.now:.0f}")
    progress.done("shipped kit, checked")
    assert out.getvalue().splitlines() == [
        "kit: …",
        "kit: checking 130",
        "kit: checking 160",
        "kit: shipped kit, checked (1 min 00 s)",
    ]
    assert CLEAR_LINE not in out.getvalue()


def test_the_evaluation_line_shows_each_tickets_least_advanced_run_or_its_status() -> None:
    line = evaluation_text(
        [
            ("baseline run #3", "succeeded", [("succeeded", 100, "")]),
            ("#4", "evaluating", [("running", 71, "load knowledge_qa (task 2 of 2)"), ("running", 46, "quality x")]),
            ("#5", "submitted", [("queued", 0, "")]),
            ("#6", "needs_evidence", [("succeeded", 100, "done"), ("succeeded", 100, "done")]),
        ]
    )
    assert line == "baseline run #3 succeeded · #4 46% quality x · #5 0% queued · #6 needs evidence"


@pytest.mark.django_db
def test_the_demo_follows_its_tickets_on_one_line(erin: Any, baseline: Any, candidate: Any) -> None:
    from tools.management.commands.demo import Command

    ticket, _ = evaluated_ticket("reject", erin, baseline, candidate)
    out = StringIO()
    command = Command(stdout=out, no_color=True)
    command.follow([ticket], timeout=60)
    assert out.getvalue().splitlines()[1:] == ["evaluations: …", f"evaluations: #{ticket.pk} evaluated (0 s)"]
