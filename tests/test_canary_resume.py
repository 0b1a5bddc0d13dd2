"""Resuming a canary that its analysis rounds paused for people: the service, the API and the page.

The rounds here are stored rows (what a round would have written); a real Prometheus behind the
rounds, pausing and resuming, is in tests/test_canary_rounds.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from core.errors import DomainError, InvalidInput, NotAllowed
from gates.models import ReleaseTicket, RoundAction
from gates.policy.parse import load_policy
from gates.policy.rules import POLICY_DIR
from gates.selectors.canary import canary_pause
from gates.selectors.verdicts import backend_verdict
from gates.services import canary, routing, signoff
from ledger.models import LedgerEntry
from tests.factories import canary_round, decided
from tests.ui_helpers import client_for

pytestmark = pytest.mark.django_db

REASON = "The slices were too small to judge; traffic doubles tonight."


@pytest.fixture
def in_canary(ada: User, erin: User, rita: User, baseline: Any, candidate: Any) -> ReleaseTicket:
    for task in ("cs_summary", "code_assistant"):
        routing.routes_set(task=task, backend=baseline, actor=ada, reason="initial fleet")
    ticket = decided("approve", erin, baseline, candidate, observation_window_hours=1)
    assert signoff.signoff_record(ticket=ticket, actor=rita, verdict="approve", reason_code="evidence_sufficient").moved
    return routing.routes_start_canary(ticket=ticket, actor=erin)


@pytest.fixture
def paused(in_canary: ReleaseTicket) -> ReleaseTicket:
    canary_round(in_canary, 1, "inconclusive", RoundAction.CONTINUE)
    canary_round(in_canary, 2, "inconclusive", RoundAction.PAUSE)
    return in_canary


# --- the service -----------------------------------------------------------------------------------


def test_a_reviewer_resumes_a_paused_canary_and_the_ledger_says_why(paused: ReleaseTicket, rita: User) -> None:
    assert canary_pause(paused).number == 2  # type: ignore[union-attr]
    assert backend_verdict(backend_name=paused.candidate.name).verdict == "canary_paused"

    canary.canary_resume(ticket=paused, actor=rita, reason=REASON)

    paused.refresh_from_db()
    assert paused.canary_resumed_at is not None and canary_pause(paused) is None
    entry = LedgerEntry.objects.filter(kind="canary.resumed").get()
    assert entry.actor == rita and entry.subject_id == str(paused.pk)
    assert entry.payload == {"paused_round": 2, "paused_reason": "round 2 said inconclusive", "reason": REASON}
    canary_round(paused, 3, "pass", RoundAction.CONTINUE)
    assert backend_verdict(backend_name=paused.candidate.name).allowed  # the pause no longer blocks


def test_a_canary_paused_again_after_a_resume_is_paused(paused: ReleaseTicket, ada: User) -> None:
    canary.canary_resume(ticket=paused, actor=ada, reason=REASON)  # admins resume too
    paused.refresh_from_db()
    canary_round(paused, 3, "fail", RoundAction.PAUSE)

    assert canary_pause(paused).number == 3  # type: ignore[union-attr]


def test_resuming_a_canary_that_is_not_paused_is_refused_saying_so(
    in_canary: ReleaseTicket, rita: User, erin: User, baseline: Any, candidate: Any
) -> None:
    canary_round(in_canary, 1, "pass", RoundAction.CONTINUE)
    with pytest.raises(DomainError, match=rf"canary of ticket #{in_canary.pk} is not paused.*since it started"):
        canary.canary_resume(ticket=in_canary, actor=rita, reason=REASON)

    canary_round(in_canary, 2, "fail", RoundAction.PAUSE)
    canary.canary_resume(ticket=in_canary, actor=rita, reason=REASON)
    in_canary.refresh_from_db()
    with pytest.raises(DomainError, match="since its last resume"):
        canary.canary_resume(ticket=in_canary, actor=rita, reason=REASON)

    approved = decided("approve", erin, baseline, candidate)
    with pytest.raises(DomainError, match="only a canary in progress is resumed"):
        canary.canary_resume(ticket=approved, actor=rita, reason=REASON)


def test_only_reviewers_and_admins_resume_and_they_say_why(paused: ReleaseTicket, erin: User, rita: User) -> None:
    with pytest.raises(NotAllowed, match="admin or reviewer"):
        canary.canary_resume(ticket=paused, actor=erin, reason=REASON)  # the owner, an engineer
    with pytest.raises(NotAllowed):
        canary.canary_resume(ticket=paused, actor=None, reason=REASON)  # the system never resumes
    with pytest.raises(InvalidInput, match="say why"):
        canary.canary_resume(ticket=paused, actor=rita, reason="  ")
    assert canary_pause(paused) is not None


# --- what the rounds decide after a resume ---------------------------------------------------------


def test_after_a_resume_the_rounds_before_it_no_longer_hold_promotion_back(paused: ReleaseTicket, rita: User) -> None:
    rule = load_policy(POLICY_DIR / "default.yaml").canary
    ReleaseTicket.objects.filter(pk=paused.pk).update(canary_started_at=timezone.now() - timedelta(hours=2))
    paused.refresh_from_db()
    traffic = {"cs_summary": rule.min_requests}
    canary_round(paused, 3, "pass", RoundAction.CONTINUE)

    held = canary._on_pass(paused, rule, {}, traffic, now=timezone.now())
    assert held.action == RoundAction.CONTINUE and "paused since round 2" in held.reason

    canary.canary_resume(ticket=paused, actor=rita, reason=REASON)
    paused.refresh_from_db()
    canary_round(paused, 4, "pass", RoundAction.CONTINUE)
    # No task result carries a peak here; a policy without the peak condition isolates the pause.
    rule = replace(rule, peak_fraction=0.0)
    ready = canary._on_pass(paused, rule, {}, traffic, now=timezone.now())
    assert ready.action in (RoundAction.PROMOTE, RoundAction.PROPOSE_PROMOTE), ready.reason


def test_after_a_resume_the_inconclusive_streak_starts_again(paused: ReleaseTicket, rita: User) -> None:
    rule = load_policy(POLICY_DIR / "default.yaml").canary  # three inconclusive rounds in a row allowed
    canary_round(paused, 3, "inconclusive", RoundAction.PAUSE)
    assert canary._inconclusive(paused, rule, "small").action == RoundAction.PAUSE  # the fourth in a row

    canary.canary_resume(ticket=paused, actor=rita, reason=REASON)
    paused.refresh_from_db()

    assert "(1 in a row)" in canary._inconclusive(paused, rule, "small").reason


# --- the API ---------------------------------------------------------------------------------------


def test_the_api_resumes_a_paused_canary(
    paused: ReleaseTicket, api_for: Callable[[User | None], APIClient], rita: User
) -> None:
    response = api_for(rita).post(f"/api/v1/tickets/{paused.pk}/resume-canary/", {"reason": REASON}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "canary"
    assert canary_pause(ReleaseTicket.objects.get(pk=paused.pk)) is None


def test_the_api_answers_409_when_the_canary_is_not_paused_and_403_to_the_owner(
    in_canary: ReleaseTicket, api_for: Callable[[User | None], APIClient], rita: User, erin: User
) -> None:
    url = f"/api/v1/tickets/{in_canary.pk}/resume-canary/"
    refused = api_for(rita).post(url, {"reason": REASON}, format="json")
    assert refused.status_code == 409 and "is not paused" in refused.json()["detail"]
    assert api_for(erin).post(url, {"reason": REASON}, format="json").status_code == 403
    assert api_for(rita).post(url, {}, format="json").status_code == 400  # no reason


# --- the ticket page -------------------------------------------------------------------------------


def test_the_page_shows_the_pause_and_a_resume_button_to_reviewers(
    paused: ReleaseTicket, rita: User, erin: User
) -> None:
    page = client_for(rita).get(f"/tickets/{paused.pk}/").content.decode()
    assert "Paused for people at round 2:" in page and "Resume the canary" in page
    owners = client_for(erin).get(f"/tickets/{paused.pk}/").content.decode()
    assert "Paused for people at round 2:" in owners and "Resume the canary" not in owners

    response = client_for(rita).post(
        f"/tickets/{paused.pk}/action/", {"action": "resume_canary", "comment": REASON}, follow=True
    )

    after = response.content.decode()
    assert "resume canary done" in after
    assert "Paused for people" not in after and "Resumed by a reviewer at" in after


def test_the_page_asks_for_a_reason_before_it_resumes(paused: ReleaseTicket, rita: User) -> None:
    response = client_for(rita).post(f"/tickets/{paused.pk}/action/", {"action": "resume_canary", "comment": ""})

    assert response.status_code == 400
    assert "say why the canary may go on" in response.content.decode()
    assert canary_pause(paused) is not None


def test_a_running_canary_offers_no_resume(in_canary: ReleaseTicket, rita: User) -> None:
    canary_round(in_canary, 1, "pass", RoundAction.CONTINUE)
    page = client_for(rita).get(f"/tickets/{in_canary.pk}/").content.decode()
    assert "Canary analysis rounds" in page and "Resume the canary" not in page
