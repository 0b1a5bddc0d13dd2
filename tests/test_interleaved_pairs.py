"""Interleaved pairs: baseline and candidate measured together, in balanced alternating blocks.

* the block order and chunking are balanced (ABBA BAAB);
* against two real HTTP servers on a machine that slows down over time, the interleaved blocks
  keep the two sides level while two runs one after the other put the whole drift on one side;
* a ticket fans out to one pair with one message; either run's message executes both; the
  baseline's deterministic quality may come from a matching earlier run, its timing never does;
* a pair whose candidate cannot start ends the candidate run as ``start_failed`` and keeps the
  baseline that came up warm.

The real-engine pair is in ``tests/test_measurement_engine.py``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from django.contrib.auth.models import User

from backends.models import Backend
from evaluators import pipeline, services, warm
from evaluators.engine import EngineStartError
from evaluators.engine_metrics import MetricsSnapshot
from evaluators.interleave import (
    BASELINE,
    CANDIDATE,
    Endpoint,
    KvSampler,
    block_order,
    collector_paused,
    combine_engine,
    measure_interleaved,
    split_chunks,
)
from evaluators.loadgen import LoadRequest, LoadResult, RequestRecord, run_load_sync
from evaluators.models import EvaluationRun, RunErrorKind, RunStatus, SampleRecord, TaskResult
from evaluators.processes import group_alive
from gates.models import ReleaseTicket, TicketStatus
from gates.services import evaluation
from ledger.models import LedgerEntry
from tests.factories import captured_tasks
from tests.test_warm_engine import start_engine

# --- the schedule -------------------------------------------------------------------------------


def test_four_chunks_run_in_abba_baab_order() -> None:
    order = block_order(4)
    sides = "".join("A" if side == BASELINE else "B" for _, side in order)
    assert sides == "ABBABAAB"
    assert [chunk for chunk, _ in order] == [0, 0, 1, 1, 2, 2, 3, 3]
    # Balanced: each side goes first in half of the pairs, and the mean position is equal.
    positions = {side: [i for i, (_, s) in enumerate(order) if s == side] for side in (BASELINE, CANDIDATE)}
    assert statistics.mean(positions[BASELINE]) == statistics.mean(positions[CANDIDATE])


def test_chunks_cover_every_request_once() -> None:
    chunks = split_chunks(10, 4)
    assert [i for chunk in chunks for i in chunk] == list(range(10))
    assert {len(chunk) for chunk in chunks} == {2, 3}
    assert len(split_chunks(3, 4)) == 3  # never an empty block
    with pytest.raises(ValueError):
        block_order(0)


def test_engine_evidence_adds_counters_and_recomputes_rates_over_blocks() -> None:
    blocks: list[dict[str, float | None]] = [
        {
            "prefix_cache_hits": 10.0,
            "prefix_cache_queries": 100.0,
            "prefix_cache_hit_rate": 0.1,
            "kv_cache_usage_peak": 0.2,
        },
        {
            "prefix_cache_hits": 50.0,
            "prefix_cache_queries": 100.0,
            "prefix_cache_hit_rate": 0.5,
            "kv_cache_usage_peak": 0.4,
        },
    ]
    combined = combine_engine(blocks)
    assert combined["prefix_cache_hits"] == 60 and combined["prefix_cache_queries"] == 200
    assert combined["prefix_cache_hit_rate"] == pytest.approx(0.3)
    assert combined["kv_cache_usage_peak"] == 0.4
    # The engine's latency means are per request: a block that finished more requests weighs more.
    means = combine_engine(
        [
            {"engine_ttft_mean_ms": 10.0, "request_success": 30.0},
            {"engine_ttft_mean_ms": 40.0, "request_success": 10.0},
        ]
    )
    assert means["engine_ttft_mean_ms"] == pytest.approx(17.5)


# --- drift: interleaved vs one after the other, on real HTTP servers -------------------------------


class DriftingMachine:
    """Two fake engines on one 'machine' whose every answer is slower than the one before (by
    ``slope_ms`` per request the machine served, on either engine)."""

    def __init__(self, slope_ms: float) -> None:
        self.slope = slope_ms / 1000.0
        self.served = 0
        self.loop = asyncio.new_event_loop()
        self.urls: list[str] = []
        self.runners: list[web.AppRunner] = []
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            for _ in range(2):
                app = web.Application()
                app.router.add_post("/v1/chat/completions", self.answer)
                runner = web.AppRunner(app)
                self.loop.run_until_complete(runner.setup())
                site = web.TCPSite(runner, "127.0.0.1", 0)
                self.loop.run_until_complete(site.start())
                port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
                self.urls.append(f"http://127.0.0.1:{port}")
                self.runners.append(runner)
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        ready.wait(10)

    async def answer(self, request: web.Request) -> web.StreamResponse:
        await request.json()
        self.served += 1
        await asyncio.sleep(0.005 + self.slope * self.served)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        events: list[dict[str, Any]] = [
            {"choices": [{"index": 0, "delta": {"content": "a"}}]},
            {"choices": [{"index": 0, "delta": {"content": "b"}}]},
            {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
        ]
        for event in events:
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def close(self) -> None:
        async def stop() -> None:
            for runner in self.runners:
                await runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def machine() -> Iterator[DriftingMachine]:
    drifting = DriftingMachine(slope_ms=0.25)
    yield drifting
    drifting.close()


def _median_ttft_ms(records: list[dict[str, Any]]) -> float:
    return statistics.median(r["ttft_s"] * 1000 for r in records if r["ttft_s"] is not None)


def test_interleaving_keeps_two_identical_engines_level_where_sequential_runs_drift(
    machine: DriftingMachine,
) -> None:
    requests = [LoadRequest(messages=[{"role": "user", "content": f"q{i}"}], max_tokens=2) for i in range(48)]
    a, b = (Endpoint(url, "m") for url in machine.urls)

    sequential_a = run_load_sync(a.base_url, "m", requests, concurrency=1)
    sequential_b = run_load_sync(b.base_url, "m", requests, concurrency=1)
    seq_ratio = statistics.median(r.ttft_s for r in sequential_b.records if r.ttft_s) / statistics.median(
        r.ttft_s for r in sequential_a.records if r.ttft_s
    )

    load, indexes = measure_interleaved(
        {BASELINE: a, CANDIDATE: b}, requests, chunks=4, concurrency=1, seed=0, settle_s=0
    )
    inter_ratio = _median_ttft_ms(load.records(CANDIDATE, indexes)) / _median_ttft_ms(load.records(BASELINE, indexes))

    # The same server code on both sides: one after the other the second looks much slower.
    assert seq_ratio > 1.25, seq_ratio
    assert abs(inter_ratio - 1) < abs(seq_ratio - 1) / 3, (inter_ratio, seq_ratio)
    # Every block is kept, in order, with its drift shown per side.
    assert [b.position for b in load.blocks] == list(range(8))
    summary = load.summary(BASELINE)
    assert len(summary["blocks"]) == 4 and len(summary["block_output_throughput"]) == 4
    assert summary["drift"]["ttft_median_spread"] > 0.2  # the machine really drifted across blocks
    assert not any(block["cache_reset"] for block in summary["blocks"])  # no such route on these servers
    assert [r["index"] for r in load.records(CANDIDATE, indexes)] == list(range(48))


class FakeClock:
    """``time.monotonic`` and ``time.sleep`` of the interleaver, advanced by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize("settle_s", [0.0, 1.25])
