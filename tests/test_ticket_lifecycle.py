"""The release ticket's state machine: every legal and illegal transition."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from core.errors import InvalidInput, NotAllowed
from gates.models import TRANSITIONS, IllegalTransition, ReleaseTicket, TicketStatus
from gates.services import tickets as services
from ledger.models import LedgerEntry

pytestmark = pytest.mark.django_db

ALL_PAIRS = [(state, action) for state in TicketStatus.values for action in TRANSITIONS]


def _force_status(ticket: ReleaseTicket, status: str) -> ReleaseTicket:
    # Test set-up only: jump straight to a state without walking the lifecycle.
    ReleaseTicket.objects.filter(pk=ticket.pk).update(status=status)
    ticket.refresh_from_db()
    return ticket


@pytest.mark.parametrize(("state", "action"), ALL_PAIRS)
def test_it_allows_exactly_the_mapped_transitions(draft: ReleaseTicket, state: str, action: str) -> None:
    ticket = _force_status(draft, state)
    sources, target = TRANSITIONS[action]
    if state in sources:
        previous = ticket.transition(action)
        ticket.refresh_from_db()
        assert previous == state
        assert ticket.status == target
    else:
        with pytest.raises(IllegalTransition, match=f"that is {state}"):
            ticket.transition(action)
        ticket.refresh_from_db()
        assert ticket.status == state


def test_it_walks_the_whole_happy_path_with_a_ledger_entry_per_step(draft: ReleaseTicket, erin: Any, rita: Any) -> None:
    steps = [
        ("submit", erin, ""),
        ("start_evaluation", None, ""),
        ("finish_evaluation", None, ""),
        ("approve", rita, "all tasks pass"),
        ("start_canary", erin, ""),
        ("promote", rita, "window clean"),
        ("roll_back", rita, "citation complaints"),
        ("retire", rita, ""),
    ]
    before = LedgerEntry.objects.count()
    for action, actor, reason in steps:
        draft = services.ticket_transition(ticket=draft, action=action, actor=actor, reason=reason)
    assert draft.status == TicketStatus.RETIRED
    kinds = list(LedgerEntry.objects.filter(subject_type="ticket").order_by("seq").values_list("kind", flat=True))
    assert kinds[-len(steps) :] == [
        "ticket.submitted",
        "ticket.evaluating",
        "ticket.evaluated",
        "ticket.approved",
        "ticket.canary",
        "ticket.default",
        "ticket.rolled_back",
        "ticket.retired",
    ]
    assert LedgerEntry.objects.count() == before + len(steps)
    rollback = LedgerEntry.objects.get(kind="ticket.rolled_back")
    assert rollback.payload["reason"] == "citation complaints"
    assert rollback.payload["from"] == "default"
    assert rollback.actor_name == "rita"


def test_it_refuses_an_illegal_transition_without_a_ledger_entry(draft: ReleaseTicket, rita: Any) -> None:
    before = LedgerEntry.objects.count()
    with pytest.raises(IllegalTransition, match="cannot approve a ticket that is draft"):
        services.ticket_transition(ticket=draft, action="approve", actor=rita, reason="looks fine")
    assert LedgerEntry.objects.count() == before
    draft.refresh_from_db()
    assert draft.status == TicketStatus.DRAFT


def test_it_refuses_a_transition_from_a_stale_copy(draft: ReleaseTicket, erin: Any) -> None:
    stale = ReleaseTicket.objects.get(pk=draft.pk)
    services.ticket_submit(ticket=draft, actor=erin)
    # The stale copy still believes it is a draft; compare-and-swap must refuse a second submit.
    with pytest.raises(IllegalTransition, match="changed concurrently"):
        stale.transition("submit")


def test_it_never_lets_the_owner_sign_off_their_own_ticket(draft: ReleaseTicket, erin: Any, ada: Any) -> None:
    draft = _force_status(draft, TicketStatus.EVALUATED)
    for action in ("approve", "restrict", "reject"):
        with pytest.raises(NotAllowed, match="owner cannot sign off"):
            services.ticket_transition(ticket=draft, action=action, actor=erin, reason="mine")


def test_it_keeps_sign_off_for_reviewers(draft: ReleaseTicket, evan: Any, olga: Any) -> None:
    draft = _force_status(draft, TicketStatus.EVALUATED)
    for outsider in (evan, olga):
        with pytest.raises(NotAllowed, match="approve is for: reviewer"):
            services.ticket_transition(ticket=draft, action="approve", actor=outsider)


def test_it_keeps_evaluation_moves_for_the_system(draft: ReleaseTicket, erin: Any, rita: Any) -> None:
    draft = _force_status(draft, TicketStatus.SUBMITTED)
    for person in (erin, rita):
        with pytest.raises(NotAllowed):
            services.ticket_transition(ticket=draft, action="start_evaluation", actor=person)
    moved = services.ticket_transition(ticket=draft, action="start_evaluation", actor=None)
    assert moved.status == TicketStatus.EVALUATING
    assert LedgerEntry.objects.filter(kind="ticket.evaluating").get().actor_name == "system"


def test_it_requires_a_reason_to_reject(draft: ReleaseTicket, rita: Any) -> None:
    draft = _force_status(draft, TicketStatus.EVALUATED)
    with pytest.raises(InvalidInput) as caught:
        services.ticket_transition(ticket=draft, action="reject", actor=rita, reason="  ")
    assert "reason" in caught.value.errors


def test_it_keeps_a_rejected_ticket_as_a_not_adopted_plan(draft: ReleaseTicket, rita: Any) -> None:
    draft = _force_status(draft, TicketStatus.EVALUATED)
    services.ticket_transition(ticket=draft, action="reject", actor=rita, reason="INT4 broke DataAgent SQL")
    entry = LedgerEntry.objects.get(kind="ticket.rejected")
    assert entry.payload["reason"] == "INT4 broke DataAgent SQL"
    assert entry.payload["plan"]["candidate"]["name"] == "kit-bf16-prefix-cache"
    assert entry.payload["plan"]["beneficiary_tasks"] == ["knowledge_qa"]
    draft.refresh_from_db()
    assert draft.status == TicketStatus.REJECTED and draft.closed_at is not None


def test_the_observation_window_ends_its_hours_after_the_canary_starts(draft: ReleaseTicket) -> None:
    assert draft.observation_window_ends is None  # no canary, no window
    ticket = _force_status(draft, TicketStatus.APPROVED)
    ticket.transition("start_canary")
    ticket.refresh_from_db()
    assert ticket.canary_started_at is not None
    assert ticket.observation_window_ends == ticket.canary_started_at + timedelta(hours=ticket.observation_window_hours)
    ticket.observation_window_hours = 0.25
    assert ticket.observation_window_ends == ticket.canary_started_at + timedelta(minutes=15)
