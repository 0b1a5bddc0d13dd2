"""Review outcomes, each applied through a service with its ledger entry."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User

from core.errors import DomainError, InvalidInput, NotAllowed
from gates.models import ReleaseTicket, Review, ReviewReason, ReviewStatus, RouteTableVersion, TicketStatus
from gates.selectors.routes import route_table
from gates.services import reviews, routing
from ledger.models import LedgerEntry
from ledger.selectors import ledger_verify
from tests.factories import serving_by_default

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
    with mock.patch("gates.services.routing.routes_rollback_within") as rollback:
        rollback.return_value.number = 7
        done = reviews.review_complete(review=review, outcome="rollback", actor=rita, comment="quality drift")
    rollback.assert_called_once()
    assert rollback.call_args.kwargs["task"] is None  # all of the ticket's tasks
    assert "quality drift" in rollback.call_args.kwargs["reason"]
    assert LedgerEntry.objects.get(kind="review.completed").payload["applied"] == {"route_versions": [7]}
    assert done.outcome == "rollback"


def test_restrict_moves_only_the_named_tasks_back(review: Review, rita: User) -> None:
    with mock.patch("gates.services.routing.routes_rollback_within") as rollback:
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


# --- atomicity: the outcome, its route changes and its ledger entries commit together or not at all ---


@pytest.fixture
def serving(erin: User, rita: User, ada: User, baseline: Any, candidate: Any) -> ReleaseTicket:
    return serving_by_default(erin, rita, ada, baseline, candidate)


def routes_now() -> dict[tuple[str, str], str]:
    return {(r.task.slug, r.tenant): r.backend.name for r in route_table()}


def test_a_rollback_review_moves_the_routes_and_closes_in_one_go(serving: ReleaseTicket, bella: User) -> None:
    review = reviews.review_open(ticket=serving, reason=ReviewReason.QUARTERLY)
    assert review is not None
    done = reviews.review_complete(review=review, outcome="rollback", actor=bella, comment="quality drift")
    assert done.status == ReviewStatus.DONE
    assert set(routes_now().values()) == {"kit-bf16"}
    serving.refresh_from_db()
    assert serving.status == TicketStatus.ROLLED_BACK
    version = RouteTableVersion.objects.order_by("-number").first()
    assert LedgerEntry.objects.get(kind="review.completed").payload["applied"] == {"route_versions": [version.number]}  # type: ignore[union-attr]
    assert ledger_verify().ok


def test_a_failure_after_the_first_route_change_moves_no_route(
    serving: ReleaseTicket, bella: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    review = reviews.review_open(ticket=serving, reason=ReviewReason.QUARTERLY)
    assert review is not None
    before = (routes_now(), RouteTableVersion.objects.count(), LedgerEntry.objects.count())
    real = routing.routes_rollback_within
    calls: list[RouteTableVersion] = []

    def fails_after_the_first(**kwargs: Any) -> RouteTableVersion:
        if calls:
            raise RuntimeError("injected fault after the first route change")
        calls.append(real(**kwargs))
        return calls[-1]

    monkeypatch.setattr(routing, "routes_rollback_within", fails_after_the_first)
    with pytest.raises(RuntimeError, match="injected fault"):
        reviews.review_complete(
            review=review,
            outcome="restrict",
            actor=bella,
            comment="drift on both",
            restrict_tasks=["cs_summary", "code_assistant"],
        )
    assert len(calls) == 1  # the first route change did happen inside the transaction
    assert (routes_now(), RouteTableVersion.objects.count(), LedgerEntry.objects.count()) == before
    review.refresh_from_db()
    serving.refresh_from_db()
    assert (review.status, serving.status) == (ReviewStatus.OPEN, TicketStatus.DEFAULT)
    assert ledger_verify().ok


def test_a_failing_ledger_entry_undoes_the_rollback(
    serving: ReleaseTicket, bella: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    review = reviews.review_open(ticket=serving, reason=ReviewReason.QUARTERLY)
    assert review is not None
    before = routes_now()

    def refuse(**kwargs: Any) -> None:
        raise RuntimeError("ledger unavailable")

    monkeypatch.setattr(reviews, "ledger_append", refuse)
    with pytest.raises(RuntimeError):
        reviews.review_complete(review=review, outcome="rollback", actor=bella, comment="quality drift")
    assert routes_now() == before and "kit-bf16-prefix-cache" in before.values()
    review.refresh_from_db()
    assert review.status == ReviewStatus.OPEN


def test_the_second_of_two_completions_conflicts_and_moves_nothing(
    serving: ReleaseTicket, rita: User, bella: User
) -> None:
    opened = reviews.review_open(ticket=serving, reason=ReviewReason.QUARTERLY)
    assert opened is not None
    first, second = Review.objects.get(pk=opened.pk), Review.objects.get(pk=opened.pk)  # both read it open
    reviews.review_complete(review=first, outcome="keep_default", actor=rita)
    versions = RouteTableVersion.objects.count()
    with pytest.raises(DomainError, match="already done"):
        reviews.review_complete(review=second, outcome="rollback", actor=bella, comment="late")
    assert RouteTableVersion.objects.count() == versions
    assert Review.objects.get(pk=opened.pk).outcome == "keep_default"
