"""Beat schedules and the time-driven checks they run, with frozen time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
import time_machine
from django.contrib.auth.models import User
from django_celery_beat.models import PeriodicTask

from backends import services as backend_services
from backends.models import Backend
from gates.models import Notification, ReleaseTicket, Review, ReviewReason, ReviewStatus, TicketStatus
from gates.services import reviews
from gates.services import tickets as gate_services
from tests.factories import backend_fields
from workers.schedules import SCHEDULES
from workers.services import schedules_install

pytestmark = pytest.mark.django_db

T0 = datetime(2027, 1, 4, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _no_broker() -> Any:
    with mock.patch("core.queue.enqueue"):
        yield


def _walk(ticket: ReleaseTicket, erin: User, rita: User, *actions: str) -> ReleaseTicket:
    """Move a ticket through its lifecycle with the service, as people and the system would."""
    actors: dict[str, User | None] = {
        "submit": erin,
        "start_evaluation": None,
        "finish_evaluation": None,
        "approve": rita,
        "start_canary": erin,
        "promote": None,
    }
    for action in actions:
        ticket = gate_services.ticket_transition(ticket=ticket, action=action, actor=actors[action])
    return ticket


TO_CANARY = ("submit", "start_evaluation", "finish_evaluation", "approve", "start_canary")


def test_every_schedule_is_installed_once_and_again_idempotently() -> None:
    schedules_install()
    schedules_install()
    tasks = dict(PeriodicTask.objects.values_list("name", "task"))
    assert tasks == {item.name: item.task for item in SCHEDULES}
    assert set(tasks.values()) == {
        "optgate.sweep",
        "optgate.close_observation_windows",
        "optgate.schedule_canary_rounds",
        "optgate.open_due_reviews",
        "optgate.remind_reviews",
        "optgate.ledger_checkpoint",
    }


def test_it_prompts_promotion_once_when_the_observation_window_ends(
    draft: ReleaseTicket, erin: User, rita: User
) -> None:
    with time_machine.travel(T0, tick=False):
        ticket = _walk(draft, erin, rita, *TO_CANARY)  # observation window: 72 h
    with time_machine.travel(T0 + timedelta(hours=71), tick=False):
        assert reviews.observation_windows_close() == []
    with time_machine.travel(T0 + timedelta(hours=72, minutes=1), tick=False):
        assert reviews.observation_windows_close() == [(ticket.pk, "prompted")]
        assert reviews.observation_windows_close() == []
    prompt = Notification.objects.get(event="ticket.promotion_due")
    assert "erin@example.com" in prompt.recipients and "rita@example.com" in prompt.recipients
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.CANARY


def test_time_alone_never_promotes_even_where_the_policy_allows_automatic_promotion(
    draft: ReleaseTicket, erin: User, rita: User, settings: Any
) -> None:
    # Automatic promotion is the canary rounds' to make, on evidence (tests/test_canary_rounds.py).
    settings.OPTGATE_AUTO_PROMOTE_RISK_TIERS = ["low", "medium", "high"]
    with time_machine.travel(T0, tick=False):
        ticket = _walk(draft, erin, rita, *TO_CANARY)
    with (
        time_machine.travel(T0 + timedelta(hours=73), tick=False),
        mock.patch("gates.services.routing.routes_promote") as promote,
    ):
        assert reviews.observation_windows_close() == [(ticket.pk, "prompted")]
    promote.assert_not_called()
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.CANARY


def test_a_quarterly_review_falls_due_with_reminders_until_done(draft: ReleaseTicket, erin: User, rita: User) -> None:
    with time_machine.travel(T0, tick=False):
        ticket = _walk(draft, erin, rita, *TO_CANARY, "promote")
    with time_machine.travel(T0 + timedelta(days=90), tick=False):
        assert reviews.reviews_open_due() == []
    with time_machine.travel(T0 + timedelta(days=91, hours=1), tick=False):
        [review] = reviews.reviews_open_due()
        assert reviews.reviews_open_due() == []  # one open review per ticket and reason
        assert review.reason == ReviewReason.QUARTERLY and review.ticket_id == ticket.pk
        assert reviews.reviews_remind() == []  # just notified on opening
    with time_machine.travel(T0 + timedelta(days=94, hours=2), tick=False):
        assert [r.pk for r in reviews.reviews_remind()] == [review.pk]
        assert reviews.reviews_remind() == []
    with time_machine.travel(T0 + timedelta(days=97, hours=3), tick=False):
        assert [r.pk for r in reviews.reviews_remind()] == [review.pk]
    events = list(Notification.objects.filter(ticket=ticket).values_list("event", flat=True))
    assert sorted(events) == ["review.opened", "review.reminder", "review.reminder"]
    with time_machine.travel(T0 + timedelta(days=98), tick=False):
        reviews.review_complete(review=review, outcome="keep_default", actor=rita, comment="still pays off")
    with time_machine.travel(T0 + timedelta(days=110), tick=False):
        assert reviews.reviews_remind() == []  # done: no more reminders
        assert reviews.reviews_open_due() == []  # the next quarter counts from the completed review
    with time_machine.travel(T0 + timedelta(days=98 + 91, hours=1), tick=False):
        assert len(reviews.reviews_open_due()) == 1


def test_an_approval_not_used_within_its_lifetime_expires_into_review(
    draft: ReleaseTicket, erin: User, rita: User, settings: Any
) -> None:
    settings.OPTGATE_APPROVAL_TTL_DAYS = 30
    with time_machine.travel(T0, tick=False):
        ticket = _walk(draft, erin, rita, "submit", "start_evaluation", "finish_evaluation", "approve")
    with time_machine.travel(T0 + timedelta(days=29), tick=False):
        assert reviews.approvals_expire() == []
    with time_machine.travel(T0 + timedelta(days=30, minutes=1), tick=False):
        [review] = reviews.approvals_expire()
        assert reviews.approvals_expire() == []
    assert review.reason == ReviewReason.APPROVAL_EXPIRED and review.ticket_id == ticket.pk
    assert review.status == ReviewStatus.OPEN


def test_a_backend_moved_to_a_new_engine_version_queues_a_recheck(
    draft: ReleaseTicket, erin: User, rita: User, model_root: Any, make_backend: Callable[..., Backend]
) -> None:
    with time_machine.travel(T0, tick=False):
        ticket = _walk(draft, erin, rita, *TO_CANARY)
        assert reviews.backends_recheck() == []
    candidate = ticket.candidate
    fields = backend_fields(
        model_root, "kit-bf16-prefix-cache-v033", engine_version="0.33.0", engine_args=candidate.engine_args
    )
    with time_machine.travel(T0 + timedelta(days=3), tick=False):
        backend_services.backend_register(actor=erin, **fields)
        [review] = reviews.backends_recheck()
        assert reviews.backends_recheck() == []
    assert review.reason == ReviewReason.ENGINE_CHANGED
    assert review.details == {
        "field": "engine_version",
        "from": "0.32.0",
        "to": "0.33.0",
        "backend": "kit-bf16-prefix-cache-v033",
    }
    assert Review.objects.filter(ticket=ticket, reason=ReviewReason.HARDWARE_CHANGED).count() == 0
