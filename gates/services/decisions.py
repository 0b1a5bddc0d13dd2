"""Gate decisions: judge a ticket's stored baseline and candidate runs under a policy, record the
result and move the ticket.

A binding decision moves an ``evaluating`` ticket to ``evaluated`` and, when the evidence is
inconclusive (or a run failed), on to ``needs_evidence``. Approve, restrict and reject are left to
the reviewers' sign-off (``gates.services.signoff``): the system proposes, people with the required
capacities decide, and the owner never signs their own ticket. A dry-run policy records its
decision for comparison but never moves anything.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from core.errors import DomainError, NotAllowed
from core.roles import ADMIN, Actor, has_role, person
from evaluators.models import EvaluationRun
from gates.judge import Decision, TaskEvidence, evaluate
from gates.judge.staged import StagedTask
from gates.models import DecisionOutcome, GateDecision, ReleaseTicket, TicketStatus
from gates.policy.rules import Policy
from gates.prefix_cache import prefix_cache_findings
from gates.selectors.calibrations import calibration_noise
from gates.selectors.decisions import decision_current
from gates.selectors.evidence import run_task_evidence
from gates.selectors.stages import series_stages, ticket_staged
from gates.services.policy import gate_policy
from gates.services.tickets import ticket_transition_within
from ledger.services import ledger_append

DECIDABLE_STATUSES = frozenset({TicketStatus.EVALUATING, TicketStatus.EVALUATED})


@dataclass(frozen=True)
class Judgement:
    """A decision computed but not stored: what a dry run returns and what ``decision_make`` keeps."""

    decision: Decision
    warnings: tuple[dict[str, Any], ...]
    baseline_run: EvaluationRun
    candidate_run: EvaluationRun
    seed: int
    # A staged evaluation's stages, design and looks (``{}`` when one fixed stage was judged).
    stages: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = self.decision.to_dict()
        data["warnings"] = list(self.warnings)
        data["baseline_run"] = self.baseline_run.pk
        data["candidate_run"] = self.candidate_run.pk
        data["seed"] = self.seed
        data["stages"] = self.stages
        return data


def _runs_checked(ticket: ReleaseTicket) -> tuple[EvaluationRun, EvaluationRun]:
    runs = {"baseline_run": ticket.baseline_run, "candidate_run": ticket.candidate_run}
    backends = {"baseline_run": ticket.baseline_id, "candidate_run": ticket.candidate_id}
    for field, run in runs.items():
        side = field.removesuffix("_run")
        if run is None:
            raise DomainError(f"ticket #{ticket.pk} has no {side} run to judge")
        if not run.is_finished:
            raise DomainError(f"the {side} run #{run.pk} is still {run.status}; judge it when it has finished")
        if run.backend_id != backends[field]:
            raise DomainError(f"the {side} run #{run.pk} measured another backend than the ticket's {side}")
    assert ticket.baseline_run is not None and ticket.candidate_run is not None
    for stage in series_stages(ticket):
        for run in (stage.baseline_run, stage.candidate_run):
            if not run.is_finished:
                raise DomainError(
                    f"stage {stage.number}'s run #{run.pk} is still {run.status}; judge it when it has finished"
                )
    return ticket.baseline_run, ticket.candidate_run


def stage_count(ticket: ReleaseTicket) -> int:
    """How many stages the ticket's current evidence holds (1: its first pair alone)."""
    return 1 + len(series_stages(ticket))


def _stage_evidence(ticket: ReleaseTicket, task: str, first: TaskEvidence) -> TaskEvidence:
    """The first pair's evidence of ``task``, or a later stage's run error on it: a stage that could
    not answer is a run error (needs evidence), never judged as if the stage had not been asked for."""
    for stage in series_stages(ticket):
        if task not in stage.tasks:
            continue
        base, cand = run_task_evidence(stage.baseline_run, task), run_task_evidence(stage.candidate_run, task)
        if base.error or cand.error:
            return TaskEvidence(task, base if base.error else first.base, cand if cand.error else first.cand)
    return first


def _stages_record(ticket: ReleaseTicket, staged: dict[str, StagedTask]) -> dict[str, Any]:
    """What the decision and its ledger entry keep of a staged evaluation."""
    pairs = [{"stage": 1, "baseline_run": ticket.baseline_run_id, "candidate_run": ticket.candidate_run_id}]
    pairs += [
        {"stage": s.number, "baseline_run": s.baseline_run_id, "candidate_run": s.candidate_run_id, "tasks": s.tasks}
        for s in series_stages(ticket)
    ]
    return {"count": len(pairs), "pairs": pairs, "tasks": {task: item.to_dict() for task, item in staged.items()}}


