"""The phases of one evaluation on a live endpoint: quality through lm-eval, load through our
streaming generator, engine evidence from ``/metrics`` around both.

Nothing here touches the database; :mod:`evaluators.services` stores what these functions return.
"""

from __future__ import annotations

import logging
import math
import os
import random
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evaluators.engine_metrics import MetricsSnapshot, derive_engine_evidence, scrape_metrics
from evaluators.interleave import (
    BASELINE,
    CANDIDATE,
    DEFAULT_BLOCKS,
    KV_SAMPLE_INTERVAL_S,
    Endpoint,
    InterleavedLoad,
    measure_interleaved,
)
from evaluators.loadgen import LoadRequest, build_workload, run_load_sync
from evaluators.suites import get_suite
from evaluators.suites.base import HELD_OUT_SIZE, Suite
from evaluators.suites.lm_eval_task import write_task_folder

logger = logging.getLogger(__name__)

# 200 requests per task: the shipped samples' prompts, then held-out ones of the same shape (the
# pool's first, which are stage two's quality samples: timing and answers do not interact). Twice
# the most latency samples the default policy asks of any task (cs_summary's 100): a tail guardrail
# judged on 100 requests in 8 chunks swung past its 50 % margin with one slow chunk (the demo's
# prefix-caching ticket: knowledge_qa's TTFT P95 −21 %, 95 % CI −62 % to +65 %), where twice the
# requests in twice the chunks settle it.
# The failure reason of a sample whose request the engine refused (HTTP 400 and the like).
REQUEST_REFUSED = "request_refused"
# ``open_loop_requests`` of them are sent again as Poisson arrivals at OPEN_LOOP_UTILISATION of the
# request rate the baseline sustained in the closed loop (its capacity at that concurrency).
DEFAULT_LOAD_PROFILE: dict[str, Any] = {
    "concurrency": 4,
    "requests_per_task": 200,
    "seed": 0,
    "quality_concurrency": 4,
    "open_loop_requests": 32,
}
# Requests per interleaved block: blocks last a second or two on a small CPU, so a neighbour's
# burst lands on both sides alike, and each chunk still has enough requests for its own figures.
BLOCK_REQUESTS = 12
OPEN_LOOP_UTILISATION = 0.9
OPEN_LOOP_BLOCKS = 4
# The kv_memory stress profile (run when a ticket claims that bottleneck, ``profile["stress"]``):
# long documents built from the task's own prompts, as many at once as would need twice the
# baseline's KV cache, within a bound a worker can serve; four interleaved blocks per side.
STRESS_CONTEXT_WORDS = 600
STRESS_FILL = 2.0
STRESS_MAX_CONCURRENCY = 32
STRESS_BLOCKS = 4
# Each block sends its concurrency this many times over, so the cache stays full for a while: with
# one round a block of the tiny model lasted a few hundred milliseconds and the KV gauge, read
# every KV_STRESS_SAMPLE_S, could miss the requests waiting for room in it.
STRESS_ROUNDS = 3
KV_STRESS_SAMPLE_S = 0.1
STRESS_MAX_TOKENS = 64
# A task's performance record holding only this key: its load was not measured, for the reason
# given (what its pair measured before already settled the verdict; ``evaluators.services``).
LOAD_SKIPPED = "load_skipped"
# The gateway's tenants the load comes from, in turn; each gets its cache salt (see
# backends.prefix_cache), so a cache partitioned per tenant is measured as it would serve.
LOAD_TENANTS = ("tenant-a", "tenant-b", "tenant-c", "tenant-d")


@dataclass
class SampleOutcome:
    sample_id: str
    prompt: str
    target: str
    output: str
    passed: bool
    score: float
    failure_reason: str
    detail: str
    latency_ms: float | None = None


@dataclass
class TaskOutcome:
    task: str
    suite_version: str
    samples: list[SampleOutcome] = field(default_factory=list)
    quality: dict[str, Any] = field(default_factory=dict)
    performance: dict[str, Any] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    engine_evidence: dict[str, Any] = field(default_factory=dict)


