"""The traffic driver: each task's business prompts, per tenant, through the current route table.

It plays the gateway and the application for a canary (docs/canary.md): each request of a
(task, tenant) pair takes the route the gateway would (the tenant's own route, else the task's
default; ``gates.selectors.routes.route_resolve``), goes to that backend's OpenAI-compatible
endpoint with the backend's sampling params and the tenant's ``cache_salt`` (the evaluators'
``Endpoint.prepare``), and its answer is scored by the task suite's own scorer. The outcome and the
latencies count under the business-signal contract (``OutcomeExporter``), so Prometheus and the
canary's analysis rounds see what real traffic would show.

The route table is read again whenever its version changes, so a task rolled back mid-canary sends
its canary tenants' next requests to the rollback target. Only the dispatching thread touches the
database; the requests, scoring and counting run in a thread pool.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from backends.prefix_cache import cache_salt
from evaluators.interleave import Endpoint
from evaluators.loadgen import LoadRequest
from evaluators.suites import get_suite
from evaluators.suites.base import SampleScore, Suite
from gates.canary.contract import HUMAN_RETURN, OutcomeExporter
from gates.selectors.routes import route_json, route_resolve, route_version_current

logger = logging.getLogger(__name__)

# The scorers' failure reasons (the part before ":") a gateway or application sees for itself.
# Every other failure is an answer that is delivered and looks fine (a wrong fact, a wrong tool, a
# query that reads the wrong table): it counts ``ok`` and a person sends it back (``human_return``).
PARSE_ERRORS = frozenset({"invalid_json", "sql_parse_error", "syntax_error"})
TOOL_ARG_ERRORS = frozenset({"schema_violation"})
# A refusal of an allowed request; refusing a disallowed one is the right answer (``ok``).
REFUSALS = frozenset({"over_refusal"})


def outcome_of(verdict: SampleScore) -> tuple[str, bool]:
    """The contract's outcome of a scored answer, and whether a person sends the answer back."""
    if verdict.passed:
        return "ok", False
    kind = (verdict.failure_reason or "").split(":")[0]
    if kind in PARSE_ERRORS:
        return "parse_error", False
    if kind in TOOL_ARG_ERRORS:
        return "tool_arg_error", False
    if kind in REFUSALS:
        return "refusal", False
    return "ok", True


@dataclass(frozen=True)
class Target:
    """Where the gateway sends a (task, tenant)'s requests: the backend, its chat-completions URL,
    and the endpoint that adds the backend's sampling params and the tenant's cache salt."""

    backend: str
    url: str
    endpoint: Endpoint


def route_target(*, task: str, tenant: str, api_bases: Mapping[str, str] | None = None) -> Target | None:
    """The current route's target for a tenant's request on ``task``; None when the task has no route.

    ``api_bases`` (backend name → address) is where this gateway reaches a backend when that is
    not the route export's ``api_base`` (engines on this machine's own ports, as in the demo)."""
    route = route_resolve(task=task, tenant=tenant)
    if route is None:
        return None
    exported = route_json(route)
    api_base = (api_bases or {}).get(route.backend.name, exported["api_base"])
    endpoint = Endpoint(
        base_url=api_base,
        model=exported["served_model_name"],
        sampling=dict(route.backend.sampling_params or {}),
        # What /api/v1/routes/cache-salt/ answers for this task and tenant.
        salts={tenant: cache_salt(route.backend, tenant)},
    )
    return Target(route.backend.name, api_base.rstrip("/") + "/chat/completions", endpoint)


@dataclass
class Answer:
    """One request's answer text and latencies (seconds from the send), or why there is none."""

    text: str = ""
    ttft_s: float | None = None
    e2e_s: float | None = None
    error: str | None = None


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300]
    inner = body.get("error") if isinstance(body, dict) else None
    return str(inner.get("message") if isinstance(inner, dict) else body)[:300]


