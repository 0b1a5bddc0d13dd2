"""Scrape vLLM's Prometheus ``/metrics`` and derive the engine evidence a gate judges.

A metric the engine does not expose is reported as ``None`` (absent), never 0: "no prefix cache
hits" and "this engine cannot tell us about its prefix cache" are different facts.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

MetricKey = tuple[str, frozenset[tuple[str, str]]]

# Each evidence counter: candidate metric names, newest first. Old names (vLLM < 0.12) are kept so
# evidence from older GPU workers still parses.
COUNTERS: dict[str, tuple[str, ...]] = {
    "prefix_cache_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    "prompt_tokens": ("vllm:prompt_tokens",),
    "cached_prompt_tokens": ("vllm:prompt_tokens_cached",),
    "generation_tokens": ("vllm:generation_tokens",),
    "preemptions": ("vllm:num_preemptions",),
    "spec_decode_drafts": ("vllm:spec_decode_num_drafts",),
    "spec_decode_draft_tokens": ("vllm:spec_decode_num_draft_tokens",),
    "spec_decode_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens",),
    "request_success": ("vllm:request_success",),
}
KV_USAGE_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
# Requests waiting for scheduling capacity: vLLM v1 admits what fits rather than preempting, so
# under KV pressure this, not preemptions, is what rises. It also counts requests that wait for the
# step's token budget or ``max_num_seqs`` (``MetricsSnapshot.waiting_for_kv_room`` tells them apart).
KV_WAITING_GAUGE = ("vllm:num_requests_waiting_by_reason", ("reason", "capacity"))
RUNNING_GAUGE = "vllm:num_requests_running"
# The engine's cache configuration as an info gauge: its labels carry the KV blocks and their size.
CACHE_CONFIG_INFO = "vllm:cache_config_info"
# Percentiles read from the engine's histogram buckets over a window (Prometheus'
# histogram_quantile: linear within the bucket the rank falls in). vLLM's default latency buckets
# start at 300 ms, too coarse for a queue on a small engine, so the engines OptGate starts get the
# finer ones below (``--custom-histogram-buckets``, see :func:`measurement_argv`).
HISTOGRAM_P95_MS: dict[str, str] = {
    "engine_queue_p95_ms": "vllm:request_queue_time_seconds",
}
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
# The engine's own view of per-request latency (histograms: the mean over the window is exact,
# percentiles would be bucket-coarse). Compared with the load generator's figures they show how
# much of a client-side TTFT was delivery rather than queueing or prefill.
HISTOGRAM_MEANS_MS: dict[str, str] = {
    "engine_ttft_mean_ms": "vllm:time_to_first_token_seconds",
    "engine_queue_mean_ms": "vllm:request_queue_time_seconds",
    "engine_prefill_mean_ms": "vllm:request_prefill_time_seconds",
    "engine_e2e_mean_ms": "vllm:e2e_request_latency_seconds",
}


def measurement_argv(engine_args: Mapping[str, Any]) -> list[str]:
    """Serve flags OptGate adds to the engines it starts so the bottleneck can be measured: latency
    histogram buckets fine enough for a millisecond queue (unless the backend sets its own)."""
    if "custom_histogram_buckets" in engine_args:
        return []
    buckets = {"request_latency": list(LATENCY_BUCKETS_S)}
    return ["--custom-histogram-buckets", json.dumps(buckets, separators=(",", ":"))]


def parse_prometheus(text: str) -> dict[MetricKey, float]:
    """Parse Prometheus text exposition into ``{(sample_name, frozenset(labels)): value}``.

    Sample names are as exposed (counters keep their ``_total`` suffix, histograms their
    ``_bucket``/``_sum``/``_count``).
    """
    samples: dict[MetricKey, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = float(sample.value)
    return samples


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape of ``/metrics`` and when it was taken (monotonic and wall clock)."""

    samples: dict[MetricKey, float]
    taken_at: float = field(default_factory=time.time)

    @classmethod
    def from_text(cls, text: str, taken_at: float | None = None) -> MetricsSnapshot:
        return cls(parse_prometheus(text), taken_at if taken_at is not None else time.time())

    def total(self, *names: str) -> float | None:
        """Sum of a counter over all label sets, trying ``names`` in order; None if none exposed."""
        for name in names:
            values = [v for (n, _), v in self.samples.items() if n in (name, name + "_total")]
            if values:
                return math.fsum(values)
        return None

    def gauge_max(self, *names: str) -> float | None:
        for name in names:
            values = [v for (n, _), v in self.samples.items() if n == name]
            if values:
                return max(values)
        return None

    def gauge_labelled(self, name: str, label: tuple[str, str]) -> float | None:
        """The largest value of a gauge over the label sets carrying ``label`` (name, value)."""
        values = [v for (n, labels), v in self.samples.items() if n == name and label in labels]
        return max(values) if values else None

    def buckets(self, name: str) -> dict[float, float]:
        """A histogram's cumulative bucket counts ``{upper bound: count}``, summed over label sets."""
        counts: dict[float, float] = {}
        for (n, labels), value in self.samples.items():
            if n == name + "_bucket":
                bound = float(dict(labels)["le"])
                counts[bound] = counts.get(bound, 0.0) + value
        return counts

    def waiting_for_kv_room(self) -> float | None:
        """Requests this scrape shows held back for want of KV-cache room; None when it cannot tell.

        vLLM's ``capacity`` waiting count also holds requests that wait for the step's token budget
        while others prefill: a long-context load makes some on an engine whose cache is mostly
        empty. They count here only when the cache could not take one more request the size of the
        running ones: its free share is below what each running request holds on average, that is
        ``running x (1 - usage) < usage``. (A CI run once saw a cache four times too large for its
        load "hold back" three requests in one block, all waiting for the token budget.)
        """
        waiting = self.gauge_labelled(*KV_WAITING_GAUGE)
        usage = self.gauge_max(*KV_USAGE_GAUGES)
        if waiting is None or usage is None:
            return None
        running = self.gauge_max(RUNNING_GAUGE)
        if running is None:
            return None
        full = running > 0 and running * (1.0 - usage) < usage
        return waiting if full else 0.0

    def kv_capacity_tokens(self) -> float | None:
        """Tokens the KV cache holds (blocks x block size, from the cache-config info gauge)."""
        for (n, labels), _ in self.samples.items():
            if n == CACHE_CONFIG_INFO:
                info = dict(labels)
                try:
                    if "kv_cache_size_tokens" in info:  # vLLM >= 0.2x states it directly
                        return float(info["kv_cache_size_tokens"])
                    return float(info["num_gpu_blocks"]) * float(info["block_size"])
                except (KeyError, ValueError):  # "None" before the engine sized its cache
                    return None
        return None

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly form for storage: ``[{name, labels, value}]``."""
        return {
            "taken_at": self.taken_at,
            "samples": [
                {"name": n, "labels": dict(sorted(labels)), "value": v}
                for (n, labels), v in sorted(self.samples.items(), key=lambda kv: (kv[0][0], sorted(kv[0][1])))
            ],
        }


def scrape_metrics(base_url: str, *, timeout_s: float = 10.0, client: httpx.Client | None = None) -> MetricsSnapshot:
    """GET ``{base_url}/metrics`` and parse it."""
    url = base_url.rstrip("/") + "/metrics"
    response = client.get(url, timeout=timeout_s) if client is not None else httpx.get(url, timeout=timeout_s)
    response.raise_for_status()
    return MetricsSnapshot.from_text(response.text)


def _delta(before: MetricsSnapshot, after: MetricsSnapshot, names: Sequence[str]) -> float | None:
    end = after.total(*names)
    if end is None:
        return None
    start = before.total(*names)
    # A counter missing "before" but present "after" started from zero (lazily registered).
    delta = end - (start or 0.0)
    # A negative delta means the engine restarted between scrapes; the "after" value is then the
    # best available lower bound of the work done.
    return end if delta < 0 else delta


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def engine_latency_means(before: MetricsSnapshot, after: MetricsSnapshot) -> dict[str, float | None]:
    """The engine's mean TTFT, queue, prefill and E2E times (ms) over the requests finished between
    two scrapes; None where the engine does not expose the histogram or finished nothing."""
    means: dict[str, float | None] = {}
    for key, histogram in HISTOGRAM_MEANS_MS.items():
        mean_s = _ratio(_delta(before, after, (histogram + "_sum",)), _delta(before, after, (histogram + "_count",)))
        means[key] = None if mean_s is None else mean_s * 1000.0
    return means


def histogram_quantile(before: MetricsSnapshot, after: MetricsSnapshot, name: str, q: float) -> float | None:
    """The ``q`` quantile (seconds) of what a histogram observed between two scrapes, interpolated
    linearly within its bucket as Prometheus' ``histogram_quantile`` does; None for no observations.
    A rank in the open last bucket (``+Inf``) answers that bucket's lower bound."""
    if not 0 < q < 1:
        raise ValueError(f"q must be within (0, 1), got {q}")
    end = after.buckets(name)
    start = before.buckets(name)
    counts = sorted((bound, value - start.get(bound, 0.0)) for bound, value in end.items())
    if not counts or counts[-1][1] <= 0:
        return None
    rank = q * counts[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in counts:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def engine_latency_p95(before: MetricsSnapshot, after: MetricsSnapshot) -> dict[str, float | None]:
    """P95 (ms) of the engine's queue time over the requests finished between two scrapes."""
    out: dict[str, float | None] = {}
    for key, histogram in HISTOGRAM_P95_MS.items():
        value = histogram_quantile(before, after, histogram, 0.95)
        out[key] = None if value is None else value * 1000.0
    return out


def counter_rates(counters: Mapping[str, float | None]) -> dict[str, float | None]:
    """The rates derived from counter deltas (one scrape pair's, or several blocks' summed)."""
    # As vLLM defines it (vllm/v1/spec_decode/metrics.py): 1 + accepted / drafts — every draft
    # step yields the accepted tokens plus the one token the target model always produces.
    per_draft = _ratio(counters.get("spec_decode_accepted_tokens"), counters.get("spec_decode_drafts"))
    return {
        "prefix_cache_hit_rate": _ratio(counters.get("prefix_cache_hits"), counters.get("prefix_cache_queries")),
        "spec_decode_acceptance_rate": _ratio(
            counters.get("spec_decode_accepted_tokens"), counters.get("spec_decode_draft_tokens")
        ),
        "spec_decode_mean_accepted_length": None if per_draft is None else 1.0 + per_draft,
    }


def derive_engine_evidence(
    before: MetricsSnapshot,
    after: MetricsSnapshot,
    *,
    during: Iterable[MetricsSnapshot] = (),
    latency_since: MetricsSnapshot | None = None,
) -> dict[str, float | None]:
    """Counter deltas between two scrapes plus derived rates.

    ``during`` are extra snapshots taken while load ran, used for the KV-cache usage peak (a gauge
    at scrape time says little about the peak by itself). The engine's latency means cover
    ``latency_since`` to ``after`` when given (the load phase alone), else the whole window.
    """
    evidence: dict[str, float | None] = {key: _delta(before, after, names) for key, names in COUNTERS.items()}
    evidence.update(counter_rates(evidence))
    evidence.update(engine_latency_means(latency_since or before, after))
    evidence.update(engine_latency_p95(latency_since or before, after))
    evidence["kv_capacity_tokens"] = after.kv_capacity_tokens()
    peaks = [p for s in (before, *during, after) if (p := s.gauge_max(*KV_USAGE_GAUGES)) is not None]
    evidence["kv_cache_usage_peak"] = max(peaks) if peaks else None
    return evidence
