"""The phases of one evaluation on a live endpoint: quality through lm-eval, load through our
streaming generator, engine evidence from ``/metrics`` around both.

Nothing here touches the database; :mod:`evaluators.services` stores what these functions return.
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evaluators.engine_metrics import MetricsSnapshot, derive_engine_evidence, scrape_metrics
from evaluators.interleave import BASELINE, CANDIDATE, DEFAULT_BLOCKS, Endpoint, measure_interleaved
from evaluators.loadgen import LoadRequest, run_load_sync
from evaluators.suites import get_suite
from evaluators.suites.base import Suite
from evaluators.suites.lm_eval_task import write_task_folder

logger = logging.getLogger(__name__)

# 100 requests per task: the most latency samples the default policy asks of any task (cs_summary).
# The failure reason of a sample whose request the engine refused (HTTP 400 and the like).
REQUEST_REFUSED = "request_refused"
DEFAULT_LOAD_PROFILE: dict[str, Any] = {"concurrency": 4, "requests_per_task": 100, "seed": 0, "quality_concurrency": 4}


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


def quality_phase(suite: Suite, *, base_url: str, model: str, concurrency: int, workdir: Path) -> list[SampleOutcome]:
    """Run the suite through lm-eval against the endpoint; re-score each output with the suite's scorer.

    lm-eval drives the requests (chat template applied server-side, greedy decoding from the task
    YAML); the suite's own scorer then gives every sample its failure reason and reviewer note.
    """
    import lm_eval
    from lm_eval.tasks import TaskManager

    from evaluators.lm_eval_client import RefusalAwareChatCompletion, parse_refusal

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    task_name = write_task_folder(suite, workdir)
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
    by_id = {sample["id"]: sample for sample in suite.load_samples()}
    outcomes = []
    for record in results["samples"][task_name]:
        sample = by_id[record["doc"]["id"]]
        responses = record.get("filtered_resps") or record.get("resps") or [""]
        output = responses[0]
        while isinstance(output, list):  # lm-eval nests responses per request and per repeat
            output = output[0] if output else ""
        outcomes.append(_scored(suite, sample, str(output), refusal=parse_refusal(str(output))))
    return sorted(outcomes, key=lambda o: o.sample_id)


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
    """The task's load: its own business prompts, in a seeded order, as streaming chat requests.

    Each suite's prompts already carry its shape (knowledge_qa shares long document prefixes,
    cs_summary asks for long JSON output, the rest are short interactive requests).
    """
    samples = suite.load_samples()
    order = list(range(len(samples)))
    random.Random(f"{suite.slug}:{seed}").shuffle(order)
    chosen = [samples[i] for i in order[: max(1, min(count, len(samples)))]]
    requests = [
        LoadRequest(messages=[{"role": "user", "content": s["prompt"]}], max_tokens=suite.max_gen_tokens)
        for s in chosen
    ]
    return [s["id"] for s in chosen], requests


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
        )
    outcome.quality = quality_summary(outcome.samples)
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


def evaluate_pair_task(
    slug: str,
    *,
    baseline: Endpoint,
    candidate: Endpoint,
    profile: dict[str, Any],
    baseline_samples: list[SampleOutcome] | None = None,
    on_phase: Any = None,
) -> tuple[TaskOutcome, TaskOutcome]:
    """One task on both engines at once: quality on each (the baseline's deterministic greedy
    outcomes may be passed in from a matching earlier run), then the load in interleaved blocks
    (:mod:`evaluators.interleave`). Timing is always measured here, never reused."""
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
            )
    for outcome in outcomes.values():
        outcome.quality = quality_summary(outcome.samples)
    if on_phase:
        on_phase("load (interleaved)")
    sample_ids, requests = load_requests(suite, count=int(profile["requests_per_task"]), seed=int(profile["seed"]))
    load, indexes = measure_interleaved(
        endpoints,
        requests,
        chunks=int(profile.get("blocks", DEFAULT_BLOCKS)),
        concurrency=int(profile["concurrency"]),
        seed=int(profile["seed"]),
    )
    for side, outcome in outcomes.items():
        outcome.performance = load.summary(side)
        outcome.requests = [{**r, "sample_id": sample_ids[r["index"]]} for r in load.records(side, indexes)]
        outcome.engine_evidence = load.engine(side)
        latency = {r["sample_id"]: r["e2e_s"] for r in outcome.requests if r.get("e2e_s") is not None}
        for sample in outcome.samples:
            if sample.sample_id in latency:
                sample.latency_ms = latency[sample.sample_id] * 1000.0
    return outcomes[BASELINE], outcomes[CANDIDATE]