def send_chat(client: httpx.Client, target: Target, request: LoadRequest) -> Answer:
    """Stream one chat completion to ``target``; every failure to get an answer becomes ``error``.

    TTFT is the first chunk that carries choices (as ``vllm bench serve`` and our load generator
    count it), E2E the end of the stream.
    """
    prepared = target.endpoint.prepare(request)
    body: dict[str, Any] = {
        "model": target.endpoint.model,
        "messages": prepared.messages,
        "max_tokens": prepared.max_tokens,
        "stream": True,
        **prepared.extra_body,
    }
    answer = Answer()
    parts: list[str] = []
    start = time.perf_counter()
    try:
        with client.stream("POST", target.url, json=body) as response:
            if response.status_code != 200:
                response.read()
                return Answer(error=f"HTTP {response.status_code}: {_error_text(response)}")
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators and SSE comments
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if "error" in event and not event.get("choices"):
                    return Answer(error=f"stream error: {json.dumps(event['error'])[:300]}")
                for choice in event.get("choices") or []:
                    if answer.ttft_s is None:
                        answer.ttft_s = time.perf_counter() - start
                    parts.append((choice.get("delta") or {}).get("content") or "")
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        return Answer(error=f"{type(exc).__name__}: {exc}"[:300])
    if answer.ttft_s is None:
        return Answer(error="no answer chunk received")
    answer.e2e_s = time.perf_counter() - start
    answer.text = "".join(parts)
    return answer


def arrivals(rate: float, *, seed: int, poisson: bool = True) -> Iterator[float]:
    """Arrival times (seconds from the start) at ``rate`` per second, the first at 0: Poisson
    (exponential gaps drawn from ``seed``, as ``evaluators.loadgen.arrival_schedule``) or evenly spaced."""
    if rate <= 0:
        raise ValueError("rate must be > 0")
    rng = random.Random(seed)
    now, index = 0.0, 0
    while True:
        yield now if poisson else index / rate
        index += 1
        if poisson:
            now += rng.expovariate(rate)


@dataclass
class DriveResult:
    """What a drive sent: requests per (task, backend, tenant, outcome), human returns included."""

    counts: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)
    sent: int = 0
    unrouted: int = 0
    duration_s: float = 0.0
    interrupted: bool = False

    def rows(self) -> list[tuple[str, str, str, dict[str, int]]]:
        """(task, backend, tenant, {outcome: count}) sorted by label."""
        grouped: dict[tuple[str, str, str], dict[str, int]] = {}
        for (task, backend, tenant, outcome), count in self.counts.items():
            grouped.setdefault((task, backend, tenant), {})[outcome] = count
        return [(*labels, outcomes) for labels, outcomes in sorted(grouped.items())]


