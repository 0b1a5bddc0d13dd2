"""Evaluation runs as the gate shows them: in progress, with the tickets each one serves."""

from __future__ import annotations

from typing import Any

from evaluators.models import EvaluationRun, RunStatus
from gates.models import ReleaseTicket


def runs_in_progress(*, limit: int = 20) -> list[dict[str, Any]]:
    """Queued and running evaluations, oldest first, each with the tickets it serves (two queries)."""
    runs = list(
        EvaluationRun.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING])
        .select_related("backend")
        .order_by("created_at", "id")[:limit]
    )
    ids = [run.pk for run in runs]
    serving: dict[int, list[ReleaseTicket]] = {}
    if ids:
        for ticket in ReleaseTicket.objects.filter(baseline_run_id__in=ids) | ReleaseTicket.objects.filter(
            candidate_run_id__in=ids
        ):
            for run_id in (ticket.baseline_run_id, ticket.candidate_run_id):
                if run_id in ids:
                    serving.setdefault(run_id, []).append(ticket)
    return [{"run": run, "tickets": serving.get(run.pk, [])} for run in runs]
