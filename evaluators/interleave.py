"""Baseline and candidate measured in alternating, balanced blocks while both engines are up.

Two runs measured one after the other drift apart on a shared machine (13-61 % on changes that do
nothing): whatever else the machine does lands on one side only. Here the task's load is split
into chunks and every chunk is sent to both engines in adjacent blocks, in the balanced order
AB BA BA AB (for four chunks), so slow drift falls on both sides alike and the same prompts are
timed on both. Each engine's prefix cache is emptied once before its first block (the quality
phase, which sent the very same prompts, must not warm the load; what the load's own prompts
share, a document or a schema, may be reused as real traffic would); each block is bracketed by
``/metrics`` scrapes; a sampler reads the KV-cache usage gauge while the
block runs. What a block measured is kept per block, so the judge can show drift across blocks
and use per-block throughput for an interval.

Nothing here touches the database.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import httpx

from evaluators.engine_metrics import (
    KV_USAGE_GAUGES,
    KV_WAITING_GAUGE,
    MetricsSnapshot,
    counter_rates,
    derive_engine_evidence,
    engine_latency_p95,
    scrape_metrics,
)
from evaluators.loadgen import LoadRequest, RequestRecord, run_load_sync, summarize

logger = logging.getLogger(__name__)

BASELINE, CANDIDATE = "baseline", "candidate"
# Chunks per task: each side gets this many blocks. Four is the least that balances order and
# linear drift; eight alternate often enough that a neighbour's burst of a second or two (blocks of
# a dozen requests last about that long on a small CPU) lands on both sides alike.
DEFAULT_BLOCKS = 8
# Requests each engine serves, untimed, before the first block: an engine whose quality phase was
# reused from an earlier run has served nothing yet, and first batches pay one-off costs.
WARMUP_REQUESTS = 4
KV_SAMPLE_INTERVAL_S = 0.25
# How long an engine keeps a core busy after its last request: vLLM's worker busy-polls its
# shared-memory queue for a second after each read before it sleeps (``SpinCondition``,
# ``busy_loop_s=1`` in ``vllm/distributed/device_communicators/shm_broadcast.py``). On a small
# CPU box that loop takes a core from the other engine's next block: measured on two cores, the
# first four requests of every block sent right after the other engine's came out 480-700 ms
# where the same engine's next block started at 50-140 ms, whichever engine it was, so an A/B
# comparison measured whose turn it was. A block that follows the other engine's waits this long.
ENGINE_SETTLE_S = 1.25


def block_order(chunks: int) -> list[tuple[int, str]]:
    """(chunk, side) in measuring order: pairs alternate AB, BA, BA, AB, … (ABBA BAAB).

    Over every four chunks each side goes first twice and each position (1st-4th pair) is
    balanced, so a linear drift adds the same amount to both sides.
    """
    if chunks < 1:
        raise ValueError("chunks must be >= 1")
    order: list[tuple[int, str]] = []
    for chunk in range(chunks):
        first_is_baseline = chunk % 4 in (0, 3)
        pair = (BASELINE, CANDIDATE) if first_is_baseline else (CANDIDATE, BASELINE)
        order += [(chunk, side) for side in pair]
    return order


def split_chunks(count: int, chunks: int) -> list[range]:
    """``count`` request indexes in ``chunks`` contiguous, near-equal ranges (none empty)."""
    chunks = max(1, min(chunks, count))
    bounds = [round(i * count / chunks) for i in range(chunks + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(chunks)]


# Body fields the load itself controls; a backend's sampling params cannot override them.
LOAD_CONTROLLED = frozenset({"model", "prompt", "messages", "max_tokens", "stream", "stream_options", "n"})


@dataclass(frozen=True)
class Endpoint:
    """A live engine to measure: its base URL and the model name it serves, and what the gateway
    adds to every request sent to it: the backend's sampling params and each tenant's cache salt."""

    base_url: str
    model: str
    sampling: Mapping[str, Any] = field(default_factory=dict)
    salts: Mapping[str, str] = field(default_factory=dict)

    def prepare(self, request: LoadRequest) -> LoadRequest:
        """``request`` as the gateway would send it to this backend."""
        body = {key: value for key, value in self.sampling.items() if key not in LOAD_CONTROLLED}
        body.update(request.extra_body)
        if salt := self.salts.get(request.tenant):
            body["cache_salt"] = salt
        return replace(request, extra_body=body)


@dataclass
class BlockResult:
    """One block: which side and chunk, when in the sequence, and what it measured."""

    side: str
    chunk: int
    position: int
    records: list[RequestRecord]
    duration_s: float
    summary: dict[str, Any]
    engine: dict[str, float | None] = field(default_factory=dict)
    cache_reset: bool = False

    def to_json(self) -> dict[str, Any]:
        ttft = self.summary.get("ttft_ms", {})
        e2e = self.summary.get("e2e_ms", {})
        return {
            "side": self.side,
            "chunk": self.chunk,
            "position": self.position,
            "requests": len(self.records),
            "errors": self.summary.get("errors"),
            "duration_s": self.duration_s,
            "output_token_throughput": self.summary.get("output_token_throughput"),
            "ttft_median_ms": ttft.get("median"),
            "ttft_p95_ms": ttft.get("p95"),
            "e2e_median_ms": e2e.get("median"),
            "cache_reset": self.cache_reset,
            "engine": self.engine,
        }


@dataclass
class InterleavedLoad:
    """Both sides' blocks of one task, in the order they ran, and per side the scrapes before its
    first block and after its last (the engine served nothing else in between)."""

    blocks: list[BlockResult]
    spans: dict[str, tuple[MetricsSnapshot, MetricsSnapshot]] = field(default_factory=dict)

    def side(self, side: str) -> list[BlockResult]:
        return sorted((b for b in self.blocks if b.side == side), key=lambda b: b.chunk)

    def records(self, side: str, indexes: Sequence[range]) -> list[dict[str, Any]]:
        """The side's request records in request order, each with its block and chunk."""
        out: list[dict[str, Any]] = []
        for block in self.side(side):
            for offset, record in zip(indexes[block.chunk], block.records, strict=True):
                out.append({**asdict(record), "index": offset, "block": block.position, "chunk": block.chunk})
        return sorted(out, key=lambda r: r["index"])

    def summary(self, side: str) -> dict[str, Any]:
        """Whole-side aggregates, per-block throughput and the drift across the side's blocks."""
        blocks = self.side(side)
        records = [r for b in blocks for r in b.records]
        summary = summarize(records, sum(b.duration_s for b in blocks))
        summary["blocks"] = [b.to_json() for b in blocks]
        summary["block_output_throughput"] = [b.summary.get("output_token_throughput") for b in blocks]
        summary["drift"] = drift(blocks)
        return summary

    def engine(self, side: str) -> dict[str, float | None]:
        """The side's engine evidence summed over its blocks (counters) or taken over them (gauges);
        percentiles from the histograms over the side's whole span."""
        combined = combine_engine([b.engine for b in self.side(side)])
        if side in self.spans:
            combined.update(engine_latency_p95(*self.spans[side]))
        return combined


