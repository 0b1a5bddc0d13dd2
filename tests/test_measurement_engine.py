"""Measurement on real vLLM-on-CPU engines with the shipped kit: interleaved pairs and planted
scenarios, each asserting its outcome.

* a seed-only change, measured as an interleaved pair, claims no regression on any guardrail;
  its blocks ran in ABBA BAAB ABBA BAAB order, from a prefix cache emptied after the quality phase;
* a candidate with a context cut (``max_model_len`` below the long-context prompts) and
  ``max_num_seqs: 1`` (two planted faults in one engine pair, to spend one engine start):
  the long-context task fails on refused requests, counted as failed samples — not a run error —
  and the fitting risk task is still judged, failing its goodput guardrail;
* a prefix cache on a workload with no shared prefix hits nothing and gains nothing, and the
  KV-memory bottleneck it might claim is "not exercised", naming the stress profile;
* a larger KV cache relieves a claimed kv_memory bottleneck under its stress profile (long
  documents at a concurrency sized from the baseline's KV capacity);
* an engine that cannot start is an ``error`` decision naming the root cause from its log.

The order spends as few engine starts as it can (``evaluators.warm``: a worker keeps the engines
it last measured with): the KV scenario's two engines are its own, so it comes first; the
scenarios on the ``kit-base`` baseline follow one after the other, its engine warm from one to the
next (also past the candidate that cannot start), as on a worker between tickets; the seed-only
pair comes last, and ``tests/test_staged_engine.py``, next in the suite, takes both its engines.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from backends.models import Backend
from evaluators import pipeline, services
from evaluators.interleave import BASELINE, CANDIDATE
from evaluators.models import EvaluationRun, RunErrorKind, RunStatus, SampleRecord, TaskResult
from gates.judge.verdicts import TaskEvidence, judge_task
from gates.models import DecisionOutcome
from gates.policy.parse import load_policy
from gates.selectors.evidence import run_task_evidence
from gates.services import decisions
from tests.factories import evaluating_ticket, register_kit_backend, tasks
from tools.kit import Kit

# Engines start in threads that write to the database: a real transaction, task types restored after.
pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

POLICY = load_policy("default")
# Fewer load requests than the policy's minimum: a failure still fails, a pass reads inconclusive.
PROFILE = {"requests_per_task": 40}
# Scenarios about performance alone ask for a handful of answers (the load still sends 40 prompts).
QUALITY_FEW = 8


@pytest.fixture
def kit_backend(kit: Kit, settings: Any, erin: User, tmp_path: Any) -> Any:
    settings.OPTGATE_MODEL_ROOTS = [kit.root]
    settings.OPTGATE_ARTIFACTS_DIR = tmp_path  # run ids restart with each test database

    def register(name: str, **engine_args: Any) -> Backend:
        return register_kit_backend(kit, erin, name, **engine_args)

    return register


def _pair(
    baseline: Backend, candidate: Backend, task_list: list[str], **profile: Any
) -> tuple[EvaluationRun, EvaluationRun]:
    base_run, cand_run = services.pair_request(
        baseline=baseline, candidate=candidate, tasks=task_list, load_profile={**PROFILE, **profile}
    )
    services.run_execute(run_id=cand_run.pk)
    base_run.refresh_from_db()
    cand_run.refresh_from_db()
    return base_run, cand_run


def test_a_larger_kv_cache_relieves_the_kv_memory_bottleneck_under_its_stress_profile(kit_backend: Any) -> None:
    """A baseline whose KV cache holds 3,072 tokens against one holding four times as many: the
    kv_memory stress profile sends long documents at a concurrency sized to need twice the
    baseline's cache, the baseline comes under pressure and the candidate does not."""
    baseline = kit_backend("kit-base-small-kv", num_gpu_blocks_override=24)
    candidate = kit_backend("kit-base-large-kv", num_gpu_blocks_override=96)
    base_run, cand_run = _pair(
        baseline, candidate, ["code_assistant"], stress="kv_memory", open_loop_requests=0, quality_samples=QUALITY_FEW
    )
    assert (base_run.status, cand_run.status) == (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED), cand_run.error
    stress = TaskResult.objects.get(run=cand_run).performance["stress"]
    assert stress["plan"]["kv_capacity_tokens"] == 24 * 128 and stress["plan"]["concurrency"] >= 4
    assert len(stress["point"]["blocks"]) == 4

    evidence = TaskEvidence(
        "code_assistant", run_task_evidence(base_run, "code_assistant"), run_task_evidence(cand_run, "code_assistant")
    )
    assert evidence.cand.engine["max_concurrency"] == pytest.approx(4 * evidence.base.engine["max_concurrency"])
    squeezed = evidence.base.stress
    assert squeezed is not None
    # Every document decoded all its tokens, holding its KV room as an answer would (the kit's model
    # ends most after a few: a CI run's baseline cache was a quarter full on average and no wait
    # was caught).
    sent = stress["plan"]["concurrency"] * pipeline.STRESS_BLOCKS * pipeline.STRESS_ROUNDS
    assert squeezed.engine["generation_tokens"] == sent * pipeline.STRESS_MAX_TOKENS, squeezed.engine
    assert squeezed.engine["preemptions"] > 0 or squeezed.engine["kv_waiting_peak"] > 0, squeezed.engine
    # Requests that waited on the roomy engine waited for the step's token budget, not for room.
    roomy = evidence.cand.stress
    assert roomy is not None
    assert not roomy.engine["preemptions"] and roomy.engine["kv_waiting_peak"] == 0, roomy.engine
    print(
        "kv stress, requests waiting for capacity / for KV room (peak): "
        f"baseline {squeezed.engine['capacity_waiting_peak']} / {squeezed.engine['kv_waiting_peak']}, "
        f"candidate {roomy.engine['capacity_waiting_peak']} / {roomy.engine['kv_waiting_peak']}"
    )
    verdict = judge_task(POLICY, evidence, role="beneficiary", bottleneck="kv_memory")
    kv = next(m for m in verdict.metrics if m.source == "bottleneck:kv_memory")
    assert kv.status == "pass", kv.reason


