"""The main job on embedded defaults: everything a new user should see, measured for real.

Migrates the SQLite database, creates the demo users, builds (or reuses) the tiny model kit,
registers its serving configurations as backends, starts a GPU-queue worker, a default-queue
worker, beat and the web server, files the three demo release tickets through the same services
the UI and API use, and follows their evaluation on vLLM-on-CPU until each has a decision.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import time
from pathlib import Path
from types import FrameType
from typing import IO, Any, cast

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from backends.models import Backend
from evaluators.models import EvaluationRun, RunStatus
from evaluators.processes import port_is_free
from gates.models import GateDecision, ReleaseTicket, TicketStatus
from gates.selectors.summary import decision_summary, next_action, numbers_text
from ledger.selectors import ledger_verify
from tools.demo.canary import CanaryWatch, canary_watch_start, demo_canary
from tools.demo.fleet import DEMO_PASSWORD, DEMO_USERS, demo_backends_register, demo_tickets_file, demo_users_create
from tools.demo.processes import DemoProcesses, demo_commands
from tools.demo.progress import ProgressLine, Run, evaluation_text

SETTLED = {
    TicketStatus.APPROVED,
    TicketStatus.RESTRICTED,
    TicketStatus.REJECTED,
    TicketStatus.NEEDS_EVIDENCE,
    TicketStatus.EVALUATED,
}
# The demo's gate policy: the default one with a canary a demo can watch (gates/policies/demo.yaml).
DEMO_POLICY = "demo"
# However the demo is stopped, it stops what it started (tools.demo.processes).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class DemoStopped(Exception):
    """A stop signal reached the demo."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Command(BaseCommand):
    help = "Set up embedded defaults, start worker and web server, and evaluate the three demo tickets for real."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-serve", action="store_true", help="exit once every demo ticket has a decision")
        parser.add_argument("--timeout", type=int, default=3600, help="seconds to wait for the decisions")

    def handle(self, *args: Any, **options: Any) -> None:
        self.processes = DemoProcesses()
        self.stopping = False  # set once stopping began: a further signal only hurries it
        self.hurry = False
        logs = Path(settings.VAR_DIR) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        lock = self.claim(options["port"])
        previous = {sig: signal.signal(sig, self.on_signal) for sig in STOP_SIGNALS}
        stopped_by: DemoStopped | None = None
        watch: CanaryWatch | None = None
        try:
            self.step("migrating the database")
            call_command("migrate", interactive=False, verbosity=0)
            call_command("install_schedules", verbosity=0)
            self.step("creating the demo users")
            users = demo_users_create()
            backends = demo_backends_register(self)
            watch = self.configure(logs)
            self.step("starting the GPU-queue worker, the default worker, beat and the web server")
            self.processes.start(logs, options["port"])
            names = ", ".join(f"{name}.log" for name in demo_commands(options["port"]))
            self.line(f"    their logs: {logs}/ ({names}); each engine's under {settings.OPTGATE_ARTIFACTS_DIR}/runs/")
            fleet_run = self.measure_fleet_baseline(backends["kit-bf16"])
            self.step("filing and submitting the three demo release tickets")
            tickets = demo_tickets_file(users["erin"], backends, self)
            self.print_welcome(options["port"], logs)
            self.follow(tickets, options["timeout"], fleet_run_id=fleet_run.pk)
            self.print_decisions(tickets)
            self.canary(tickets[0], users, watch, logs)
            if not options["no_serve"]:
                self.stdout.write(f"\nOpen http://127.0.0.1:{options['port']}/ — Ctrl-C stops everything.")
                while not self.processes.any_stopped():
                    time.sleep(2)
                raise CommandError("a demo process stopped; see the logs in " + str(logs))
        except DemoStopped as stop:
            stopped_by = stop
            with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
                self.stdout.write(f"\n{stop}: stopping everything the demo started …")
        finally:
            self.stopping = True
            self.processes.stop(hurry=lambda: self.hurry)
            if watch is not None:
                watch.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            lock.close()
        if stopped_by is not None:
            raise SystemExit(128 + stopped_by.signum)

    def configure(self, logs: Path) -> CanaryWatch | None:
        """The demo's own settings, for this process and the ones it starts: its gate policy
        (``demo``: the default policy with a canary short enough to watch) unless one is set, and a
        Prometheus of its own for the canary's analysis rounds when the binary is installed."""
        # The terminal shows phases and rounds; each request the canary's traffic sends is not one.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        overrides = {"OPTGATE_GATE_POLICY": os.environ.get("OPTGATE_GATE_POLICY") or DEMO_POLICY}
        watch = None
        self.step(f"gate policy {overrides['OPTGATE_GATE_POLICY']}; Prometheus for the canary's analysis rounds")
        if settings.OPTGATE_PROMETHEUS_URL:
            self.line(f"    the canary's rounds ask the Prometheus at {settings.OPTGATE_PROMETHEUS_URL}")
        else:
            watch = canary_watch_start(Path(settings.VAR_DIR) / "prometheus")
            if watch is None:
                self.line(
                    "    no prometheus binary here: the approved ticket's canary step is skipped "
                    "(scripts/install-prometheus.sh installs it, as root)"
                )
            else:
                overrides["OPTGATE_PROMETHEUS_URL"] = watch.url
                self.line(f"    Prometheus for the canary rounds at {watch.url} (log: {watch.prometheus.log_path})")
        for name, value in overrides.items():
            os.environ[name] = value  # the workers, beat and the web server inherit it
            setattr(settings, name, value)  # and this process files and follows the tickets under it
        return watch

    def canary(self, ticket: ReleaseTicket, users: dict[str, Any], watch: CanaryWatch | None, logs: Path) -> None:
        """The approved ticket's canary, on replayed traffic with live analysis rounds."""
        ticket.refresh_from_db()
        if ticket.status in (TicketStatus.DEFAULT, TicketStatus.ROLLED_BACK):
            self.line(f"#{ticket.pk} {ticket.title}: {ticket.status} since an earlier demo's canary")
            return
        decision = GateDecision.objects.filter(ticket=ticket).order_by("-created_at").first()
        if decision is None or decision.outcome != "approve":
            outcome = decision.outcome if decision else "no decision"
            self.line(f"    no canary for #{ticket.pk} {ticket.title}: it ended {outcome}; canaries follow approvals")
            return
        if watch is None and not settings.OPTGATE_PROMETHEUS_URL:
            return
        self.step(f"the canary of #{ticket.pk} {ticket.title}")
        if watch is None:
            self.line("    OPTGATE_PROMETHEUS_URL is set: this demo leaves the canary to that deployment")
            return
        ended = demo_canary(ticket, users, watch, self, logs=logs)
        self.stdout.write(self.style.SUCCESS(f"#{ended.pk} {ended.title}: {ended.status} after its canary"))

    def claim(self, port: int) -> IO[str]:
        """Refuse to start a second demo on this folder, or one whose port is taken, before anything starts.

        Returns the lock file, held (``flock``) for as long as the demo runs; the kernel releases it
        when the process ends, however it ends.
        """
        var = Path(settings.VAR_DIR)
        handle = open(var / "demo.lock", "a+")  # noqa: SIM115 - held until the demo ends
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            raise CommandError(
                f"another demo is already running from {var} (pid {holder}); stop it first "
                f"(Ctrl-C in its terminal, or kill {holder})"
            ) from None
        if not port_is_free(port):
            handle.close()
            raise CommandError(
                f"port {port} is already in use (another demo or web server?); stop it or pick a free one "
                "with: python manage.py demo --port N"
            )
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        return handle

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            self.hurry = True  # a second signal: no more grace, SIGKILL what is left
            return
        self.stopping = True
        raise DemoStopped(signum)

    def step(self, text: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(f"==> {text}"))

    def line(self, text: str) -> None:
        self.stdout.write(text)

    def measure_fleet_baseline(self, baseline: Backend) -> EvaluationRun:
        """Queue one baseline run over every task type; each ticket's baseline then reuses its
        answers (greedy, so deterministic). Interleaved pairs measure timing themselves, with both
        engines up, so this run asks for answers only; sequential runs reuse the whole run."""
        from evaluators.services import run_request
        from evaluators.suites import SUITES
        from gates.services.evaluation import run_enqueue

        profile = dict(settings.OPTGATE_LOAD_PROFILE)
        if settings.OPTGATE_INTERLEAVED:
            profile["quality_only"] = True
        run, _ = run_request(backend=baseline, tasks=list(SUITES), load_profile=profile)
        if run.status == RunStatus.QUEUED:
            # Also after an interrupted demo: a second message for a queued run is harmless (only one
            # worker can claim it), a lost one would leave it waiting for the sweeper's deadline.
            run_enqueue(run.pk)
        self.stdout.write(f"    baseline {baseline.name} on all six task types: run #{run.pk} ({run.status})")
        return run

    def print_welcome(self, port: int, logs: Path) -> None:
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS(f"OptGate is running at http://127.0.0.1:{port}/"))
        self.stdout.write(f"    API docs: http://127.0.0.1:{port}/api/docs/   logs: {logs}")
        for username, _, _, what in DEMO_USERS:
            self.stdout.write(f"    sign in as {username:<6} / {DEMO_PASSWORD}   ({what})")
        self.stdout.write("")

    def follow(self, tickets: list[ReleaseTicket], timeout: int, fleet_run_id: int | None = None) -> None:
        """One progress line for the evaluations (rewritten in place on a terminal) until every ticket is decided."""
        self.step("evaluating on vLLM-on-CPU (live progress also on the dashboard)")
        # The raw stream: Django's wrapper would end every write with a newline.
        progress = ProgressLine(cast(IO[str], self.stdout._out))
        progress.start("evaluations")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ticket in tickets:
                ticket.refresh_from_db()
            sides = {t.pk: [r for r in (t.baseline_run_id, t.candidate_run_id) if r is not None] for t in tickets}
            wanted = [r for ids in sides.values() for r in ids] + ([fleet_run_id] if fleet_run_id else [])
            runs: dict[int, Run] = {
                pk: (status, progress_pct, phase)
                for pk, status, progress_pct, phase in EvaluationRun.objects.filter(pk__in=wanted).values_list(
                    "pk", "status", "progress", "phase"
                )
            }
            items = [(f"#{t.pk}", str(t.status), [runs[r] for r in sides[t.pk] if r in runs]) for t in tickets]
            if fleet_run_id in runs:
                fleet = runs[fleet_run_id]
                items.insert(0, (f"baseline run #{fleet_run_id}", fleet[0], [fleet]))
            if all(t.status in SETTLED for t in tickets):
                progress.done(evaluation_text(items))
                return
            progress.update(evaluation_text(items))
            if self.processes.any_stopped():
                raise CommandError("a worker or the web server stopped; see the logs under var/logs")
            time.sleep(5)
        raise CommandError(f"the demo tickets were not decided within {timeout} s")

    def print_decisions(self, tickets: list[ReleaseTicket]) -> None:
        self.step("decisions")
        for ticket in tickets:
            ticket.refresh_from_db()
            decision = GateDecision.objects.filter(ticket=ticket).order_by("-created_at").first()
            outcome = decision.outcome if decision else ticket.status
            self.stdout.write(self.style.SUCCESS(f"#{ticket.pk} {ticket.title}: {outcome}"))
            if decision is None:
                continue
            # The same summary as the ticket page: per task the numbers that decided it, each
            # blocking finding once, then what to do next.
            summary = decision_summary(decision)
            for task in summary["tasks"]:
                numbers = numbers_text(task["numbers"], task["not_measured"])
                self.stdout.write(f"    {task['task']} ({task['role']}): {task['status']} — {numbers}")
            for finding in summary["findings"]:
                self.stdout.write(f"    - {finding['task']}: {finding['text']}")
            action = next_action(status=ticket.status, decision=decision)
            self.stdout.write(f"    next: {action['text']}")
        report = ledger_verify()
        self.stdout.write(f"ledger: {report.checked} entries, chain {'verified' if report.ok else 'BROKEN'}")
