"""The demo's canary: the approved ticket goes live for its canary tenants on replayed traffic.

Reviewers sign the decision off; the ticket's tasks get their fleet routes (the baseline: a fresh
installation has none); two serving engines start, the baseline and the candidate; the ticket
starts its canary, so the canary tenants' requests for its tasks go to the candidate; and the
traffic driver replays each task's prompts for four tenants, two of them the canary's, through
the route table. A real Prometheus (``tools.prometheus``) scrapes the driver's business signals;
beat queues an analysis round as each canary interval passes and the default worker judges it
(``gates.services.canary``). The demo prints every round until the candidate is promoted, rolled
back or paused for people. Without the ``prometheus`` binary the step is skipped, saying how to
install it: rounds need a Prometheus, and nothing here stands in for one.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from django.contrib.auth.models import User
from prometheus_client import start_http_server

from backends.models import Backend
from core.errors import DomainError
from evaluators.engine import EngineHandle, side_by_side_cpu_binds
from evaluators.processes import find_free_port
from evaluators.services import backend_engine_launch
from gates.canary.contract import OutcomeExporter
from gates.canary.traffic import DriveResult, TrafficDriver
from gates.models import CanaryRound, ReleaseTicket, RoundAction, TicketStatus
from gates.selectors.routes import route_resolve
from gates.services import routing, signoff
from gates.services.evaluation import ticket_tasks
from tools.demo.fleet import Say
from tools.prometheus import PrometheusServer, prometheus_binary, start_prometheus

# Four tenants, two of them the canary's (the ticket's canary scope): each engine serves half of
# the traffic, on CPUs of its own (docs/canary.md, "In the demo").
TRAFFIC_TENANTS = ("tenant-a", "tenant-b", "tenant-c", "tenant-d")
# Requests per second over every task and tenant: about 90 per task, slice and one-minute round
# (the demo policy's). With a core each, the two CPU engines answer all of it as it comes: the
# candidate in about 0.2 s (median), the baseline, prefilling every prompt in full, in about 3-4 s
# (manage.py bench_canary_engines).
TRAFFIC_RATE = 6.0
# How long the demo follows the canary past its observation window before it stops waiting.
GRACE_S = 300.0
ENDED = (TicketStatus.DEFAULT, TicketStatus.ROLLED_BACK)


@dataclass
class CanaryWatch:
    """The demo's Prometheus and the port the traffic driver will serve its signals on."""

    prometheus: PrometheusServer
    exporter_port: int

    @property
    def url(self) -> str:
        return self.prometheus.url

    def stop(self) -> None:
        self.prometheus.stop()


def canary_watch_start(data_dir: Path) -> CanaryWatch | None:
    """Start the demo's Prometheus (scraping the driver's port, which serves once the canary runs);
    None when the binary is not installed."""
    if prometheus_binary() is None:
        return None
    exporter_port = find_free_port()
    server = start_prometheus(targets=[f"127.0.0.1:{exporter_port}"], data_dir=data_dir)
    return CanaryWatch(server, exporter_port)


def demo_canary(
    ticket: ReleaseTicket, users: dict[str, User], watch: CanaryWatch, say: Say, *, logs: Path
) -> ReleaseTicket:
    """Take an approved (or evaluated-to-approve) ticket through its canary; returns it as it ended."""
    ticket = _signed_off(ticket, [users["rita"], users["bella"]], say)
    if ticket.status not in (TicketStatus.APPROVED, TicketStatus.CANARY):
        say.line(f"    #{ticket.pk} is {ticket.status}: no canary")
        return ticket
    tasks = ticket_tasks(ticket)
    for task in tasks:
        if route_resolve(task=task) is None:
            reason = "the demo fleet: every task on the baseline"
            routing.routes_set(task=task, backend=ticket.baseline, actor=users["admin"], reason=reason)
    say.step(f"starting the fleet's serving engines: {ticket.baseline.name} and {ticket.candidate.name}")
    engines = _serving_engines(ticket.candidate, ticket.baseline, logs)
    try:
        if ticket.status == TicketStatus.APPROVED:
            ticket = routing.routes_start_canary(ticket=ticket, actor=ticket.owner)
        tenants = ", ".join((ticket.canary_scope or {}).get("tenants") or [])
        window = ticket.observation_window_hours * 60
        say.line(
            f"    #{ticket.pk} in canary: {', '.join(tasks)} of {tenants} on {ticket.candidate.name}, the other "
            f"tenants on {ticket.baseline.name}; window {window:g} min, Prometheus at {watch.url}"
        )
        api_bases = {backend: f"{engine.base_url}/v1" for backend, engine in engines.items()}
        return _follow(ticket, tasks, watch, api_bases, say, promoter=users["rita"])
    finally:
        for engine in engines.values():
            engine.stop()


