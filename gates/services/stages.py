"""Staged evaluation: ask for the next stage of a ticket's evidence for the tasks still unsettled.

A stage after the first is one more interleaved pair of quality-only runs on the suite's held-out
samples of that stage (``evaluators.suites``: stage ``k`` is the ``(k-1)``-th block of the task's
stage size — the shipped file's, or the power plan's under ``sequential.stage_size: planned`` —
named per task in the runs' profile). Which tasks get it, and when the ticket is judged instead,
is decided by ``gates.services.evaluation`` from the looks (``gates.selectors.stages``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from evaluators import services as run_services
from gates.judge.staged import StagedTask
from gates.models import EvaluationStage, ReleaseTicket, TicketStatus
from gates.selectors.stages import series_stages
from gates.services.dispatch import enqueue_runs
from ledger.services import ledger_append


def stage_profile(number: int, sizes: Mapping[str, int]) -> dict[str, Any]:
    """The load profile of stage ``number`` ≥ 2: the worker's quality settings, answers only, on
    ``sizes[task]`` held-out samples per task."""
    return {
        **dict(settings.OPTGATE_LOAD_PROFILE),
        "quality_only": True,
        "stage": number,
        "stage_sizes": dict(sizes),
    }


def next_stage_sizes(staged: Mapping[str, StagedTask], tasks: list[str]) -> dict[str, int]:
    """Per task, the held-out samples its next stage adds (its design's, the same for every
    guardrail of the task)."""
    return {task: max(looks.stage_size for looks in staged[task].guardrails.values()) for task in tasks}


def looks_summary(staged: Mapping[str, StagedTask]) -> dict[str, dict[str, Any]]:
    """Per task and staged guardrail, the last look in a few numbers (the ledger's view)."""
    return {
        task: {
            metric: {
                "look": s.last.look,
                "n": s.last.n,
                "outcome": s.last.outcome,
                "statistic": s.last.to_dict()["statistic"],
                "efficacy_bound": s.last.to_dict()["efficacy_bound"],
                "alpha_spent": s.last.alpha_spent,
            }
            for metric, s in item.guardrails.items()
        }
        for task, item in staged.items()
    }


def stage_request(
    *, ticket: ReleaseTicket, tasks: list[str], staged: Mapping[str, StagedTask]
) -> EvaluationStage | None:
    """Ask for the next stage of the ticket's current evidence on ``tasks`` and send its pair.

    The stage's number follows the series' last; its two runs are new (``pair_request``) and go to
    the ``gpu`` queue after commit. The ledger entry names the stage, its tasks and the looks that
    asked for it. Returns None when the ticket moved on meanwhile, or another worker asked for the
    same stage first: the runs this call created are then cancelled before anyone sends them.
    """
    if not tasks:
        raise ValueError("a stage needs at least one task")
    first_run = ticket.candidate_run_id
    if first_run is None:
        raise ValueError(f"ticket #{ticket.pk} has no first pair to add a stage to")
    number = 2 + len(series_stages(ticket))
    sizes = next_stage_sizes(staged, tasks)
    base_run, cand_run = run_services.pair_request(
        baseline=ticket.baseline, candidate=ticket.candidate, tasks=tasks, load_profile=stage_profile(number, sizes)
    )
    try:
        with transaction.atomic(durable=True):
            current = (
                ReleaseTicket.objects.select_for_update()
                .filter(pk=ticket.pk, status=TicketStatus.EVALUATING, candidate_run_id=first_run)
                .first()
            )
            if current is None:
                raise IntegrityError("the ticket's evidence changed")
            stage = EvaluationStage.objects.create(
                ticket=current,
                first_run_id=first_run,
                number=number,
                tasks=list(tasks),
                baseline_run=base_run,
                candidate_run=cand_run,
            )
            ledger_append(
                kind="ticket.stage_requested",
                subject_type="ticket",
                subject_id=ticket.pk,
                subject_name=ticket.title,
                actor=None,
                payload={
                    "stage": number,
                    "tasks": list(tasks),
                    "stage_sizes": sizes,
                    "baseline_run": base_run.pk,
                    "candidate_run": cand_run.pk,
                    "first_run": first_run,
                    "looks": looks_summary(staged),
                },
            )
            # The pair's one message goes with the candidate, as for the first pair.
            enqueue_runs([cand_run.pk])
    except IntegrityError:
        for run in (base_run, cand_run):
            run_services.run_cancel(run_id=run.pk)
        return None
    return stage
