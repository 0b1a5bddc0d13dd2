"""The evaluation pipeline on real vLLM-on-CPU engines with the shipped kit.

The evidence is the demo's (``tests/demo_evidence.py``): its workers measured the kit's base model
without and with prefix caching, its low-bit variant and the base model with n-gram speculative
decoding, through the same services, engines and suites a production worker uses. Reading it here
keeps to one engine start per configuration per test run. Only attach mode needs an engine of
its own: the base model, started once for the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command

from backends.services import backend_register
from evaluators import services
from evaluators.engine import EngineHandle, launch_engine
from evaluators.models import RunStatus, SampleRecord
from evaluators.suites import get_suite
from ledger.models import LedgerEntry
from ledger.selectors import ledger_verify
from tests.demo_evidence import BASELINE, LOW_BIT, NGRAM, PREFIX_CACHE, DemoEvidence
from tests.factories import assert_prefix_cache_judged
from tools.kit import BASE, Kit

pytestmark = pytest.mark.engine

NO_PREFIX = {"max_model_len": 2048, "seed": 0, "max_num_seqs": 8, "enable_prefix_caching": False}
LOW_BIT_TITLE = "Low-bit weights for the whole fleet"
PREFIX_TITLE = "Prefix caching for the knowledge assistant"


@pytest.fixture(scope="session")
def demo(demo_evidence: DemoEvidence) -> DemoEvidence:
    assert demo_evidence.returncode == 0, demo_evidence.output[-4000:]
    return demo_evidence


def test_the_trained_baseline_answers_most_samples(demo: DemoEvidence) -> None:
    # The kit's per-task accuracy in-process is on its manifest (test_kit); served by vLLM, each
    # task must still be answered far more often than not.
    for task in ("knowledge_qa", "compliance_qa", "dataagent_nl2sql", "tool_calling", "cs_summary", "code_assistant"):
        quality = demo.task_result(BASELINE, task)["quality"]
        assert quality["n"] == len(get_suite(task).load_samples()), task
        assert quality["pass_rate"] > 0.8, (task, quality)


def test_prefix_caching_hits_on_the_shared_prefix_workload_only_when_enabled(demo: DemoEvidence) -> None:
    off = demo.task_result(BASELINE, "knowledge_qa")["engine_evidence"]
    on = demo.task_result(PREFIX_CACHE, "knowledge_qa")["engine_evidence"]
    assert not off.get("prefix_cache_hits")  # absent or zero: nothing was served from a cache
    assert (off.get("prefix_cache_hit_rate") or 0.0) == 0.0
    assert on["prefix_cache_hits"] > 0
    assert on["prefix_cache_hit_rate"] > 0.3
    assert on["cached_prompt_tokens"] > 0


def test_both_runs_keep_per_sample_records_with_latency(demo: DemoEvidence) -> None:
    suite_size = len(get_suite("knowledge_qa").load_samples())
    for backend in (BASELINE, PREFIX_CACHE):
        requests_per_task = demo.run(backend)["load_profile"]["requests_per_task"]
        samples = demo.samples(backend, "knowledge_qa")
        result = demo.task_result(backend, "knowledge_qa")
        assert len(samples) == suite_size
        assert all(s["output"] and s["prompt"] and s["target"] for s in samples)
        assert sum(s["latency_ms"] is not None for s in samples) == min(requests_per_task, suite_size)
        assert len(result["requests"]) == requests_per_task  # shipped prompts, then held-out ones
        assert all(r["error"] is None and r["ttft_s"] > 0 for r in result["requests"])
        # The engine's own TTFT covers the load phase only and starts when a request arrives, so it
        # is part of what the client measured, never more.
        client_ttft_ms = sum(r["ttft_s"] for r in result["requests"]) / len(result["requests"]) * 1000
        assert 0 < result["engine_evidence"]["engine_ttft_mean_ms"] <= client_ttft_ms


def test_the_low_bit_variant_scores_lower_on_a_risk_task(demo: DemoEvidence) -> None:
    # The shipped low-bit variant loses tool calling in the kit's own measurement; served by vLLM
    # over the whole suite, SQL or tool calling must still come out lower.
    rates = {
        task: (
            demo.task_result(BASELINE, task)["quality"]["pass_rate"],
            demo.task_result(LOW_BIT, task)["quality"]["pass_rate"],
        )
        for task in ("dataagent_nl2sql", "tool_calling")
    }
    lower = [task for task, (base, low) in rates.items() if low < base]
    assert lower, rates
    reasons = {s["failure_reason"] for task in lower for s in demo.samples(LOW_BIT, task) if not s["passed"]}
    assert reasons and all(reasons), "a regressed variant must leave failure reasons reviewers can read"


def test_ngram_speculative_decoding_reports_acceptance_counters(demo: DemoEvidence) -> None:
    evidence = demo.task_result(NGRAM, "cs_summary")["engine_evidence"]
    assert evidence["spec_decode_drafts"] > 0
    assert evidence["spec_decode_draft_tokens"] > 0
    assert evidence["spec_decode_accepted_tokens"] is not None
    assert 0.0 <= evidence["spec_decode_acceptance_rate"] <= 1.0
    assert evidence["spec_decode_mean_accepted_length"] >= 1.0


def test_prefix_caching_changes_no_answer(demo: DemoEvidence) -> None:
    # Greedy decoding over the same weights: reusing cached KV blocks must give the same tokens.
    for task in ("knowledge_qa", "compliance_qa"):
        before = {s["sample_id"]: s["output"] for s in demo.samples(BASELINE, task)}
        after = {s["sample_id"]: s["output"] for s in demo.samples(PREFIX_CACHE, task)}
        assert before and after == before, task


def test_a_low_bit_candidate_is_restricted_or_rejected_naming_each_regressed_task(demo: DemoEvidence) -> None:
    decision = demo.decision(LOW_BIT_TITLE)
    assert decision["outcome"] in ("restrict", "reject"), decision["reasons"]
    regressed = [task for task, verdict in decision["verdicts"].items() if verdict["status"] == "fail"]
    assert regressed, decision["verdicts"]
    text = " ".join(decision["reasons"])
    for task in regressed:
        assert task in text
    assert "%" in text  # the reasons carry the measured pass rates


def test_prefix_caching_passes_every_quality_guardrail_and_is_approved_unless_timing_is_unclear(
    demo: DemoEvidence,
) -> None:
    # The suites are large enough for the default policy: 100 knowledge_qa samples settle its
    # 5-point margin and 200 compliance_qa samples its 2-point margin when no answer changes.
    decision = demo.decision(PREFIX_TITLE)
    assert_prefix_cache_judged(decision["outcome"], decision["verdicts"])
    metrics = [m for verdict in decision["verdicts"].values() for m in verdict["metrics"]]
    guardrails = {m["task"]: m for m in metrics if m["kind"] == "guardrail" and m["metric"] == "pass_rate"}
    assert guardrails["compliance_qa"]["n"] >= 200 and guardrails["compliance_qa"]["interval"][0] > -0.02


# --- attach mode: a run against an endpoint OptGate did not start ---------------------------------


@pytest.fixture(scope="module")
def base_engine(kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHandle]:
    logs = tmp_path_factory.mktemp("logs")
    with launch_engine(
        model_path=kit.path(BASE),
        served_model_name="kit-base",
        engine_args=NO_PREFIX,
        log_path=logs / "kit-base.log",
        model_roots=[kit.root],
    ) as engine:
        yield engine


@pytest.mark.django_db
def test_a_run_through_the_services_stores_evidence_in_attach_mode(
    kit: Kit, base_engine: EngineHandle, settings: Any, capsys: Any
) -> None:
    settings.OPTGATE_MODEL_ROOTS = [kit.root]
    backend, _ = backend_register(
        actor=None,
        name="kit-base",
        model_id="optgate/kit-base",
        model_path=str(kit.path(BASE)),
        model_revision=kit.revision(BASE),
        engine_version="0.32.0",
        hardware_class="cpu",
        engine_args=NO_PREFIX,
    )
    run, _ = services.run_request(
        backend=backend,
        tasks=["compliance_qa"],
        load_profile={"requests_per_task": 8},
        attach_base_url=base_engine.base_url,
        attach_model=base_engine.model,
    )
    run = services.run_execute(run_id=run.pk)

    assert run.status == RunStatus.SUCCEEDED, run.error
    result = run.task_results.get(task="compliance_qa")
    samples = len(get_suite("compliance_qa").load_samples())
    assert result.quality["n"] == samples
    assert result.quality["pass_rate"] > 0.8  # the trained kit, not junk: the endpoint really served it
    assert len(result.requests) == 8
    assert SampleRecord.objects.filter(run=run, task="compliance_qa").count() == samples
    assert run.attempts.get().timings["total_s"] > 0
    assert LedgerEntry.objects.filter(kind="evaluation.succeeded", subject_id=str(run.pk)).exists()
    assert ledger_verify().ok

    attach = ["--attach", base_engine.base_url, "--attach-model", base_engine.model]
    call_command("evaluate_backend", "kit-base", "--tasks", "compliance_qa", "--requests", "8", *attach)
    out = capsys.readouterr().out
    assert f"reusing finished run #{run.pk}" in out
    assert "compliance_qa" in out and "%" in out
