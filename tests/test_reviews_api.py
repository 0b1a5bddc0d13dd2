"""The reviews API: due reviews, and completing one through the atomic service (one wins, the other 409)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from gates.models import ReleaseTicket, Review, ReviewReason, ReviewStatus, RouteTableVersion, TicketStatus
from gates.selectors.routes import route_table
from gates.services import reviews
from ledger.models import LedgerEntry
from tests.factories import serving_by_default

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_broker() -> Any:
    with mock.patch("core.queue.enqueue"):
        yield


@pytest.fixture
def serving(erin: User, rita: User, ada: User, baseline: Any, candidate: Any) -> ReleaseTicket:
    return serving_by_default(erin, rita, ada, baseline, candidate)


@pytest.fixture
def review(serving: ReleaseTicket) -> Review:
    opened = reviews.review_open(ticket=serving, reason=ReviewReason.QUARTERLY)
    assert opened is not None
    return opened


def url(review: Review) -> str:
    return f"/api/v1/reviews/{review.pk}/complete/"


def backends_routed() -> set[str]:
    return {r.backend.name for r in route_table()}


def test_it_lists_the_open_reviews(api_for: Callable[[User | None], APIClient], review: Review, olga: User) -> None:
    page = api_for(olga).get("/api/v1/reviews/?status=open").json()
    assert [(r["id"], r["ticket"], r["status"]) for r in page["results"]] == [(review.pk, review.ticket_id, "open")]


def test_a_rollback_completes_the_review_and_moves_the_routes(
    api_for: Callable[[User | None], APIClient], review: Review, serving: ReleaseTicket, bella: User
) -> None:
    answer = api_for(bella).post(url(review), {"outcome": "rollback", "comment": "drift"}, format="json")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["status"], answer.json()["outcome"], answer.json()["reviewed_by"]) == (
        "done",
        "rollback",
        "bella",
    )
    assert backends_routed() == {"kit-bf16"}
    serving.refresh_from_db()
    assert serving.status == TicketStatus.ROLLED_BACK
    assert LedgerEntry.objects.filter(kind="review.completed").count() == 1


def test_of_two_completions_one_wins_and_the_other_is_a_409_that_moves_nothing(
    api_for: Callable[[User | None], APIClient], review: Review, rita: User, bella: User
) -> None:
    first = api_for(rita).post(url(review), {"outcome": "keep_default"}, format="json")
    versions = RouteTableVersion.objects.count()
    second = api_for(bella).post(url(review), {"outcome": "rollback", "comment": "late"}, format="json")
    assert (first.status_code, second.status_code) == (200, 409)
    assert "already done" in second.json()["detail"]
    assert RouteTableVersion.objects.count() == versions
    assert "kit-bf16-prefix-cache" in backends_routed()
    assert Review.objects.get(pk=review.pk).outcome == "keep_default"
    assert LedgerEntry.objects.filter(kind="review.completed").count() == 1


@pytest.mark.parametrize("who", ["olga", "evan", "erin"])
def test_only_a_reviewer_other_than_the_owner_completes_a_review(
    api_for: Callable[[User | None], APIClient], review: Review, who: str, request: pytest.FixtureRequest
) -> None:
    user = request.getfixturevalue(who)  # an outsider, another engineer, and the ticket's owner
    answer = api_for(user).post(url(review), {"outcome": "keep_default"}, format="json")
    assert answer.status_code == 403, answer.content
    assert Review.objects.get(pk=review.pk).status == ReviewStatus.OPEN


def test_an_anonymous_caller_is_refused(api_for: Callable[[User | None], APIClient], review: Review) -> None:
    assert api_for(None).post(url(review), {"outcome": "keep_default"}, format="json").status_code in (401, 403)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"outcome": "shrug"}, "outcome"),
        ({}, "outcome"),
        ({"outcome": "keep_default", "colour": "red"}, "colour"),
        ({"outcome": "rollback"}, "comment"),  # routes move back: say why
        ({"outcome": "restrict", "comment": "drift"}, "restrict_tasks"),
        ({"outcome": "restrict", "comment": "drift", "restrict_tasks": ["tool_calling"]}, "restrict_tasks"),
        ({"outcome": "keep_default", "restrict_tasks": "cs_summary"}, "restrict_tasks"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    api_for: Callable[[User | None], APIClient], review: Review, rita: User, body: dict[str, Any], field: str
) -> None:
    answer = api_for(rita).post(url(review), body, format="json")
    assert answer.status_code == 400, answer.content
    assert list(answer.json()) == [field]
    assert Review.objects.get(pk=review.pk).status == ReviewStatus.OPEN


def test_restrict_moves_only_the_named_signed_task_back(
    api_for: Callable[[User | None], APIClient], review: Review, rita: User
) -> None:
    body = {"outcome": "restrict", "comment": "summaries drift", "restrict_tasks": ["cs_summary"]}
    assert api_for(rita).post(url(review), body, format="json").status_code == 200
    routed = {r.task.slug: r.backend.name for r in route_table() if not r.tenant}
    assert routed["cs_summary"] == "kit-bf16" and routed["code_assistant"] == "kit-bf16-prefix-cache"


def test_the_schema_documents_the_completion(api_for: Callable[[User | None], APIClient], olga: User) -> None:
    schema = api_for(olga).get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/reviews/{id}/complete/"]["post"]
    assert set(operation["responses"]) >= {"200", "400", "403", "409"}
    assert "ReviewComplete" in str(operation["requestBody"])
