"""Load generator: percentile math, goodput, stream parsing (against a local HTTP server), shapes."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from evaluators.loadgen import (
    LoadRequest,
    LoadResult,
    RequestRecord,
    build_workload,
    meets_slo,
    percentile,
    run_load,
    summarize,
)

SAMPLES = ["the quick brown fox jumps over the lazy dog", "select name from orders where total > 10"]


def _record(index: int, ttft: float, e2e: float, tokens: int, error: str | None = None) -> RequestRecord:
    tpot = (e2e - ttft) / (tokens - 1) if tokens > 1 else None
    return RequestRecord(index=index, ttft_s=ttft, e2e_s=e2e, tpot_s=tpot, output_tokens=tokens, error=error)


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([1.0, 2.0, 3.0, 4.0], 90, 3.7),
        ([10.0], 99, 10.0),
        ([3.0, 1.0, 2.0], 0, 1.0),
        ([3.0, 1.0, 2.0], 100, 3.0),
    ],
)
def test_percentile_interpolates_like_numpy(values: list[float], p: float, expected: float) -> None:
    assert percentile(values, p) == pytest.approx(expected)


def test_percentile_of_nothing_is_none_and_bad_p_is_refused() -> None:
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summary_aggregates_successes_in_ms_and_counts_errors() -> None:
    records = [
        _record(0, 0.1, 1.1, 11),  # tpot 100 ms
        _record(1, 0.3, 2.3, 11),  # tpot 200 ms
        _record(2, 0.0, 0.0, 0, error="HTTP 500: boom"),
    ]
    records[0].itl_s = [0.1, 0.1]
    records[1].itl_s = [0.2]
    summary = summarize(records, duration_s=4.0)
    assert summary["count"] == 3
    assert summary["completed"] == 2
    assert summary["errors"] == 1
    assert summary["ttft_ms"]["mean"] == pytest.approx(200)
    assert summary["ttft_ms"]["median"] == pytest.approx(200)
    assert summary["tpot_ms"]["p99"] == pytest.approx(199)
    assert summary["itl_ms"]["median"] == pytest.approx(100)
    assert summary["e2e_ms"]["p90"] == pytest.approx(2180)
    assert summary["request_throughput"] == pytest.approx(0.5)
    assert summary["output_token_throughput"] == pytest.approx(22 / 4)
    assert "goodput" not in summary


def test_goodput_counts_errors_and_slo_breaches_as_misses() -> None:
    records = [
        _record(0, 0.1, 1.1, 11),  # meets everything
        _record(1, 3.0, 4.0, 11),  # TTFT 3000 ms > 2000
        _record(2, 0.1, 5.1, 11),  # TPOT 500 ms > 200
        _record(3, 0.1, 1.1, 11, error="ReadTimeout"),  # fast but failed: a miss
        _record(4, 0.2, 0.2, 1),  # one token: no TPOT, still good (as in vLLM)
    ]
    slo = {"ttft_ms": 2000, "tpot_ms": 200, "e2e_ms": 10000}
    summary = summarize(records, duration_s=10.0, slo=slo)
    assert summary["good_requests"] == 2
    assert summary["goodput"] == pytest.approx(0.2)
    assert summary["goodput_fraction"] == pytest.approx(0.4)
    assert not meets_slo(records[3], slo)
    with pytest.raises(ValueError, match="unknown SLO key"):
        meets_slo(records[0], {"latency": 1})


def _sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def _completion_stream(tokens: int) -> bytes:
    events: list[dict[str, Any]] = [{"choices": [{"index": 0, "text": f"t{i}"}]} for i in range(tokens)]
    events.append({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": tokens}})
    return b": keep-alive\n\n" + _sse(events)


# A handler gets (path, JSON body) and answers (status, body bytes), or DROP to cut the connection.
DROP = "drop"


def _run(requests: list[LoadRequest], handler: Any, **kwargs: Any) -> LoadResult:
    """Run the load generator against a real HTTP server on a loopback port answering with ``handler``."""

    async def serve(request: web.Request) -> web.StreamResponse:
        answer = handler(request.path, await request.json())
        if asyncio.iscoroutine(answer):
            answer = await answer
        if answer == DROP:
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        status, body = answer
        response = web.StreamResponse(status=status, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        # Sent in small pieces that split lines, as a real engine's chunks may.
        for start in range(0, len(body), 7):
            await response.write(body[start : start + 7])
        await response.write_eof()
        return response

    async def go() -> LoadResult:
        app = web.Application()
        app.router.add_post("/{path:.*}", serve)
        async with TestServer(app, host="127.0.0.1") as server:
            return await run_load(str(server.make_url("")), "tiny", requests, **kwargs)

    return asyncio.run(go())


def test_it_streams_completions_and_records_per_request_timings() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        assert path == "/v1/completions"
        bodies.append(body)
        return 200, _completion_stream(5)

    requests = [LoadRequest(prompt="hi", max_tokens=5, extra_body={"cache_salt": "tenantA"})] * 3
    result = _run(requests, handler, concurrency=2, ignore_eos=True)
    assert bodies[0] == {
        "model": "tiny",
        "prompt": "hi",
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "cache_salt": "tenantA",
    }
    for record in result.records:
        assert record.error is None
        assert record.output_tokens == 5
        assert record.prompt_tokens == 7
        assert len(record.itl_s) == 4
        assert record.ttft_s is not None and record.e2e_s is not None and record.e2e_s >= record.ttft_s
        assert record.tpot_s == pytest.approx((record.e2e_s - record.ttft_s) / 4)
    # The raw records survive a JSON round trip, so a verdict can be re-judged with another SLO.
    stored = json.loads(json.dumps(result.to_json(slo={"ttft_ms": 1000})))
    again = LoadResult.from_json(stored)
    assert again.summary({"ttft_ms": 1000}) == stored["summary"]


def test_it_uses_the_chat_endpoint_for_messages_and_one_token_has_no_tpot() -> None:
    def handler(path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        assert path == "/v1/chat/completions"
        events: list[dict[str, Any]] = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
            {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
        ]
        return 200, _sse(events)

    result = _run([LoadRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=1)], handler)
    record = result.records[0]
    assert record.error is None
    assert record.output_tokens == 1
    assert record.tpot_s is None


def test_http_errors_and_broken_connections_become_request_errors() -> None:
    calls = iter(["500", "drop", "empty"])

    def handler(path: str, body: dict[str, Any]) -> tuple[int, bytes] | str:
        kind = next(calls)
        if kind == "500":
            return 500, b"engine dead"
        if kind == "drop":
            return DROP
        return 200, b"data: [DONE]\n\n"

    result = _run([LoadRequest(prompt="x")] * 3, handler, concurrency=1)
    errors = [r.error for r in result.records]
    assert errors[0] == "HTTP 500: engine dead"
    assert errors[1] is not None and errors[1].startswith(("ServerDisconnectedError", "ClientPayloadError"))
    assert errors[2] == "no token chunk received"
    assert result.summary({"ttft_ms": 10_000})["good_requests"] == 0


def test_an_unreachable_engine_is_a_request_error_not_a_crash() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before the request: nothing listens there
    result = asyncio.run(run_load(f"http://127.0.0.1:{port}", "tiny", [LoadRequest(prompt="x")]))
    error = result.records[0].error
    assert error is not None and error.startswith("ClientConnectorError")


def test_concurrency_limits_requests_in_flight() -> None:
    in_flight = 0
    peak = 0

    async def handler(path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return 200, _completion_stream(2)

    result = _run([LoadRequest(prompt="x")] * 8, handler, concurrency=3)
    assert peak == 3
    assert result.summary()["completed"] == 8


def test_poisson_arrivals_are_spread_out_by_the_rate() -> None:
    result = _run(
        [LoadRequest(prompt="x")] * 6,
        lambda path, body: (200, _completion_stream(2)),
        request_rate=100.0,
        seed=3,
    )
    starts = [r.start_s for r in result.records]
    assert starts == sorted(starts)
    assert starts[-1] > 0.005  # five exponential gaps at 100/s: tens of ms, not all at once


def test_load_request_needs_exactly_one_input() -> None:
    with pytest.raises(ValueError):
        LoadRequest()
    with pytest.raises(ValueError):
        LoadRequest(prompt="a", messages=[{"role": "user", "content": "b"}])


@pytest.mark.parametrize("shape", ["short_interactive", "long_shared_prefix", "long_context", "long_output"])
def test_workloads_are_deterministic_per_seed(shape: str) -> None:
    first = build_workload(shape, samples=SAMPLES, n=4, seed=7)
    assert first == build_workload(shape, samples=SAMPLES, n=4, seed=7)
    assert first != build_workload(shape, samples=SAMPLES, n=4, seed=8)
    assert len(first) == 4


def test_long_shared_prefix_shares_a_long_prefix_and_varies_the_suffix() -> None:
    requests = build_workload("long_shared_prefix", samples=SAMPLES, n=3, seed=1)
    prompts = [r.prompt or "" for r in requests]
    shared = prompts[0].split("Question: ")[0]
    assert len(shared.split()) >= 800  # > 600 tokens on any real tokenizer
    assert all(p.startswith(shared) for p in prompts)
    assert len(set(prompts)) == 3


def test_long_output_asks_for_long_answers_and_chat_mode_uses_messages() -> None:
    requests = build_workload("long_output", samples=SAMPLES, n=2, seed=0, chat=True)
    assert requests[0].max_tokens == 512
    assert requests[0].extra_body["ignore_eos"] is True
    assert requests[0].messages is not None and requests[0].prompt is None


def test_unknown_shapes_and_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown shape"):
        build_workload("huge", samples=SAMPLES, n=1)
    with pytest.raises(ValueError, match="no size"):
        build_workload("long_context", samples=SAMPLES, n=1, prefix_words=3)