class TrafficDriver:
    """Replays each task's suite prompts for each tenant through the route table, scored and counted.

    Requests go round-robin over the (task, tenant) pairs, so every pair gets ``rate / pairs``
    requests per second; each pair walks its task's prompts in a seeded order, starting over at
    the end. Latencies count from the send (the driver's own queueing is not the gateway's).
    """

    def __init__(
        self,
        *,
        tasks: Sequence[str],
        tenants: Sequence[str],
        exporter: OutcomeExporter,
        client: httpx.Client,
        seed: int = 0,
        concurrency: int = 16,
        api_bases: Mapping[str, str] | None = None,
    ) -> None:
        if not tasks or not tenants:
            raise ValueError("name at least one task and one tenant")
        self.suites: dict[str, Suite] = {task: get_suite(task) for task in tasks}
        self.pairs = [(task, tenant) for task in tasks for tenant in tenants]
        self.tenants = list(tenants)
        self.exporter = exporter
        self.client = client
        self.concurrency = concurrency
        self.prompts = {task: _shuffled(suite.load_samples(), f"{task}:{seed}") for task, suite in self.suites.items()}
        self.seed = seed
        self.api_bases = dict(api_bases or {})
        self._version: int | None = None
        self._targets: dict[tuple[str, str], Target | None] = {}
        self._lock = threading.Lock()

    def targets(self) -> dict[tuple[str, str], Target | None]:
        """Every pair's target under the current route table, read again when its version changed."""
        current = route_version_current()
        number = current.number if current is not None else 0
        if number != self._version or not self._targets:
            self._targets = {
                (task, tenant): route_target(task=task, tenant=tenant, api_bases=self.api_bases)
                for task, tenant in self.pairs
            }
            self._version = number
            # Series of a backend the table now names start at zero before their first request.
            backends = {target.backend for target in self._targets.values() if target is not None}
            self.exporter.prepare(tasks=self.suites, backends=sorted(backends), tenants=self.tenants)
        return self._targets

    def run(
        self,
        *,
        rate: float,
        duration_s: float | None = None,
        requests: int | None = None,
        poisson: bool = True,
        stop: threading.Event | None = None,
    ) -> DriveResult:
        """Send requests at ``rate`` per second until ``duration_s`` has passed or ``requests`` were
        sent (whichever comes first; at least one must be given) or ``stop`` is set; then wait for
        the answers still on their way."""
        if duration_s is None and requests is None:
            raise ValueError("give a duration or a number of requests")
        stop = stop or threading.Event()
        result = DriveResult()
        walked: Counter[tuple[str, str]] = Counter()
        self.targets()
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="traffic") as pool:
            try:
                for index, due in enumerate(arrivals(rate, seed=self.seed, poisson=poisson)):
                    if (requests is not None and index >= requests) or (duration_s is not None and due >= duration_s):
                        break
                    if stop.wait(max(0.0, start + due - time.monotonic())):
                        result.interrupted = True
                        break
                    task, tenant = self.pairs[index % len(self.pairs)]
                    target = self.targets()[(task, tenant)]
                    prompts = self.prompts[task]
                    sample = prompts[walked[(task, tenant)] % len(prompts)]
                    walked[(task, tenant)] += 1
                    if target is None:
                        logger.warning("no route for %s (tenant %s): request not sent", task, tenant)
                        result.unrouted += 1
                        continue
                    result.sent += 1
                    pool.submit(self._one, result, task, tenant, target, sample)
            except KeyboardInterrupt:
                result.interrupted = True
        result.duration_s = time.monotonic() - start
        return result

    def _one(self, result: DriveResult, task: str, tenant: str, target: Target, sample: dict[str, Any]) -> None:
        """Send one sample's prompt, score the answer and count its outcome."""
        suite = self.suites[task]
        request = LoadRequest(
            messages=[{"role": "user", "content": sample["prompt"]}], max_tokens=suite.max_gen_tokens, tenant=tenant
        )
        try:
            answer = send_chat(self.client, target, request)
            if answer.error is not None:
                logger.info("%s on %s for %s: %s", task, target.backend, tenant, answer.error)
                outcome, returned = "error", False
            else:
                outcome, returned = outcome_of(suite.score(sample, answer.text))
        except Exception:
            # A scorer that breaks on an odd answer must not silently drop the request.
            logger.exception("scoring %s's answer for %s failed", task, tenant)
            outcome, returned, answer = "error", False, Answer()
        backend = target.backend
        self.exporter.record(
            task=task, backend=backend, tenant=tenant, outcome=outcome, ttft_s=answer.ttft_s, e2e_s=answer.e2e_s
        )
        if returned:
            self.exporter.record(task=task, backend=backend, tenant=tenant, outcome=HUMAN_RETURN)
        with self._lock:
            result.counts[(task, backend, tenant, outcome)] += 1
            if returned:
                result.counts[(task, backend, tenant, HUMAN_RETURN)] += 1


def _shuffled(samples: list[dict[str, Any]], seed: str) -> list[dict[str, Any]]:
    order = list(samples)
    random.Random(seed).shuffle(order)
    return order
