"""``manage.py bench_decision``: what orchestration costs, and what baseline reuse saves.

1. A three-task decision (baseline + candidate runs, judged) executed in this process through the
   same services the workers call. Engine-up time = the time each engine was healthy and in use,
   summed over the two runs.
2. The bare time of the same requests: each backend's engine is started again and the same
   quality prompts and load requests are sent straight through the load generator, no lm-eval,
   no scoring, no storage. Ratio 1 = engine-up / bare (target at most 1.3×).
3. A second ticket with the same baseline and another candidate: the baseline run is reused.
   Saving = 1 − (wall time of the second decision / wall time of the first) (target at least 45%).

It writes backends, tickets and runs (prefixed ``bench-``) into the configured database.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import user_save
from backends import services as backend_services
from backends.models import Backend
from core.roles import ENGINEER
from evaluators import services as run_services
from evaluators.engine import launch_engine
from evaluators.loadgen import LoadRequest, run_load_sync
from evaluators.models import EvaluationRun
from evaluators.pipeline import DEFAULT_LOAD_PROFILE, load_requests
from evaluators.suites import get_suite
from gates.models import EvaluationStage, ReleaseTicket, TaskType
from gates.services import evaluation
from gates.services import tickets as gate_services

TASKS = ("compliance_qa", "knowledge_qa", "tool_calling")


class Command(BaseCommand):
    help = "Time a three-task decision against the bare requests, and the saving of baseline reuse."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--model-dir", help="model directory (default: the kit's base variant)")
        parser.add_argument("--tasks", default=",".join(TASKS), help="three task types, comma-separated")
        parser.add_argument("--requests-per-task", type=int, default=8)

    def handle(self, *args: Any, **options: Any) -> None:
        tasks = [t.strip() for t in options["tasks"].split(",") if t.strip()]
        model = Path(options["model_dir"]) if options["model_dir"] else self._kit_model()
        profile = {**DEFAULT_LOAD_PROFILE, "requests_per_task": options["requests_per_task"]}
        settings.OPTGATE_LOAD_PROFILE = profile
        tag = time.strftime("%Y%m%d%H%M%S")
        owner = self._owner()
        base, cand1, cand2 = (
            self._backend(owner, f"bench-{tag}-base", model, {}),
            self._backend(owner, f"bench-{tag}-prefix", model, {"enable_prefix_caching": True}),
            self._backend(owner, f"bench-{tag}-seqs", model, {"max_num_seqs": 8}),
        )
        first_s, first = self._decide(owner, base, cand1, tasks, f"bench {tag} first")
        runs = [first.baseline_run, first.candidate_run]
        engine_up = sum(self._engine_up(run) for run in runs if run is not None)
        bare = sum(self._bare(backend, tasks, profile) for backend in (base, cand1))
        second_s, second = self._decide(owner, base, cand2, tasks, f"bench {tag} reuse")
        reused = second.baseline_run_id == first.baseline_run_id
        ratio, saving = engine_up / bare, 1 - second_s / first_s
        self.stdout.write(f"three-task decision ({', '.join(tasks)}): wall {first_s:.1f} s")
        self.stdout.write(f"engines up (healthy to torn down), both runs: {engine_up:.1f} s")
        self.stdout.write(f"bare time of the same requests: {bare:.1f} s")
        self.stdout.write(f"ratio engine-up / bare: {ratio:.2f}x (target <= 1.3x)")
        self.stdout.write(f"second ticket, baseline reused={reused}: wall {second_s:.1f} s")
        self.stdout.write(f"saving from baseline reuse: {saving:.0%} (target >= 45%)")

    def _kit_model(self) -> Path:
        from tools.kit import ensure_kit

        return ensure_kit().path()

    def _owner(self) -> User:
        owner = User.objects.filter(username="bench-owner").first()
        if owner is None:
            owner, _ = user_save(actor=None, username="bench-owner", role=ENGINEER, email="bench@localhost")
        return owner

    def _backend(self, owner: User, name: str, model: Path, extra: dict[str, Any]) -> Backend:
        backend, _ = backend_services.backend_register(
            actor=owner,
            name=name,
            model_id=f"bench/{model.name}",
            model_path=str(model),
            model_revision="bench",
            engine_version="0.32.0",
            hardware_class=settings.OPTGATE_HARDWARE_CLASS,
            engine_args={"max_model_len": 2048, "seed": 0, **extra},
            sampling_params={"temperature": 0.0},
        )
        return backend

    def _decide(
        self, owner: User, base: Backend, cand: Backend, tasks: list[str], title: str
    ) -> tuple[float, ReleaseTicket]:
        started = time.monotonic()
        ticket = gate_services.ticket_create(
            owner=owner,
            title=title,
            mechanisms=["prefix_cache"],
            bottleneck="prefill",
            bottleneck_evidence="benchmark",
            baseline=base,
            candidate=cand,
            beneficiary_tasks=list(TaskType.objects.filter(slug__in=tasks)),
            benefit_metrics=["ttft_p95"],
            guardrail_metrics=["refusal_accuracy"],
            rollback_target=base,
            rollback_plan={"sacrifices": "-", "warmup": "-", "inflight_streams": "-", "route_update": "-"},
        )
        gate_services.ticket_submit(ticket=ticket, actor=owner)
        evaluated = evaluation.ticket_evaluate(ticket_id=ticket.pk)
        if evaluated is None:
            raise CommandError("the ticket vanished")
        for run in (evaluated.baseline_run, evaluated.candidate_run):
            if run is not None and not run.is_finished:
                run_services.run_execute(run_id=run.pk, worker="bench")
        outcome = evaluation.ticket_check(ticket_id=ticket.pk)
        # A staged policy asks for further quality-only pairs until every task settles: run each here.
        while outcome is None and (stage := EvaluationStage.objects.filter(ticket=ticket).order_by("-number").first()):
            if stage.candidate_run.is_finished:
                break
            run_services.run_execute(run_id=stage.candidate_run_id, worker="bench")
            outcome = evaluation.ticket_check(ticket_id=ticket.pk)
        self.stdout.write(f"{title}: outcome {outcome}")
        evaluated.refresh_from_db()
        return time.monotonic() - started, evaluated

    def _engine_up(self, run: EvaluationRun) -> float:
        timings = run.attempts.order_by("-number").first().timings  # type: ignore[union-attr]
        return float(timings["total_s"]) - float(timings["engine_up_s"])

    def _bare(self, backend: Backend, tasks: list[str], profile: dict[str, Any]) -> float:
        log = Path(settings.OPTGATE_ARTIFACTS_DIR) / "bench" / f"{backend.name}.log"
        roots = list(settings.OPTGATE_MODEL_ROOTS)
        with launch_engine(
            model_path=backend.model_path,
            served_model_name=backend.name,
            engine_args=backend.engine_args,
            log_path=log,
            model_roots=roots,
            startup_timeout_s=settings.OPTGATE_ENGINE_STARTUP_TIMEOUT_S,
            device=settings.OPTGATE_ENGINE_DEVICE,  # type: ignore[arg-type]
        ) as engine:
            started = time.monotonic()
            for slug in tasks:
                suite = get_suite(slug)
                quality = [
                    LoadRequest(messages=[{"role": "user", "content": s["prompt"]}], max_tokens=suite.max_gen_tokens)
                    for s in suite.load_samples()
                ]
                run_load_sync(engine.base_url, engine.model, quality, concurrency=int(profile["quality_concurrency"]))
                _, load = load_requests(suite, count=int(profile["requests_per_task"]), seed=int(profile["seed"]))
                run_load_sync(engine.base_url, engine.model, load, concurrency=int(profile["concurrency"]))
            return time.monotonic() - started