def decision_judge(*, ticket: ReleaseTicket, policy: Policy, seed: int | None = None) -> Judgement:
    """Judge the ticket's stored runs under ``policy``; stores nothing and moves nothing.

    A failed run or a task missing from a run reaches the judge as an error, which yields
    ``needs_evidence``: an engine failure is never counted against the candidate. The baseline's
    current A/A calibration, where there is one, gives each verdict its noise floor.
    """
    baseline_run, candidate_run = _runs_checked(ticket)
    beneficiary = [t.slug for t in ticket.beneficiary_tasks.all()]
    risk = [t.slug for t in ticket.risk_tasks.all()]
    tasks = list(dict.fromkeys(beneficiary + risk))
    evidence = [
        _stage_evidence(
            ticket,
            task,
            TaskEvidence(task, run_task_evidence(baseline_run, task), run_task_evidence(candidate_run, task)),
        )
        for task in tasks
    ]
    staged = ticket_staged(ticket, policy, tasks)
    used_seed = policy.seed if seed is None else seed
    decision = evaluate(
        policy,
        evidence,
        mechanisms=list(ticket.mechanisms),
        bottleneck=ticket.bottleneck or None,
        beneficiary_tasks=beneficiary,
        risk_tasks=risk,
        seed=used_seed,
        noise=calibration_noise(ticket.baseline),
        staged=staged,
    )
    warnings = tuple(prefix_cache_findings(ticket=ticket))
    stages = _stages_record(ticket, staged) if policy.sequential.enabled else {}
    return Judgement(decision, warnings, baseline_run, candidate_run, used_seed, stages)


def _load(ticket_id: int, *, lock: bool = False) -> ReleaseTicket:
    tickets = ReleaseTicket.objects.select_related(
        "baseline", "candidate", "rollback_target", "owner", "baseline_run", "candidate_run"
    )
    if lock:
        # Lock only the ticket row: PostgreSQL refuses FOR UPDATE on the nullable side of the run joins.
        tickets = tickets.select_for_update(of=("self",))
    return tickets.get(pk=ticket_id)


def decision_make(
    *, ticket: ReleaseTicket, actor: Actor = None, policy: Policy | None = None, seed: int | None = None
) -> GateDecision:
    """Judge the ticket's baseline and candidate runs, store a ``GateDecision`` and move the ticket.

    ``evaluating`` → ``evaluated``; an inconclusive or errored judgement goes on to
    ``needs_evidence``. A dry-run policy stores its decision flagged and moves nothing. Calling
    again for the same runs and policy version on an already evaluated ticket returns the stored
    decision, so a redelivered worker message is harmless.
    """
    if actor is not None and not has_role(actor, ADMIN):
        raise NotAllowed("gate decisions are made by the system (or an admin re-judging)")
    policy = policy or gate_policy()
    current = _load(ticket.pk)
    if not policy.dry_run:
        if current.status not in DECIDABLE_STATUSES:
            raise DomainError(f"ticket #{current.pk} is {current.status}; decisions are made while evaluating")
        previous = decision_current(ticket=current)
        if (
            current.status == TicketStatus.EVALUATED
            and previous is not None
            and previous.policy_version == policy.version_label
            and (previous.baseline_run_id, previous.candidate_run_id)
            == (current.baseline_run_id, current.candidate_run_id)
            and int((previous.stages or {}).get("count") or 1) == stage_count(current)
        ):
            return previous
    # The statistics run outside the transaction: bootstrap intervals take CPU time, and the
    # ticket row is re-checked under lock below before anything is written.
    judged = decision_judge(ticket=current, policy=policy, seed=seed)
    decision = judged.decision
    stages = stage_count(current)
    with transaction.atomic(durable=True):
        locked = _load(ticket.pk, lock=True)
        if (locked.status, locked.baseline_run_id, locked.candidate_run_id, stage_count(locked)) != (
            current.status,
            current.baseline_run_id,
            current.candidate_run_id,
            stages,
        ):
            raise DomainError(f"ticket #{locked.pk} changed while it was being judged; judge it again")
        reasons = list(decision.reasons) + [f"Warning: {w['message']}" for w in judged.warnings]
        record = GateDecision.objects.create(
            ticket=locked,
            policy_version=decision.policy_version,
            dry_run=decision.dry_run,
            baseline_run=judged.baseline_run,
            candidate_run=judged.candidate_run,
            outcome=decision.outcome,
            verdicts={task: verdict.to_dict() for task, verdict in decision.verdicts.items()},
            reasons=reasons,
            proposed_routes=dict(decision.proposed_routes),
            allowed_tasks=list(decision.allowed_tasks),
            samples_needed=dict(decision.samples_needed),
            warnings=list(judged.warnings),
            seed=judged.seed,
            stages=judged.stages,
            created_by=person(actor),
        )
        ledger_append(
            kind="gate.decision",
            subject_type="ticket",
            subject_id=locked.pk,
            subject_name=locked.title,
            actor=actor,
            payload={
                "decision": record.pk,
                "outcome": record.outcome,
                "policy_version": record.policy_version,
                "dry_run": record.dry_run,
                "baseline_run": record.baseline_run_id,
                "candidate_run": record.candidate_run_id,
                "task_status": {task: v["status"] for task, v in record.verdicts.items()},
                "proposed_routes": record.proposed_routes,
                "reasons": record.reasons,
                "warnings": record.warnings,
                "stages": record.stages,
            },
        )
        if record.dry_run:
            return record
        if locked.status == TicketStatus.EVALUATING:
            ticket_transition_within(
                ticket=locked, action="finish_evaluation", actor=actor, details={"decision": record.pk}
            )
        if record.outcome == DecisionOutcome.NEEDS_EVIDENCE:
            ticket_transition_within(
                ticket=locked,
                action="request_evidence",
                actor=actor,
                reason=record.reasons[0],
                details={"decision": record.pk, "samples_needed": record.samples_needed},
            )
    return record
