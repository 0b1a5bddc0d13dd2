"""The decision summary: what a reviewer needs from one screen, in the same shape for UI, API and CLI.

The outcome; one row per task with its verdict and the one or two numbers that decided it (with
their intervals, in the metric's unit); the blocking findings, each once; and the next action for
the person looking. Each task's numbers name the run they came from on each side, and so who
produced them (an OptGate worker, or a person's import with its file hashes). It reads the stored
decision and, in two queries, its runs' provenance.
"""

from __future__ import annotations

from typing import Any

from gates.display import metric_display
from gates.judge.records import LOAD_NOT_MEASURED
from gates.models import DecisionOutcome, GateDecision, TicketStatus
from gates.selectors.evidence import decision_provenance

DECIDING_PER_TASK = 2
# Which metrics decided a task, by its verdict: the failures of a failed task, the open questions
# of an inconclusive one, and for a passing task its promises (objectives and mechanism checks)
# before its guardrails.
_KIND_ORDER = {"objective": 0, "mechanism": 1, "guardrail": 2, "tradeable": 3}
WARNING_PREFIX = "Warning: "
# A task in one of these states holds the release back; its checks in the same state are the findings.
FINDING_STATUSES = ("fail", "inconclusive", "error")


def deciding_metrics(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    """The one or two stored metric verdicts of a task (``TaskVerdict.to_dict()``) that decided it."""
    metrics = list(verdict.get("metrics") or [])
    status = verdict.get("status")
    if status in FINDING_STATUSES:
        # A check the skipped load left open has no numbers: the row says why instead (``not_measured``).
        chosen = [m for m in metrics if m.get("status") == status and m.get("test") != LOAD_NOT_MEASURED]
        chosen.sort(key=lambda m: (not m.get("critical"), _KIND_ORDER.get(m.get("kind", ""), 9)))
    else:
        chosen = [m for m in metrics if m.get("status") == "pass" and m.get("kind") != "tradeable"]
        chosen.sort(key=lambda m: (_KIND_ORDER.get(m.get("kind", ""), 9), not m.get("critical")))
    return chosen[:DECIDING_PER_TASK]


def _number_row(metric: dict[str, Any]) -> dict[str, Any]:
    return {"metric": metric.get("metric", ""), "status": metric.get("status", ""), **metric_display(metric)}


def _samples_used(verdict: dict[str, Any]) -> int | None:
    # Per-sample metrics carry the sample count; one-figure metrics (n=1) say nothing about it.
    counts = [m["n"] for m in verdict.get("metrics") or [] if isinstance(m.get("n"), int) and m["n"] > 1]
    return max(counts) if counts else None


def blocking_findings(verdicts: dict[str, Any]) -> list[dict[str, str]]:
    """The failed (or unsettled) checks that hold the release back, one reason text each."""
    findings = []
    for task, verdict in verdicts.items():
        status = verdict.get("status")
        if status not in FINDING_STATUSES:
            continue
        for metric in verdict.get("metrics") or []:
            # A check the skipped load left open holds nothing back: the answers already rejected.
            if metric.get("status") == status and metric.get("test") != LOAD_NOT_MEASURED:
                findings.append(
                    {
                        "task": task,
                        "metric": metric.get("metric", ""),
                        "status": status,
                        "text": metric.get("reason", ""),
                    }
                )
    return findings


def not_measured(verdict: dict[str, Any]) -> str:
    """Why the task's load was not measured (what already rejected the candidate), where that
    leaves the task open: its timing checks carry the reason. "" when the load was measured, and
    for a task that fails anyway (what its timing would have said does not matter)."""
    if verdict.get("status") == "fail":
        return ""
    for metric in verdict.get("metrics") or []:
        if metric.get("test") == LOAD_NOT_MEASURED:
            return str((metric.get("details") or {}).get("not_measured") or "").removeprefix("not measured: ")
    return ""


def numbers_text(numbers: list[dict[str, Any]], unmeasured: str = "") -> str:
    """A task's deciding numbers in one line: "Pass rate 91.0% → 81.0% (−10.0 pts, CI −14.9 to −6.6 pts)",
    with ", A/A noise ±1.0 pts" where the baseline's calibration gave the metric a noise floor, and
    "timing not measured: …" where the task's load was skipped (``unmeasured``: why)."""
    parts = []
    for n in numbers:
        text = f"{n['label']} {n['baseline']} → {n['candidate']}"
        if n["change"] != "—":
            text += f" ({n['change']}" + (f", CI {n['interval']}" if n["interval"] != "—" else "")
            text += (f", A/A noise {n['noise_floor']}" if n.get("noise_floor", "—") != "—" else "") + ")"
        parts.append(text)
    if unmeasured:
        parts.append(f"timing not measured: {unmeasured}")
    return "; ".join(parts) or "—"


def decision_summary(decision: GateDecision) -> dict[str, Any]:
    """The viewer-independent part of the summary of ``decision`` (see the module docstring)."""
    verdicts: dict[str, Any] = decision.verdicts or {}
    provenance = decision_provenance(decision)
    tasks = [
        {
            "task": task,
            "role": verdict.get("role", ""),
            "status": verdict.get("status", ""),
            "numbers": [_number_row(m) for m in deciding_metrics(verdict)],
            "not_measured": not_measured(verdict),
            "samples_used": _samples_used(verdict),
            "samples_needed": verdict.get("samples_needed") or (decision.samples_needed or {}).get(task),
            "provenance": provenance[task],
        }
        for task, verdict in verdicts.items()
    ]
    return {
        "decision": decision.pk,
        "outcome": decision.outcome,
        "policy_version": decision.policy_version,
        "signed_verdict": decision.signed_verdict or "",
        "signed_tasks": list(decision.signed_tasks or []),
        "allowed_tasks": list(decision.allowed_tasks or []),
        "tasks": tasks,
        "findings": blocking_findings(verdicts),
        "warnings": [r.removeprefix(WARNING_PREFIX) for r in decision.reasons or [] if r.startswith(WARNING_PREFIX)],
        "stages": stage_summary(decision.stages or {}),
    }


def _percent(value: float) -> str:
    return "<0.01%" if 0 < value < 0.0001 else f"{value:.2%}"


def stage_summary(stages: dict[str, Any]) -> dict[str, Any] | None:
    """A staged decision's looks in a few words per task and guardrail (None for one fixed stage).

    Each look reads "pairs · score / ±boundary → outcome"; the α spent is the last look's, one-sided.
    """
    if not stages:
        return None
    rows = []
    spending = ""
    for task, item in (stages.get("tasks") or {}).items():
        for staged in (item.get("guardrails") or {}).values():
            spending = spending or staged["design"]["alpha_spending"]
            looks = staged.get("looks") or []
            rows.append(
                {
                    "task": task,
                    "label": staged.get("label", ""),
                    "looks": [
                        {
                            "look": look["look"],
                            "n": look["n"],
                            "statistic": "—" if look["statistic"] is None else f"{look['statistic']:.2f}",
                            "bound": "—" if look["efficacy_bound"] is None else f"{look['efficacy_bound']:.2f}",
                            "outcome": look["outcome"],
                        }
                        for look in looks
                    ],
                    "of": staged["design"]["looks"],
                    "alpha_spent": _percent(looks[-1]["alpha_spent"]) if looks else "—",
                    "outcome": looks[-1]["outcome"] if looks else "",
                }
            )
    return {"count": stages.get("count", 1), "spending": spending, "rows": rows}


def next_action(
    *, status: str, decision: GateDecision | None, may_sign: bool = False, is_owner: bool = False
) -> dict[str, str]:
    """What the person looking should do next: ``{"action": …, "text": …}``.

    ``action`` is one of ``sign_off``, ``await_sign_off``, ``evaluate_again``, ``fix_config``,
    ``start_canary``, ``promote``, ``wait`` or ``none``; ``may_sign`` says the viewer may sign the
    decision now, ``is_owner`` that they filed the ticket.
    """
    if decision is None or status in (TicketStatus.DRAFT, TicketStatus.SUBMITTED, TicketStatus.EVALUATING):
        return {"action": "wait", "text": "Wait for the evaluation: the gate decides when both runs have finished."}
    if status == TicketStatus.NEEDS_EVIDENCE or decision.outcome == DecisionOutcome.NEEDS_EVIDENCE:
        needed = decision.samples_needed or {}
        more = ", ".join(f"{task} about {n:,} more" for task, n in needed.items())
        text = "Evaluate again" + (f" with more samples ({more})." if more else " to settle the open checks.")
        return {"action": "evaluate_again", "text": text}
    if status == TicketStatus.EVALUATED and decision.outcome == DecisionOutcome.ERROR:
        cause = (decision.reasons or ["", "an engine could not start"])[1:2] or ["an engine could not start"]
        text = f"Fix the configuration that could not start ({cause[0]}) and file a new ticket"
        return {"action": "fix_config", "text": text + ("; sign off reject to close this one." if may_sign else ".")}
    if status == TicketStatus.EVALUATED:
        if may_sign:
            return {"action": "sign_off", "text": f"Sign off: the policy proposes {decision.outcome}."}
        who = "You own this ticket: a reviewer" if is_owner else "A reviewer"
        return {"action": "await_sign_off", "text": f"{who} signs off the policy's {decision.outcome} next."}
    if status == TicketStatus.REJECTED:
        return {
            "action": "fix_config",
            "text": "Fix the candidate's configuration for the blocking findings and file a new ticket.",
        }
    if status in (TicketStatus.APPROVED, TicketStatus.RESTRICTED):
        return {"action": "start_canary", "text": "Start the canary: the canary tenants route to the candidate first."}
    if status == TicketStatus.CANARY:
        return {"action": "promote", "text": "Promote after the observation window, or roll back."}
    return {"action": "none", "text": f"Nothing is waiting: the ticket is {status.replace('_', ' ')}."}