def drift(blocks: Sequence[BlockResult]) -> dict[str, float | None]:
    """How far the side's block medians wandered: spread of TTFT and E2E medians, relative to their
    median (0.1 = the slowest block was 10 % of the typical median above the fastest)."""
    out: dict[str, float | None] = {}
    for key in ("ttft_ms", "e2e_ms"):
        medians = [m for b in blocks if (m := b.summary.get(key, {}).get("median")) is not None]
        typical = statistics.median(medians) if medians else None
        out[f"{key.removesuffix('_ms')}_median_spread"] = (
            (max(medians) - min(medians)) / typical if medians and typical else None
        )
    return out


# Engine figures that describe a configuration rather than count work: the same in every block.
LEVELS = ("kv_capacity_tokens", "max_concurrency")


def combine_engine(per_block: Sequence[dict[str, float | None]]) -> dict[str, float | None]:
    """One side's engine evidence over its blocks: counters add up, peaks take the maximum, latency
    means are weighted by requests, and the rates are recomputed from the summed counters."""
    if not per_block:
        return {}
    keys = {key for block in per_block for key in block}
    combined: dict[str, float | None] = {}
    for key in keys:
        values = [v for block in per_block if (v := block.get(key)) is not None]
        if not values:
            combined[key] = None
        elif key.endswith(("_peak", "_max")) or key in LEVELS:
            combined[key] = max(values)
        elif key.endswith("_p95_ms"):
            combined[key] = max(values)  # an upper bound; InterleavedLoad.engine reads the span's
        elif key.endswith("_mean_ms"):
            combined[key] = _weighted_mean(per_block, key)
        elif key.endswith("_time_weighted_mean"):
            combined[key] = math.fsum(values) / len(values)
        else:
            combined[key] = math.fsum(values)
    combined.update(counter_rates(combined))  # not the blocks' rates averaged
    return combined