def quality_phase(
    suite: Suite,
    *,
    base_url: str,
    model: str,
    concurrency: int,
    workdir: Path,
    samples: list[dict[str, Any]] | None = None,
) -> list[SampleOutcome]:
    """Run the suite (or ``samples`` of it: a stage, a subset) through lm-eval against the endpoint;
    re-score each output with the suite's scorer.

    lm-eval drives the requests (chat template applied server-side, greedy decoding from the task
    YAML); the suite's own scorer then gives every sample its failure reason and reviewer note.
    """
    import lm_eval
    from lm_eval.tasks import TaskManager

    from evaluators.lm_eval_client import RefusalAwareChatCompletion, parse_refusal

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    task_name = write_task_folder(suite, workdir, samples)
    client = RefusalAwareChatCompletion(
        model=model,
        base_url=f"{base_url}/v1/chat/completions",
        num_concurrent=concurrency,
        max_retries=1,
        tokenized_requests=False,
    )
    results = lm_eval.simple_evaluate(
        model=client,
        tasks=[task_name],
        task_manager=TaskManager(include_path=str(workdir), include_defaults=False),
        apply_chat_template=True,
        log_samples=True,
        bootstrap_iters=0,
        verbosity="WARNING",
    )
    if results is None:
        raise RuntimeError(f"lm-eval returned no results for {suite.slug}")
    by_id = {sample["id"]: sample for sample in (samples or suite.load_samples())}
    outcomes = []
    for record in results["samples"][task_name]:
        sample = by_id[record["doc"]["id"]]
        responses = record.get("filtered_resps") or record.get("resps") or [""]
        output = responses[0]
        while isinstance(output, list):  # lm-eval nests responses per request and per repeat
            output = output[0] if output else ""
        outcomes.append(_scored(suite, sample, str(output), refusal=parse_refusal(str(output))))
    return sorted(outcomes, key=lambda o: o.sample_id)


