"""``manage.py bench_canary_engines``: what each slice of the demo's canary measures, by engine placement.

The demo's canary runs two serving engines side by side: the baseline (the kit's base model) and
the candidate (the same with prefix caching), on the demo's traffic (``tools.demo.canary``: its
tasks, tenants and rate; the first two tenants on the candidate). This starts both engines once per
placement, one placement after the other in the same run, drives that traffic at them straight
(no route table, no database) and prints, per minute of answers and per task, each slice's request
count and E2E median and P95, the candidate's P95 over the baseline's, and how fast the answers
came against how fast the requests were sent.

* ``shared``: both engines with the default binding (``default_cpu_threads_bind``: on two cores,
  both engines' model threads on the second);
* ``own``: CPUs of their own (``side_by_side_cpu_binds``, the candidate first), as the demo runs them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from evaluators.engine import EngineHandle, launch_engine, side_by_side_cpu_binds
from evaluators.interleave import Endpoint
from evaluators.loadgen import percentile
from gates.canary.contract import HUMAN_RETURN, OutcomeExporter
from gates.canary.traffic import Target, TrafficDriver
from tools.demo.canary import TRAFFIC_RATE, TRAFFIC_TENANTS
from tools.demo.fleet import BASE_ARGS
from tools.kit import BASE, ensure_kit

TASKS = ("knowledge_qa", "compliance_qa")
BASELINE, CANDIDATE = "baseline", "candidate"
ENGINE_ARGS = {BASELINE: BASE_ARGS, CANDIDATE: {**BASE_ARGS, "enable_prefix_caching": True}}
PLACEMENTS = ("shared", "own")


@dataclass(frozen=True)
class Answered:
    """One answered request: when its answer ended (s from the drive's start), its slice and E2E."""

    at_s: float
    task: str
    side: str
    e2e_ms: float | None


class RecordingExporter(OutcomeExporter):
    """The contract's exporter that also keeps every answered request for this benchmark."""

    def __init__(self, sides: Mapping[str, str]) -> None:
        super().__init__()
        self.sides = sides
        self.started = time.monotonic()
        self.answered: list[Answered] = []
        self._lock = threading.Lock()

    def record(
        self,
        *,
        task: str,
        backend: str,
        tenant: str,
        outcome: str,
        ttft_s: float | None = None,
        e2e_s: float | None = None,
        count: int = 1,
    ) -> None:
        super().record(
            task=task, backend=backend, tenant=tenant, outcome=outcome, ttft_s=ttft_s, e2e_s=e2e_s, count=count
        )
        if outcome == HUMAN_RETURN:
            return
        at = time.monotonic() - self.started
        with self._lock:
            self.answered.append(Answered(at, task, self.sides[backend], e2e_s * 1000 if e2e_s is not None else None))


class FixedRoutes(TrafficDriver):
    """The traffic driver with a fixed table: the canary tenants on the candidate, the rest on the baseline."""

    def __init__(self, *, engines: Mapping[str, EngineHandle], canary_tenants: Sequence[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fixed: dict[tuple[str, str], Target | None] = {}
        for task, tenant in self.pairs:
            side = CANDIDATE if tenant in canary_tenants else BASELINE
            engine = engines[side]
            endpoint = Endpoint(base_url=f"{engine.base_url}/v1", model=engine.model, sampling={"temperature": 0.0})
            self.fixed[(task, tenant)] = Target(engine.model, f"{engine.base_url}/v1/chat/completions", endpoint)

    def targets(self) -> dict[tuple[str, str], Target | None]:
        return self.fixed


class Command(BaseCommand):
    help = "The demo canary's per-slice latencies with both engines' model threads on shared or own CPUs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--duration", type=float, default=150.0, help="seconds of sending per placement")
        parser.add_argument("--rate", type=float, default=TRAFFIC_RATE, help="requests per second in all")
        parser.add_argument("--placements", default=",".join(PLACEMENTS), help="comma-separated: shared, own")

    def handle(self, *args: Any, **options: Any) -> None:
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request says nothing here
        kit = ensure_kit()
        placements = [name.strip() for name in options["placements"].split(",") if name.strip()]
        for placement in placements:
            if placement not in PLACEMENTS:
                raise ValueError(f"--placements: {placement!r} is not one of {', '.join(PLACEMENTS)}")
        self.stdout.write(
            f"{', '.join(TASKS)} for {', '.join(TRAFFIC_TENANTS)} at {options['rate']:g} req/s for "
            f"{options['duration']:g} s per placement; {TRAFFIC_TENANTS[0]} and {TRAFFIC_TENANTS[1]} on the candidate"
        )
        for placement in placements:
            binds = side_by_side_cpu_binds(2) if placement == "own" else [None, None]
            engines = self._start(str(kit.path(BASE)), dict(zip((CANDIDATE, BASELINE), binds, strict=True)))
            try:
                self._drive(placement, binds, engines, rate=options["rate"], duration_s=options["duration"])
            finally:
                for engine in engines.values():
                    engine.stop()

    def _start(self, model: str, binds: Mapping[str, str | None]) -> dict[str, EngineHandle]:
        logs = settings.VAR_DIR / "logs"
        engines: dict[str, EngineHandle] = {}
        try:
            for side in (CANDIDATE, BASELINE):
                bind = binds[side]
                engines[side] = launch_engine(
                    model_path=model,
                    served_model_name=f"bench-{side}",
                    engine_args=ENGINE_ARGS[side],
                    log_path=logs / f"bench-canary-{side}.log",
                    model_roots=list(settings.OPTGATE_MODEL_ROOTS),
                    env_extra={"VLLM_CPU_OMP_THREADS_BIND": bind} if bind else None,
                )
        except BaseException:
            for engine in engines.values():
                engine.stop()
            raise
        return engines

    def _drive(
        self,
        placement: str,
        binds: Sequence[str | None],
        engines: Mapping[str, EngineHandle],
        *,
        rate: float,
        duration_s: float,
    ) -> None:
        exporter = RecordingExporter({engine.model: side for side, engine in engines.items()})
        with httpx.Client(timeout=httpx.Timeout(120.0, connect=10.0)) as client:
            driver = FixedRoutes(
                engines=engines,
                canary_tenants=TRAFFIC_TENANTS[:2],
                tasks=TASKS,
                tenants=TRAFFIC_TENANTS,
                exporter=exporter,
                client=client,
            )
            exporter.started = time.monotonic()
            result = driver.run(rate=rate, duration_s=duration_s)
        answered = exporter.answered
        took = max((row.at_s for row in answered), default=0.0)
        where = "default binding" if placement == "shared" else f"candidate on {binds[0]}, baseline on {binds[1]}"
        self.stdout.write(
            f"\n{placement} ({where}): {result.sent} requests sent in {duration_s:g} s, answered in {took:.0f} s "
            f"({len(answered) / took if took else 0:.1f} req/s)"
        )
        self.stdout.write(
            "  minute  task            baseline n  p50 ms  p95 ms   candidate n  p50 ms  p95 ms   P95 cand/base"
        )
        for minute in range(int(took // 60) + 1):
            for task in TASKS:
                cells = {
                    side: sorted(
                        row.e2e_ms
                        for row in answered
                        if row.task == task
                        and row.side == side
                        and row.e2e_ms is not None
                        and minute * 60 <= row.at_s < (minute + 1) * 60
                    )
                    for side in (BASELINE, CANDIDATE)
                }
                if not all(cells.values()):
                    continue
                p95 = {side: percentile(values, 95) or 0.0 for side, values in cells.items()}
                self.stdout.write(
                    f"  {minute:>6}  {task:<14}  "
                    + "   ".join(
                        f"{len(values):>10}  {percentile(values, 50) or 0.0:>6.0f}  {p95[side]:>6.0f}"
                        for side, values in cells.items()
                    )
                    + f"   {p95[CANDIDATE] / p95[BASELINE]:>13.2f}"
                )
