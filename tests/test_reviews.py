"""Review outcomes, each applied through a service with its ledger entry."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User

from core.errors import DomainError, InvalidInput, NotAllowed
from gates.models import ReleaseTicket, Review, ReviewReason, ReviewStatus
from gates.services import reviews
from ledger.models import LedgerEntry
from ledger.selectors import ledger_verify

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_broker() -> Any:
    with mock.patch("core.queue.enqueue"):
        yield


@pytest.fixture
def review(draft: ReleaseTicket) -> Review:
    opened = reviews.review_open(ticket=draft, reason=ReviewReason.QUARTERLY)
    assert opened is not None
    return opened


def test_keep_default_closes_the_review_and_ledgers_it(review: Review, rita: User) -> None:
    done = reviews.review_complete(review=review, outcome="keep_default", actor=rita, comment="TTFT gain holds")
    assert (done.status, done.outcome, done.reviewed_by) == (ReviewStatus.DONE, "keep_default", rita)
    entry = LedgerEntry.objects.get(kind="review.completed")
    assert entry.payload["outcome"] == "keep_default" and entry.actor == rita
    assert LedgerEntry.objects.filter(kind="review.opened").count() == 1
    assert ledger_verify().ok


def test_rollback_moves_every_route_back_through_the_routing_service(review: Review, rita: User) -> None:
    with mock.patch("gates.services.routing.routes_rollback") as rollback:
        rollback.return_value.number = 7
        done = reviews.review_complete(review=review, outcome="rollback", actor=rita, comment="quality drift")
    rollback.assert_called_once()
    assert "task" not in rollback.call_args.kwargs  # all of the ticket's tasks
    assert "quality drift" in rollback.call_args.kwargs["reason"]
    assert LedgerEntry.objects.get(kind="review.completed").payload["applied"] == {"route_versions": [7]}
    assert done.outcome == "rollback"


def test_restrict_moves_only_the_named_tasks_back(review: Review, rita: User) -> None:
    with mock.patch("gates.services.routing.routes_rollback") as rollback:
        rollback.return_value.number = 3
        reviews.review_complete(
            review=review, outcome="restrict", actor=rita, comment="compliance drift", restrict_tasks=["knowledge_qa"]
        )
    assert [call.kwargs["task"] for call in rollback.call_args_list] == ["knowledge_qa"]
    assert LedgerEntry.objects.get(kind="review.completed").payload["restrict_tasks"] == ["knowledge_qa"]


def test_restrict_needs_the_tasks_to_move(review: Review, rita: User) -> None:
    with pytest.raises(InvalidInput):
        reviews.review_complete(review=review, outcome="restrict", actor=rita, comment="drift")


def test_observe_more_opens_a_follow_up_review(review: Review, rita: User) -> None:
    reviews.review_complete(review=review, outcome="observe_more", actor=rita, comment="one more month")
    follow_up = Review.objects.get(status=ReviewStatus.OPEN)
    assert follow_up.reason == ReviewReason.QUARTERLY and follow_up.details["follows"] == review.pk


def test_the_owner_cannot_review_their_own_optimization(review: Review, erin: User) -> None:
    with pytest.raises(NotAllowed):
        reviews.review_complete(review=review, outcome="keep_default", actor=erin)


def test_an_outsider_cannot_complete_a_review(review: Review, olga: User) -> None:
    with pytest.raises(NotAllowed):
        reviews.review_complete(review=review, outcome="keep_default", actor=olga)


def test_a_review_is_completed_once(review: Review, rita: User, bella: User) -> None:
    reviews.review_complete(review=review, outcome="keep_default", actor=rita)
    review.refresh_from_db()
    with pytest.raises(DomainError):
        reviews.review_complete(review=review, outcome="rollback", actor=bella, comment="late")
