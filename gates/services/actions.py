"""The actions people take on a ticket, in one table that the web UI and the API both dispatch through.

Most actions are plain lifecycle transitions (``gates.services.tickets``); evaluating asks the
workers for runs, and canary, promotion and rollback move routes too. Approve, restrict and reject
are not here: they are reviewers' sign-offs on a decision (``gates.services.signoff``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.errors import InvalidInput, NotAllowed
from core.roles import ADMIN, Actor, has_role, person
from gates.models import TRANSITIONS, ReleaseTicket
from gates.services.canary import canary_resume
from gates.services.evaluation import EVALUABLE, evaluation_cancel, evaluation_request
from gates.services.routing import routes_promote, routes_rollback, routes_start_canary
from gates.services.tickets import ACTION_ROLES, REASON_REQUIRED, SIGN_OFF_ACTIONS, ticket_transition


@dataclass(frozen=True)
class Request:
    """What a person asked for: the reason they gave, extra details for the ledger, one task (rollback)."""

    ticket: ReleaseTicket
    actor: Actor
    reason: str = ""
    details: dict[str, Any] | None = None
    task: str | None = None


@dataclass(frozen=True)
class TicketAction:
    name: str
    take: Callable[[Request], Any]
    reason_required: bool = False


def _transition(name: str) -> TicketAction:
    def take(r: Request) -> Any:
        return ticket_transition(ticket=r.ticket, action=name, actor=r.actor, reason=r.reason, details=r.details)

    return TicketAction(name, take, reason_required=name in REASON_REQUIRED)


TICKET_ACTIONS: dict[str, TicketAction] = {
    **{name: _transition(name) for name in TRANSITIONS if name not in SIGN_OFF_ACTIONS},
    # Submits a draft first; the fan-out to baseline and candidate runs happens on a worker.
    "evaluate": TicketAction("evaluate", lambda r: evaluation_request(ticket=r.ticket, actor=r.actor)),
    "cancel_evaluation": TicketAction("cancel_evaluation", lambda r: evaluation_cancel(ticket=r.ticket, actor=r.actor)),
    "start_canary": TicketAction(
        "start_canary", lambda r: routes_start_canary(ticket=r.ticket, actor=r.actor, reason=r.reason)
    ),
    "promote": TicketAction("promote", lambda r: routes_promote(ticket=r.ticket, actor=r.actor, reason=r.reason)),
    "roll_back": TicketAction(
        "roll_back",
        lambda r: routes_rollback(ticket=r.ticket, actor=r.actor, reason=r.reason, task=r.task),
        reason_required=True,
    ),
    # Not a status transition: the ticket stays in canary, its analysis rounds' pause is lifted.
    "resume_canary": TicketAction(
        "resume_canary",
        lambda r: canary_resume(ticket=r.ticket, actor=r.actor, reason=r.reason),
        reason_required=True,
    ),
}


def ticket_action_take(
    *,
    ticket: ReleaseTicket,
    action: str,
    actor: Actor,
    reason: str = "",
    details: dict[str, Any] | None = None,
    task: str | None = None,
) -> Any:
    """Take ``action`` on ``ticket`` through its service; what it returns is the service's result."""
    if action in SIGN_OFF_ACTIONS:
        raise NotAllowed("approve, restrict and reject are reviewer sign-offs: use the sign-off form")
    if action not in TICKET_ACTIONS:
        raise InvalidInput({"action": f"unknown action {action!r}"})
    return TICKET_ACTIONS[action].take(Request(ticket, actor, reason, details, task))


def ticket_actions_for(ticket: ReleaseTicket, actor: Actor) -> list[str]:
    """The actions worth offering ``actor`` on ``ticket`` now; the services still decide when one is taken.

    The owner (or an admin) asks for the evaluation of a submitted ticket; the system's
    ``start_evaluation`` follows on a worker. Sign-off actions are offered by the sign-off form.
    """
    user = person(actor)
    if user is None:
        return []
    is_owner = ticket.owner_id == user.pk
    actions = ticket.allowed_actions()
    if ticket.status in EVALUABLE and (is_owner or has_role(user, ADMIN)):
        actions = ["evaluate", *[a for a in actions if a != "start_evaluation"]]
    offered = []
    for action in actions:
        if action == "evaluate":
            offered.append(action)
            continue
        if action in SIGN_OFF_ACTIONS:
            continue
        allowed = ACTION_ROLES[action]
        if (is_owner and "owner" in allowed) or has_role(user, *(allowed - {"owner", "system"})):
            offered.append(action)
    return offered
