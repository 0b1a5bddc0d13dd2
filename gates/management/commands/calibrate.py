"""Measure a backend against itself (A/A) and print the noise floor of every judged metric per task."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from backends.selectors import backend_get
from core.errors import InvalidInput
from evaluators import services as run_services
from gates.display import FLOOR_COLUMNS, calibration_rows, metric_label
from gates.models import Calibration, CalibrationStatus
from gates.services.calibration import calibration_finish, calibration_request


def floors_table(calibration: Calibration) -> str:
    """One line per task: the share of samples the two sides disagreed on, then the floors."""
    header = f"{'task':<18} {'discordance':>13} " + " ".join(f"{metric_label(m)[:17]:>17}" for m in FLOOR_COLUMNS)
    lines = [header, "-" * len(header)]
    rows = calibration_rows(calibration.tasks, calibration.floors, calibration.discordance, calibration.task_errors)
    for row in rows:
        if row["error"]:
            lines.append(f"{row['task']:<18} not calibrated: {row['error'][:200]}")
            continue
        lines.append(f"{row['task']:<18} {row['discordance']:>13} " + " ".join(f"{f:>17}" for f in row["floors"]))
    return "\n".join(lines)


class Command(BaseCommand):
    help = (
        "A/A calibration: measure BACKEND against itself (two engines, interleaved) and keep per task the "
        "noise floor of every judged metric. Without --wait a GPU worker measures it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("backend", help="backend name")
        parser.add_argument("--tasks", default="", help="comma-separated task types (default: all)")
        parser.add_argument("--requests", type=int, default=None, help="load requests per task")
        parser.add_argument(
            "--wait", action="store_true", help="measure here (this process starts both engines) and print the floors"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        backend = backend_get(name=options["backend"])
        if backend is None:
            raise CommandError(f"no backend named {options['backend']!r}")
        tasks = [t.strip() for t in options["tasks"].split(",") if t.strip()]
        profile = {} if options["requests"] is None else {"requests_per_task": options["requests"]}
        try:
            calibration = calibration_request(
                backend=backend, tasks=tasks, actor=None, load_profile=profile, enqueue=not options["wait"]
            )
        except InvalidInput as exc:
            raise CommandError("; ".join(f"{field}: {message}" for field, message in exc.errors.items())) from None
        runs = f"runs #{calibration.baseline_run_id} and #{calibration.candidate_run_id}"
        if not options["wait"]:
            requested = f"calibration #{calibration.pk} of {backend.name} requested"
            self.stdout.write(f"{requested}: a GPU worker measures {runs}")
            return
        self.stdout.write(f"calibrating {backend.name} as {runs} on {', '.join(calibration.tasks)} …")
        run_services.run_execute(run_id=calibration.candidate_run_id)
        finished = calibration_finish(calibration_id=calibration.pk)
        assert finished is not None  # the row was created above and is never deleted
        if finished.status != CalibrationStatus.FINISHED:
            raise CommandError(f"calibration #{finished.pk} {finished.status}: {finished.error}")
        self.stdout.write(
            f"calibration #{finished.pk} of {backend.name} (engine {finished.engine_version}, "
            f"{finished.hardware_class}): noise floors of two identical engines"
        )
        self.stdout.write(floors_table(finished))
