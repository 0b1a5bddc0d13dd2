"""The README's first command, end to end: ``manage.py demo`` on embedded defaults.

Runs the demo in its own folder (SQLite database, file broker, logs) with real workers, a real
web server and vLLM-on-CPU, and checks what DEMO.md promises a new user: three tickets decided on
measured evidence, prefix caching passing every quality guardrail (approved unless the machine's
timings hide the TTFT gain), the low-bit candidate stopped, the ledger verified.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from evaluators.engine import find_free_port
from tests.conftest import assert_prefix_cache_judged

pytestmark = pytest.mark.engine

# The demo runs on embedded defaults: nothing from a PostgreSQL/Redis test environment may leak in.
SERVICE_VARIABLES = ("DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "REDIS_URL", "OPTGATE_EMBEDDED")


def test_the_demo_decides_its_three_tickets_on_measured_evidence(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key not in SERVICE_VARIABLES}
    env["OPTGATE_VAR_DIR"] = str(tmp_path)
    command = [sys.executable, "manage.py", "demo", "--no-serve", "--port", str(find_free_port()), "--timeout", "1800"]
    done = subprocess.run(
        command, cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=2400, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]

    decisions = dict(re.findall(r"^#\d+ (.+?): (\w+)$", done.stdout.split("==> decisions", 1)[1], re.MULTILINE))
    assert decisions["Prefix caching for the knowledge assistant"] in ("approve", "needs_evidence"), output[-4000:]
    assert decisions["Low-bit weights for the whole fleet"] in ("restrict", "reject"), output[-4000:]
    assert decisions["N-gram speculative decoding for templated summaries"] in (
        "approve", "restrict", "reject", "needs_evidence"
    )  # fmt: skip
    assert re.search(r"^ledger: \d+ entries, chain verified$", done.stdout, re.MULTILINE)
    assert "OptGate is running at http://127.0.0.1:" in done.stdout
    # The shipped kit, as it is: nothing trained, the same low-bit variant on every CPU.
    shipped = r"^    kit \w{16} shipped with the repository, .*; low-bit variant: w2g32$"
    assert re.search(shipped, done.stdout, re.MULTILINE)
    assert "kit train step" not in output
    for login in ("erin", "rita", "bella", "admin"):
        assert f"sign in as {login}" in done.stdout

    # The low-bit ticket keeps its failing samples for the side-by-side view: read the demo's database.
    with sqlite3.connect(tmp_path / "optgate.sqlite3") as db:
        outcome, verdicts = db.execute(
            "SELECT d.outcome, d.verdicts FROM gates_gatedecision d JOIN gates_releaseticket t ON d.ticket_id = t.id"
            " WHERE t.title = 'Prefix caching for the knowledge assistant' ORDER BY d.created_at DESC"
        ).fetchone()
        failing = db.execute(
            "SELECT COUNT(*) FROM evaluators_samplerecord s JOIN gates_releaseticket t ON s.run_id = t.candidate_run_id"
            " WHERE t.title = 'Low-bit weights for the whole fleet' AND NOT s.passed AND s.failure_reason != ''"
        ).fetchone()[0]
    assert failing > 0
    assert_prefix_cache_judged(outcome, json.loads(verdicts))
