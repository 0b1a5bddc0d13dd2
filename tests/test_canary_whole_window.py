"""The whole-window judgement at a canary's end, on stored rounds: when a round asks for it, and
what a window that still cannot tell does. The same judgement on a real Prometheus (a pass that
promotes, a breach that pauses) is in tests/test_canary_rounds.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from gates.canary.judge import TaskRound, judge_task_round
from gates.canary.queries import SliceNumbers
from gates.models import ReleaseTicket, RoundAction
from gates.policy.parse import load_policy
from gates.policy.rules import POLICY_DIR
from gates.services import canary, routing, signoff
from tests.factories import canary_round, decided

pytestmark = pytest.mark.django_db

RULE = load_policy(POLICY_DIR / "default.yaml").canary
TRAFFIC = {"cs_summary": 5000}


@pytest.fixture
def in_canary(ada: User, erin: User, rita: User, baseline: Any, candidate: Any) -> ReleaseTicket:
    routing.routes_set(task="cs_summary", backend=baseline, actor=ada, reason="initial fleet")
    ticket = decided("approve", erin, baseline, candidate, observation_window_hours=1)
    assert signoff.signoff_record(ticket=ticket, actor=rita, verdict="approve", reason_code="evidence_sufficient").moved
    return routing.routes_start_canary(ticket=ticket, actor=erin)


def window_ended(ticket: ReleaseTicket) -> ReleaseTicket:
    ReleaseTicket.objects.filter(pk=ticket.pk).update(canary_started_at=timezone.now() - timedelta(hours=2))
    ticket.refresh_from_db()
    return ticket


def passing() -> TaskRound:
    """A task whose round passed (its signals' verdicts are not what these tests look at)."""
    return TaskRound("cs_summary", "pass", [], SliceNumbers(requests=800), SliceNumbers(requests=800))


def too_few() -> TaskRound:
    """A task judged on slices smaller than the policy's per-round minimum: inconclusive."""
    small = SliceNumbers(requests=RULE.min_requests_per_round - 1, outcomes={"ok": RULE.min_requests_per_round - 1})
    judged = judge_task_round("cs_summary", candidate=small, baseline=small, rule=RULE)
    assert judged.status == "inconclusive", judged.reason
    return judged


def test_only_a_round_after_the_window_with_an_inconclusive_round_before_it_pools_the_window(
    in_canary: ReleaseTicket, rita: User
) -> None:
    now = timezone.now()
    first = canary_round(in_canary, 1, "inconclusive", RoundAction.CONTINUE)
    assert canary._whole_window_from(in_canary, now=now) is None  # the window runs on

    ticket = window_ended(in_canary)
    assert canary._whole_window_from(ticket, now=now) == first.window_start

    canary_round(ticket, 2, "inconclusive", RoundAction.PAUSE)
    canary.canary_resume(ticket=ticket, actor=rita, reason="the slices were small; traffic doubles tonight")
    ticket.refresh_from_db()
    # A resume settles the rounds before it: nothing left to pool until a later round cannot tell.
    assert canary._whole_window_from(ticket, now=timezone.now()) is None


def test_a_window_that_passed_round_by_round_is_not_pooled(in_canary: ReleaseTicket) -> None:
    canary_round(in_canary, 1, "pass", RoundAction.CONTINUE)
    ticket = window_ended(in_canary)
    assert canary._whole_window_from(ticket, now=timezone.now()) is None


@pytest.mark.parametrize(("allowed", "action"), [(3, RoundAction.CONTINUE), (1, RoundAction.PAUSE)])
def test_a_whole_window_that_still_cannot_tell_is_an_inconclusive_round_in_the_streak(
    in_canary: ReleaseTicket, allowed: int, action: str
) -> None:
    canary_round(in_canary, 1, "inconclusive", RoundAction.CONTINUE)
    ticket = window_ended(in_canary)
    now = timezone.now()
    since = canary._whole_window_from(ticket, now=now)
    assert since is not None
    whole = canary.WholeWindow(since, [1], {"cs_summary": too_few()})
    rule = replace(RULE, max_inconclusive_rounds=allowed)

    plan = canary._decide(ticket, rule, {"cs_summary": passing()}, TRAFFIC, tenants=("tenant-a",), now=now, whole=whole)

    assert (plan.verdict, plan.action) == ("inconclusive", action), plan.reason
    assert "round 1 could not tell" in plan.reason and "still inconclusive — cs_summary: " in plan.reason
    assert "2 inconclusive rounds in a row" in plan.reason if allowed == 1 else "(2 in a row)" in plan.reason
    assert plan.details["whole_window"]["tasks"]["cs_summary"]["status"] == "inconclusive"
    assert plan.details["whole_window"]["since"] == since.isoformat()


def test_a_whole_window_that_passes_lets_the_round_go_on_to_the_traffic_minimum(in_canary: ReleaseTicket) -> None:
    canary_round(in_canary, 1, "inconclusive", RoundAction.CONTINUE)
    ticket = window_ended(in_canary)
    now = timezone.now()
    whole = canary.WholeWindow(now - timedelta(minutes=10), [1], {"cs_summary": passing()})

    plan = canary._decide(
        ticket, RULE, {"cs_summary": passing()}, {"cs_summary": 10}, tenants=("tenant-a",), now=now, whole=whole
    )

    assert (plan.verdict, plan.action) == ("pass", RoundAction.CONTINUE), plan.reason
    assert "every signal within its margin (cs_summary 800 candidate requests)" in plan.reason
    assert "the whole window passed, but the candidate has served too little traffic" in plan.reason
    assert plan.details["whole_window"]["tasks"]["cs_summary"]["status"] == "pass"
