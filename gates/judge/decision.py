"""From per-task verdicts to one gate decision and the route changes it proposes.

Precedence, strongest first:

0. **error** — an engine could not start with its configuration on this hardware: no sample can
   be measured until the configuration changes, so more evidence would not settle anything;
1. **reject** — a critical metric fails on any task (a veto), a beneficiary task breaks a
   guardrail, or a beneficiary task's promised benefit (objective, mechanism rule, targeted
   bottleneck) confidently fails to appear;
2. **needs_evidence** — a run error, a missing task, or an inconclusive deciding metric on a task
   that does not already fail (each of them could still change the outcome); a run error is
   never a failure;
3. **restrict** — beneficiary tasks pass and some risk tasks fail: the candidate serves only the
   passing tasks, the failing ones stay on the baseline;
4. **approve** — every task passes.

A real failure outranks missing evidence because no further sample can undo it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from gates.judge.noise import NoiseFloor
from gates.judge.records import LOAD_NOT_MEASURED
from gates.judge.staged import StagedTask
from gates.judge.verdicts import MetricVerdict, TaskEvidence, TaskVerdict, judge_task
from gates.policy.rules import Policy

Outcome = Literal["approve", "restrict", "reject", "needs_evidence", "error"]
Route = Literal["candidate", "baseline"]


@dataclass(frozen=True)
class Decision:
    """The gate's outcome with everything a reviewer and the route table need."""

    outcome: Outcome
    policy_version: str
    dry_run: bool
    mechanisms: tuple[str, ...]
    bottleneck: str | None
    beneficiary_tasks: tuple[str, ...]
    risk_tasks: tuple[str, ...]
    allowed_tasks: tuple[str, ...]
    blocked_tasks: tuple[str, ...]
    reasons: tuple[str, ...]
    verdicts: Mapping[str, TaskVerdict]
    proposed_routes: Mapping[str, Route]
    samples_needed: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "policy_version": self.policy_version,
            "dry_run": self.dry_run,
            "mechanisms": list(self.mechanisms),
            "bottleneck": self.bottleneck,
            "beneficiary_tasks": list(self.beneficiary_tasks),
            "risk_tasks": list(self.risk_tasks),
            "allowed_tasks": list(self.allowed_tasks),
            "blocked_tasks": list(self.blocked_tasks),
            "reasons": list(self.reasons),
            "verdicts": {task: verdict.to_dict() for task, verdict in self.verdicts.items()},
            "proposed_routes": dict(self.proposed_routes),
            "samples_needed": dict(self.samples_needed),
        }


def _by_task(task_verdicts: Mapping[str, TaskVerdict] | Sequence[TaskVerdict]) -> dict[str, TaskVerdict]:
    if isinstance(task_verdicts, Mapping):
        return dict(task_verdicts)
    return {verdict.task: verdict for verdict in task_verdicts}