def test_a_block_after_the_other_engine_waits_until_that_engine_is_idle(
    monkeypatch: pytest.MonkeyPatch, settle_s: float
) -> None:
    """vLLM's worker busy-polls for a second after its last request: a block sent right after the
    other engine's waits ``settle_s`` from that engine's last answer; the same engine's next block
    does not wait."""
    clock = FakeClock()
    started: list[tuple[str, float]] = []

    def load(base_url: str, model: str, requests: Any, **kwargs: Any) -> Any:
        started.append((base_url, clock.now))
        clock.now += 0.5  # the block's requests
        return run_result(len(requests))

    monkeypatch.setattr("evaluators.interleave.time", clock)
    monkeypatch.setattr("evaluators.interleave.run_load_sync", load)
    monkeypatch.setattr("evaluators.interleave.reset_prefix_cache", lambda base_url: False)
    monkeypatch.setattr("evaluators.interleave._scrape", lambda base_url: None)
    a, b = Endpoint("http://a", "m"), Endpoint("http://b", "m")
    requests = [LoadRequest(messages=[{"role": "user", "content": f"q{i}"}], max_tokens=2) for i in range(8)]
    measure_interleaved(
        {BASELINE: a, CANDIDATE: b}, requests, chunks=4, concurrency=1, seed=0, warmup=False, settle_s=settle_s
    )

    assert "".join("A" if url == "http://a" else "B" for url, _ in started) == "ABBABAAB"
    finished: dict[str, float] = {}
    for (url, at), previous in zip(started, [None, *started[:-1]], strict=True):
        other = [end for side, end in finished.items() if side != url]
        if previous is not None and previous[0] != url:
            assert at - max(other) == pytest.approx(settle_s)  # waited for the other engine to go idle
        elif previous is not None:
            assert at == pytest.approx(finished[url])  # the same engine goes on at once
        finished[url] = at + 0.5


