"""Replay each task's prompts per tenant through the current route table and export the business signals."""

from __future__ import annotations

import signal
import threading
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser
from prometheus_client import start_http_server

from evaluators.pipeline import LOAD_TENANTS
from evaluators.suites import SUITES
from gates.canary.contract import REQUEST_OUTCOMES, OutcomeExporter
from gates.canary.traffic import DriveResult, TrafficDriver
from gates.selectors.routes import route_table


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _api_bases(items: list[str]) -> dict[str, str]:
    """``--api-base BACKEND=URL`` items as a mapping; a malformed one is refused naming it."""
    bases = {}
    for item in items:
        name, _, url = item.partition("=")
        if not name.strip() or not url.strip().startswith(("http://", "https://")):
            raise CommandError(f"--api-base {item!r}: give BACKEND=http://host:port/v1")
        bases[name.strip()] = url.strip()
    return bases


class Command(BaseCommand):
    help = (
        "Send each task's suite prompts for each tenant through the current route table, as the gateway "
        "would (sampling params, cache_salt), at --rate requests/s; score the answers with the suites' "
        "scorers and export optgate_outcome_total and optgate_request_duration_seconds on --metrics-port "
        "for Prometheus (docs/canary.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tasks", default="", help="comma-separated task types (default: every routed task)")
        parser.add_argument("--tenants", default=",".join(LOAD_TENANTS), help="comma-separated tenants")
        parser.add_argument("--rate", type=float, default=2.0, help="requests per second over all pairs")
        parser.add_argument("--duration", type=float, default=None, help="seconds to send for")
        parser.add_argument("--requests", type=int, default=None, help="requests to send (over all pairs)")
        parser.add_argument("--arrivals", choices=("poisson", "even"), default="poisson")
        parser.add_argument("--seed", type=int, default=0, help="prompt order and Poisson arrivals")
        parser.add_argument("--metrics-port", type=int, default=9464, help="serve /metrics here (0: do not serve)")
        parser.add_argument("--metrics-addr", default="127.0.0.1", help="address the metrics server binds")
        parser.add_argument(
            "--warmup", type=float, default=15.0, help="seconds between serving the zeros and the first request"
        )
        parser.add_argument(
            "--linger", type=float, default=15.0, help="seconds to keep serving /metrics after the last answer"
        )
        parser.add_argument("--concurrency", type=int, default=16, help="requests in flight at most")
        parser.add_argument("--timeout", type=float, default=120.0, help="seconds one request may take")
        parser.add_argument(
            "--api-base",
            action="append",
            default=[],
            metavar="BACKEND=URL",
            help="where to reach BACKEND instead of its route's api_base (repeat per backend)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["duration"] is None and options["requests"] is None:
            raise CommandError("give --duration or --requests")
        if options["rate"] <= 0:
            raise CommandError("--rate must be > 0")
        tenants = _names(options["tenants"])
        if not tenants:
            raise CommandError("--tenants names no tenant")
        tasks = _names(options["tasks"]) or sorted({route.task.slug for route in route_table()} & set(SUITES))
        if not tasks:
            raise CommandError("no task has a route: set the route table first")
        unknown = [task for task in tasks if task not in SUITES]
        if unknown:
            raise CommandError(f"no suite for task(s) {', '.join(unknown)}; known: {', '.join(sorted(SUITES))}")
        api_bases = _api_bases(options["api_base"])
        exporter = OutcomeExporter()
        stop = threading.Event()
        with httpx.Client(timeout=httpx.Timeout(options["timeout"], connect=10.0)) as client:
            driver = TrafficDriver(
                tasks=tasks,
                tenants=tenants,
                exporter=exporter,
                client=client,
                seed=options["seed"],
                concurrency=options["concurrency"],
                api_bases=api_bases,
            )
            # Every pair's route now, and the zeros of every series before Prometheus' first scrape.
            unrouted = sorted({task for (task, _), target in driver.targets().items() if target is None})
            if unrouted:
                raise CommandError(f"no route for task(s) {', '.join(unrouted)}")
            served = None
            if options["metrics_port"]:
                served = start_http_server(
                    options["metrics_port"], addr=options["metrics_addr"], registry=exporter.registry
                )
                self.stdout.write(f"serving /metrics on {options['metrics_addr']}:{options['metrics_port']}")
            previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
            try:
                if not stop.wait(options["warmup"]):
                    result = driver.run(
                        rate=options["rate"],
                        duration_s=options["duration"],
                        requests=options["requests"],
                        poisson=options["arrivals"] == "poisson",
                        stop=stop,
                    )
                    self._report(result)
                    stop.wait(options["linger"])
            finally:
                signal.signal(signal.SIGTERM, previous)
                if served is not None:
                    server, thread = served
                    server.shutdown()
                    server.server_close()
                    thread.join(timeout=5)

    def _report(self, result: DriveResult) -> None:
        stopped = " (stopped early)" if result.interrupted else ""
        self.stdout.write(f"sent {result.sent} requests in {result.duration_s:.1f} s{stopped}")
        if result.unrouted:
            self.stdout.write(f"{result.unrouted} requests not sent: their task had no route")
        columns = (*REQUEST_OUTCOMES, "human_return")
        self.stdout.write(f"{'task':<18} {'backend':<24} {'tenant':<12} " + " ".join(f"{c:>14}" for c in columns))
        for task, backend, tenant, outcomes in result.rows():
            counts = " ".join(f"{outcomes.get(c, 0):>14}" for c in columns)
            self.stdout.write(f"{task:<18} {backend:<24} {tenant:<12} {counts}")
