"""Builders the tests share: backend and ticket fields, stored runs, decided tickets, form bodies.

Test modules import these from here, never from one another (or from ``conftest``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import time_machine
from django.contrib.auth.models import User
from django.utils import timezone

from backends.models import Backend
from backends.services import backend_register
from core import queue
from evaluators.models import EvaluationRun, RunStatus, SampleRecord, TaskResult
from gates.models import CanaryRound, ReleaseTicket, TaskType
from gates.policy.rules import POLICY_DIR
from gates.services import decisions, routing, signoff
from gates.services import tickets as services
from tools.kit import BASE, Kit


def backend_fields(model_root: Path, name: str, **overrides: Any) -> dict[str, Any]:
    (model_root / "kit-base").mkdir(exist_ok=True)
    fields: dict[str, Any] = {
        "name": name,
        "model_id": "optgate/kit-base",
        "model_path": str(model_root / "kit-base"),
        "model_revision": "sha256:" + "ab" * 32,
        "engine_version": "0.32.0",
        "hardware_class": "cpu-avx2",
        "engine_args": {"max_model_len": 2048, "seed": 0},
        "sampling_params": {"temperature": 0.0, "max_tokens": 128},
        "model_card": {"quantization_method": "none", "allowed_tasks": []},
    }
    fields.update(overrides)
    return fields


# The real-engine tests' kit backends: as the demo fleet serves, greedy, so a seed-only change answers alike.
KIT_ENGINE_ARGS: dict[str, Any] = {"max_model_len": 2048, "seed": 0, "max_num_seqs": 8, "enable_prefix_caching": False}
KIT_SAMPLING: dict[str, Any] = {"temperature": 0.0}


def register_kit_backend(kit: Kit, actor: User, name: str, **engine_args: Any) -> Backend:
    """A backend serving the kit's base model on the CPU, ``engine_args`` over ``KIT_ENGINE_ARGS``."""
    backend, _ = backend_register(
        actor=actor,
        name=name,
        model_id="optgate/kit-base",
        model_path=str(kit.path(BASE)),
        model_revision=kit.revision(BASE),
        engine_version="0.32.0",
        hardware_class="cpu",
        engine_args={**KIT_ENGINE_ARGS, **engine_args},
        sampling_params=KIT_SAMPLING,
    )
    return backend


def ticket_fields(baseline: Backend, candidate: Backend, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "title": "Prefix caching for the knowledge assistant",
        "mechanisms": ["prefix_cache"],
        "bottleneck": "prefill",
        "bottleneck_evidence": "TTFT p95 3.1 s on 6k-token documents; prefill is 80% of E2E",
        "baseline": baseline,
        "candidate": candidate,
        "beneficiary_tasks": list(TaskType.objects.filter(slug="knowledge_qa")),
        "risk_tasks": list(TaskType.objects.filter(slug="compliance_qa")),
        "benefit_metrics": ["ttft_p95", "prefix_cache_hit_rate"],
        "guardrail_metrics": ["citation_accuracy", "refusal_accuracy"],
        "rollback_target": baseline,
        "rollback_plan": {
            "sacrifices": "TTFT gain on shared documents",
            "warmup": "none: baseline stays loaded",
            "inflight_streams": "finish on the candidate; new requests go to the baseline",
            "route_update": "knowledge_qa route back to kit-bf16",
        },
        "observation_window_hours": 72,
        "canary_scope": {"tenants": ["tenant-a"], "business_domain": "support"},
    }
    fields.update(overrides)
    return fields


TIMING_METRICS = ("ttft", "tpot", "e2e", "queue_time", "output_throughput", "goodput")