def _weighted_mean(per_block: Sequence[dict[str, float | None]], key: str) -> float | None:
    """A per-request mean over blocks, each block weighted by the requests it finished."""
    pairs = [(b[key], b.get("request_success") or 0.0) for b in per_block if b.get(key) is not None]
    weight = math.fsum(float(w) for _, w in pairs)
    if not pairs:
        return None
    if weight <= 0:
        return math.fsum(float(v) for v, _ in pairs) / len(pairs)  # type: ignore[arg-type]
    return math.fsum(float(v) * float(w) for v, w in pairs) / weight  # type: ignore[arg-type]


class KvSampler:
    """Reads the KV-cache usage gauge every ``interval_s`` while a block runs (peak and time-weighted
    mean), and how many requests waited for room in the cache (peak,
    :meth:`~evaluators.engine_metrics.MetricsSnapshot.waiting_for_kv_room`); with ``interval_s`` None it
    reads nothing (and its result is empty).

    Each read costs the engine: vLLM's API server renders its whole ``/metrics`` page (55 KB with
    OptGate's fine latency buckets, 60-190 ms on a small CPU) in the process that streams the
    tokens. Read every 0.25 s, batches of four requests on two cores stalled together for 100-150
    ms now and then on both engines; without the reads they did not. So only the load that
    measures the KV-memory bottleneck samples it."""

    def __init__(self, base_url: str, interval_s: float | None = KV_SAMPLE_INTERVAL_S) -> None:
        self.base_url = base_url
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self.waiting: list[float] = []
        self.scheduler_waiting: list[float] = []  # vLLM's own count, token-budget waits included
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        with httpx.Client(timeout=2.0) as client:
            while not self._stop.is_set():
                try:
                    snapshot = scrape_metrics(self.base_url, client=client)
                except Exception:  # a missed sample is no evidence either way
                    snapshot = None
                if snapshot is not None:
                    self._read(snapshot)
                self._stop.wait(self.interval_s)

    def _read(self, snapshot: MetricsSnapshot) -> None:
        usage = snapshot.gauge_max(*KV_USAGE_GAUGES)
        if usage is not None:
            self.samples.append((time.monotonic(), usage))
        waiting = snapshot.waiting_for_kv_room()
        if waiting is not None:
            self.waiting.append(waiting)
            self.scheduler_waiting.append(snapshot.gauge_labelled(*KV_WAITING_GAUGE) or 0.0)

    def __enter__(self) -> KvSampler:
        if self.interval_s is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def result(self) -> dict[str, float | None]:
        waiting = {
            "kv_waiting_peak": max(self.waiting) if self.waiting else None,
            "capacity_waiting_peak": max(self.scheduler_waiting) if self.scheduler_waiting else None,
        }
        if not self.samples:
            return {"kv_cache_usage_peak": None, "kv_cache_usage_time_weighted_mean": None, **waiting}
        peak = max(u for _, u in self.samples)
        if len(self.samples) == 1:
            return {"kv_cache_usage_peak": peak, "kv_cache_usage_time_weighted_mean": self.samples[0][1], **waiting}
        area = sum((t1 - t0) * u0 for (t0, u0), (t1, _) in zip(self.samples, self.samples[1:], strict=False))
        span = self.samples[-1][0] - self.samples[0][0]
        mean = area / span if span > 0 else peak
        return {"kv_cache_usage_peak": peak, "kv_cache_usage_time_weighted_mean": mean, **waiting}


def reset_prefix_cache(base_url: str) -> bool:
    """Empty the engine's prefix cache (vLLM's dev route); False when the engine does not offer it.

    vLLM refuses while blocks are still held by running requests: retried briefly.
    """
    for _ in range(10):
        try:
            response = httpx.post(base_url.rstrip("/") + "/reset_prefix_cache", timeout=10.0)
        except httpx.HTTPError:
            return False
        if response.status_code == 404:
            return False
        if response.status_code == 200 and response.json().get("success", True):
            return True
        time.sleep(0.2)
    return False


