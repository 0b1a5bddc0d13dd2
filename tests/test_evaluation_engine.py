"""The evaluation pipeline on a real vLLM-on-CPU engine with the tiny model kit.

Each distinct engine configuration is started once for the whole module (a start costs about two
minutes on two cores): the kit's base model without and with prefix caching, its low-bit variant,
and the base model with n-gram speculative decoding.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command

from evaluators import pipeline, services
from evaluators.engine import EngineHandle, launch_engine
from evaluators.kit import BASE, Kit, ensure_kit
from evaluators.models import EvaluationRun, RunStatus, SampleRecord
from evaluators.suites import get_suite
from gates import services as gate_services
from gates.decisions import decision_make
from gates.models import GateDecision, ReleaseTicket, TaskType
from ledger.models import Backend, LedgerEntry
from ledger.selectors import ledger_verify
from ledger.services import backend_register
from tests.conftest import assert_prefix_cache_judged, ticket_fields

pytestmark = pytest.mark.engine

ENGINE_ARGS = {"max_model_len": 2048, "seed": 0, "max_num_seqs": 8}
PREFIX = {**ENGINE_ARGS, "enable_prefix_caching": True}
NO_PREFIX = {**ENGINE_ARGS, "enable_prefix_caching": False}
NGRAM = {
    **NO_PREFIX,
    "speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4,
                           "prompt_lookup_min": 2},
}  # fmt: skip
# 50 requests per task: the most latency samples the default policy asks of the tasks judged
# here (knowledge_qa), and small enough to keep the module inside a few minutes of CPU time.
PROFILE = {**pipeline.DEFAULT_LOAD_PROFILE, "requests_per_task": 50, "concurrency": 4}


@pytest.fixture(scope="module")
def kit() -> Kit:
    return ensure_kit()


def _launch(kit: Kit, variant: str, name: str, engine_args: dict[str, Any], logs: Path) -> EngineHandle:
    return launch_engine(model_path=kit.path(variant), served_model_name=name, engine_args=engine_args,
                         log_path=logs / f"{name}.log", model_roots=[kit.root])  # fmt: skip


def _evaluate(engine: EngineHandle, tasks: list[str]) -> dict[str, pipeline.TaskOutcome]:
    return {t: pipeline.evaluate_task(t, base_url=engine.base_url, model=engine.model, profile=PROFILE) for t in tasks}


@pytest.fixture(scope="module")
def base_engine(kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHandle]:
    with _launch(kit, BASE, "kit-base", NO_PREFIX, tmp_path_factory.mktemp("logs")) as engine:
        yield engine


@pytest.fixture(scope="module")
def base(base_engine: EngineHandle) -> dict[str, pipeline.TaskOutcome]:
    return _evaluate(base_engine, ["knowledge_qa", "compliance_qa", "dataagent_nl2sql", "tool_calling", "cs_summary"])


@pytest.fixture(scope="module")
def prefix_cached(kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> dict[str, pipeline.TaskOutcome]:
    with _launch(kit, BASE, "kit-base-prefix", PREFIX, tmp_path_factory.mktemp("logs")) as engine:
        return _evaluate(engine, ["knowledge_qa", "compliance_qa"])


@pytest.fixture(scope="module")
def low_bit(kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> dict[str, pipeline.TaskOutcome]:
    with _launch(kit, kit.degraded, "kit-low-bit", NO_PREFIX, tmp_path_factory.mktemp("logs")) as engine:
        return _evaluate(engine, ["dataagent_nl2sql", "tool_calling", "cs_summary"])


@pytest.fixture(scope="module")
def ngram(kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> dict[str, pipeline.TaskOutcome]:
    with _launch(kit, BASE, "kit-base-ngram", NGRAM, tmp_path_factory.mktemp("logs")) as engine:
        return _evaluate(engine, ["cs_summary"])


def test_the_trained_baseline_answers_most_samples(base: dict[str, pipeline.TaskOutcome]) -> None:
    # The kit's overall target (>= 80% across all six suites) is checked on its manifest in
    # test_kit; served by vLLM, each of these tasks must still be answered more often than not.
    for task, outcome in base.items():
        assert outcome.quality["n"] == len(get_suite(task).load_samples()), task
        assert outcome.quality["pass_rate"] > 0.5, (task, outcome.quality)


def test_prefix_caching_hits_on_the_shared_prefix_workload_only_when_enabled(
    base: dict[str, pipeline.TaskOutcome], prefix_cached: dict[str, pipeline.TaskOutcome]
) -> None:
    off = base["knowledge_qa"].engine_evidence
    on = prefix_cached["knowledge_qa"].engine_evidence
    assert not off.get("prefix_cache_hits")  # absent or zero: nothing was served from a cache
    assert (off.get("prefix_cache_hit_rate") or 0.0) == 0.0
    assert on["prefix_cache_hits"] > 0
    assert on["prefix_cache_hit_rate"] > 0.3
    assert on["cached_prompt_tokens"] > 0


def test_both_runs_keep_per_sample_records_with_latency(
    base: dict[str, pipeline.TaskOutcome], prefix_cached: dict[str, pipeline.TaskOutcome]
) -> None:
    for outcome in (base["knowledge_qa"], prefix_cached["knowledge_qa"]):
        assert len(outcome.samples) == len(get_suite("knowledge_qa").load_samples())
        assert all(s.output for s in outcome.samples)
        assert all(s.prompt and s.target for s in outcome.samples)
        assert sum(s.latency_ms is not None for s in outcome.samples) == PROFILE["requests_per_task"]
        assert len(outcome.requests) == PROFILE["requests_per_task"]
        assert all(r["error"] is None and r["ttft_s"] > 0 for r in outcome.requests)
        # The engine's own TTFT covers the load phase only and starts when a request arrives, so it
        # is part of what the client measured, never more.
        client_ttft_ms = sum(r["ttft_s"] for r in outcome.requests) / len(outcome.requests) * 1000
        assert 0 < outcome.engine_evidence["engine_ttft_mean_ms"] <= client_ttft_ms


def test_the_low_bit_variant_scores_lower_on_a_risk_task(
    base: dict[str, pipeline.TaskOutcome], low_bit: dict[str, pipeline.TaskOutcome]
) -> None:
    # The kit picks the rounding that measurably loses SQL or tool calling; served by vLLM over
    # the whole suite, one of them must still come out lower.
    lower = [
        task
        for task in ("dataagent_nl2sql", "tool_calling")
        if low_bit[task].quality["pass_rate"] < base[task].quality["pass_rate"]
    ]
    assert lower, {task: (base[task].quality, low_bit[task].quality) for task in ("dataagent_nl2sql", "tool_calling")}
    reasons = {s.failure_reason for task in lower for s in low_bit[task].samples if not s.passed}
    assert all(reasons), "a regressed variant must leave failure reasons reviewers can read"
    assert reasons


def test_ngram_speculative_decoding_reports_acceptance_counters(ngram: dict[str, pipeline.TaskOutcome]) -> None:
    evidence = ngram["cs_summary"].engine_evidence
    assert evidence["spec_decode_drafts"] > 0
    assert evidence["spec_decode_draft_tokens"] > 0
    assert evidence["spec_decode_accepted_tokens"] is not None
    assert 0.0 <= evidence["spec_decode_acceptance_rate"] <= 1.0
    assert evidence["spec_decode_mean_accepted_length"] >= 1.0


@pytest.mark.django_db
def test_a_run_through_the_services_stores_evidence_in_attach_mode(
    kit: Kit, base_engine: EngineHandle, settings: Any, capsys: Any
) -> None:
    settings.OPTGATE_MODEL_ROOTS = [kit.root]
    backend, _ = backend_register(actor=None, name="kit-base", model_id="optgate/kit-base",
                                  model_path=str(kit.path(BASE)), model_revision=kit.revision(BASE),
                                  engine_version="0.32.0", hardware_class="cpu", engine_args=NO_PREFIX)  # fmt: skip
    run, _ = services.run_request(backend=backend, tasks=["compliance_qa"], load_profile={"requests_per_task": 8},
                                  attach_base_url=base_engine.base_url, attach_model=base_engine.model)  # fmt: skip
    run = services.run_execute(run_id=run.pk)

    assert run.status == RunStatus.SUCCEEDED, run.error
    result = run.task_results.get(task="compliance_qa")
    samples = len(get_suite("compliance_qa").load_samples())
    assert result.quality["n"] == samples
    assert len(result.requests) == 8
    assert SampleRecord.objects.filter(run=run, task="compliance_qa").count() == samples
    assert run.attempts.get().timings["total_s"] > 0
    assert LedgerEntry.objects.filter(kind="evaluation.succeeded", subject_id=str(run.pk)).exists()
    assert ledger_verify().ok

    call_command("evaluate_backend", "kit-base", "--tasks", "compliance_qa", "--requests", "8",
                 "--attach", base_engine.base_url, "--attach-model", base_engine.model)  # fmt: skip
    out = capsys.readouterr().out
    assert f"reusing finished run #{run.pk}" in out
    assert "compliance_qa" in out and "%" in out


def test_prefix_caching_changes_no_answer(
    base: dict[str, pipeline.TaskOutcome], prefix_cached: dict[str, pipeline.TaskOutcome]
) -> None:
    # Greedy decoding over the same weights: reusing cached KV blocks must give the same tokens.
    for task in ("knowledge_qa", "compliance_qa"):
        before = {s.sample_id: s.output for s in base[task].samples}
        after = {s.sample_id: s.output for s in prefix_cached[task].samples}
        assert after == before, task


def _stored_run(backend: Backend, outcomes: dict[str, pipeline.TaskOutcome]) -> EvaluationRun:
    """Store measured outcomes the way ``run_execute`` does, as a finished run of ``backend``."""
    run, _ = services.run_request(backend=backend, tasks=list(outcomes), load_profile=PROFILE)
    for outcome in outcomes.values():
        services._store_task(run, outcome)
    EvaluationRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    run.refresh_from_db()
    return run


def _judged(
    baseline: Backend,
    candidate: Backend,
    base_outcomes: dict[str, pipeline.TaskOutcome],
    cand_outcomes: dict[str, pipeline.TaskOutcome],
    **fields: Any,
) -> GateDecision:
    """File a ticket as an engineer, attach the measured runs of both backends, and judge it."""
    engineer = User.objects.create_user("erin")
    engineer.groups.add(Group.objects.get_or_create(name="engineer")[0])
    ticket = gate_services.ticket_create(owner=engineer, **ticket_fields(baseline, candidate, **fields))
    gate_services.ticket_submit(ticket=ticket, actor=engineer)
    gate_services.ticket_transition(ticket=ticket, action="start_evaluation", actor=None)
    ReleaseTicket.objects.filter(pk=ticket.pk).update(
        baseline_run=_stored_run(baseline, base_outcomes), candidate_run=_stored_run(candidate, cand_outcomes)
    )
    return decision_make(ticket=ReleaseTicket.objects.get(pk=ticket.pk), actor=None)


@pytest.mark.django_db
def test_a_low_bit_candidate_is_restricted_or_rejected_naming_each_regressed_task(
    kit: Kit, base: dict[str, pipeline.TaskOutcome], low_bit: dict[str, pipeline.TaskOutcome], settings: Any
) -> None:
    settings.OPTGATE_MODEL_ROOTS = [kit.root]
    common: dict[str, Any] = {"model_id": "optgate/kit", "engine_version": "0.32.0", "hardware_class": "cpu",
                              "engine_args": NO_PREFIX}  # fmt: skip
    bf16, _ = backend_register(actor=None, name="kit-bf16", model_path=str(kit.path(BASE)),
                               model_revision=kit.revision(BASE), **common)  # fmt: skip
    low, _ = backend_register(actor=None, name="kit-low-bit", model_path=str(kit.path(kit.degraded)),
                              model_revision=kit.revision(kit.degraded), **common)  # fmt: skip
    tasks = ["cs_summary", "dataagent_nl2sql"]
    decision = _judged(
        bf16, low, {t: base[t] for t in tasks}, {t: low_bit[t] for t in tasks},
        mechanisms=["weight_quantization"], bottleneck="kv_memory",
        beneficiary_tasks=list(TaskType.objects.filter(slug="cs_summary")),
        risk_tasks=list(TaskType.objects.filter(slug="dataagent_nl2sql")),
    )  # fmt: skip

    assert decision.outcome in ("restrict", "reject"), decision.reasons
    regressed = [task for task, verdict in decision.verdicts.items() if verdict["status"] == "fail"]
    assert regressed, decision.verdicts
    text = " ".join(decision.reasons)
    for task in regressed:
        assert task in text
    assert "%" in text  # the reasons carry the measured pass rates
    assert ledger_verify().ok


@pytest.mark.django_db
def test_prefix_caching_passes_every_quality_guardrail_and_is_approved_unless_timing_is_unclear(
    kit: Kit, base: dict[str, pipeline.TaskOutcome], prefix_cached: dict[str, pipeline.TaskOutcome], settings: Any
) -> None:
    # The suites are large enough for the default policy: 100 knowledge_qa samples settle its
    # 5-point margin and 200 compliance_qa samples its 2-point margin when no answer changes.
    settings.OPTGATE_MODEL_ROOTS = [kit.root]
    common: dict[str, Any] = {"model_id": "optgate/kit", "model_path": str(kit.path(BASE)),
                              "model_revision": kit.revision(BASE), "engine_version": "0.32.0",
                              "hardware_class": "cpu"}  # fmt: skip
    bf16, _ = backend_register(actor=None, name="kit-bf16", engine_args=NO_PREFIX, **common)
    recipe = {"system_prompt_hash": "sha256:test", "tool_version": "tools@1", "policy_version": "default@1",
              "security_domain": "internal", "tenant": True}  # fmt: skip
    cached, _ = backend_register(actor=None, name="kit-bf16-prefix-cache", engine_args=PREFIX,
                                 prefix_cache_key_recipe=recipe, **common)  # fmt: skip
    tasks = ["knowledge_qa", "compliance_qa"]
    decision = _judged(bf16, cached, {t: base[t] for t in tasks}, {t: prefix_cached[t] for t in tasks})

    assert_prefix_cache_judged(decision.outcome, decision.verdicts)
    guardrails = {m["task"]: m for v in decision.verdicts.values() for m in v["metrics"] if m["kind"] == "guardrail"}
    assert guardrails["compliance_qa"]["n"] >= 200 and guardrails["compliance_qa"]["interval"][0] > -0.02
    assert ledger_verify().ok