def assert_prefix_cache_judged(outcome: str, verdicts: dict[str, Any]) -> None:
    """A prefix-cache candidate on the kit: every quality guardrail and the hit rate must pass.

    Greedy decoding over the same weights gives the same answers, and the suites are sized for the
    policy's margins, so quality always settles. TTFT is measured on a shared two-core machine:
    when a neighbour's load hides the prefill saving, or holds responses up between the engine and
    the client, the only open questions allowed are timing metrics, and then the outcome is *needs
    evidence*, never a rejection.
    """
    metrics = [m for verdict in verdicts.values() for m in verdict["metrics"]]
    quality = {m["task"]: m["status"] for m in metrics if m["kind"] == "guardrail" and m["metric"] == "pass_rate"}
    assert quality == {"knowledge_qa": "pass", "compliance_qa": "pass"}, metrics
    assert [m["status"] for m in metrics if m["metric"] == "prefix_cache_hit_rate"] == ["pass"], metrics
    open_questions = [m for m in metrics if m["status"] != "pass"]
    for metric in open_questions:
        assert metric["status"] == "inconclusive" and metric["metric"].startswith(TIMING_METRICS), metric
    # Tradeable metrics are reported only: set aside as not comparable, they leave the outcome alone.
    deciding = [m for m in open_questions if m["kind"] != "tradeable"]
    assert outcome == ("needs_evidence" if deciding else "approve"), (outcome, open_questions)


def outcomes(n: int, rate: float, seed: int) -> list[bool]:
    return [bool(x) for x in np.random.default_rng(seed).random(n) < rate]


def drop_passes(passed: list[bool], points: int) -> list[bool]:
    """Turn ``points`` percent of the samples from pass to fail."""
    out, left = list(passed), points * len(passed) // 100
    for i, ok in enumerate(out):
        if ok and left:
            out[i], left = False, left - 1
    return out


def task_spec(
    passed: list[bool], *, speed: float = 1.0, seed: int = 0, engine: dict[str, float] | None = None, error: str = ""
) -> dict[str, Any]:
    return {"passed": passed, "speed": speed, "seed": seed, "engine": engine or {}, "error": error}


