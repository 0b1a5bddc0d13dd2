"""Load-test the read API under gunicorn and print latency percentiles per endpoint.

Starts gunicorn on the configured database (``DATABASE_URL``), signs a benchmark user in with a
database session (no password, no API token), and runs concurrent asyncio httpx clients for a
fixed duration against the ticket list, ticket detail, decision and ledger list endpoints. Each
client sends its next request as soon as the previous one answers (a closed loop), optionally
after a think time. Prints, per endpoint, the request rate, p50, p99 and errors; then the CPU time
per request of gunicorn, of a local PostgreSQL and of the clients themselves, and the request rate
those allow on this machine's cores. Stops gunicorn. Seed the database first (``manage.py bench_seed``).

A developer tool, like ``bench_seed``: it starts its own web server process, which the product
code never does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import IO, Any

import httpx
import numpy as np
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from accounts.services import user_save
from core.roles import ENGINEER
from gates.models import GateDecision, ReleaseTicket

BENCH_USER = "bench-reader"


@dataclass
class EndpointStats:
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""


class Command(BaseCommand):
    help = "Run concurrent clients against the read API under gunicorn; print p50/p99, rate and errors."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
        parser.add_argument("--threads", type=int, default=1, help="threads per worker (>1: gthread workers)")
        parser.add_argument("--clients", type=int, default=50, help="concurrent clients")
        parser.add_argument("--duration", type=float, default=30.0, help="measured seconds")
        parser.add_argument("--warmup", type=float, default=5.0, help="seconds of load before measuring")
        parser.add_argument("--think-ms", type=float, default=0.0, help="pause of each client between requests")
        parser.add_argument("--target-p99-ms", type=float, default=100.0)
        parser.add_argument(
            "--endpoints",
            default="",
            help="comma-separated subset, e.g. 'ticket detail,decision' (the CPU figure is then theirs alone)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one log line per request would drown the figures
        ticket_ids = list(ReleaseTicket.objects.order_by("?").values_list("pk", flat=True)[:2000])
        decided_ids = list(
            GateDecision.objects.filter(dry_run=False).order_by("?").values_list("ticket_id", flat=True)[:2000]
        )
        if not ticket_ids or not decided_ids:
            raise CommandError("no tickets with decisions: run `manage.py bench_seed` first")
        cookie = session_cookie(bench_user())
        total_tickets = ReleaseTicket.objects.count()
        connection.close()  # the measurement should not hold a connection the server could use
        endpoints = {
            "ticket list": lambda: "/api/v1/tickets/",
            "ticket detail": lambda: f"/api/v1/tickets/{random.choice(ticket_ids)}/",
            "decision": lambda: f"/api/v1/tickets/{random.choice(decided_ids)}/decision/",
            "ledger list": lambda: "/api/v1/ledger/",
        }
        if options["endpoints"]:
            chosen = [name.strip() for name in options["endpoints"].split(",") if name.strip()]
            unknown = sorted(set(chosen) - set(endpoints))
            if unknown:
                raise CommandError(f"unknown endpoints {unknown}; known: {', '.join(endpoints)}")
            endpoints = {name: endpoints[name] for name in chosen}
        # A connection opened per request (DB_CONN_MAX_AGE=0, the embedded default) costs the web
        # process about a millisecond more per SQLite read than a kept one (docs/benchmarks.md).
        self.stdout.write(
            f"{connection.vendor} database with {total_tickets} tickets, connections kept "
            f"{connection.settings_dict['CONN_MAX_AGE']} s; gunicorn {options['workers']} worker(s) × "
            f"{options['threads']} thread(s); {options['clients']} clients for {options['duration']:.0f} s "
            f"(after {options['warmup']:.0f} s warm-up), think time {options['think_ms']:.0f} ms"
        )
        with gunicorn(options["workers"], options["threads"]) as (base_url, pid):
            stats, measured_s, cpu_s = asyncio.run(
                load(
                    base_url,
                    cookie,
                    endpoints,
                    options["clients"],
                    options["warmup"],
                    options["duration"],
                    options["think_ms"] / 1000,
                    cpu_probe=lambda: cpu_seconds(pid),
                )
            )
        self._report(stats, measured_s, options["target_p99_ms"])
        served = sum(len(s.latencies_s) + s.errors for s in stats.values())
        # CPU time is what a request costs regardless of what else runs on a shared machine; the
        # load generator and a local database share the machine with the server.
        if not served:
            return
        for name, seconds in cpu_s.items():
            self.stdout.write(f"{name} CPU per request: {seconds / served * 1000:.1f} ms ({seconds:.1f} CPU-s)")
        # Little's law for a closed loop: clients = rate × (latency + think time). At the CPU-bound
        # ceiling, that is the least mean latency this machine can give this many clients.
        cores, per_request_s = os.cpu_count() or 1, sum(cpu_s.values()) / served
        ceiling = cores / per_request_s
        floor_ms = max(0.0, options["clients"] / ceiling - options["think_ms"] / 1000) * 1000
        self.stdout.write(
            f"CPU-bound ceiling on {cores} cores: {ceiling:.0f} req/s; {options['clients']} clients "
            f"then wait at least {floor_ms:.0f} ms per request on average"
        )

    def _report(self, stats: dict[str, EndpointStats], measured_s: float, target_ms: float) -> None:
        def row(name: str, latencies_s: list[float], errors: int) -> float:
            p50, p99 = percentiles_ms(latencies_s)
            rate = len(latencies_s) / measured_s
            self.stdout.write(f"{name:<15}{len(latencies_s):>10}{rate:>9.1f}{p50:>9.1f}{p99:>9.1f}{errors:>8}")
            return p99

        self.stdout.write(f"{'endpoint':<15}{'requests':>10}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
        worst_p99 = max(row(name, s.latencies_s, s.errors) for name, s in stats.items())
        every = [latency for s in stats.values() for latency in s.latencies_s]
        row("all", every, sum(s.errors for s in stats.values()))
        for name, s in stats.items():
            if s.first_error:
                self.stdout.write(f"first error on {name}: {s.first_error}")
        verdict = "met" if worst_p99 <= target_ms else "MISSED"
        self.stdout.write(f"target p99 ≤ {target_ms:.0f} ms on every endpoint: {verdict} (worst {worst_p99:.1f} ms)")


def percentiles_ms(latencies_s: list[float]) -> tuple[float, float]:
    if not latencies_s:
        return float("nan"), float("nan")
    p50, p99 = np.percentile(np.asarray(latencies_s) * 1000, [50, 99])
    return float(p50), float(p99)


def bench_user() -> User:
    user = User.objects.filter(username=BENCH_USER).first()
    if user is None:
        user, _ = user_save(actor=None, username=BENCH_USER, role=ENGINEER, email=f"{BENCH_USER}@bench.example")
    return user


def session_cookie(user: User) -> str:
    """A ``Cookie`` header value for a fresh database session of ``user``, as Django's login makes."""
    store = import_module(settings.SESSION_ENGINE).SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.set_expiry(3600)
    store.save()
    return f"{settings.SESSION_COOKIE_NAME}={store.session_key}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def gunicorn(workers: int, threads: int) -> Iterator[tuple[str, int]]:
    """Run gunicorn on a free local port for the duration of the block; yields its base URL and pid."""
    port = _free_port()
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "optgate.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        "--chdir",
        str(settings.BASE_DIR),
        "--log-level",
        "warning",
        "--timeout",
        "60",
    ]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "optgate.settings")}
    with tempfile.TemporaryFile(mode="w+") as log:
        server = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            base_url = f"http://127.0.0.1:{port}"
            _wait_until_up(server, base_url, log)
            yield base_url, server.pid
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def _wait_until_up(server: subprocess.Popen[Any], base_url: str, log: IO[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            log.seek(0)
            raise CommandError(f"gunicorn exited with {server.returncode}:\n{log.read()[-4000:]}")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise CommandError("gunicorn did not answer /healthz within 60 s")


def cpu_seconds(server_pid: int) -> dict[str, float]:
    """User + system CPU seconds so far of gunicorn (``server_pid`` and its workers), of PostgreSQL
    server processes on this machine (none when the database is elsewhere) and of this process.
    Reads Linux ``/proc``; elsewhere only this process is counted."""
    ticks = {"gunicorn": 0, "PostgreSQL (local)": 0}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we looked
            continue
        command, after = text[text.find("(") + 1 : text.rfind(")")], text.rsplit(")", 1)[1].split()
        # After the command: state, ppid, …; utime and stime are the 12th and 13th of those.
        used = int(after[11]) + int(after[12])
        if int(stat.parent.name) == server_pid or int(after[1]) == server_pid:
            ticks["gunicorn"] += used
        elif command in ("postgres", "postmaster"):
            ticks["PostgreSQL (local)"] += used
    seconds = {name: count / os.sysconf("SC_CLK_TCK") for name, count in ticks.items() if count}
    return {**seconds, "load generator": time.process_time()}


async def load(
    base_url: str,
    cookie: str,
    endpoints: dict[str, Any],
    clients: int,
    warmup_s: float,
    duration_s: float,
    think_s: float,
    cpu_probe: Callable[[], dict[str, float]],
) -> tuple[dict[str, EndpointStats], float, dict[str, float]]:
    """Closed-loop clients cycling through the endpoints; only requests started after the warm-up count.

    Also returns the CPU seconds spent during the measured window by each process group that
    ``cpu_probe`` counts (read before and after).
    """
    stats = {name: EndpointStats() for name in endpoints}
    names = list(endpoints)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base_url, headers={"Cookie": cookie}, limits=limits, timeout=30) as http:
        start = time.perf_counter()
        measure_from, stop_at = start + warmup_s, start + warmup_s + duration_s

        async def client(index: int) -> None:
            turn = index
            while (sent := time.perf_counter()) < stop_at:
                name = names[turn % len(names)]
                turn += 1
                error = ""
                try:
                    response = await http.get(endpoints[name]())
                    if response.status_code != 200:
                        error = f"HTTP {response.status_code}: {response.text[:200]}"
                except httpx.HTTPError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                if sent >= measure_from:
                    s = stats[name]
                    if error:
                        s.errors += 1
                        s.first_error = s.first_error or error
                    else:
                        s.latencies_s.append(time.perf_counter() - sent)
                if think_s:
                    await asyncio.sleep(think_s)

        async def cpu_window() -> dict[str, float]:
            await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
            before = cpu_probe()
            await asyncio.sleep(max(0.0, stop_at - time.perf_counter()))
            after = cpu_probe()
            return {name: after[name] - before[name] for name in after if name in before}

        window = asyncio.create_task(cpu_window())
        await asyncio.gather(*(client(i) for i in range(clients)))
        cpu_s = await window
    return stats, duration_s, cpu_s