def run_result(count: int) -> LoadResult:
    return LoadResult(records=[RequestRecord(index=i, ttft_s=0.01, e2e_s=0.02) for i in range(count)], duration_s=0.5)


def test_no_garbage_is_collected_while_a_block_is_timed() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled() and gc.get_freeze_count() > 0  # the heap as it was, out of reach
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()  # a caller that had switched collection off keeps it off
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_kv_gauge_is_sampled_during_a_block_only_when_asked() -> None:
    with KvSampler("http://127.0.0.1:9", None) as quiet:
        assert not quiet._thread.is_alive()  # no /metrics reads while the block's requests stream
    assert quiet.result() == {
        "kv_cache_usage_peak": None,
        "kv_cache_usage_time_weighted_mean": None,
        "kv_waiting_peak": None,
        "capacity_waiting_peak": None,
    }
    with KvSampler("http://127.0.0.1:9", 0.01) as sampling:
        assert sampling._thread.is_alive()


def test_the_kv_sampler_keeps_vllms_waiting_count_beside_the_requests_held_back_for_room() -> None:
    def scrape(waiting: float, usage: float, running: float) -> MetricsSnapshot:
        return MetricsSnapshot.from_text(
            f'vllm:num_requests_waiting_by_reason{{reason="capacity"}} {waiting}\n'
            f"vllm:kv_cache_usage_perc {usage}\nvllm:num_requests_running {running}\n"
        )

    sampler = KvSampler("http://127.0.0.1:9", None)
    sampler._read(scrape(2.0, 0.5, 7.0))  # waiting for the token budget in a half-empty cache
    sampler._read(scrape(1.0, 0.97, 3.0))  # waiting for room in a full one
    result = sampler.result()
    peaks = (result["capacity_waiting_peak"], result["kv_waiting_peak"], result["kv_cache_usage_peak"])
    assert peaks == (2.0, 1.0, 0.97)


# --- orchestration ------------------------------------------------------------------------------


@pytest.fixture
def sent() -> Any:
    with captured_tasks() as published:
        yield published