def test_a_prefix_cache_on_a_workload_with_no_shared_prefix_hits_nothing_and_gains_nothing(kit_backend: Any) -> None:
    """code_assistant's prompts are a sentence or two, shorter than one KV block (128 tokens on CPU):
    nothing can be shared, so the cache must not be credited. The same evidence, read against a
    claimed KV-memory bottleneck, shows a workload that never fills the cache: inconclusive, with
    the stress profile to use named, never a failure."""
    base_run, cand_run = _pair(
        kit_backend("kit-base"),
        kit_backend("kit-base-prefix", enable_prefix_caching=True),
        ["code_assistant"],
        quality_samples=QUALITY_FEW,
    )
    assert (base_run.status, cand_run.status) == (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED), cand_run.error
    evidence = TaskEvidence(
        "code_assistant", run_task_evidence(base_run, "code_assistant"), run_task_evidence(cand_run, "code_assistant")
    )
    assert evidence.cand.engine["prefix_cache_queries"] > 0  # the counters were read, and ...
    assert evidence.cand.engine["prefix_cache_hit_rate"] < 0.05  # ... the cache hit (almost) nothing

    verdict = judge_task(POLICY, evidence, role="beneficiary", mechanisms=["prefix_cache"], bottleneck="kv_memory")
    by_source = {(m.source, m.metric): m for m in verdict.metrics}
    hit = by_source[("prefix_cache", "prefix_cache_hit_rate")]
    assert hit.status == "fail", hit.reason
    ttft = by_source[("prefix_cache", "ttft_p50")]
    assert ttft.status != "pass", ttft.reason  # no TTFT gain is claimed for it
    kv = by_source[("bottleneck:kv_memory", "bottleneck:kv_memory")]
    assert kv.status == "inconclusive", kv.reason
    assert "not exercised" in kv.reason and "long contexts at high concurrency" in kv.reason
    assert verdict.status != "pass"


def test_a_context_cut_fails_the_long_task_on_refusals_and_the_fitting_task_is_still_judged(
    kit_backend: Any, erin: User
) -> None:
    baseline = kit_backend("kit-base")
    cut = kit_backend("kit-base-cut", max_model_len=512, max_num_seqs=1)
    base_run, cand_run = _pair(baseline, cut, ["knowledge_qa", "code_assistant"])
    assert (base_run.status, cand_run.status) == (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED), cand_run.error

    refused = SampleRecord.objects.filter(run=cand_run, task="knowledge_qa", failure_reason=pipeline.REQUEST_REFUSED)
    assert refused.count() == SampleRecord.objects.filter(run=cand_run, task="knowledge_qa").count() > 0
    assert "maximum context length" in refused.first().detail  # type: ignore[union-attr]
    assert TaskResult.objects.get(run=cand_run, task="knowledge_qa").error == ""

    ticket = evaluating_ticket(
        erin,
        baseline,
        cut,
        base_run,
        cand_run,
        beneficiary_tasks=tasks("knowledge_qa"),
        risk_tasks=tasks("code_assistant"),
    )
    decision = decisions.decision_make(ticket=ticket)
    assert decision.outcome == DecisionOutcome.REJECT, decision.reasons
    assert decision.verdicts["knowledge_qa"]["status"] == "fail"
    fitting = {m["metric"]: m for m in decision.verdicts["code_assistant"]["metrics"] if m["kind"] == "guardrail"}
    assert fitting["pass_rate"]["status"] == "pass"  # judged, and its answers are the baseline's
    # max_num_seqs: 1 at concurrency 4: requests wait for one another in the engine's queue. (With
    # the model thread pinned, the kit answers fast enough that the wait no longer breaks the 1 s
    # TTFT SLO, so goodput is judged but need not fail.)
    assert fitting["goodput"]["status"] in ("pass", "inconclusive", "fail"), fitting["goodput"]
    queued = {
        side: TaskResult.objects.get(run=run, task="code_assistant").engine_evidence["engine_queue_mean_ms"]
        for side, run in (("baseline", base_run), ("candidate", cand_run))
    }
    assert queued["candidate"] > 2 * queued["baseline"] + 1.0, queued


