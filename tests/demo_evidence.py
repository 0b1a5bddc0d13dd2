"""The README's main job, run once per test session, and the evidence it measured.

``manage.py demo --no-serve`` starts its own workers and web server on embedded defaults and
evaluates its three tickets on vLLM-on-CPU with the shipped kit: one baseline run over all six
task types and one run each of the prefix-caching, low-bit and n-gram candidates. Those are the
same four engine configurations the real-engine tests need, so they read this run's database
instead of starting the same engines a second time (a start costs 30–50 s on two cores).

``demo_database_copy`` hands a test a private copy of that database, for a test that writes to it
(a web server's sign-ins do). ``OPTGATE_DEMO_VAR_DIR`` names the folder of an earlier demo instead
(``make demo`` leaves its database in ``var/``), so such a test can be rerun without the demo.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from evaluators.processes import find_free_port

# The demo runs on embedded defaults: nothing from a PostgreSQL/Redis test environment may leak in.
SERVICE_VARIABLES = ("DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "REDIS_URL", "OPTGATE_EMBEDDED")
BASELINE = "kit-bf16"
PREFIX_CACHE = "kit-bf16-prefix-cache"
LOW_BIT = "kit-w2g32"
NGRAM = "kit-bf16-ngram"


@dataclass
class DemoEvidence:
    """What one demo run printed and stored (its SQLite database, read directly)."""

    returncode: int
    stdout: str
    stderr: str
    var_dir: Path

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def query(self, sql: str, *params: Any) -> list[sqlite3.Row]:
        with sqlite3.connect(self.var_dir / "optgate.sqlite3") as db:
            db.row_factory = sqlite3.Row
            return db.execute(sql, params).fetchall()

    def run(self, backend: str, task: str | None = None) -> dict[str, Any]:
        """The backend's newest first-stage run (that measured ``task``, when given): id, status and load profile.

        The baseline has several: the fleet run over every task, then one per ticket, measured
        interleaved with that ticket's candidate; by task, the pair's own run comes first.
        """
        rows = self.query(
            "SELECT r.id, r.status, r.load_profile FROM evaluators_evaluationrun r"
            " JOIN ledger_backend b ON r.backend_id = b.id WHERE b.name = ?"
            + (
                " AND EXISTS (SELECT 1 FROM evaluators_taskresult t WHERE t.run_id = r.id AND t.task = ?)"
                if task
                else ""
            )
            # A held-out stage's runs measure quality only, on samples after the shipped ones.
            + " AND r.id NOT IN (SELECT baseline_run_id FROM gates_evaluationstage"
            " UNION SELECT candidate_run_id FROM gates_evaluationstage)" + " ORDER BY r.id DESC",
            *((backend, task) if task else (backend,)),
        )
        assert rows, f"the demo has no run of {backend}:\n{self.output[-3000:]}"
        return {"id": rows[0]["id"], "status": rows[0]["status"], "load_profile": json.loads(rows[0]["load_profile"])}

    def task_result(self, backend: str, task: str) -> dict[str, Any]:
        """Quality, performance, per-request records and engine evidence of one task of the backend's run."""
        rows = self.query(
            "SELECT quality, performance, requests, engine_evidence FROM evaluators_taskresult"
            " WHERE run_id = ? AND task = ?",
            self.run(backend, task)["id"],
            task,
        )
        assert rows, f"the {backend} run has no {task} result"
        return {key: json.loads(rows[0][key]) for key in ("quality", "performance", "requests", "engine_evidence")}

    def samples(self, backend: str, task: str) -> list[dict[str, Any]]:
        rows = self.query(
            "SELECT sample_id, prompt, target, output, passed, failure_reason, latency_ms"
            " FROM evaluators_samplerecord WHERE run_id = ? AND task = ? ORDER BY sample_id",
            self.run(backend, task)["id"],
            task,
        )
        return [dict(row) for row in rows]

    def decision(self, title: str) -> dict[str, Any]:
        """The latest decision on the demo ticket with this title: outcome, verdicts, reasons."""
        rows = self.query(
            "SELECT d.outcome, d.verdicts, d.reasons FROM gates_gatedecision d"
            " JOIN gates_releaseticket t ON d.ticket_id = t.id WHERE t.title = ? ORDER BY d.created_at DESC",
            title,
        )
        assert rows, f"no decision on {title!r}:\n{self.output[-3000:]}"
        row = rows[0]
        return {
            "outcome": row["outcome"],
            "verdicts": json.loads(row["verdicts"]),
            "reasons": json.loads(row["reasons"]),
        }


