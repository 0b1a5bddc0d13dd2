"""Acceptance with real processes: Celery workers on a private Redis, PostgreSQL, and vLLM on the CPU.

One flow per fault, each asserting that nothing is lost and nothing is done twice:

- a ticket submitted through the API while Redis is down is persisted, and once Redis is back it
  gets both runs, a decision and a verified ledger (a duplicated run message changes nothing);
- the GPU worker SIGKILLed mid-evaluation: the run is recovered and finishes exactly once, and
  no vLLM process is left behind (nor the engine it then kept warm, once killed again and restarted);
- the baseline's engine stays warm after a pair, and stops with its worker;
- the engine killed mid-run: the run ends ``error`` with the engine's last log lines, and can be
  retried;
- a *needs evidence* ticket evaluated again through the API gets two new runs, measured by the
  workers, and a second decision on them (the judged runs are not reused).

Run with ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/optgate pytest -m worker``; skipped on
SQLite or without vLLM. Each engine start costs a couple of minutes on two cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from backends import services as backend_services
from backends.models import Backend
from evaluators import processes
from evaluators import services as run_services
from evaluators.models import EvaluationAttempt, EvaluationRun, ParkedEngine, RunStatus, TaskResult
from gates.models import GateDecision, ReleaseTicket, TicketStatus
from gates.services import evaluation
from gates.services import tickets as gate_services
from ledger.models import LedgerEntry
from ledger.selectors import ledger_verify
from optgate.celery import app as celery_app
from workers import sweeper
from workers.tasks import evaluate_run

# serialized_rollback: earlier transactional tests flush the database, seeded task types included.
pytestmark = [pytest.mark.worker, pytest.mark.engine, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

ROOT = Path(__file__).resolve().parent.parent
PROFILE = {"requests_per_task": 8, "concurrency": 2, "quality_concurrency": 4, "seed": 0}
TASK = "compliance_qa"  # short prompts, 64 output tokens: the cheapest suite to run


def wait_for(what: str, predicate: Callable[[], Any], timeout_s: float, interval_s: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def group_alive(pgid: int | None) -> bool:
    return pgid is not None and processes.group_alive(pgid)


class PrivateRedis:
    """A redis-server of our own on a spare loopback port, so faults never touch the shared one."""

    def __init__(self, workdir: Path) -> None:
        self.port = processes.find_free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        ping = ["redis-cli", "-p", str(self.port), "ping"]
        wait_for("redis", lambda: subprocess.run(ping, capture_output=True).stdout.strip() == b"PONG", 20, 0.2)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
            self.proc = None


class Worker:
    """A real ``celery worker`` process in its own session (so a SIGKILL can take the whole pool)."""

    def __init__(self, name: str, queues: str, concurrency: int, env: dict[str, str], log: Path) -> None:
        self.name, self.queues, self.concurrency, self.env, self.log = name, queues, concurrency, env, log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def nodename(self) -> str:
        return f"{self.name}@{socket.gethostname()}"

    def start(self) -> None:
        # The log is appended across restarts: only a "ready." written after this start counts.
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "optgate",
                    "worker",
                    "-Q",
                    self.queues,
                    "-c",
                    str(self.concurrency),
                    "-n",
                    self.nodename,
                    "--prefetch-multiplier",
                    "1",
                    "--without-mingle",
                    "--without-gossip",
                    "-l",
                    "INFO",
                ],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(f"{self.nodename} to be ready", lambda: b"ready." in self.log.read_bytes()[offset:], 90, 0.5)

    def sigkill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=20)
        self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)
        self.proc = None

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


def _reset_publisher() -> None:
    """Drop this process's broker connections so the next publish connects to the current broker."""
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (engine-cpu extra)")
    from tests.engine_fixtures import build_tiny_llama

    # Under the model root the autouse settings fixture allows.
    return build_tiny_llama(tmp_path_factory.getbasetemp() / "models" / "tiny-llama", max_position=2048)


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if connection.vendor != "postgresql":
        pytest.skip("worker tests need PostgreSQL: set DATABASE_URL=postgres://postgres@127.0.0.1:5432/<name>")
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    server = PrivateRedis(tmp_path)
    server.start()
    previous = celery_app.conf.broker_url
    celery_app.conf.broker_url = server.url
    _reset_publisher()
    try:
        yield server
    finally:
        celery_app.conf.broker_url = previous
        _reset_publisher()
        server.stop()