def measure_interleaved(
    endpoints: dict[str, Endpoint],
    requests: Sequence[LoadRequest],
    *,
    chunks: int = DEFAULT_BLOCKS,
    concurrency: int | None,
    seed: int,
    request_rate: float | None = None,
    warmup: bool = True,
    on_block: Callable[[int, int], None] | None = None,
    settle_s: float = ENGINE_SETTLE_S,
    kv_sample_s: float | None = None,
) -> tuple[InterleavedLoad, list[range]]:
    """Send ``requests`` to both endpoints in balanced alternating blocks; returns the blocks and
    the request indexes of each chunk. Each engine first serves a few requests untimed (warm-up,
    unless ``warmup`` is False), then its prefix cache is emptied once, so its first block starts
    cold and later blocks reuse only what the load itself shares. Closed loop at ``concurrency``,
    or open loop with Poisson arrivals at ``request_rate`` (then latency counts from each request's
    scheduled arrival). ``on_block(done, total)`` reports progress. A block sent right after the
    other engine's waits until that engine is idle again (``settle_s``, :data:`ENGINE_SETTLE_S`).
    ``kv_sample_s`` reads the KV-cache gauge that often while a block runs (:class:`KvSampler`);
    None reads it only before and after each block."""
    indexes = split_chunks(len(requests), chunks)
    order = block_order(len(indexes))
    cleared: dict[str, bool] = {}
    # Per side: when its engine stops spinning after its last request. Whatever ran before this
    # call (a quality phase, another load point) may have just ended on either engine.
    busy_until = {side: time.monotonic() + settle_s for side in endpoints}
    for side, endpoint in endpoints.items():
        if warmup:
            warm = [endpoint.prepare(r) for r in requests[:WARMUP_REQUESTS]]
            run_load_sync(endpoint.base_url, endpoint.model, warm, concurrency=concurrency or 1, seed=seed)
            busy_until[side] = time.monotonic() + settle_s
        # Nothing the quality phase or the warm-up sent stays cached; from here on the cache holds
        # only what the load itself shares (documents, schemas), as it would under real traffic.
        cleared[side] = reset_prefix_cache(endpoint.base_url)
    blocks: list[BlockResult] = []
    spans: dict[str, list[MetricsSnapshot | None]] = {}
    for position, (chunk, side) in enumerate(order):
        endpoint = endpoints[side]
        _settle(busy_until, side)
        before = _scrape(endpoint.base_url)
        with KvSampler(endpoint.base_url, kv_sample_s) as sampler, collector_paused():
            result = run_load_sync(
                endpoint.base_url,
                endpoint.model,
                [endpoint.prepare(requests[i]) for i in indexes[chunk]],
                concurrency=concurrency,
                request_rate=request_rate,
                seed=seed + chunk,
            )
        busy_until[side] = time.monotonic() + settle_s
        after = _scrape(endpoint.base_url)
        spans.setdefault(side, [before, None])[1] = after
        engine: dict[str, float | None] = {}
        if before is not None and after is not None:
            engine = derive_engine_evidence(before, after, during=())
        sampled = sampler.result()
        peaks = [p for p in (engine.get("kv_cache_usage_peak"), sampled["kv_cache_usage_peak"]) if p is not None]
        engine.update(sampled, kv_cache_usage_peak=max(peaks) if peaks else None)
        blocks.append(
            BlockResult(
                side=side,
                chunk=chunk,
                position=position,
                records=result.records,
                duration_s=result.duration_s,
                summary=result.summary(),
                engine=engine,
                cache_reset=cleared[side] and not any(b.side == side for b in blocks),
            )
        )
        if on_block:
            on_block(position + 1, len(order))
    complete = {side: (first, last) for side, (first, last) in spans.items() if first is not None and last is not None}
    return InterleavedLoad(blocks, complete), indexes


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection in this process while a block's requests are timed.

    The load generator runs in the worker's own process, whose heap holds the run's evidence: a
    full collection there paused the event loop that reads the streams, and the first requests of
    a block came out 80-210 ms late together (two-core demo, on both engines, after their own
    previous block as often as after the other's). Objects that exist when the pause begins are
    frozen out of later collections; after the block they are unfrozen and collection resumes.
    """
    was_enabled = gc.isenabled()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()


def _settle(busy_until: Mapping[str, float], side: str) -> None:
    """Wait until every other side's engine has stopped spinning after its last request."""
    others = [until for other, until in busy_until.items() if other != side]
    wait = max(others, default=0.0) - time.monotonic()
    if wait > 0:
        time.sleep(wait)


def _scrape(base_url: str) -> MetricsSnapshot | None:
    try:
        return scrape_metrics(base_url)
    except Exception as exc:  # an endpoint without /metrics has no engine evidence, not zero
        logger.warning("could not scrape %s/metrics: %s", base_url, exc)
        return None