DEMO_VAR_DIR_VARIABLE = "OPTGATE_DEMO_VAR_DIR"
DEMO_DATABASE = "optgate.sqlite3"


@pytest.fixture(scope="session")
def demo_evidence(tmp_path_factory: pytest.TempPathFactory) -> DemoEvidence:
    """This session's demo run; ``OPTGATE_DEMO_EVIDENCE_DIR`` names the folder an earlier session's
    run left (``demo0`` under pytest's base temporary folder) instead, to rerun a test on it."""
    earlier = os.environ.get(DEMO_EVIDENCE_DIR_VARIABLE)
    if earlier:
        return _evidence_read(Path(earlier))
    var_dir = tmp_path_factory.mktemp("demo")
    env = {key: value for key, value in os.environ.items() if key not in SERVICE_VARIABLES}
    env["OPTGATE_VAR_DIR"] = str(var_dir)
    # About 16 minutes on a quiet two-core box; the limits leave room for a box twice as slow.
    command = [sys.executable, "manage.py", "demo", "--no-serve", "--port", str(find_free_port()), "--timeout", "2700"]
    done = subprocess.run(
        command, cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=3000, check=False
    )
    (var_dir / "demo.stdout").write_text(done.stdout)
    (var_dir / "demo.stderr").write_text(done.stderr)
    (var_dir / "demo.returncode").write_text(f"{done.returncode}\n")
    return DemoEvidence(returncode=done.returncode, stdout=done.stdout, stderr=done.stderr, var_dir=var_dir)


DEMO_EVIDENCE_DIR_VARIABLE = "OPTGATE_DEMO_EVIDENCE_DIR"


def _evidence_read(var_dir: Path) -> DemoEvidence:
    if not (var_dir / "demo.returncode").is_file():
        pytest.fail(f"{DEMO_EVIDENCE_DIR_VARIABLE}={var_dir}: no demo run of a test session there")
    return DemoEvidence(
        returncode=int((var_dir / "demo.returncode").read_text()),
        stdout=(var_dir / "demo.stdout").read_text(),
        stderr=(var_dir / "demo.stderr").read_text(),
        var_dir=var_dir,
    )


@pytest.fixture
def demo_database_copy(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A var folder holding a copy of the demo's SQLite database: an earlier demo's, when
    ``OPTGATE_DEMO_VAR_DIR`` names its folder, else this session's demo run (started now if no test
    asked for it yet)."""
    named = os.environ.get(DEMO_VAR_DIR_VARIABLE)
    if named:
        source = Path(named) / DEMO_DATABASE
        if not source.is_file():
            pytest.fail(f"{DEMO_VAR_DIR_VARIABLE}={named}: there is no {DEMO_DATABASE} in it (run `make demo` first)")
    else:
        evidence: DemoEvidence = request.getfixturevalue("demo_evidence")
        assert evidence.returncode == 0, evidence.output[-4000:]
        source = evidence.var_dir / DEMO_DATABASE
    var_dir = tmp_path / "demo-var"
    var_dir.mkdir()
    # SQLite's online backup: a consistent copy even of a database another process still has open.
    with (
        contextlib.closing(sqlite3.connect(source)) as original,
        contextlib.closing(sqlite3.connect(var_dir / DEMO_DATABASE)) as copy,
    ):
        original.backup(copy)
    return var_dir
