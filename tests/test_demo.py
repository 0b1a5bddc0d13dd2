"""The README's first command, end to end: ``manage.py demo`` on embedded defaults.

The demo runs once per session in its own folder (SQLite database, file broker, logs) with real
workers, a real web server and vLLM-on-CPU (``tests/demo_evidence.py``); this checks what DEMO.md
promises a new user: the shipped kit used as it is, three tickets decided on measured evidence,
prefix caching passing every quality guardrail (approved unless the machine's timings hide the
TTFT gain), the low-bit candidate stopped with its failing samples kept, the ledger verified.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.demo_evidence import BASELINE, LOW_BIT, DemoEvidence
from tests.factories import assert_prefix_cache_judged

pytestmark = pytest.mark.engine


def test_the_demo_decides_its_three_tickets_on_measured_evidence(demo_evidence: DemoEvidence) -> None:
    output, stdout = demo_evidence.output, demo_evidence.stdout
    assert demo_evidence.returncode == 0, output[-4000:]

    decisions = dict(re.findall(r"^#\d+ (.+?): (\w+)$", stdout.split("==> decisions", 1)[1], re.MULTILINE))
    assert decisions["Prefix caching for the knowledge assistant"] in ("approve", "needs_evidence"), output[-4000:]
    assert decisions["Low-bit weights for the whole fleet"] in ("restrict", "reject"), output[-4000:]
    ngram_outcome = decisions["N-gram speculative decoding for templated summaries"]
    assert ngram_outcome in ("approve", "restrict", "reject", "needs_evidence")
    assert re.search(r"^ledger: \d+ entries, chain verified$", stdout, re.MULTILINE)
    assert "OptGate is running at http://127.0.0.1:" in stdout
    # The shipped kit, as it is: nothing trained, the same low-bit variant on every CPU.
    shipped = r"^    kit \w{16} shipped with the repository, .*; low-bit variant: w2g32$"
    assert re.search(shipped, stdout, re.MULTILINE)
    assert "kit train step" not in output
    for login in ("erin", "rita", "bella", "admin"):
        assert f"sign in as {login}" in stdout

    prefix = demo_evidence.decision("Prefix caching for the knowledge assistant")
    assert_prefix_cache_judged(prefix["outcome"], prefix["verdicts"])
    # The low-bit ticket keeps its failing samples for the side-by-side view.
    failing = [
        sample
        for task in ("cs_summary", "dataagent_nl2sql", "tool_calling")
        for sample in demo_evidence.samples(LOW_BIT, task)
        if not sample["passed"] and sample["failure_reason"]
    ]
    assert failing


def test_the_demos_baseline_engine_starts_once_and_stays_warm_for_each_ticket(demo_evidence: DemoEvidence) -> None:
    """One GPU worker evaluates the fleet's baseline answers, then the three tickets' pairs: each
    pair takes the baseline engine the run before it parked (evaluators.warm) instead of starting
    its own, and measures it afresh."""
    attempts = demo_evidence.query(
        "SELECT a.run_id, a.engine_pgid, a.artifacts, a.timings FROM evaluators_evaluationattempt a"
        " JOIN evaluators_evaluationrun r ON a.run_id = r.id JOIN ledger_backend b ON r.backend_id = b.id"
        " WHERE b.name = ? AND a.status = 'succeeded' ORDER BY a.id",
        BASELINE,
    )
    assert len(attempts) == 4, [dict(a) for a in attempts]  # the fleet's answers, then one per ticket
    first, *pairs = attempts
    assert "warm_engine" not in json.loads(first["artifacts"])
    previous_run = first["run_id"]
    for attempt in pairs:
        warm_engine = json.loads(attempt["artifacts"]).get("warm_engine")
        assert warm_engine is not None, dict(attempt)
        assert warm_engine["started_for_run"] == previous_run  # parked by the run just before
        assert attempt["engine_pgid"] == first["engine_pgid"]  # the same process all along
        previous_run = attempt["run_id"]