@pytest.fixture
def workers(redis: PrivateRedis, tiny_model: Path, tmp_path: Path, settings: Any) -> Iterator[dict[str, Worker]]:
    db = connection.settings_dict
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "CELERY_BROKER_URL": redis.url,
            "CELERY_VISIBILITY_TIMEOUT_S": "3600",
            "OPTGATE_MODEL_ROOTS": str(settings.OPTGATE_MODEL_ROOTS[0]),
            "OPTGATE_VALIDATE_WITH_VLLM": "off",
            "OPTGATE_LOAD_PROFILE": json.dumps(PROFILE),
            "OPTGATE_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
            "OPTGATE_ENGINE_STARTUP_TIMEOUT_S": "600",
            "PYTHONPATH": str(ROOT),
        }
    )
    settings.OPTGATE_LOAD_PROFILE = PROFILE
    started = {
        "gpu": Worker("gpu1", "gpu", 1, env, tmp_path / "gpu.log"),
        "default": Worker("default1", "default", 2, env, tmp_path / "default.log"),
    }
    try:
        for worker in started.values():
            worker.start()
        yield started
    finally:
        for worker in started.values():
            worker.stop()
        # Whatever happened, no engine outlives the test.
        for pgid in EvaluationAttempt.objects.exclude(engine_pgid=None).values_list("engine_pgid", flat=True):
            if pgid is not None and group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)


def _register(erin: User, model: Path) -> tuple[Backend, Backend]:
    common: dict[str, Any] = {
        "model_id": "optgate/tiny-llama",
        "model_path": str(model),
        "model_revision": "sha256:" + "cd" * 32,
        "engine_version": "0.32.0",
        "hardware_class": "cpu-avx2",
        "sampling_params": {"temperature": 0.0},
        "model_card": {"quantization_method": "none"},
    }
    baseline, _ = backend_services.backend_register(
        actor=erin, name="tiny-bf16", **common, engine_args={"max_model_len": 2048, "seed": 0}
    )
    candidate, _ = backend_services.backend_register(
        actor=erin,
        name="tiny-bf16-prefix-cache",
        **common,
        engine_args={"max_model_len": 2048, "seed": 0, "enable_prefix_caching": True},
    )
    return baseline, candidate


def _diagnose(workers: dict[str, Worker]) -> str:
    runs = list(EvaluationRun.objects.values("pk", "status", "phase", "error"))
    return f"runs: {runs}\n--- gpu worker ---\n{workers['gpu'].tail()}\n--- default ---\n{workers['default'].tail(30)}"


def _ticket_body(baseline: Backend, candidate: Backend) -> dict[str, Any]:
    return {
        "title": "Prefix caching for compliance answers",
        "mechanisms": ["prefix_cache"],
        "bottleneck": "prefill",
        "bottleneck_evidence": "TTFT p95 dominated by the shared policy preamble",
        "baseline": baseline.name,
        "candidate": candidate.name,
        "beneficiary_tasks": [TASK],
        "risk_tasks": [],
        "benefit_metrics": ["ttft_p95"],
        "guardrail_metrics": ["refusal_accuracy"],
        "rollback_target": baseline.name,
        "rollback_plan": {
            "sacrifices": "TTFT gain",
            "warmup": "none",
            "inflight_streams": "finish",
            "route_update": "compliance_qa back to tiny-bf16",
        },
        "observation_window_hours": 24,
        "canary_scope": {"tenants": ["tenant-a"], "business_domain": "support"},
    }