def test_an_engine_that_cannot_start_is_an_error_decision_with_its_root_cause(kit_backend: Any, erin: User) -> None:
    baseline = kit_backend("kit-base")
    # Beyond the model's 2,048 positions: vLLM refuses the configuration while starting.
    too_long = kit_backend("kit-base-too-long", max_model_len=8192)
    base_run, cand_run = _pair(baseline, too_long, ["code_assistant"])

    assert cand_run.status == RunStatus.ERROR and cand_run.error_kind == RunErrorKind.START_FAILED
    headline = cand_run.error.splitlines()[0]
    assert "max_model_len" in headline and "See root cause above" not in headline, headline
    assert base_run.status == RunStatus.ERROR and base_run.error_kind == RunErrorKind.OTHER

    ticket = evaluating_ticket(
        erin, baseline, too_long, base_run, cand_run, beneficiary_tasks=tasks("code_assistant"), risk_tasks=[]
    )
    decision = decisions.decision_make(ticket=ticket)
    assert decision.outcome == DecisionOutcome.ERROR
    assert "max_model_len" in decision.reasons[1]


def test_a_seed_only_change_measured_interleaved_claims_no_regression(kit_backend: Any) -> None:
    base_run, cand_run = _pair(kit_backend("kit-base"), kit_backend("kit-base-seed1", seed=1), ["code_assistant"])
    assert (base_run.status, cand_run.status) == (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED), cand_run.error

    blocks = TaskResult.objects.get(run=cand_run).performance["blocks"]
    # Each engine's cache was emptied once, before its first block (after quality and warm-up).
    assert len(blocks) == 8 and [block["cache_reset"] for block in blocks] == [True] + [False] * 7
    positions = sorted(
        [(b["position"], CANDIDATE) for b in blocks]
        + [(b["position"], BASELINE) for b in TaskResult.objects.get(run=base_run).performance["blocks"]]
    )
    assert "".join("A" if side == BASELINE else "B" for _, side in positions) == "ABBABAAB" * 2

    # The bottleneck read from the engine: KV capacity and the task's max concurrency, queue P95 from
    # the histogram (fine buckets). The KV gauge is read around each block, and sampled during the
    # load only where a KV-memory claim is judged (each read stalls the token stream a little).
    result = TaskResult.objects.get(run=cand_run)
    engine = result.engine_evidence
    assert engine["kv_capacity_tokens"] > 0 and engine["max_concurrency"] > 1
    assert engine["engine_queue_p95_ms"] is not None and engine["kv_cache_usage_peak"] is not None
    assert engine["kv_cache_usage_time_weighted_mean"] is None
    # Load as users send it: an open-loop point near the baseline's capacity, interleaved too.
    open_loop = result.performance["open_loop"]
    assert open_loop["request_rate"] > 0 and len(open_loop["blocks"]) == 4
    assert all(r["scheduled_s"] is not None for r in open_loop["requests"])

    evidence = TaskEvidence(
        "code_assistant", run_task_evidence(base_run, "code_assistant"), run_task_evidence(cand_run, "code_assistant")
    )
    verdict = judge_task(POLICY, evidence, role="risk")
    guardrails = {m.metric: m for m in verdict.metrics if m.kind == "guardrail"}
    assert guardrails["pass_rate"].status == "pass", guardrails["pass_rate"].reason  # greedy: same answers
    failing = [m.reason for m in guardrails.values() if m.status == "fail"]
    assert not failing, failing
    assert {"open_loop:ttft_p95", "open_loop:goodput"} <= {m.metric for m in verdict.metrics}
