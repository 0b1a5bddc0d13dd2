"""The gate's binding verdict on a backend, as rollout tools and deployment checks ask for it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from backends.selectors import backend_get
from gates.models import (
    CanaryRound,
    DecisionOutcome,
    GateDecision,
    ReleaseTicket,
    RoundVerdict,
    TicketStatus,
)
from gates.selectors.canary import canary_pause
from gates.selectors.decisions import decision_current

# Verdicts beyond the decision outcomes, for states where nothing binding exists yet.
UNKNOWN = "unknown"  # no such backend
UNGATED = "ungated"  # a backend no ticket has proposed as a candidate
PENDING = "pending"  # evaluating, or judged but not yet signed
ROLLED_BACK = "rolled_back"
RETIRED = "retired"


@dataclass
class BackendVerdict:
    """Whether ``backend`` may serve ``route``, and why, in words and ids."""

    backend: str
    verdict: str
    allowed: bool
    route: str | None = None
    tasks: list[str] = field(default_factory=list)
    ticket: int | None = None
    ticket_status: str | None = None
    decision: int | None = None
    proposed_outcome: str | None = None
    reason: str = ""
    # The latest canary analysis round, while the ticket is in canary: {round, verdict, action, at, reason}.
    live: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _route_task(route: str | None) -> str | None:
    return route.partition("@")[0] if route else None


def backend_verdict(*, backend_name: str, route: str | None = None) -> BackendVerdict:
    """The gate's binding verdict on ``backend_name`` as a candidate (optionally for one route).

    The latest ticket that proposed the backend as its candidate decides. ``approve`` allows every
    route; ``restrict`` allows only the signed tasks (so without a route it does not allow); a
    rollback or retirement withdraws the allowance whatever was signed before.
    """
    # PostgreSQL refuses to compare text holding a NUL character; no backend name has one.
    backend = backend_get(name=backend_name) if "\x00" not in backend_name else None
    if backend is None:
        reason = f"OptGate has no backend named {backend_name!r}"
        return BackendVerdict(backend_name, UNKNOWN, False, route, reason=reason)
    ticket = ReleaseTicket.objects.filter(candidate=backend).exclude(status=TicketStatus.DRAFT).order_by("-id").first()
    if ticket is None:
        return BackendVerdict(
            backend.name, UNGATED, False, route, reason=f"no submitted ticket proposes {backend.name} as a candidate"
        )
    decision: GateDecision | None = decision_current(ticket=ticket)
    verdict = BackendVerdict(
        backend.name,
        PENDING,
        False,
        route,
        ticket=ticket.pk,
        ticket_status=ticket.status,
        decision=decision.pk if decision else None,
        proposed_outcome=decision.outcome if decision else None,
    )
    if ticket.status in (TicketStatus.ROLLED_BACK, TicketStatus.RETIRED):
        verdict.verdict = ROLLED_BACK if ticket.status == TicketStatus.ROLLED_BACK else RETIRED
        verdict.reason = f"ticket #{ticket.pk} is {ticket.status}"
        return verdict
    if decision is None:
        verdict.reason = f"ticket #{ticket.pk} is {ticket.status}; no gate decision yet"
        return verdict
    if decision.outcome in (DecisionOutcome.NEEDS_EVIDENCE, DecisionOutcome.ERROR) and not decision.signed_verdict:
        verdict.verdict = decision.outcome
        verdict.reason = (decision.reasons or ["the evidence is inconclusive"])[0]
        return verdict
    if not decision.signed_verdict:
        verdict.reason = f"the gate proposes {decision.outcome}; reviewers have not signed it yet"
        return verdict
    verdict.verdict = decision.signed_verdict
    verdict.tasks = list(decision.signed_tasks)
    task = _route_task(route)
    if decision.signed_verdict == DecisionOutcome.APPROVE:
        verdict.allowed = task is None or not verdict.tasks or task in verdict.tasks
        verdict.reason = f"ticket #{ticket.pk} approved" + ("" if verdict.allowed else f", but not for {task}")
    elif decision.signed_verdict == DecisionOutcome.RESTRICT:
        verdict.allowed = task is not None and task in verdict.tasks
        scope = ", ".join(verdict.tasks) or "no task"
        verdict.reason = f"ticket #{ticket.pk} restricted to {scope}"
        if task is not None:
            verdict.reason += f"; {task} is {'in' if verdict.allowed else 'not in'} it"
    else:
        verdict.reason = f"ticket #{ticket.pk} rejected"
    if ticket.status == TicketStatus.CANARY:
        _follow_canary(verdict, ticket, task)
    return verdict


def _follow_canary(verdict: BackendVerdict, ticket: ReleaseTicket, task: str | None) -> None:
    """During the canary the latest analysis round decides too: the signed verdict allows at most
    what the live evidence allows. No round yet: the signed verdict alone, as before the canary."""
    rounds = CanaryRound.objects.filter(ticket=ticket)
    if ticket.canary_started_at is not None:
        rounds = rounds.filter(started_at__gte=ticket.canary_started_at)
    latest = rounds.order_by("-number").first()
    if latest is None:
        return
    verdict.live = {
        "round": latest.number,
        "verdict": latest.verdict,
        "action": latest.action,
        "at": latest.window_end.isoformat(),
        "reason": latest.reason,
    }
    if not verdict.allowed:
        return
    paused = canary_pause(ticket)  # none once a reviewer resumed the canary
    if latest.verdict == RoundVerdict.ERROR:
        blocked, why = "canary_error", f"canary round {latest.number} could not measure: {latest.error}"
    elif paused is not None:
        blocked, why = "canary_paused", f"canary paused at round {paused.number}: {paused.reason}"
    elif task is not None:
        # The latest round that judged this task (a task rolled back drops out of later rounds).
        judged = next((r for r in rounds.order_by("-number") if task in r.tasks), None)
        status = judged.tasks[task].get("status") if judged else None
        if judged is None or status == "pass":
            verdict.reason += f"; canary round {latest.number}: {task} passed" if judged else ""
            return
        blocked = f"canary_{status}"
        why = f"canary round {judged.number}: {judged.tasks[task].get('reason', status)}"
    elif latest.verdict == RoundVerdict.PASS:
        verdict.reason += f"; canary round {latest.number} passed"
        return
    else:
        blocked, why = f"canary_{latest.verdict}", f"canary round {latest.number}: {latest.reason}"
    verdict.allowed = False
    verdict.verdict = blocked
    verdict.reason = why
