"""Metric families: which evidence a metric reads, which test judges it, and which way is better.

The names come from :mod:`gates.vocabulary` (shared with the ticket form); this module adds the
judge's view of each name so the policy validator and the verdicts agree on one table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Family = Literal["pass_fail", "score", "latency", "throughput", "goodput", "engine"]


@dataclass(frozen=True)
class MetricSpec:
    """How one metric is measured and compared."""

    name: str
    family: Family
    label: str
    higher_is_better: bool
    field: str = ""  # RunTaskEvidence attribute (latency list, throughput) or engine/check key
    stat: str = ""  # for latency: median / p90 / p95 / p99


def _latency(name: str, field: str, label: str) -> MetricSpec:
    pct = name.rsplit("_p", 1)[1]
    stat = "median" if pct == "50" else f"p{pct}"
    return MetricSpec(name, "latency", f"{label} P{pct}", higher_is_better=False, field=field, stat=stat)


_SPECS: tuple[MetricSpec, ...] = (
    MetricSpec("pass_rate", "pass_fail", "pass rate", True, field="passed"),
    MetricSpec("fact_accuracy", "pass_fail", "fact-pass rate", True, field="fact_accuracy"),
    MetricSpec("json_validity", "pass_fail", "JSON validity", True, field="json_validity"),
    MetricSpec("sql_accuracy", "pass_fail", "SQL accuracy", True, field="sql_accuracy"),
    MetricSpec("refusal_accuracy", "pass_fail", "refusal accuracy", True, field="refusal_accuracy"),
    MetricSpec("citation_accuracy", "pass_fail", "citation accuracy", True, field="citation_accuracy"),
    MetricSpec("tool_argument_validity", "pass_fail", "tool-argument validity", True, field="tool_argument_validity"),
    MetricSpec("code_test_pass_rate", "pass_fail", "code test pass rate", True, field="code_test_pass_rate"),
    # A truncated answer is a failure, so the check's True means "truncated" and lower is better.
    MetricSpec("truncation_rate", "pass_fail", "truncation rate", False, field="truncation_rate"),
    MetricSpec("score", "score", "graded score", True, field="scores"),
    _latency("ttft_p50", "ttft_ms", "TTFT"),
    _latency("ttft_p95", "ttft_ms", "TTFT"),
    _latency("ttft_p99", "ttft_ms", "TTFT"),
    _latency("tpot_p50", "tpot_ms", "TPOT"),
    _latency("tpot_p95", "tpot_ms", "TPOT"),
    _latency("itl_p50", "itl_ms", "ITL"),
    _latency("itl_p95", "itl_ms", "ITL"),
    _latency("e2e_p50", "e2e_ms", "E2E latency"),
    _latency("e2e_p95", "e2e_ms", "E2E latency"),
    _latency("e2e_p99", "e2e_ms", "E2E latency"),
    # From the engine's queue-time histogram over the load (``evaluators.engine_metrics``).
    MetricSpec("queue_time_p95", "engine", "queue time P95", False, field="engine_queue_p95_ms"),
    MetricSpec("output_throughput", "throughput", "output throughput", True, field="output_throughput"),
    MetricSpec("request_throughput", "engine", "request throughput", True, field="request_throughput"),
    MetricSpec("goodput", "goodput", "goodput (share of requests within SLOs)", True),
    # Sampled while the load ran (``evaluators.interleave.KvSampler``), not read once at the end.
    MetricSpec("peak_kv_cache_usage", "engine", "peak KV-cache usage", False, field="kv_cache_usage_peak"),
    MetricSpec("preemptions", "engine", "preemptions", False, field="preemptions"),
    # Peak number of requests the scheduler held back for want of KV-cache room (sampled under load).
    MetricSpec(
        "kv_capacity_waits", "engine", "requests waiting for KV-cache room (peak)", False, field="kv_waiting_peak"
    ),
    MetricSpec("max_concurrency", "engine", "max concurrency", True, field="max_concurrency"),
    MetricSpec("prefix_cache_hit_rate", "engine", "prefix-cache hit rate", True, field="prefix_cache_hit_rate"),
    MetricSpec(
        "spec_decode_acceptance_rate", "engine", "draft acceptance rate", True, field="spec_decode_acceptance_rate"
    ),
    MetricSpec("gpu_hours", "engine", "GPU hours", False, field="gpu_hours"),
)

METRIC_SPECS: dict[str, MetricSpec] = {spec.name: spec for spec in _SPECS}


def metric_spec(name: str) -> MetricSpec:
    """The spec for ``name``; raises ``KeyError`` naming the known metrics."""
    try:
        return METRIC_SPECS[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(sorted(METRIC_SPECS))}") from None


def is_quality(name: str) -> bool:
    """Quality metrics are the ones quantization and the critical flag protect."""
    return METRIC_SPECS[name].family in ("pass_fail", "score")


@dataclass(frozen=True)
class CanarySignalSpec:
    """A signal a canary analysis round reads from Prometheus (``gates.canary.queries``).

    ``rate``: the share of a slice's requests with ``outcome`` (lower is better, judged in points);
    ``latency``: a quantile of the request-duration histogram's ``phase`` (relative margin).
    """

    name: str
    family: Literal["rate", "latency"]
    label: str
    outcome: str = ""
    phase: str = ""
    quantile: float = 0.0


CANARY_SIGNALS: dict[str, CanarySignalSpec] = {
    spec.name: spec
    for spec in (
        CanarySignalSpec("error_rate", "rate", "error rate", outcome="error"),
        CanarySignalSpec("parse_error_rate", "rate", "structured-output parse-error rate", outcome="parse_error"),
        CanarySignalSpec("refusal_rate", "rate", "refusal rate", outcome="refusal"),
        CanarySignalSpec("tool_arg_error_rate", "rate", "tool-argument error rate", outcome="tool_arg_error"),
        CanarySignalSpec("human_return_rate", "rate", "human-return rate", outcome="human_return"),
        CanarySignalSpec("ttft_p50", "latency", "TTFT P50", phase="ttft", quantile=0.5),
        CanarySignalSpec("ttft_p95", "latency", "TTFT P95", phase="ttft", quantile=0.95),
        CanarySignalSpec("e2e_p50", "latency", "E2E latency P50", phase="e2e", quantile=0.5),
        CanarySignalSpec("e2e_p95", "latency", "E2E latency P95", phase="e2e", quantile=0.95),
        CanarySignalSpec("e2e_p99", "latency", "E2E latency P99", phase="e2e", quantile=0.99),
    )
}