def profile_samples(suite: Suite, profile: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The samples a profile asks quality on: a stage's (``stage`` ≥ 2: held-out samples, as many
    as the suite's entry in ``stage_sizes``, else ``stage_size``, else the shipped file), the first
    ``quality_samples`` shipped ones, or all (None) — a performance-only measurement may ask for a
    handful."""
    stage = profile.get("stage")
    if stage and int(stage) > 1:
        size = (profile.get("stage_sizes") or {}).get(suite.slug) or profile.get("stage_size")
        return suite.stage_samples(int(stage), int(size) if size else None)
    limit = profile.get("quality_samples")
    if not limit:
        return None
    return suite.load_samples()[: int(limit)]


def _scored(suite: Suite, sample: dict[str, Any], output: str, *, refusal: str | None) -> SampleOutcome:
    """One sample's outcome: the suite's verdict on the output, or a failure when the engine refused
    the request (``refusal``: its own configuration said no, so the candidate fails this sample)."""
    base = {"sample_id": sample["id"], "prompt": sample["prompt"], "target": str(sample.get("target", ""))}
    if refusal is not None:
        return SampleOutcome(**base, output="", passed=False, score=0.0, failure_reason=REQUEST_REFUSED, detail=refusal)
    verdict = suite.score(sample, output)
    return SampleOutcome(
        **base,
        output=output,
        passed=verdict.passed,
        score=verdict.score,
        failure_reason=verdict.failure_reason or "",
        detail=verdict.detail,
    )


def load_requests(suite: Suite, *, count: int, seed: int) -> tuple[list[str], list[LoadRequest]]:
    """The task's load: ``count`` of its own business prompts, in a seeded order, as streaming chat
    requests — the shipped samples', then as many held-out ones as it takes.

    Each suite's prompts already carry its shape (knowledge_qa shares long document prefixes,
    cs_summary asks for long JSON output, the rest are short interactive requests).
    """
    samples = suite.load_samples()
    if count > len(samples):
        samples += suite.held_out_samples(0, min(count - len(samples), HELD_OUT_SIZE))
    order = list(range(len(samples)))
    random.Random(f"{suite.slug}:{seed}").shuffle(order)
    chosen = [samples[i] for i in order[: max(1, min(count, len(samples)))]]
    requests = [
        LoadRequest(
            messages=[{"role": "user", "content": s["prompt"]}],
            max_tokens=suite.max_gen_tokens,
            tenant=LOAD_TENANTS[k % len(LOAD_TENANTS)],
        )
        for k, s in enumerate(chosen)
    ]
    return [s["id"] for s in chosen], requests


def blocks_for(requests: int) -> int:
    """Interleaved blocks per side for a load of ``requests``: a dozen or so requests each, at least
    :data:`DEFAULT_BLOCKS` (200 requests: 16 blocks of 12-13)."""
    return max(DEFAULT_BLOCKS, requests // BLOCK_REQUESTS)


def quality_summary(samples: list[SampleOutcome]) -> dict[str, Any]:
    n = len(samples)
    reasons: dict[str, int] = {}
    for s in samples:
        if not s.passed:
            key = s.failure_reason.split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
    return {
        "n": n,
        "passed": sum(s.passed for s in samples),
        "pass_rate": (sum(s.passed for s in samples) / n) if n else None,
        "score_mean": (sum(s.score for s in samples) / n) if n else None,
        "failure_reasons": reasons,
    }


def evaluate_task(
    slug: str,
    *,
    base_url: str,
    model: str,
    profile: dict[str, Any],
    on_phase: Any = None,
) -> TaskOutcome:
    """Quality, then load, for one task type: engine counters are scraped around both, the engine's
    own latency means around the load alone."""
    suite = get_suite(slug)
    outcome = TaskOutcome(task=slug, suite_version=suite.version)
    before = _scrape(base_url)
    if on_phase:
        on_phase("quality")
    with tempfile.TemporaryDirectory(prefix=f"optgate-{slug}-") as workdir:
        outcome.samples = quality_phase(
            suite,
            base_url=base_url,
            model=model,
            concurrency=int(profile["quality_concurrency"]),
            workdir=Path(workdir),
            samples=profile_samples(suite, profile),
        )
    outcome.quality = quality_summary(outcome.samples)
    if profile.get("quality_only"):
        # Answers only (e.g. a fleet baseline whose greedy outcomes later pairs reuse): no timing.
        return outcome
    if on_phase:
        on_phase("load")
    sample_ids, requests = load_requests(suite, count=int(profile["requests_per_task"]), seed=int(profile["seed"]))
    load_start = _scrape(base_url)
    result = run_load_sync(
        base_url, model, requests, concurrency=int(profile["concurrency"]), seed=int(profile["seed"])
    )
    after = _scrape(base_url)
    outcome.performance = result.summary()
    records = result.to_json()["records"]
    outcome.requests = [{**record, "sample_id": sample_ids[record["index"]]} for record in records]
    latency = {r["sample_id"]: r["e2e_s"] for r in outcome.requests if r.get("e2e_s") is not None}
    for sample in outcome.samples:
        if sample.sample_id in latency:
            sample.latency_ms = latency[sample.sample_id] * 1000.0
    if before is not None and after is not None:
        # The engine's own latencies over the load phase only, comparable with the load generator's.
        outcome.engine_evidence = derive_engine_evidence(before, after, latency_since=load_start)
    return outcome


def _scrape(base_url: str) -> MetricsSnapshot | None:
    # An attached endpoint may not expose /metrics: its evidence is then absent, not zero.
    try:
        return scrape_metrics(base_url)
    except Exception as exc:  # any scrape failure means "no engine evidence"
        logger.warning("could not scrape %s/metrics: %s", base_url, exc)
        return None


def pair_quality(
    slug: str,
    *,
    baseline: Endpoint,
    candidate: Endpoint,
    profile: dict[str, Any],
    baseline_samples: list[SampleOutcome] | None = None,
    on_phase: Any = None,
) -> tuple[TaskOutcome, TaskOutcome]:
    """One task's answers on both engines: each side's quality (the baseline's deterministic greedy
    outcomes may be passed in from a matching earlier run) and its summary."""
    suite = get_suite(slug)
    outcomes = {side: TaskOutcome(task=slug, suite_version=suite.version) for side in (BASELINE, CANDIDATE)}
    endpoints = {BASELINE: baseline, CANDIDATE: candidate}
    concurrency = int(profile["quality_concurrency"])
    for side in (CANDIDATE, BASELINE):
        if side == BASELINE and baseline_samples is not None:
            outcomes[side].samples = [replace(sample, latency_ms=None) for sample in baseline_samples]
            continue
        if on_phase:
            on_phase(f"quality ({side})")
        with tempfile.TemporaryDirectory(prefix=f"optgate-{slug}-") as workdir:
            outcomes[side].samples = quality_phase(
                suite,
                base_url=endpoints[side].base_url,
                model=endpoints[side].model,
                concurrency=concurrency,
                workdir=Path(workdir),
                samples=profile_samples(suite, profile),
            )
    for outcome in outcomes.values():
        outcome.quality = quality_summary(outcome.samples)
        if profile.get("stage"):
            outcome.suite_version = suite.samples_version(profile_samples(suite, profile) or [])
    return outcomes[BASELINE], outcomes[CANDIDATE]


def pair_load(
    base: TaskOutcome,
    cand: TaskOutcome,
    *,
    baseline: Endpoint,
    candidate: Endpoint,
    profile: dict[str, Any],
    on_phase: Any = None,
) -> None:
    """One task's load on both engines in interleaved blocks (:mod:`evaluators.interleave`), and its
    open-loop and stress points, stored on both outcomes, whose samples gain their latencies.
    Timing is always measured here, never reused."""
    slug = cand.task
    suite = get_suite(slug)
    outcomes = {BASELINE: base, CANDIDATE: cand}
    endpoints = {BASELINE: baseline, CANDIDATE: candidate}
    if on_phase:
        on_phase("load (interleaved)")
    sample_ids, requests = load_requests(suite, count=int(profile["requests_per_task"]), seed=int(profile["seed"]))
    # The KV gauge is sampled during the load only where the KV-memory bottleneck is judged: each
    # read stalls the engine's token stream a little (evaluators.interleave.KvSampler).
    stressed_here = profile.get("stress") == "kv_memory" and slug in profile.get("stress_tasks", [slug])
    load, indexes = measure_interleaved(
        endpoints,
        requests,
        chunks=int(profile.get("blocks") or blocks_for(len(requests))),
        concurrency=int(profile["concurrency"]),
        seed=int(profile["seed"]),
        kv_sample_s=KV_SAMPLE_INTERVAL_S if stressed_here else None,
    )
    open_loop = _open_loop_point(endpoints, requests, load, profile, on_phase)
    stress = _kv_stress_point(endpoints, suite, requests, load, profile, on_phase) if stressed_here else None
    for side, outcome in outcomes.items():
        outcome.performance = load.summary(side)
        outcome.requests = [{**r, "sample_id": sample_ids[r["index"]]} for r in load.records(side, indexes)]
        outcome.engine_evidence = load.engine(side)
        outcome.engine_evidence.update(kv_concurrency(outcome.engine_evidence, outcome.requests, suite.max_gen_tokens))
        if open_loop is not None:
            point, point_indexes, rate = open_loop
            summary = _point_summary(point, side)
            summary["request_rate"] = rate
            summary["requests"] = [
                {**r, "sample_id": sample_ids[r["index"]]} for r in point.records(side, point_indexes)
            ]
            outcome.performance["open_loop"] = summary
        if stress is not None:
            plan, stressed = stress
            outcome.performance["stress"] = {
                "plan": plan,
                "point": None if stressed is None else _point_summary(stressed, side),
            }
        latency = {r["sample_id"]: r["e2e_s"] for r in outcome.requests if r.get("e2e_s") is not None}
        for sample in outcome.samples:
            if sample.sample_id in latency:
                sample.latency_ms = latency[sample.sample_id] * 1000.0


def _open_loop_point(
    endpoints: dict[str, Endpoint],
    requests: list[LoadRequest],
    closed: InterleavedLoad,
    profile: dict[str, Any],
    on_phase: Any,
) -> tuple[InterleavedLoad, list[range], float] | None:
    """Load as users send it: the task's first ``open_loop_requests`` prompts again, arriving as a
    Poisson stream near the baseline's capacity (the request rate it sustained in the closed loop),
    in interleaved blocks with each engine's prefix cache emptied first. None when the profile asks
    for no open-loop point or the baseline completed nothing to size it by."""
    count = min(int(profile.get("open_loop_requests", 0)), len(requests))
    capacity = closed.summary(BASELINE).get("request_throughput")
    if count < OPEN_LOOP_BLOCKS or not capacity:
        return None
    rate = OPEN_LOOP_UTILISATION * float(capacity)
    if on_phase:
        on_phase("load (open loop)")
    point, indexes = measure_interleaved(
        endpoints,
        requests[:count],
        chunks=OPEN_LOOP_BLOCKS,
        concurrency=None,
        request_rate=rate,
        seed=int(profile["seed"]) + 1,
        warmup=False,
    )
    return point, indexes, rate


def kv_concurrency(engine: dict[str, Any], requests: list[dict[str, Any]], max_tokens: int) -> dict[str, float | None]:
    """How many of the task's longest requests (prompt plus the most it may generate) the engine's
    KV cache holds at once — the capacity a KV-memory change moves, read from the engine."""
    capacity = engine.get("kv_capacity_tokens")
    prompts = [int(r["prompt_tokens"]) for r in requests if r.get("prompt_tokens")]
    if not capacity or not prompts:
        return {"task_context_tokens": None, "max_concurrency": None}
    context = max(prompts) + max_tokens
    return {"task_context_tokens": float(context), "max_concurrency": float(capacity) / context}


def _point_summary(point: InterleavedLoad, side: str) -> dict[str, Any]:
    """One side of a further load point: its aggregates and per-block figures, and its engine evidence."""
    summary = point.summary(side)
    summary["engine"] = point.engine(side)
    return summary


def _kv_stress_point(
    endpoints: dict[str, Endpoint],
    suite: Suite,
    requests: list[LoadRequest],
    closed: InterleavedLoad,
    profile: dict[str, Any],
    on_phase: Any,
) -> tuple[dict[str, Any], InterleavedLoad | None]:
    """The kv_memory stress profile: long contexts at a concurrency that needs twice the baseline's
    KV cache (sized from its capacity and the tokens per word its engine counted in the closed loop).
    Returns the plan, and the measured point — or None with the plan saying why it was not run (a
    cache too large to fill within the bound is itself the finding: KV memory is not this
    engine's bottleneck)."""
    engine = closed.engine(BASELINE)
    capacity, prompt_tokens = engine.get("kv_capacity_tokens"), engine.get("prompt_tokens")
    plan: dict[str, Any] = {"profile": "kv_memory", "kv_capacity_tokens": capacity}
    words = sum(len(m["content"].split()) for r in requests for m in (r.messages or []))
    if not capacity or not prompt_tokens or not words:
        return {**plan, "skipped": "the baseline engine did not report its KV capacity"}, None
    tokens_per_word = float(prompt_tokens) / words
    context_tokens = STRESS_CONTEXT_WORDS * tokens_per_word + STRESS_MAX_TOKENS
    needed = math.ceil(STRESS_FILL * float(capacity) / context_tokens)
    plan.update(context_tokens=round(context_tokens), concurrency_needed=needed)
    if needed > STRESS_MAX_CONCURRENCY:
        plan["skipped"] = (
            f"the baseline's KV cache holds {capacity:,.0f} tokens, {float(capacity) / context_tokens:,.0f} requests "
            f"of ~{context_tokens:,.0f} tokens at once; filling it needs more than the {STRESS_MAX_CONCURRENCY} "
            "concurrent requests this profile sends"
        )
        return plan, None
    concurrency = max(4, needed)
    long_requests = build_workload(
        "long_context",
        samples=[s["prompt"] for s in suite.load_samples()],
        n=concurrency * STRESS_BLOCKS * STRESS_ROUNDS,
        seed=int(profile["seed"]),
        chat=True,
        max_tokens=STRESS_MAX_TOKENS,
        # Every document decodes all its tokens, holding its KV room for as many steps as an answer
        # would: the kit's model ends most after a few tokens, and the cache was full for moments.
        extra_body={"ignore_eos": True},
        context_words=STRESS_CONTEXT_WORDS,
    )
    plan["concurrency"] = concurrency
    if on_phase:
        on_phase("load (kv_memory stress)")
    point, _ = measure_interleaved(
        endpoints,
        long_requests,
        chunks=STRESS_BLOCKS,
        concurrency=concurrency,
        seed=int(profile["seed"]),
        warmup=False,
        # Here the cost of each read (a stalled token stream) matters less than missing a wait.
        kv_sample_s=KV_STRESS_SAMPLE_S,
    )
    return plan, point
