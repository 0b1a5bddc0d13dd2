"""``judge_task``: every metric the policy names for one task, then the task's overall status."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gates.judge.mechanisms import bottleneck_verdict, mechanism_verdicts
from gates.judge.metric_judge import judge_metric
from gates.judge.noise import NoiseFloor, apply_noise_floor
from gates.judge.records import (
    ENGINE_START,
    LOAD_NOT_MEASURED,
    Kind,
    MetricVerdict,
    Role,
    Status,
    TaskEvidence,
    TaskVerdict,
    unmeasured_verdict,
)
from gates.judge.rules import Rule, min_samples_for
from gates.judge.staged import StagedTask
from gates.judge.validity import CLIENT_TIMED, judge_comparability
from gates.policy.metrics import METRIC_SPECS, is_quality
from gates.policy.rules import MetricRule, Policy, TaskPolicy


def _policy_rules(
    task_policy: TaskPolicy, role: Role, critical_override: str | None
) -> list[tuple[MetricRule, Kind, bool, str]]:
    """(rule, kind as judged, critical, note); objectives only decide for beneficiary tasks."""
    out: list[tuple[MetricRule, Kind, bool, str]] = []
    for rule in task_policy.guardrails:
        forced = critical_override is not None and is_quality(rule.metric) and not rule.critical
        note = f"critical under {critical_override}" if forced else ""
        out.append((rule, "guardrail", rule.critical or forced, note))
    out += [(rule, "tradeable", False, "") for rule in task_policy.tradeable]
    for rule in task_policy.objectives:
        # On a risk task an objective is not promised, so it is reported like a tradeable metric.
        out.append((rule, "objective" if role == "beneficiary" else "tradeable", False, ""))
    return out


def _to_rule(rule: MetricRule, kind: Kind, critical: bool, note: str, task_policy: TaskPolicy) -> Rule:
    return Rule(
        metric=rule.metric,
        kind=kind,
        label=rule.label,
        confidence=rule.confidence,
        margin=rule.margin or 0.0,
        min_improvement=rule.min_improvement or 0.0,
        critical=critical,
        min_n=min_samples_for(task_policy, rule.metric),
        note=note,
        slack_ms=rule.slack_ms or 0.0,
    )


def _error_task(task: str, role: Role, reason: str, ev: TaskEvidence | None, metric: str = "run") -> TaskVerdict:
    verdict = unmeasured_verdict(
        task=task, metric=metric, kind="guardrail", status="error", test="none (not judged)", reason=reason
    )
    return TaskVerdict(
        task=task,
        role=role,
        status="error",
        metrics=(verdict,),
        reason=reason,
        base_run=ev.base.run_id if ev else None,
        cand_run=ev.cand.run_id if ev else None,
    )


def judge_task(
    policy: Policy,
    evidence: TaskEvidence,
    role: Role = "risk",
    mechanisms: Sequence[str] = (),
    bottleneck: str | None = None,
    *,
    seed: int | None = None,
    noise: NoiseFloor | None = None,
    staged: StagedTask | None = None,
) -> TaskVerdict:
    """Judge every metric the policy names for one task, plus mechanism and bottleneck rules.

    Guardrails decide for every task; objectives, mechanism rules and the targeted bottleneck
    decide only for beneficiary tasks (that is where the benefit is promised). Quality guardrails
    of tasks listed under an active quantization mechanism become critical. Client-timed checks
    are inconclusive when the runs' delivery delays differ too much to compare (``validity``).
    With ``noise`` (the baseline's current A/A calibration of this task) each verdict shows its
    noise floor, and a promised improvement inside it is not counted as a benefit (``noise``).
    With ``staged`` (a staged evaluation's looks) the pass-rate guardrails are decided by their
    last look on the pooled stages instead of the fixed test on the first (``gates.judge.staged``).
    """
    task = evidence.task
    task_policy = policy.task(task)
    if task_policy is None:
        return _error_task(task, role, f"Policy {policy.version_label} has no rules for task {task!r}.", evidence)
    sides = (("baseline", evidence.base), ("candidate", evidence.cand))
    start_failures = [(side, run) for side, run in sides if run.error and run.start_failed]
    if start_failures:
        side, run = start_failures[0]
        reason = f"The {side} engine could not start with its configuration on this hardware: {run.error}"
        return _error_task(task, role, reason, evidence, metric=ENGINE_START)
    errors = [f"the {side} run failed ({run.error})" for side, run in sides if run.error]
    if errors:
        reason = f"{task} was not judged because {' and '.join(errors)}; a run error is not a verdict."
        return _error_task(task, role, reason[0].upper() + reason[1:], evidence)

    base_seed = policy.seed if seed is None else seed
    active_quant = next((m for m in mechanisms if task in policy.critical_tasks_for([m])), None)
    verdicts = [
        judge_metric(
            _to_rule(rule, kind, critical, note, task_policy),
            evidence,
            task_policy,
            seed=base_seed,
            n_boot=policy.n_boot,
        )
        for rule, kind, critical, note in _policy_rules(task_policy, role, active_quant)
    ]
    if staged is not None:
        verdicts = staged.apply(verdicts)
    verdicts += _open_loop_verdicts(evidence, task_policy, base_seed, policy.n_boot)
    if role == "beneficiary":
        verdicts += mechanism_verdicts(policy, evidence, task_policy, mechanisms, base_seed)
        if bottleneck:
            verdicts.append(bottleneck_verdict(policy, evidence, task_policy, bottleneck, base_seed))
    verdicts = judge_comparability(verdicts, evidence, policy.measurement.max_delivery_shift_ms)
    verdicts = [apply_noise_floor(_with_drift(v, evidence), noise) for v in verdicts]
    if evidence.load_skipped:
        verdicts = [v if _from_answers(v) else _not_measured(v, evidence.load_skipped) for v in verdicts]
    return TaskVerdict(
        task=task,
        role=role,
        status=_task_status(verdicts),
        metrics=tuple(verdicts),
        reason=_task_reason(task, role, verdicts),
        base_run=evidence.base.run_id,
        cand_run=evidence.cand.run_id,
    )


# Reported at the open-loop point: how the task's users would wait when requests arrive on their own.
OPEN_LOOP_METRICS = ("ttft_p95", "e2e_p95", "goodput")


def _open_loop_verdicts(evidence: TaskEvidence, task_policy: TaskPolicy, seed: int, n_boot: int) -> list[MetricVerdict]:
    """The open-loop point's latency and goodput, reported (tradeable) beside the closed-loop checks;
    latency there counts from each request's scheduled arrival."""
    point = evidence.open_loop()
    if point is None:
        return []
    rate = evidence.base.open_loop.offered_rate if evidence.base.open_loop else None
    where = f"open loop, {rate:.2f} req/s" if rate else "open loop"
    verdicts = []
    for metric in OPEN_LOOP_METRICS:
        spec = METRIC_SPECS[metric]
        rule = Rule(metric=metric, kind="tradeable", label=f"{spec.label} ({where})", source="open_loop")
        verdict = judge_metric(rule, point, task_policy, seed=seed, n_boot=n_boot)
        verdicts.append(
            replace(verdict, metric=f"open_loop:{metric}", details={**verdict.details, "offered_rate": rate})
        )
    return verdicts


def _from_answers(verdict: MetricVerdict) -> bool:
    """Judged from the answers alone (pass/fail or score), so measured without the load."""
    return verdict.metric in METRIC_SPECS and is_quality(verdict.metric)


def _not_measured(verdict: MetricVerdict, why: str) -> MetricVerdict:
    """A timing or engine verdict of a task whose load was skipped: open, with the reason; the
    outcome it leaves open is settled already by what was measured (a rejection)."""
    spec = METRIC_SPECS.get(verdict.metric)
    label = spec.label if spec is not None else verdict.metric
    unmeasured = unmeasured_verdict(
        task=verdict.task,
        metric=verdict.metric,
        kind=verdict.kind,
        status="inconclusive",
        test=LOAD_NOT_MEASURED,
        reason=f"{label}: {why}.",
        critical=verdict.critical,
        source=verdict.source,
    )
    return replace(unmeasured, details={"not_measured": why})


def _with_drift(verdict: MetricVerdict, evidence: TaskEvidence) -> MetricVerdict:
    """Client-timed verdicts of interleaved evidence show how far each side wandered across blocks."""
    spec = METRIC_SPECS.get(verdict.metric)
    if spec is None or spec.family not in CLIENT_TIMED or not (evidence.base.drift or evidence.cand.drift):
        return verdict
    drift = {"drift_baseline": dict(evidence.base.drift), "drift_candidate": dict(evidence.cand.drift)}
    return replace(verdict, details={**verdict.details, **drift, "measured_in": "interleaved blocks"})


def _task_status(verdicts: Sequence[MetricVerdict]) -> Status:
    deciding = [v.status for v in verdicts if v.deciding]
    for status in ("error", "fail", "inconclusive"):
        if status in deciding:
            return status  # type: ignore[return-value]
    return "pass"


def _task_reason(task: str, role: Role, verdicts: Sequence[MetricVerdict]) -> str:
    status = _task_status(verdicts)
    deciding = [v for v in verdicts if v.deciding]
    if status == "pass":
        return f"{task} ({role}) passes all {len(deciding)} deciding checks."
    picked = [v for v in deciding if v.status == status]
    head = {"fail": "fails", "inconclusive": "is inconclusive on", "error": "could not be judged on"}[status]
    names = ", ".join(v.metric for v in picked)
    return f"{task} ({role}) {head} {names}: {picked[0].reason}"
