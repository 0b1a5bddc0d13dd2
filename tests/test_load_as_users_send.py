"""Load as users send it, and the bottleneck measured: the gateway's sampling params and per-tenant
cache salts, open-loop arrivals timed from their schedule, the engine's queue-time P95 from its
histogram, KV capacity and the task's max concurrency, and how the judge reads them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backends.models import Backend
from evaluators import pipeline
from evaluators.engine_metrics import (
    LATENCY_BUCKETS_S,
    MetricsSnapshot,
    derive_engine_evidence,
    histogram_quantile,
    measurement_argv,
)
from evaluators.interleave import BlockResult, Endpoint, InterleavedLoad, combine_engine
from evaluators.loadgen import LoadRequest, arrival_schedule
from evaluators.services import _gateway_endpoint
from evaluators.suites import get_suite
from gates.judge.records import RequestTiming, RunTaskEvidence, TaskEvidence
from gates.judge.task import judge_task
from gates.policy.parse import load_policy
from tests.test_loadgen import _completion_stream, _run

QUEUE = "vllm:request_queue_time_seconds"


def _histogram(name: str, observations: list[float], extra: str = "") -> str:
    """Prometheus text of a histogram with vLLM's label set and OptGate's latency buckets."""
    lines = [f"# TYPE {name} histogram"]
    for bound in (*LATENCY_BUCKETS_S, float("inf")):
        count = sum(1 for v in observations if v <= bound)
        le = "+Inf" if bound == float("inf") else repr(bound)
        lines.append(f'{name}_bucket{{engine="0",le="{le}",model_name="m"}} {count}')
    lines.append(f'{name}_count{{engine="0",model_name="m"}} {len(observations)}')
    lines.append(f'{name}_sum{{engine="0",model_name="m"}} {sum(observations)}')
    return "\n".join(lines) + "\n" + extra


CACHE_INFO = (
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="128",engine="0",kv_cache_size_tokens="699008",num_gpu_blocks="5461"} 1.0\n'
)
OLD_CACHE_INFO = (
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0\n'
)


def test_queue_p95_is_read_from_the_histogram_window_like_prometheus() -> None:
    before = MetricsSnapshot.from_text(_histogram(QUEUE, [5.0] * 50))  # earlier work, outside the window
    window = [0.001] * 90 + [0.04] * 10
    after = MetricsSnapshot.from_text(_histogram(QUEUE, [5.0] * 50 + window))
    # Rank 95 of 100 falls in the (0.03, 0.05] bucket, which holds ranks 91-100: 0.03 + 0.02 * 5/10.
    assert histogram_quantile(before, after, QUEUE, 0.95) == pytest.approx(0.04)
    assert histogram_quantile(before, after, QUEUE, 0.5) == pytest.approx(0.001 * 50 / 90)
    assert histogram_quantile(after, after, QUEUE, 0.95) is None  # nothing observed in between
    with pytest.raises(ValueError, match="q must be within"):
        histogram_quantile(before, after, QUEUE, 1.0)
    evidence = derive_engine_evidence(before, after)
    assert evidence["engine_queue_p95_ms"] == pytest.approx(40.0)


def test_a_rank_in_the_open_last_bucket_answers_its_lower_bound() -> None:
    after = MetricsSnapshot.from_text(_histogram(QUEUE, [999.0] * 10))
    before = MetricsSnapshot.from_text(_histogram(QUEUE, []))
    assert histogram_quantile(before, after, QUEUE, 0.95) == LATENCY_BUCKETS_S[-1]


def test_kv_capacity_is_read_from_the_cache_config_gauge_new_and_old() -> None:
    assert MetricsSnapshot.from_text(CACHE_INFO).kv_capacity_tokens() == 699008
    assert MetricsSnapshot.from_text(OLD_CACHE_INFO).kv_capacity_tokens() == 16000
    unsized = OLD_CACHE_INFO.replace('num_gpu_blocks="1000"', 'num_gpu_blocks="None"')
    assert MetricsSnapshot.from_text(unsized).kv_capacity_tokens() is None
    assert MetricsSnapshot.from_text("").kv_capacity_tokens() is None


def test_engines_get_fine_latency_buckets_unless_the_backend_sets_its_own() -> None:
    flag, value = measurement_argv({"max_model_len": 512})
    assert flag == "--custom-histogram-buckets"
    assert '"request_latency":[0.001,' in value
    assert measurement_argv({"custom_histogram_buckets": {"request_latency": [1.0]}}) == []


def test_max_concurrency_is_capacity_over_the_tasks_longest_request() -> None:
    requests: list[dict[str, Any]] = [{"prompt_tokens": 300}, {"prompt_tokens": 900}, {"error": "HTTP 400"}]
    got = pipeline.kv_concurrency({"kv_capacity_tokens": 10240.0}, requests, max_tokens=124)
    assert got == {"task_context_tokens": 1024.0, "max_concurrency": 10.0}
    assert pipeline.kv_concurrency({}, requests, 124)["max_concurrency"] is None


def test_configuration_levels_are_not_summed_over_blocks() -> None:
    blocks: list[dict[str, float | None]] = [
        {"kv_capacity_tokens": 1000.0, "max_concurrency": 2.5, "request_success": 3.0}
    ] * 4
    combined = combine_engine(blocks)
    assert combined["kv_capacity_tokens"] == 1000.0
    assert combined["max_concurrency"] == 2.5
    assert combined["request_success"] == 12.0


def test_a_sides_queue_p95_comes_from_its_whole_span() -> None:
    first = MetricsSnapshot.from_text(_histogram(QUEUE, []))
    last = MetricsSnapshot.from_text(_histogram(QUEUE, [0.001] * 19 + [0.2]))
    block = BlockResult("baseline", 0, 0, [], 1.0, {}, engine={"engine_queue_p95_ms": 999.0})
    load = InterleavedLoad([block], spans={"baseline": (first, last)})
    assert load.engine("baseline")["engine_queue_p95_ms"] == pytest.approx(
        histogram_quantile(first, last, QUEUE, 0.95) * 1000  # type: ignore[operator]
    )


# --- the gateway's view of a request ---------------------------------------------------------------


def test_the_gateway_adds_sampling_params_and_the_tenants_salt_but_not_over_the_load() -> None:
    endpoint = Endpoint(
        "http://x",
        "m",
        sampling={"temperature": 0.0, "top_p": 0.9, "max_tokens": 9999, "stream": False},
        salts={"tenant-a": "aaa", "tenant-b": "bbb"},
    )
    request = LoadRequest(prompt="hi", max_tokens=16, extra_body={"ignore_eos": True}, tenant="tenant-b")
    sent = endpoint.prepare(request)
    assert sent.extra_body == {"temperature": 0.0, "top_p": 0.9, "ignore_eos": True, "cache_salt": "bbb"}
    assert sent.max_tokens == 16
    assert "cache_salt" not in endpoint.prepare(LoadRequest(prompt="hi", tenant="other")).extra_body


def test_load_requests_come_from_the_tenants_in_turn() -> None:
    _, requests = pipeline.load_requests(get_suite("knowledge_qa"), count=8, seed=0)
    assert [r.tenant for r in requests] == list(pipeline.LOAD_TENANTS) * 2


def test_a_load_larger_than_the_suite_goes_on_with_held_out_prompts_of_the_same_shape() -> None:
    suite = get_suite("knowledge_qa")
    ids, requests = pipeline.load_requests(suite, count=pipeline.DEFAULT_LOAD_PROFILE["requests_per_task"], seed=0)
    shipped = {sample["id"] for sample in suite.load_samples()}
    held_out = {sample["id"] for sample in suite.held_out_samples(0, 100)}
    assert len(ids) == len(set(ids)) == 200 and set(ids) == shipped | held_out
    assert len({r.messages[0]["content"] for r in requests if r.messages}) == 200  # every prompt once
    # Held-out editions share their own documents, as the shipped ones do: still a shared-prefix load.
    documents = {r.messages[0]["content"].split("\nQuestion: ")[0] for r in requests if r.messages}
    assert len(documents) == 10
    # A dozen or so requests per interleaved block, never fewer than eight blocks a side.
    assert (pipeline.blocks_for(200), pipeline.blocks_for(100), pipeline.blocks_for(40)) == (16, 8, 8)


def _backend(recipe: dict[str, Any]) -> Backend:
    return Backend(
        name="b",
        model_path="/m",
        engine_version="0",
        hardware_class="cpu",
        sampling_params={"temperature": 0.0},
        prefix_cache_key_recipe=recipe,
    )


class _Engine:
    base_url = "http://127.0.0.1:1"
    model = "b"


def test_a_cache_partitioned_per_tenant_gets_one_salt_per_tenant() -> None:
    shared = _gateway_endpoint(_backend({}), _Engine())  # type: ignore[arg-type]
    assert len(set(shared.salts.values())) == 1
    assert shared.sampling == {"temperature": 0.0}
    partitioned = _gateway_endpoint(_backend({"tenant": True}), _Engine())  # type: ignore[arg-type]
    assert set(partitioned.salts) == set(pipeline.LOAD_TENANTS)
    assert len(set(partitioned.salts.values())) == len(pipeline.LOAD_TENANTS)


# --- open loop -------------------------------------------------------------------------------------


def test_arrival_schedule_is_seeded_poisson() -> None:
    times = arrival_schedule(2000, rate=10.0, seed=3)
    assert times == arrival_schedule(2000, rate=10.0, seed=3)
    assert times[0] == 0.0 and times == sorted(times)
    assert times[-1] / 1999 == pytest.approx(0.1, rel=0.1)  # mean gap 1/rate
    with pytest.raises(ValueError, match="request_rate"):
        arrival_schedule(3, rate=0.0, seed=0)


def test_open_loop_latency_counts_from_the_scheduled_arrival() -> None:
    """Two requests due at once through a client that sends one at a time: the second waited for
    the first, and a user would have waited too, so its TTFT includes that wait."""

    async def slow(path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        await asyncio.sleep(0.3)
        return 200, _completion_stream(3)

    requests = [LoadRequest(prompt="a", max_tokens=3), LoadRequest(prompt="b", max_tokens=3)]
    result = _run(requests, slow, concurrency=1, request_rate=10_000.0)
    first, second = result.records
    assert first.scheduled_s == 0.0 and second.scheduled_s is not None and second.scheduled_s < 0.01
    assert second.start_s >= 0.29  # it left the client after the first finished
    assert second.ttft_s is not None and second.ttft_s >= 0.58  # 0.3 s waiting + 0.3 s served
    closed = _run(requests, slow, concurrency=1)
    assert closed.records[1].scheduled_s is None
    assert closed.records[1].ttft_s is not None and closed.records[1].ttft_s < 0.5


# --- the judge -------------------------------------------------------------------------------------


def _side(queue_p95: float, queue_mean: float, ttft: float, rate: float | None = None) -> RunTaskEvidence:
    ttfts = {f"s{i}": ttft + i % 5 for i in range(40)}
    return RunTaskEvidence(
        run_id="r",
        passed={f"s{i}": True for i in range(40)},
        ttft_ms=ttfts,
        e2e_ms={k: v + 100 for k, v in ttfts.items()},
        requests=[RequestTiming(ok=True, ttft_ms=v, tpot_ms=5.0, e2e_ms=v + 100) for v in ttfts.values()],
        blocks=True,
        engine={"engine_queue_p95_ms": queue_p95, "engine_queue_mean_ms": queue_mean},
        offered_rate=rate,
    )


def _with_open_loop(closed: RunTaskEvidence, open_loop: RunTaskEvidence) -> RunTaskEvidence:
    from dataclasses import replace

    return replace(closed, open_loop=open_loop)


def test_the_queueing_bottleneck_is_judged_at_the_open_loop_point() -> None:
    policy = load_policy("default")
    calm = _side(queue_p95=0.5, queue_mean=0.1, ttft=50.0)
    evidence = TaskEvidence(
        "knowledge_qa",
        _with_open_loop(calm, _side(queue_p95=400.0, queue_mean=120.0, ttft=600.0, rate=3.2)),
        _with_open_loop(calm, _side(queue_p95=100.0, queue_mean=30.0, ttft=250.0, rate=3.2)),
    )
    verdict = judge_task(policy, evidence, role="beneficiary", bottleneck="queueing")
    bottleneck = next(v for v in verdict.metrics if v.source == "bottleneck:queueing")
    assert bottleneck.metric == "queue_time_p95"
    assert bottleneck.status == "pass"
    assert (bottleneck.baseline, bottleneck.candidate) == (400.0, 100.0)
    assert "400 ms" in bottleneck.reason.replace(".0 ms", " ms")
    reported = {v.metric: v for v in verdict.metrics if v.metric.startswith("open_loop:")}
    assert set(reported) == {"open_loop:ttft_p95", "open_loop:e2e_p95", "open_loop:goodput"}
    assert all(not v.deciding for v in reported.values())
    assert "3.20 req/s" in reported["open_loop:ttft_p95"].reason


def test_a_queue_even_the_open_loop_point_did_not_build_is_inconclusive_and_says_so() -> None:
    policy = load_policy("default")
    calm = _side(queue_p95=0.5, queue_mean=0.1, ttft=50.0)
    evidence = TaskEvidence(
        "knowledge_qa",
        _with_open_loop(calm, _side(queue_p95=1.0, queue_mean=0.2, ttft=60.0, rate=2.0)),
        _with_open_loop(calm, _side(queue_p95=1.0, queue_mean=0.2, ttft=60.0, rate=2.0)),
    )
    verdict = judge_task(policy, evidence, role="beneficiary", bottleneck="queueing")
    bottleneck = next(v for v in verdict.metrics if v.metric == "bottleneck:queueing")
    assert bottleneck.status == "inconclusive"
    assert "not exercised" in bottleneck.reason and "open-loop point (2.00 req/s offered)" in bottleneck.reason
    # Without an open-loop point the verdict names the stress profile to run.
    bare = judge_task(policy, TaskEvidence("knowledge_qa", calm, calm), role="beneficiary", bottleneck="queueing")
    reason = next(v for v in bare.metrics if v.metric == "bottleneck:queueing").reason
    assert "stress profile: open-loop (Poisson) arrivals" in reason


def test_requests_held_back_for_kv_room_are_read_from_the_labelled_gauge() -> None:
    text = (
        "# TYPE vllm:num_requests_waiting_by_reason gauge\n"
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 3.0\n'
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 7.0\n'
    )
    snapshot = MetricsSnapshot.from_text(text)
    assert snapshot.gauge_labelled("vllm:num_requests_waiting_by_reason", ("reason", "capacity")) == 3.0
    assert snapshot.gauge_labelled("vllm:num_requests_waiting_by_reason", ("reason", "other")) is None


def _scrape(waiting: float, usage: float | None, running: float | None) -> MetricsSnapshot:
    text = (
        "# TYPE vllm:num_requests_waiting_by_reason gauge\n"
        f'vllm:num_requests_waiting_by_reason{{engine="0",model_name="m",reason="capacity"}} {waiting}\n'
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 5.0\n'
    )
    for name, value in (("vllm:kv_cache_usage_perc", usage), ("vllm:num_requests_running", running)):
        if value is not None:
            text += f'# TYPE {name} gauge\n{name}{{engine="0",model_name="m"}} {value}\n'
    return MetricsSnapshot.from_text(text)


@pytest.mark.parametrize(
    ("waiting", "usage", "running", "held_back"),
    [
        # Three long requests fill the cache: the three behind them wait for room.
        (3.0, 0.95, 3.0, 3.0),
        (3.0, 1.0, 3.0, 3.0),
        # The same three waiting while seven run in a cache not 60 % full: the token budget, not room.
        (3.0, 0.58, 7.0, 0.0),
        # One more like the running ones would just not fit (3 x 0.24 < 0.76), or would (0.26 x 3 > 0.74).
        (2.0, 0.76, 3.0, 2.0),
        (2.0, 0.74, 3.0, 0.0),
        (0.0, 1.0, 3.0, 0.0),
        # Nothing running holds the cache, so nothing waits for its room.
        (4.0, 0.0, 0.0, 0.0),
        # Without the usage or running gauge a scrape cannot tell.
        (3.0, None, 3.0, None),
        (3.0, 0.95, None, None),
    ],
)
def test_only_requests_a_full_cache_holds_back_count_as_waiting_for_kv_room(
    waiting: float, usage: float | None, running: float | None, held_back: float | None
) -> None:
    assert _scrape(waiting, usage, running).waiting_for_kv_room() == held_back


def _kv_side(**engine: float) -> RunTaskEvidence:
    base = _side(queue_p95=1.0, queue_mean=0.1, ttft=50.0)
    from dataclasses import replace

    return replace(base, engine={"preemptions": 0.0, "kv_cache_usage_peak": 0.5, **engine})


def test_a_kv_memory_claim_is_judged_on_the_first_signal_that_moved() -> None:
    """vLLM v1 holds requests back rather than preempting them: preemptions stay 0 on both sides and
    say nothing, so the verdict reads the requests that waited for KV room."""
    policy = load_policy("default")
    evidence = TaskEvidence(
        "knowledge_qa",
        _kv_side(kv_waiting_peak=6.0, kv_cache_usage_peak=0.87),
        _kv_side(kv_waiting_peak=0.0, kv_cache_usage_peak=0.4),
    )
    verdict = judge_task(policy, evidence, role="beneficiary", bottleneck="kv_memory")
    kv = next(v for v in verdict.metrics if v.source == "bottleneck:kv_memory")
    assert kv.metric == "kv_capacity_waits" and kv.status == "pass", kv.reason
    # Nothing waited, nothing preempted, the cache never near full: not exercised, not a failure.
    calm = TaskEvidence("knowledge_qa", _kv_side(kv_waiting_peak=0.0), _kv_side(kv_waiting_peak=0.0))
    idle = judge_task(policy, calm, role="beneficiary", bottleneck="kv_memory")
    kv = next(v for v in idle.metrics if v.source == "bottleneck:kv_memory")
    assert kv.status == "inconclusive" and "held one back for KV room" in kv.reason