def test_a_ticket_submitted_while_redis_is_down_is_evaluated_once_redis_returns(
    workers: dict[str, Worker], redis: PrivateRedis, erin: User, tiny_model: Path, api_for: Any
) -> None:
    baseline, candidate = _register(erin, tiny_model)
    api = api_for(erin)
    created = api.post("/api/v1/tickets/", _ticket_body(baseline, candidate), format="json")
    assert created.status_code == 201, created.content

    redis.stop()
    submitted = api.post(f"/api/v1/tickets/{created.json()['id']}/evaluate/")
    assert submitted.status_code == 202, submitted.content  # the broker is down, the request is not
    ticket = ReleaseTicket.objects.get(pk=created.json()["id"])
    assert ticket.status == TicketStatus.SUBMITTED  # persisted, waiting for the broker
    redis.start()
    _reset_publisher()

    # Beat's sweep finds the waiting ticket (called here directly, as beat would).
    report = sweeper.sweep(now=timezone.now() + timedelta(minutes=1))
    assert report.dispatched == [ticket.pk]
    ticket = wait_for(
        "the fan-out", lambda: ReleaseTicket.objects.filter(pk=ticket.pk, candidate_run__isnull=False).first(), 120
    )
    assert ticket.candidate_run is not None and ticket.baseline_run is not None
    # The same run message delivered twice: the duplicate must change nothing.
    evaluate_run.apply_async((ticket.candidate_run.pk,), task_id=evaluation.run_task_id(ticket.candidate_run.pk, 1))

    try:
        judged = ReleaseTicket.objects.filter(
            pk=ticket.pk, status__in=[TicketStatus.EVALUATED, TicketStatus.NEEDS_EVIDENCE]
        )
        wait_for("the decision", judged.exists, 1500, 5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnose(workers)}") from None
    ticket.refresh_from_db()
    for run in (ticket.baseline_run, ticket.candidate_run):
        assert run is not None
        run.refresh_from_db()
        assert run.status == RunStatus.SUCCEEDED, run.error
        assert run.attempts.count() == 1
        assert TaskResult.objects.filter(run=run).count() == 1
        assert LedgerEntry.objects.filter(kind="evaluation.succeeded", subject_id=str(run.pk)).count() == 1
    assert GateDecision.objects.filter(ticket=ticket).count() == 1
    assert LedgerEntry.objects.filter(kind="ticket.evaluation_requested", subject_id=str(ticket.pk)).count() == 1
    assert ledger_verify().ok

    # Both engines of the pair stay warm for the next pair (or the next stage), recorded, until
    # the worker stops (its pool process kills them on the way out).
    pgids = {run.attempts.get().engine_pgid for run in (ticket.baseline_run, ticket.candidate_run)}
    assert all(group_alive(pgid) for pgid in pgids)
    assert set(ParkedEngine.objects.values_list("pgid", flat=True)) == pgids
    workers["gpu"].stop()
    wait_for("the parked engines to stop with their worker", lambda: not any(map(group_alive, pgids)), 60, 1)


def test_a_needs_evidence_ticket_evaluated_again_is_measured_afresh_by_the_workers(
    workers: dict[str, Worker], erin: User, tiny_model: Path, api_for: Any
) -> None:
    baseline, candidate = _register(erin, tiny_model)
    api = api_for(erin)
    created = api.post("/api/v1/tickets/", _ticket_body(baseline, candidate), format="json")
    assert created.status_code == 201, created.content
    ticket = ReleaseTicket.objects.get(pk=created.json()["id"])
    # A first judgement without engines: two runs that "succeeded" with no results (no message sent).
    gate_services.ticket_submit(ticket=ticket, actor=erin)
    gate_services.ticket_transition(ticket=ticket, action="start_evaluation", actor=None)
    old = [run_services.run_request(backend=b, tasks=[TASK], load_profile=PROFILE)[0] for b in (baseline, candidate)]
    ReleaseTicket.objects.filter(pk=ticket.pk).update(baseline_run=old[0], candidate_run=old[1])
    for run in old:
        run.move(RunStatus.RUNNING)
        run.move(RunStatus.SUCCEEDED)
    assert evaluation.ticket_check(ticket_id=ticket.pk) == "needs_evidence"

    again = api.post(f"/api/v1/tickets/{ticket.pk}/evaluate/")
    assert again.status_code == 202, again.content
    judged_twice = GateDecision.objects.filter(ticket=ticket)
    try:
        wait_for("the second decision", lambda: judged_twice.count() == 2, 1500, 5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnose(workers)}") from None
    ticket.refresh_from_db()
    assert ticket.baseline_run_id is not None and ticket.candidate_run_id is not None
    fresh = [
        EvaluationRun.objects.get(pk=ticket.baseline_run_id),
        EvaluationRun.objects.get(pk=ticket.candidate_run_id),
    ]
    assert {run.pk for run in fresh}.isdisjoint({run.pk for run in old})
    for run in fresh:
        assert run.status == RunStatus.SUCCEEDED, run.error
        assert TaskResult.objects.filter(run=run).count() == 1  # measured for real this time
    latest = judged_twice.first()
    assert latest is not None and (latest.baseline_run_id, latest.candidate_run_id) == (fresh[0].pk, fresh[1].pk)
    entry = LedgerEntry.objects.filter(kind="ticket.evaluation_requested", subject_id=str(ticket.pk)).first()
    assert entry is not None and entry.payload["judged_before"] == sorted(run.pk for run in old)
    assert ledger_verify().ok


