"""A/A calibration: measure a backend against itself and keep the noise floor of every judged metric.

``calibration_request`` asks for an interleaved pair whose two sides are the same backend (two
engines, the same prompts, alternating blocks) and records a ``Calibration``; the pair's one
message goes to a GPU worker after commit. ``calibration_finish`` computes the floors once both runs
have finished (``gates.judge.noise``); the GPU worker calls it when the pair ends, and calling it
again is harmless.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from backends.models import Backend
from core.errors import InvalidInput, NotAllowed
from core.roles import ADMIN, ENGINEER, Actor, has_role, person
from evaluators import pipeline
from evaluators import services as run_services
from evaluators.models import RunStatus
from evaluators.suites import SUITES
from gates.judge.noise import aa_floors, discordance
from gates.judge.records import TaskEvidence
from gates.models import Calibration, CalibrationStatus
from gates.selectors.evidence import run_task_evidence
from gates.services.decisions import gate_policy
from gates.services.evaluation import enqueue_runs
from ledger.services import ledger_append

logger = logging.getLogger(__name__)

# What a calibration's load profile may set: the interleaved measurement's own knobs.
PROFILE_KEYS = frozenset({*pipeline.DEFAULT_LOAD_PROFILE, "blocks"})


def _profile(load_profile: dict[str, Any] | None) -> dict[str, Any]:
    """The load tickets are measured with (so the floors fit them), with the caller's changes."""
    changes = dict(load_profile or {})
    unknown = sorted(set(changes) - PROFILE_KEYS)
    if unknown:
        known = ", ".join(sorted(PROFILE_KEYS))
        raise InvalidInput({"load_profile": f"unknown keys {', '.join(unknown)}; known: {known}"})
    bad = sorted(k for k, v in changes.items() if isinstance(v, bool) or not isinstance(v, int) or v < 0)
    if bad:
        raise InvalidInput({"load_profile": f"{', '.join(bad)} must be whole numbers of at least 0"})
    # Both sides answer afresh: reusing an earlier run's answers would hide the engines' own discordance.
    return {**dict(settings.OPTGATE_LOAD_PROFILE), **changes, "reuse_quality": False}


def calibration_request(
    *,
    backend: Backend,
    actor: Actor,
    tasks: list[str] | None = None,
    load_profile: dict[str, Any] | None = None,
    enqueue: bool = True,
) -> Calibration:
    """Ask for an A/A calibration of ``backend`` on ``tasks`` (default: every task type).

    Engineers and admins ask for it (``actor`` None: the system, e.g. an operator's command); a GPU
    worker measures two engines of the backend as an interleaved pair, or with ``enqueue=False``
    the caller executes the pair itself. Ledger ``calibration.requested``.
    """
    if actor is not None and not has_role(actor, ENGINEER, ADMIN):
        raise NotAllowed("only engineers and admins calibrate backends")
    tasks = list(tasks) if tasks else list(SUITES)
    profile = _profile(load_profile)
    base_run, cand_run = run_services.pair_request(
        baseline=backend, candidate=backend, tasks=tasks, load_profile=profile
    )
    with transaction.atomic(durable=True):
        calibration = Calibration.objects.create(
            backend=backend,
            fingerprint=backend.fingerprint,
            engine_version=backend.engine_version,
            hardware_class=backend.hardware_class,
            tasks=tasks,
            baseline_run=base_run,
            candidate_run=cand_run,
            requested_by=person(actor),
        )
        ledger_append(
            kind="calibration.requested",
            subject_type="backend",
            subject_id=backend.pk,
            subject_name=backend.name,
            actor=actor,
            payload={
                "calibration": calibration.pk,
                "fingerprint": backend.fingerprint,
                "engine_version": backend.engine_version,
                "hardware_class": backend.hardware_class,
                "tasks": tasks,
                "runs": [base_run.pk, cand_run.pk],
                "load_profile": cand_run.load_profile,
            },
        )
        if enqueue:
            enqueue_runs([cand_run.pk])  # one message carries the pair
    return calibration


def _measured_floors(calibration: Calibration) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """Per task: the noise floors, the discordance, or why the task has none."""
    policy = gate_policy()
    floors: dict[str, Any] = {}
    discord: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for task in calibration.tasks:
        evidence = TaskEvidence(
            task,
            run_task_evidence(calibration.baseline_run, task),
            run_task_evidence(calibration.candidate_run, task),
        )
        task_policy = policy.task(task)
        failed = evidence.base.error or evidence.cand.error
        if failed or task_policy is None:
            errors[task] = failed or f"policy {policy.version_label} has no rules for {task}"
            continue
        floors[task] = aa_floors(evidence, task_policy, seed=policy.seed, n_boot=policy.n_boot)
        counted = discordance(evidence.base, evidence.cand)
        discord[task] = {"rate": counted.rate, "discordant": counted.discordant, "paired": counted.paired}
    return floors, discord, errors


def calibration_finish(*, calibration_id: int) -> Calibration | None:
    """Compute the floors of a calibration whose two runs have finished, and record them.

    Returns quietly while the runs are still measuring, and when it already finished (a second
    call, a redelivered message). A run that did not succeed fails the calibration with its
    error. Ledger ``calibration.finished`` (with the floors) or ``calibration.failed``.
    """
    calibration = Calibration.objects.select_related("backend", "baseline_run", "candidate_run").filter(
        pk=calibration_id
    )
    found = calibration.first()
    if found is None or found.status != CalibrationStatus.MEASURING:
        return found
    runs = (found.baseline_run, found.candidate_run)
    if not all(run.is_finished for run in runs):
        return found
    failed = [run for run in runs if run.status != RunStatus.SUCCEEDED]
    floors: dict[str, Any] = {}
    discord: dict[str, Any] = {}
    errors: dict[str, str] = {}
    error = "; ".join(f"run #{run.pk} ended {run.status}: {run.error[:500]}" for run in failed)
    if not failed:
        # The statistics run outside the transaction: bootstrap intervals take CPU time.
        floors, discord, errors = _measured_floors(found)
        if not floors:
            error = "no task could be calibrated: " + "; ".join(f"{t}: {e[:300]}" for t, e in errors.items())
    with transaction.atomic(durable=True):
        locked = Calibration.objects.select_for_update().get(pk=found.pk)
        if locked.status != CalibrationStatus.MEASURING:
            return locked
        if error:
            locked.move(CalibrationStatus.FAILED, error=error[-5000:], task_errors=errors)
        else:
            locked.move(CalibrationStatus.FINISHED, floors=floors, discordance=discord, task_errors=errors)
        ledger_append(
            kind=f"calibration.{locked.status}",
            subject_type="backend",
            subject_id=found.backend_id,
            subject_name=found.backend.name,
            actor=None,
            payload={
                "calibration": locked.pk,
                "floors": floors,
                "discordance": discord,
                "task_errors": errors,
                "error": error[-2000:],
            },
        )
    return locked


def calibrations_finish_for_run(*, run_id: int) -> list[Calibration]:
    """Finish every measuring calibration that ``run_id`` belongs to (called when a run ends)."""
    ids = Calibration.objects.filter(
        Q(baseline_run_id=run_id) | Q(candidate_run_id=run_id), status=CalibrationStatus.MEASURING
    ).values_list("pk", flat=True)
    finished = [calibration_finish(calibration_id=pk) for pk in ids]
    return [c for c in finished if c is not None]