def timed_requests(n: int, speed: float, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``n`` requests' timings and the load's throughput, latencies scaled by ``speed``."""
    rng = np.random.default_rng(seed)
    ttft, tpot = rng.lognormal(np.log(0.3), 0.3, n) * speed, rng.lognormal(np.log(0.04), 0.3, n) * speed
    e2e = rng.lognormal(np.log(4.0), 0.3, n) * speed
    requests = [
        {
            "ttft_s": float(a),
            "tpot_s": float(b),
            "itl_s": [float(b)],
            "e2e_s": float(c),
            "output_tokens": 100,
            "error": None,
        }
        for a, b, c in zip(ttft, tpot, e2e, strict=True)
    ]
    return requests, {"output_token_throughput": 1000.0 / speed}


def store_run(
    backend: Backend,
    tasks: dict[str, dict[str, Any]],
    *,
    status: str = RunStatus.SUCCEEDED,
    error: str = "",
    error_kind: str = "",
) -> EvaluationRun:
    """A finished run of ``backend``: per task, requests whose latencies scale with ``speed``."""
    run = EvaluationRun.objects.create(
        backend=backend,
        tasks=list(tasks),
        engine_version="0.32.0",
        hardware_class="cpu-avx2",
        reuse_key=uuid.uuid4().hex,
        status=status,
        error=error,
        error_kind=error_kind,
    )
    for task, spec in tasks.items():
        requests, performance = timed_requests(len(spec["passed"]), spec["speed"], spec["seed"])
        TaskResult.objects.create(
            run=run,
            task=task,
            suite_version="1",
            requests=requests,
            engine_evidence=spec["engine"],
            performance=performance,
            error=spec["error"],
        )
        SampleRecord.objects.bulk_create(
            SampleRecord(
                run=run,
                task=task,
                sample_id=f"{task}-{i:04d}",
                prompt="p",
                output="o",
                passed=ok,
                score=1.0 if ok else 0.0,
            )
            for i, ok in enumerate(spec["passed"])
        )
    return run


def tasks(*slugs: str) -> list[TaskType]:
    return [TaskType.objects.get(slug=slug) for slug in slugs]


def evaluating_ticket(
    owner: User,
    baseline: Backend,
    candidate: Backend,
    base_run: EvaluationRun,
    cand_run: EvaluationRun,
    **overrides: Any,
) -> ReleaseTicket:
    """A submitted ticket in ``evaluating`` with its two runs attached (what the workers leave)."""
    fields = ticket_fields(baseline, candidate, **{"mechanisms": ["batching"], "bottleneck": "decode", **overrides})
    ticket = services.ticket_create(owner=owner, **fields)
    services.ticket_submit(ticket=ticket, actor=owner)
    services.ticket_transition(ticket=ticket, action="start_evaluation", actor=None)
    # Test set-up: the evaluation orchestration attaches the runs.
    ReleaseTicket.objects.filter(pk=ticket.pk).update(baseline_run=base_run, candidate_run=cand_run)
    ticket.refresh_from_db()
    return ticket


def scenario(
    outcome: str,
    owner: User,
    baseline: Backend,
    candidate: Backend,
    *,
    roles: tuple[str, str] = ("cs_summary", "code_assistant"),
    **overrides: Any,
) -> ReleaseTicket:
    """An evaluating ticket whose stored evidence leads the default policy to ``outcome``; an
    ``approve`` ticket's beneficiary and risk task are ``roles``."""
    n = 200
    good = outcomes(n, 0.9, 1)
    shape: dict[str, Any]
    if outcome == "approve":
        beneficiary, risk = roles
        base = {beneficiary: task_spec(good, seed=1), risk: task_spec(good, seed=2)}
        cand = {beneficiary: task_spec(good, speed=0.7, seed=1), risk: task_spec(good, speed=0.7, seed=2)}
        shape = {"beneficiary_tasks": tasks(beneficiary), "risk_tasks": tasks(risk)}
    elif outcome == "approve_high_risk":
        base = {"cs_summary": task_spec(good, seed=1), "knowledge_qa": task_spec(good, seed=2)}
        cand = {"cs_summary": task_spec(good, speed=0.7, seed=1), "knowledge_qa": task_spec(good, speed=0.7, seed=2)}
        shape = {"beneficiary_tasks": tasks("cs_summary"), "risk_tasks": tasks("knowledge_qa")}
    elif outcome == "restrict":
        base = {"cs_summary": task_spec(good, seed=1), "knowledge_qa": task_spec(good, seed=2)}
        cand = {
            "cs_summary": task_spec(good, speed=0.7, seed=1),
            "knowledge_qa": task_spec(drop_passes(good, 10), seed=2),
        }
        shape = {"beneficiary_tasks": tasks("cs_summary"), "risk_tasks": tasks("knowledge_qa")}
    elif outcome == "reject":
        base = {"cs_summary": task_spec(good, seed=1), "dataagent_nl2sql": task_spec(good, seed=2)}
        cand = {
            "cs_summary": task_spec(good, speed=0.7, seed=1),
            "dataagent_nl2sql": task_spec(drop_passes(good, 10), speed=0.7, seed=2),
        }
        shape = {
            "beneficiary_tasks": tasks("cs_summary"),
            "risk_tasks": tasks("dataagent_nl2sql"),
            "mechanisms": ["weight_quantization"],
        }
    else:
        raise ValueError(outcome)
    shape.update(overrides)
    return evaluating_ticket(owner, baseline, candidate, store_run(baseline, base), store_run(candidate, cand), **shape)


def decided(outcome: str, owner: User, baseline: Any, candidate: Any, **overrides: Any) -> ReleaseTicket:
    ticket = scenario(outcome, owner, baseline, candidate, **overrides)
    decision = decisions.decision_make(ticket=ticket)
    assert decision.outcome == outcome.removesuffix("_high_risk"), decision.reasons
    ticket.refresh_from_db()
    return ticket


def serving_by_default(
    owner: User, reviewer: User, admin: User, baseline: Backend, candidate: Backend
) -> ReleaseTicket:
    """A signed ``approve`` ticket promoted to default: cs_summary and code_assistant route to the candidate."""
    for task in ("cs_summary", "code_assistant", "knowledge_qa"):
        routing.routes_set(task=task, backend=baseline, actor=admin, reason="initial fleet")
    ticket = decided("approve", owner, baseline, candidate)
    assert signoff.signoff_record(ticket=ticket, actor=reviewer, verdict="approve", reason_code="evidence_sufficient")
    ticket.refresh_from_db()
    routing.routes_start_canary(ticket=ticket, actor=owner)
    with time_machine.travel(timezone.now() + timedelta(hours=ticket.observation_window_hours + 1)):
        return routing.routes_promote(ticket=ticket, actor=reviewer, reason="window clean")


def form_body(baseline: Any, candidate: Any, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "title": "Prefix caching for the knowledge assistant",
        "mechanisms": ["prefix_cache"],
        "bottleneck": "prefill",
        "bottleneck_evidence": "TTFT p95 3.1 s on 6k-token documents",
        "baseline": baseline.pk,
        "candidate": candidate.pk,
        "beneficiary_tasks": ["knowledge_qa"],
        "risk_tasks": ["compliance_qa"],
        "benefit_metrics": ["ttft_p95", "prefix_cache_hit_rate"],
        "guardrail_metrics": ["citation_accuracy"],
        "rollback_target": baseline.pk,
        "rollback_sacrifices": "TTFT gain",
        "rollback_warmup": "none",
        "rollback_inflight_streams": "finish on the candidate",
        "rollback_route_update": "knowledge_qa back to kit-bf16",
        "observation_window_hours": "72",
        "canary_tenants": "tenant-a, tenant-b",
        "canary_business_domain": "support",
    }
    body.update(overrides)
    return body


@contextmanager
def captured_tasks() -> Iterator[dict[str, mock.MagicMock]]:
    """Every task message the code publishes, captured instead of reaching a broker.

    One mock per task: ``run`` (evaluate a run), ``ticket`` (fan a ticket out), ``check`` (judge
    when ready) and ``notify`` (deliver a notification), each called with the task's arguments
    (and ``task_id=`` when one is given). A mock's ``side_effect`` makes that publish fail.
    """
    sent = {"run": mock.MagicMock(), "ticket": mock.MagicMock(), "check": mock.MagicMock(), "notify": mock.MagicMock()}
    by_name = {
        queue.EVALUATE_RUN: "run",
        queue.EVALUATE_TICKET: "ticket",
        queue.CHECK_TICKET: "check",
        queue.DELIVER_NOTIFICATION: "notify",
    }

    def publish(name: str, *args: Any, task_id: str | None = None) -> None:
        target = sent.setdefault(by_name.get(name, name), mock.MagicMock())
        target(*args, **({"task_id": task_id} if task_id is not None else {}))

    with mock.patch("core.queue.enqueue", side_effect=publish):
        yield sent


def staged_policy_file(
    tmp_path: Path, settings: Any, old: str = "", new: str = "", *, stage_size: str = "planned"
) -> None:
    """Judge under a copy of the default policy with staged evaluation on (whatever the shipped
    file says), its stages sized ``stage_size`` (the default policy's: planned), and ``old``
    replaced by ``new``."""
    text = (POLICY_DIR / "default.yaml").read_text()
    assert "sequential:\n  enabled:" in text and old in text and "  stage_size: planned\n" in text
    text = text.replace("sequential:\n  enabled: false", "sequential:\n  enabled: true").replace(old, new)
    text = text.replace("  stage_size: planned\n", f"  stage_size: {stage_size}\n")
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    settings.OPTGATE_GATE_POLICY = str(path)


def canary_round(
    ticket: ReleaseTicket, number: int, verdict: str, action: str, tasks: dict[str, str] | None = None
) -> CanaryRound:
    """A stored analysis round of the last five minutes; ``tasks`` gives each task's status
    (``cs_summary`` with the round's verdict when not given)."""
    now = timezone.now()
    statuses = tasks if tasks is not None else {"cs_summary": verdict}
    return CanaryRound.objects.create(
        ticket=ticket,
        number=number,
        window_start=now - timedelta(minutes=5),
        window_end=now,
        policy_version="default@5",
        verdict=verdict,
        action=action,
        reason=f"round {number} said {verdict}",
        tasks={task: {"status": status, "reason": f"{task} {status}"} for task, status in statuses.items()},
    )