def _start_bare_run(erin: User, tiny_model: Path) -> EvaluationRun:
    baseline, _ = _register(erin, tiny_model)
    run, _ = run_services.run_request(backend=baseline, tasks=[TASK], load_profile=PROFILE)
    evaluation.run_enqueue(run.pk)
    return run


def _engine_serving(run: EvaluationRun) -> EvaluationAttempt | None:
    run.refresh_from_db()
    attempt = run.attempts.filter(status=RunStatus.RUNNING).exclude(engine_pgid=None).first()
    return attempt if attempt is not None and run.phase.startswith(("quality", "load")) else None


def test_a_worker_sigkilled_mid_evaluation_finishes_the_run_exactly_once_and_leaves_no_engine(
    workers: dict[str, Worker], erin: User, tiny_model: Path
) -> None:
    run = _start_bare_run(erin, tiny_model)
    try:
        first = wait_for("the engine to serve", lambda: _engine_serving(run), 900, 2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnose(workers)}") from None
    workers["gpu"].sigkill()
    assert group_alive(first.engine_pgid)  # the engine outlives its worker: recovery must find it

    workers["gpu"].start()  # same node name: on start it kills the orphan engine and re-queues the run
    try:
        wait_for("the orphan engine to be killed", lambda: not group_alive(first.engine_pgid), 60, 1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; lost attempt {first.worker}\n{_diagnose(workers)}") from None
    try:
        wait_for("the run to finish", lambda: EvaluationRun.objects.get(pk=run.pk).is_finished, 1200, 5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnose(workers)}") from None
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    attempts = list(run.attempts.order_by("number"))
    assert [a.status for a in attempts] == [RunStatus.ERROR, RunStatus.SUCCEEDED]
    assert "lost" in attempts[0].error
    assert TaskResult.objects.filter(run=run).count() == 1
    assert LedgerEntry.objects.filter(kind="evaluation.succeeded", subject_id=str(run.pk)).count() == 1
    assert not group_alive(attempts[0].engine_pgid)

    # The finished run's engine is parked for the next run. A worker killed outright cannot stop
    # it; its next start finds the record and does.
    parked = attempts[1].engine_pgid
    assert parked is not None and group_alive(parked)
    assert ParkedEngine.objects.filter(pgid=parked).exists()
    workers["gpu"].sigkill()
    assert group_alive(parked)
    workers["gpu"].start()
    wait_for("the parked engine of the killed worker to be reaped", lambda: not group_alive(parked), 60, 1)
    assert not ParkedEngine.objects.exists()


def test_an_engine_killed_mid_run_ends_the_run_in_error_with_its_log_and_it_can_be_retried(
    workers: dict[str, Worker], erin: User, tiny_model: Path
) -> None:
    run = _start_bare_run(erin, tiny_model)
    try:
        attempt = wait_for("the engine to serve", lambda: _engine_serving(run), 900, 2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnose(workers)}") from None
    assert attempt.engine_pgid is not None
    os.killpg(attempt.engine_pgid, signal.SIGKILL)
    try:
        wait_for("the run to end", lambda: EvaluationRun.objects.get(pk=run.pk).is_finished, 600, 2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnose(workers)}") from None
    run.refresh_from_db()
    assert run.status == RunStatus.ERROR  # an infrastructure failure, never a task failure
    assert "engine died" in run.error
    log_lines = [line for line in Path(attempt.engine_log).read_text(errors="replace").splitlines() if line.strip()]
    assert log_lines and log_lines[-1].strip() in run.error  # the engine's last words are in the error
    assert TaskResult.objects.filter(run=run).count() == 0
    retried = run_services.run_retry(run_id=run.pk, reason="engine killed in a fault test")
    assert retried.status == RunStatus.QUEUED


def test_settings_route_evaluations_to_the_gpu_queue() -> None:
    assert django_settings.CELERY_TASK_ROUTES["optgate.evaluate_run"] == {"queue": "gpu"}