@pytest.mark.django_db
def test_a_ticket_fans_out_to_one_pair_sent_once(
    draft: ReleaseTicket, erin: User, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    evaluation.evaluation_request(ticket=draft, actor=erin)
    with django_capture_on_commit_callbacks(execute=True):
        ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.status == TicketStatus.EVALUATING
    base, cand = ticket.baseline_run, ticket.candidate_run
    assert base is not None and cand is not None
    assert (base.paired_run_id, base.pair_side) == (cand.pk, BASELINE)
    assert (cand.paired_run_id, cand.pair_side) == (base.pk, CANDIDATE)
    assert [call.kwargs["task_id"] for call in sent["run"].call_args_list] == [f"evaluate-run-{cand.pk}-a1"]
    assert EvaluationRun.objects.filter(pk__in=[base.pk, cand.pk], sent_at__isnull=False).count() == 2
    entry = LedgerEntry.objects.get(kind="ticket.evaluation_requested", subject_id=str(ticket.pk))
    assert entry.payload["interleaved"] is True


@pytest.mark.django_db
def test_a_kv_memory_claim_asks_for_its_stress_profile_on_the_beneficiary_tasks(
    draft: ReleaseTicket, erin: User, sent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    ReleaseTicket.objects.filter(pk=draft.pk).update(bottleneck="kv_memory")
    evaluation.evaluation_request(ticket=draft, actor=erin)
    with django_capture_on_commit_callbacks(execute=True):
        ticket = evaluation.ticket_evaluate(ticket_id=draft.pk)
    assert ticket is not None and ticket.candidate_run is not None
    profile = ticket.candidate_run.load_profile
    assert profile["stress"] == "kv_memory"
    assert profile["stress_tasks"] == sorted(t.slug for t in draft.beneficiary_tasks.all())
    assert profile["open_loop_requests"] == pipeline.DEFAULT_LOAD_PROFILE["open_loop_requests"]


@pytest.mark.django_db
def test_a_second_ticket_measures_the_baseline_again(
    draft: ReleaseTicket, erin: User, baseline: Backend, candidate: Backend, sent: Any
) -> None:
    first_base, _ = services.pair_request(baseline=baseline, candidate=candidate, tasks=["knowledge_qa"])
    EvaluationRun.objects.filter(pk=first_base.pk).update(status=RunStatus.SUCCEEDED)
    second_base, _ = services.pair_request(baseline=baseline, candidate=candidate, tasks=["knowledge_qa"])
    assert second_base.pk != first_base.pk  # timing is never reused
    # Nor does a standalone request reuse a pair's run.
    alone, reused = services.run_request(backend=baseline, tasks=["knowledge_qa"])
    assert not reused and alone.pk not in (first_base.pk, second_base.pk)


class _Engine:
    def __init__(self, name: str) -> None:
        self.base_url, self.model = f"http://127.0.0.1:9/{name}", name
        self.stopped = False

    def is_alive(self) -> bool:
        return True

    def stop(self) -> None:
        self.stopped = True

    def last_log_lines(self, n: int = 30) -> list[str]:
        return []


def _sample(sample_id: str, passed: bool) -> pipeline.SampleOutcome:
    return pipeline.SampleOutcome(sample_id, "p", "t", "o", passed, float(passed), "", "")


@pytest.mark.django_db
def test_either_message_executes_the_pair_and_reuses_only_the_baselines_quality(
    baseline: Backend, candidate: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An earlier baseline run with the same fingerprint, engine, hardware and profile.
    earlier, _ = services.run_request(backend=baseline, tasks=["knowledge_qa"])
    EvaluationRun.objects.filter(pk=earlier.pk).update(status=RunStatus.SUCCEEDED)
    TaskResult.objects.create(run=earlier, task="knowledge_qa", suite_version=earlier.suite_versions["knowledge_qa"])
    SampleRecord.objects.create(run=earlier, task="knowledge_qa", sample_id="s1", passed=True, score=1.0)

    engines = {BASELINE: _Engine(BASELINE), CANDIDATE: _Engine(CANDIDATE)}
    seen: dict[str, Any] = {}

    def open_engine(run: EvaluationRun, attempt: Any, warm_engine: Any = None) -> _Engine:
        return engines[run.pair_side]

    def answer(
        slug: str, *, baseline: Endpoint, candidate: Endpoint, profile: Any, baseline_samples: Any, on_phase: Any
    ) -> tuple[pipeline.TaskOutcome, pipeline.TaskOutcome]:
        seen.update(baseline_samples=baseline_samples)
        base = pipeline.TaskOutcome(slug, "1", samples=list(baseline_samples), quality={"n": 1})
        cand = pipeline.TaskOutcome(slug, "1", samples=[_sample("s1", False)], quality={"n": 1})
        return base, cand

    def load(base: Any, cand: Any, *, baseline: Endpoint, candidate: Endpoint, profile: Any, on_phase: Any) -> None:
        seen.update(baseline=baseline, candidate=candidate)

    monkeypatch.setattr(services, "_open_engine", open_engine)
    monkeypatch.setattr(services.pipeline, "pair_quality", answer)
    monkeypatch.setattr(services.pipeline, "pair_load", load)
    base_run, cand_run = services.pair_request(baseline=baseline, candidate=candidate, tasks=["knowledge_qa"])
    services.run_execute(run_id=base_run.pk)  # the baseline's message: executes the whole pair

    base_run.refresh_from_db()
    cand_run.refresh_from_db()
    assert (base_run.status, cand_run.status) == (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED)
    assert seen["baseline"].model == BASELINE and seen["candidate"].model == CANDIDATE
    # The load goes out as the gateway sends it: the backend's sampling params, each tenant's salt.
    assert set(seen["candidate"].salts) == set(pipeline.LOAD_TENANTS)
    assert seen["candidate"].sampling == candidate.sampling_params
    assert [s.sample_id for s in seen["baseline_samples"]] == ["s1"]
    assert TaskResult.objects.get(run=base_run).quality["reused_from_run"] == earlier.pk
    assert SampleRecord.objects.get(run=cand_run).passed is False
    assert all(engine.stopped for engine in engines.values())
    assert base_run.attempts.count() == cand_run.attempts.count() == 1
    # A second delivery of the other message finds the pair done and does nothing.
    services.run_execute(run_id=cand_run.pk)
    assert cand_run.attempts.count() == 1


@pytest.mark.django_db
def test_a_candidate_that_cannot_start_fails_its_run_as_start_failed_and_the_baseline_stays_warm(
    baseline: Backend, candidate: Backend, monkeypatch: pytest.MonkeyPatch, settings: Any, tmp_path: Path
) -> None:
    settings.OPTGATE_WARM_ENGINE_IDLE_S = 600
    warm.stop_parked()
    started = start_engine(tmp_path, BASELINE)  # a real process in its own group, answering /health

    def open_engine(run: EvaluationRun, attempt: Any, warm_engine: Any = None) -> Any:
        if run.pair_side == CANDIDATE:
            raise EngineStartError("engine exited with code 1 during start-up: ValueError: no AVX-512", exit_code=1)
        return started

    monkeypatch.setattr(services, "_open_engine", open_engine)
    monkeypatch.setattr(services, "_launch_key", lambda run: f"launch of {run.backend.name}")
    try:
        base_run, cand_run = services.pair_request(baseline=baseline, candidate=candidate, tasks=["knowledge_qa"])
        services.run_execute(run_id=cand_run.pk)

        base_run.refresh_from_db()
        cand_run.refresh_from_db()
        assert cand_run.status == RunStatus.ERROR and cand_run.error_kind == RunErrorKind.START_FAILED
        assert "ValueError: no AVX-512" in cand_run.error
        assert base_run.status == RunStatus.ERROR and base_run.error_kind == RunErrorKind.OTHER
        assert "candidate engine of its pair could not start" in base_run.error
        # The failure is the candidate's configuration: the baseline that came up stays warm for the
        # next run launched like it (a retry, the next ticket).
        assert warm.parked_engines() == [started] and group_alive(started.pgid)
        [(_, taken, _)] = warm.take(f"launch of {baseline.name}")
        assert taken is started
    finally:
        warm.stop_parked()
        started.stop()


@pytest.mark.django_db
def test_answers_are_reused_across_load_profiles_but_not_across_quality_concurrency(baseline: Backend) -> None:
    """Greedy answers depend on the engine and how lm-eval asked, not on the load measured after:
    a fleet baseline that asked for answers only serves every pair of the same backend."""
    answers, _ = services.run_request(
        backend=baseline, tasks=["knowledge_qa"], load_profile={"quality_only": True, "open_loop_requests": 0}
    )
    EvaluationRun.objects.filter(pk=answers.pk).update(status=RunStatus.SUCCEEDED)
    TaskResult.objects.create(run=answers, task="knowledge_qa", suite_version=answers.suite_versions["knowledge_qa"])
    SampleRecord.objects.create(run=answers, task="knowledge_qa", sample_id="s1", passed=True, score=1.0)

    pair_base, _ = services.pair_request(baseline=baseline, candidate=baseline, tasks=["knowledge_qa"])
    reused = services._reusable_quality(pair_base, "knowledge_qa")
    assert reused is not None and reused[0] == answers.pk
    other, _ = services.run_request(backend=baseline, tasks=["knowledge_qa"], load_profile={"quality_concurrency": 1})
    assert services._reusable_quality(other, "knowledge_qa") is None
    fewer, _ = services.run_request(backend=baseline, tasks=["knowledge_qa"], load_profile={"quality_samples": 8})
    assert services._reusable_quality(fewer, "knowledge_qa") is None  # answers to other samples


def test_a_profile_may_ask_quality_on_the_first_few_samples() -> None:
    suite = pipeline.get_suite("knowledge_qa")
    assert pipeline.profile_samples(suite, {}) is None
    few = pipeline.profile_samples(suite, {"quality_samples": 8})
    assert few is not None and [s["id"] for s in few] == [s["id"] for s in suite.load_samples()[:8]]


def test_a_stage_profile_asks_that_stages_held_out_samples() -> None:
    suite = pipeline.get_suite("knowledge_qa")
    second = pipeline.profile_samples(suite, {"stage": 2})
    assert second is not None and [s["id"] for s in second] == [s["id"] for s in suite.stage_samples(2)]
    assert second[0]["id"] == "knowledge_qa-h0001" and len(second) == 100
    assert pipeline.profile_samples(suite, {"stage": 1}) is None  # stage one is the shipped file


def test_a_stage_profile_names_each_tasks_own_stage_size() -> None:
    """Planned stages: one pair, each task its own block of held-out samples (stage 3 of 250 is
    held-out 250..499), a task the mapping does not name the shipped size."""
    profile = {"stage": 3, "stage_sizes": {"dataagent_nl2sql": 250, "cs_summary": 55}}
    sql = pipeline.profile_samples(pipeline.get_suite("dataagent_nl2sql"), profile)
    summary = pipeline.profile_samples(pipeline.get_suite("cs_summary"), profile)
    other = pipeline.profile_samples(pipeline.get_suite("knowledge_qa"), profile)
    assert sql is not None and summary is not None and other is not None
    assert (len(sql), sql[0]["id"], sql[-1]["id"]) == (250, "dataagent_nl2sql-h0251", "dataagent_nl2sql-h0500")
    assert (len(summary), summary[0]["id"]) == (55, "cs_summary-h0056")
    assert (len(other), other[0]["id"]) == (100, "knowledge_qa-h0101")


@pytest.mark.django_db
def test_a_stage_pair_answers_its_held_out_samples_only_and_measures_no_load(
    baseline: Backend, candidate: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's own path (``run_execute`` → ``pair_execute``), engines and lm-eval stood in for."""
    asked: list[list[str]] = []

    def quality(suite: Any, *, base_url: str, model: str, concurrency: int, workdir: Any, samples: Any) -> Any:
        asked.append([s["id"] for s in samples])
        return [_sample(s["id"], True) for s in samples]

    def no_load(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a quality-only stage measured load")

    monkeypatch.setattr(services, "_open_engine", lambda run, attempt, warm_engine=None: _Engine(run.pair_side))
    monkeypatch.setattr(pipeline, "quality_phase", quality)
    monkeypatch.setattr(pipeline, "measure_interleaved", no_load)
    profile = {**pipeline.DEFAULT_LOAD_PROFILE, "quality_only": True, "stage": 3}
    base_run, cand_run = services.pair_request(
        baseline=baseline, candidate=candidate, tasks=["tool_calling"], load_profile=profile
    )
    services.run_execute(run_id=cand_run.pk)
    held_out = [s["id"] for s in pipeline.get_suite("tool_calling").stage_samples(3)]
    assert asked == [held_out, held_out]  # candidate, then baseline: the same samples
    base, cand = (TaskResult.objects.get(run=run, task="tool_calling") for run in (base_run, cand_run))
    assert base.error == cand.error == ""  # a load attempt would have broken the task
    assert base.suite_version == cand.suite_version == "1+h1" and cand.quality["n"] == 100
    assert cand.performance == {} and cand.requests == []


@pytest.mark.django_db
def test_a_stage_reuses_baseline_answers_of_the_same_stage_only(baseline: Backend, candidate: Backend) -> None:
    earlier, _ = services.pair_request(
        baseline=baseline, candidate=candidate, tasks=["knowledge_qa"], load_profile={"quality_only": True, "stage": 2}
    )
    assert earlier.suite_versions == {"knowledge_qa": "1+h1"}
    EvaluationRun.objects.filter(pk=earlier.pk).update(status=RunStatus.SUCCEEDED)
    TaskResult.objects.create(run=earlier, task="knowledge_qa", suite_version="1+h1")
    SampleRecord.objects.create(
        run=earlier, task="knowledge_qa", sample_id="knowledge_qa-h0001", passed=True, score=1.0
    )
    same, _ = services.pair_request(
        baseline=baseline, candidate=candidate, tasks=["knowledge_qa"], load_profile={"quality_only": True, "stage": 2}
    )
    reused = services._reusable_quality(same, "knowledge_qa")
    assert reused is not None and reused[0] == earlier.pk
    later, _ = services.pair_request(
        baseline=baseline, candidate=candidate, tasks=["knowledge_qa"], load_profile={"quality_only": True, "stage": 3}
    )
    assert services._reusable_quality(later, "knowledge_qa") is None  # other held-out samples