def _ordered_unique(*groups: Sequence[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for group in groups:
        for task in group:
            seen.setdefault(task, None)
    return tuple(seen)


def _rejecting(verdict: TaskVerdict, beneficiary: bool) -> list[tuple[str, MetricVerdict]]:
    """Each failure of ``verdict`` that rejects the candidate whatever else is measured (a veto, and
    on a beneficiary task a broken guardrail or a promise not kept), with the words its reason opens with."""
    found = [(f"Veto on {verdict.task}", m) for m in verdict.critical_failures]
    if beneficiary:
        for metric in verdict.metrics:
            if metric.status != "fail" or metric.critical:
                continue
            if metric.kind == "guardrail":
                found.append((f"Beneficiary task {verdict.task} breaks a guardrail", metric))
            elif metric.kind in ("objective", "mechanism"):
                found.append((f"Beneficiary task {verdict.task} does not show the promised benefit", metric))
    return found


def _reject_reasons(verdict: TaskVerdict, beneficiary: bool) -> list[str]:
    return [f"{opening}: {metric.reason}" for opening, metric in _rejecting(verdict, beneficiary)]


def _risk_failures(verdicts: Mapping[str, TaskVerdict], tasks: Sequence[str]) -> list[tuple[str, MetricVerdict]]:
    """Each failing risk task's deciding failures that are not vetoes (a veto is a blocking finding
    of its own, ``_reject_reasons``; a restriction has none)."""
    return [
        (task, m)
        for task in tasks
        for m in verdicts[task].metrics
        if m.deciding and m.status == "fail" and not m.critical
    ]


def settled_rejecting(decision: Decision, still_open: Mapping[str, Collection[str]]) -> list[MetricVerdict]:
    """The failures ``decision`` rejects the candidate on that rest on none of the metrics in
    ``still_open`` (per task, the staged guardrails whose look asks for another stage): a rejection
    no further stage could undo. Empty when the rejection, if any, waits on those looks."""
    found: list[MetricVerdict] = []
    for task, verdict in decision.verdicts.items():
        open_metrics = set(still_open.get(task, ()))
        settled = replace(verdict, metrics=tuple(m for m in verdict.metrics if m.metric not in open_metrics))
        found += [metric for _, metric in _rejecting(settled, beneficiary=task in decision.beneficiary_tasks)]
    return found


def _evidence_reasons(verdict: TaskVerdict) -> list[str]:
    if verdict.status == "fail":
        return []  # no further sample can undo a failure, so its open questions do not matter
    if verdict.status == "error":
        return [f"{verdict.task}: {m.reason}" for m in verdict.metrics if m.status == "error"]
    undecided: list[MetricVerdict] = [m for m in verdict.metrics if m.deciding and m.status == "inconclusive"]
    measured = [m for m in undecided if m.test != LOAD_NOT_MEASURED]
    reasons = [f"Inconclusive on {verdict.task}: {m.reason}" for m in measured]
    skipped = [m for m in undecided if m.test == LOAD_NOT_MEASURED]
    if skipped:
        why = skipped[0].details.get("not_measured", "the load was not measured")
        reasons.append(f"Open on {verdict.task}: {len(skipped)} timing check(s) {why}.")
    return reasons


def decide(
    policy: Policy,
    mechanisms: Sequence[str],
    bottleneck: str | None,
    beneficiary_tasks: Sequence[str],
    risk_tasks: Sequence[str],
    task_verdicts: Mapping[str, TaskVerdict] | Sequence[TaskVerdict],
) -> Decision:
    """Combine per-task verdicts into approve / restrict / reject / needs_evidence, or error.

    A task named as both beneficiary and risk counts as beneficiary. Proposed routes send allowed
    tasks to the candidate and every other task to the baseline (no change for it).
    """
    if not beneficiary_tasks:
        raise ValueError("a decision needs at least one beneficiary task")
    beneficiaries = _ordered_unique(beneficiary_tasks)
    risks = tuple(task for task in _ordered_unique(risk_tasks) if task not in beneficiaries)
    tasks = beneficiaries + risks
    verdicts = _by_task(task_verdicts)

    unstartable = [
        metric.reason
        for task in tasks
        if task in verdicts and verdicts[task].cannot_start
        for metric in verdicts[task].metrics
        if metric.status == "error"
    ]
    reject: list[str] = []
    evidence: list[str] = []
    samples: dict[str, int] = {}
    for task in tasks:
        verdict = verdicts.get(task)
        if verdict is None:
            evidence.append(f"No evidence was judged for {task}, so the gate cannot rule on it.")
            continue
        reject += _reject_reasons(verdict, task in beneficiaries)
        evidence += _evidence_reasons(verdict)
        if verdict.status == "inconclusive" and verdict.samples_needed:
            samples[task] = verdict.samples_needed

    failing_risks = tuple(t for t in risks if t in verdicts and verdicts[t].status == "fail")
    passing = tuple(t for t in tasks if t in verdicts and verdicts[t].status == "pass")
    outcome: Outcome
    allowed: tuple[str, ...]
    if unstartable:
        outcome, allowed = "error", ()
        summary = f"Error under {policy.version_label}: an engine could not start, so nothing was measured."
        reasons = [summary, *dict.fromkeys(unstartable)]
    elif reject:
        outcome, allowed = "reject", ()
        summary = f"Reject under {policy.version_label}: {len(reject)} blocking finding(s)."
        # A risk task's own failure blocks nothing more here, but the reviewer reads it all the same.
        also = [f"Risk task {task} also fails: {m.reason}" for task, m in _risk_failures(verdicts, failing_risks)]
        reasons = [summary, *reject, *also, *evidence]
    elif evidence:
        outcome, allowed = "needs_evidence", ()
        more = f"; about {max(samples.values())} more samples per task would likely settle it" if samples else ""
        summary = f"Needs evidence under {policy.version_label}: {len(evidence)} open question(s){more}."
        reasons = [summary, *evidence]
    elif failing_risks:
        outcome, allowed = "restrict", passing
        summary = (
            f"Restrict under {policy.version_label}: the candidate may serve {', '.join(allowed)}; "
            f"{', '.join(failing_risks)} stay on the baseline."
        )
        reasons = [summary] + [
            f"Risk task {task} fails: {m.reason}" for task, m in _risk_failures(verdicts, failing_risks)
        ]
    else:
        outcome, allowed = "approve", tasks
        reasons = [f"Approve under {policy.version_label}: every task passes ({', '.join(tasks)})."]

    blocked = tuple(task for task in tasks if task not in allowed)
    return Decision(
        outcome=outcome,
        policy_version=policy.version_label,
        dry_run=policy.dry_run,
        mechanisms=tuple(mechanisms),
        bottleneck=bottleneck,
        beneficiary_tasks=beneficiaries,
        risk_tasks=risks,
        allowed_tasks=tuple(allowed),
        blocked_tasks=blocked,
        reasons=tuple(reasons),
        verdicts={task: verdicts[task] for task in tasks if task in verdicts},
        proposed_routes={task: ("candidate" if task in allowed else "baseline") for task in tasks},
        samples_needed=samples,
    )


def evaluate(
    policy: Policy,
    evidence: Sequence[TaskEvidence],
    *,
    mechanisms: Sequence[str],
    bottleneck: str | None,
    beneficiary_tasks: Sequence[str],
    risk_tasks: Sequence[str],
    seed: int | None = None,
    noise: Mapping[str, NoiseFloor] | None = None,
    staged: Mapping[str, StagedTask] | None = None,
) -> Decision:
    """Judge every task's evidence with its role, then decide (the one call services need).

    ``noise`` holds the baseline's A/A noise floors by task, where a current calibration has them;
    ``staged`` a staged evaluation's looks by task (``gates.judge.staged``).
    """
    verdicts = [
        judge_task(
            policy,
            item,
            role="beneficiary" if item.task in beneficiary_tasks else "risk",
            mechanisms=mechanisms,
            bottleneck=bottleneck,
            seed=seed,
            noise=(noise or {}).get(item.task),
            staged=(staged or {}).get(item.task),
        )
        for item in evidence
    ]
    return decide(policy, mechanisms, bottleneck, beneficiary_tasks, risk_tasks, verdicts)
