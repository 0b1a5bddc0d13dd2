"""Reviews due, and the outcome form that keeps, restricts, rolls back or observes more."""

from __future__ import annotations

from typing import Any

import pytest

from gates.models import Review, ReviewStatus, RouteTableVersion, TicketStatus
from gates.services.reviews import review_open
from tests.ui_helpers import client_for, evaluated_ticket

pytestmark = pytest.mark.django_db


@pytest.fixture
def review(erin: Any, rita: Any, baseline: Any, candidate: Any) -> Review:
    """A quarterly review of an approved optimization in canary for tenant-a."""
    ticket, _ = evaluated_ticket("approve", erin, baseline, candidate)
    body = {"verdict": "approve", "reason_code": "evidence_sufficient"}
    assert client_for(rita).post(f"/tickets/{ticket.pk}/sign-off/", body).status_code == 302
    assert client_for(erin).post(f"/tickets/{ticket.pk}/action/", {"action": "start_canary"}).status_code == 302
    opened = review_open(ticket=ticket, reason="quarterly")
    assert opened is not None
    return opened


def test_reviews_due_are_listed_with_a_form_for_reviewers_only(review: Review, erin: Any, bella: Any) -> None:
    page = client_for(bella).get("/reviews/")
    assert [row["review"].pk for row in page.context["rows"]] == [review.pk]
    assert page.context["rows"][0]["form"] is not None
    assert b"Record outcome" in page.content
    owner = client_for(erin).get("/reviews/")
    assert owner.context["rows"][0]["form"] is None and b"You own this ticket" in owner.content
    assert [r.pk for r in client_for(bella).get("/").context["reviews_due"]] == [review.pk]


def test_a_reviewer_rolls_back_with_a_reason(review: Review, bella: Any, erin: Any) -> None:
    prefix = f"review-{review.pk}"
    refused = client_for(bella).post(f"/reviews/{review.pk}/", {f"{prefix}-outcome": "rollback"})
    assert refused.status_code == 400 and b"say why routes move back" in refused.content
    body = {f"{prefix}-outcome": "rollback", f"{prefix}-comment": "p99 regressed at peak"}
    assert client_for(erin).post(f"/reviews/{review.pk}/", body).status_code == 403
    assert client_for(bella).post(f"/reviews/{review.pk}/", body).status_code == 302
    review.refresh_from_db()
    assert (review.status, review.outcome) == (ReviewStatus.DONE, "rollback")
    assert review.ticket.status == TicketStatus.ROLLED_BACK
    assert RouteTableVersion.objects.order_by("-number").first().kind == "rollback"  # type: ignore[union-attr]
    assert client_for(bella).post(f"/reviews/{review.pk}/", body).status_code == 409


def test_keep_default_needs_no_comment(review: Review, rita: Any) -> None:
    response = client_for(rita).post(f"/reviews/{review.pk}/", {f"review-{review.pk}-outcome": "keep_default"})
    assert response.status_code == 302
    review.refresh_from_db()
    assert review.outcome == "keep_default"
    assert client_for(rita).get("/reviews/").context["rows"] == []
