"""Evaluate one registered backend on task suites and print a per-task summary table."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from backends.models import Backend
from evaluators import services
from evaluators.models import EvaluationRun, RunStatus
from evaluators.suites import SUITES


def _fmt(value: Any, pattern: str = "{:.1f}") -> str:
    return "-" if value is None else pattern.format(value)


def summary_table(run: EvaluationRun) -> str:
    """One line per task: quality, latency percentiles, throughput and engine evidence."""
    header = (
        f"{'task':<18} {'n':>3} {'pass':>6} {'ttft p50':>9} {'ttft p95':>9} {'tpot p50':>9} "
        f"{'e2e p95':>9} {'tok/s':>7} {'cache hit':>9} {'spec acc':>8}  top failure"
    )
    lines = [header, "-" * len(header)]
    for result in run.task_results.order_by("task"):
        q, p, e = result.quality, result.performance, result.engine_evidence
        reasons = q.get("failure_reasons") or {}
        top = max(reasons, key=lambda reason: reasons[reason]) if reasons else ""
        lines.append(
            f"{result.task:<18} {q.get('n', 0):>3} {_fmt(q.get('pass_rate'), '{:.0%}'):>6} "
            f"{_fmt(p.get('ttft_ms', {}).get('median')):>9} {_fmt(p.get('ttft_ms', {}).get('p95')):>9} "
            f"{_fmt(p.get('tpot_ms', {}).get('median')):>9} {_fmt(p.get('e2e_ms', {}).get('p95')):>9} "
            f"{_fmt(p.get('output_token_throughput')):>7} {_fmt(e.get('prefix_cache_hit_rate'), '{:.0%}'):>9} "
            f"{_fmt(e.get('spec_decode_acceptance_rate'), '{:.0%}'):>8}  {top}"
        )
    return "\n".join(lines)


class Command(BaseCommand):
    help = "Launch (or attach to) an engine for a backend, run the task suites and the load, print a summary."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("backend", help="backend name")
        parser.add_argument("--tasks", default=",".join(SUITES), help="comma-separated task types (default: all)")
        parser.add_argument("--attach", default="", help="base URL of a running OpenAI-compatible server")
        parser.add_argument("--attach-model", default="", help="model name served at --attach")
        parser.add_argument("--requests", type=int, default=None, help="load requests per task")
        parser.add_argument("--concurrency", type=int, default=None, help="load concurrency")
        parser.add_argument("--fresh", action="store_true", help="measure again even if a matching run exists")

    def handle(self, *args: Any, **options: Any) -> None:
        backend = Backend.objects.filter(name=options["backend"]).first()
        if backend is None:
            raise CommandError(f"no backend named {options['backend']!r}")
        profile = {
            k: v
            for k, v in {"requests_per_task": options["requests"], "concurrency": options["concurrency"]}.items()
            if v is not None
        }
        tasks = [t.strip() for t in options["tasks"].split(",") if t.strip()]
        run, reused = services.run_request(
            backend=backend,
            tasks=tasks,
            load_profile=profile,
            attach_base_url=options["attach"],
            attach_model=options["attach_model"],
            allow_reuse=not options["fresh"],
        )
        if reused and run.status == RunStatus.SUCCEEDED:
            self.stdout.write(f"reusing finished run #{run.pk} (same fingerprint, suites, engine and hardware)")
        else:
            self.stdout.write(f"evaluating {backend.name} as run #{run.pk} on {', '.join(tasks)} …")
            run = services.run_execute(run_id=run.pk)
        if run.status != RunStatus.SUCCEEDED:
            raise CommandError(f"run #{run.pk} ended {run.status}: {run.error}")
        self.stdout.write(summary_table(run))