def _signed_off(ticket: ReleaseTicket, reviewers: list[User], say: Say) -> ReleaseTicket:
    """Reviewers sign the policy's approval off until the ticket moves (a platform reviewer, then a
    business owner where a task's risk tier asks for one)."""
    for reviewer in reviewers:
        ticket.refresh_from_db()
        if ticket.status != TicketStatus.EVALUATED:
            break
        try:
            result = signoff.signoff_record(
                ticket=ticket, actor=reviewer, verdict="approve", reason_code="evidence_sufficient"
            )
        except DomainError as exc:
            say.line(f"    {reviewer.username} cannot sign off #{ticket.pk}: {exc}")
            break
        say.line(f"    {reviewer.username} signs off #{ticket.pk} ({result.sign_off.capacity})")
    ticket.refresh_from_db()
    return ticket


def _serving_engines(candidate: Backend, baseline: Backend, logs: Path) -> dict[str, EngineHandle]:
    """The candidate's and the baseline's engines, started together, each on a port and CPUs of its
    own (``side_by_side_cpu_binds``; on two cores the candidate takes the one everything else shares)."""
    backends = [candidate, baseline]
    binds = dict(zip((backend.name for backend in backends), side_by_side_cpu_binds(len(backends)), strict=True))

    def start(backend: Backend) -> EngineHandle:
        return backend_engine_launch(
            backend, log_path=logs / f"canary-{backend.name}.log", cpu_threads_bind=binds[backend.name]
        )

    with ThreadPoolExecutor(max_workers=len(backends)) as pool:
        futures = {backend.name: pool.submit(start, backend) for backend in backends}
        try:
            wait(futures.values())
        except BaseException:
            # A stop signal: let both starts end, then stop what they started.
            pool.shutdown(wait=True)
            _stop_started(futures)
            raise
    failures = [error for future in futures.values() if (error := future.exception()) is not None]
    if failures:
        # One start failed: the other's engine must not stay up.
        _stop_started(futures)
        raise failures[0]
    return {name: future.result() for name, future in futures.items()}


def _stop_started(futures: dict[str, Future[EngineHandle]]) -> None:
    for future in futures.values():
        if future.exception() is None:
            future.result().stop()


def _follow(
    ticket: ReleaseTicket,
    tasks: list[str],
    watch: CanaryWatch,
    api_bases: dict[str, str],
    say: Say,
    *,
    promoter: User,
) -> ReleaseTicket:
    """Drive traffic and print each analysis round until the canary ends, pauses or runs out of time."""
    exporter = OutcomeExporter()
    server, thread = start_http_server(watch.exporter_port, addr="127.0.0.1", registry=exporter.registry)
    stop = threading.Event()
    outcome: dict[str, Any] = {}
    assert ticket.canary_started_at is not None
    deadline = time.monotonic() + ticket.observation_window_hours * 3600 + GRACE_S
    with httpx.Client(timeout=httpx.Timeout(120.0, connect=10.0)) as client:
        driver = TrafficDriver(
            tasks=tasks, tenants=TRAFFIC_TENANTS, exporter=exporter, client=client, api_bases=api_bases
        )
        driver.targets()  # every series at zero before Prometheus' first scrape of it
        watch.prometheus.wait_for_scrapes(2, target=f"127.0.0.1:{watch.exporter_port}")

        def drive() -> None:
            outcome["result"] = driver.run(rate=TRAFFIC_RATE, duration_s=deadline - time.monotonic(), stop=stop)

        sender = threading.Thread(target=drive, name="demo-traffic", daemon=True)
        sender.start()
        say.line(f"    replaying {', '.join(tasks)} prompts for {', '.join(TRAFFIC_TENANTS)} at {TRAFFIC_RATE:g} req/s")
        try:
            ticket = _rounds(ticket, deadline, say, promoter=promoter)
        finally:
            stop.set()
            sender.join(timeout=180)
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
    result: DriveResult | None = outcome.get("result")
    if result is not None:
        say.line(f"    traffic: {result.sent} requests in {result.duration_s:.0f} s")
    return ticket


def _rounds(ticket: ReleaseTicket, deadline: float, say: Say, *, promoter: User) -> ReleaseTicket:
    """Print the canary's rounds as the worker stores them, until it ends, pauses or time runs out.

    A round that finds the evidence supports promotion proposes it (automatic promotion is for the
    risk tiers in ``OPTGATE_AUTO_PROMOTE_RISK_TIERS``); then the platform reviewer promotes."""
    shown = 0
    while time.monotonic() < deadline:
        for round_ in CanaryRound.objects.filter(ticket=ticket, number__gt=shown).order_by("number"):
            say.line(f"    round {round_.number}: {round_.verdict} → {round_.get_action_display()}: {round_.reason}")
            shown = round_.number
            if round_.action == RoundAction.PAUSE:
                ticket.refresh_from_db()
                return ticket
            if round_.action == RoundAction.PROPOSE_PROMOTE:
                ticket = routing.routes_promote(
                    ticket=ticket, actor=promoter, reason=f"canary round {round_.number}: {round_.reason}"
                )
                say.line(f"    {promoter.username} promotes #{ticket.pk}: {ticket.candidate.name} is the default now")
                return ticket
        ticket.refresh_from_db()
        if ticket.status in ENDED:
            return ticket
        time.sleep(2)
    say.line(f"    the canary of #{ticket.pk} did not end within its window and {GRACE_S:g} s")
    return ticket
