"""Concurrency proofs on PostgreSQL: fifty simultaneous writers, one winner, a consistent record.

Each race starts fifty threads behind a barrier; every thread has its own database connection
(Django's connections are per thread) and closes it when done. The services serialise on row
locks (``select_for_update`` on the ticket and on the ledger head) and compare-and-swap updates,
so the losers get the domain's conflict (HTTP 409) and nothing is recorded twice.

SQLite serialises every writer on one file lock, so these tests mean something only on
PostgreSQL: run them with ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/<name>``; they skip
on SQLite.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection, transaction
from rest_framework.response import Response
from rest_framework.test import APIClient

from core.errors import DomainError
from gates.models import GateDecision, ReleaseTicket, Review, ReviewReason, RouteTableVersion, SignOff, TicketStatus
from gates.services import decisions, reviews
from ledger.models import LedgerEntry, LedgerHead
from ledger.selectors import ledger_verify
from ledger.services import ledger_append
from tests.factories import scenario, serving_by_default

# serialized_rollback: the transactional flush would otherwise drop the seeded task types and roles.
# serial: fifty connections per race; two races at once on two pytest-xdist workers passed
# PostgreSQL's default max_connections (100) and failed with "too many clients already".
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

WRITERS = 50
T = TypeVar("T")


@pytest.fixture(autouse=True)
def _postgresql_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("concurrency tests need PostgreSQL: set DATABASE_URL=postgres://postgres@127.0.0.1:5432/<name>")


def race(work: Callable[[int], T], writers: int = WRITERS) -> list[T]:
    """Run ``work(0..writers-1)`` in as many threads, released together, each on its own connection."""
    barrier = threading.Barrier(writers)
    results: list[Any] = [None] * writers
    failures: list[BaseException] = []

    def run(index: int) -> None:
        try:
            connection.ensure_connection()  # connect before the barrier so the writers really overlap
            barrier.wait(timeout=60)
            results[index] = work(index)
        except BaseException as exc:  # collected and re-raised by the test below
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,), name=f"writer-{i}") for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert not any(thread.is_alive() for thread in threads), "a writer is still blocked"
    if failures:
        raise failures[0]
    return results


def client_for(user: User) -> APIClient:
    # force_authenticate keeps the race about the sign-off and transition, not about tokens.
    client = APIClient()
    client.force_authenticate(user=user)
    return client


def reviewers(count: int) -> list[User]:
    group = Group.objects.get(name="reviewer")
    users = User.objects.bulk_create(User(username=f"reviewer{i:02d}") for i in range(count))
    User.groups.through.objects.bulk_create(User.groups.through(user_id=u.pk, group_id=group.pk) for u in users)
    return users


def ticket_kinds(ticket: ReleaseTicket) -> Counter[str]:
    kinds = LedgerEntry.objects.filter(subject_type="ticket", subject_id=str(ticket.pk)).values_list("kind", flat=True)
    return Counter(kinds)


def evaluated(outcome: str, owner: User, baseline: Any, candidate: Any) -> tuple[ReleaseTicket, GateDecision]:
    ticket = scenario(outcome, owner, baseline, candidate)
    decision = decisions.decision_make(ticket=ticket)
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.EVALUATED
    return ticket, decision


def test_it_lets_exactly_one_of_fifty_reviewers_sign_off_a_decision(erin: User, baseline: Any, candidate: Any) -> None:
    """Fifty reviewers sign off one decision at once; its tasks are medium risk, so one platform
    sign-off agreeing with the policy is enough to approve. The sign-off that moves the ticket
    must be exclusive: the first one approves, every other one finds the ticket approved (409),
    and no second sign-off, ledger entry or approval is recorded.
    """
    ticket, decision = evaluated("approve", erin, baseline, candidate)
    url = f"/api/v1/tickets/{ticket.pk}/sign-off/"
    body = {"decision": "approve", "reason_code": "evidence_sufficient", "comment": "faster, quality unchanged"}
    clients = [client_for(user) for user in reviewers(WRITERS)]

    responses: list[Response] = race(lambda i: clients[i].post(url, body, format="json"))

    assert Counter(r.status_code for r in responses) == {201: 1, 409: WRITERS - 1}
    winner = next(r for r in responses if r.status_code == 201)
    assert winner.data["moved"] is True and winner.data["ticket_status"] == TicketStatus.APPROVED
    assert all("is approved" in r.data["detail"] for r in responses if r.status_code == 409)
    ticket.refresh_from_db()
    decision.refresh_from_db()
    assert ticket.status == TicketStatus.APPROVED and ticket.decided_at is not None
    sign_off = SignOff.objects.get(decision=decision)
    assert sign_off.reviewer.get_username() == winner.data["sign_off"]["reviewer"]
    assert decision.signed_verdict == "approve" and decision.signed_at is not None
    kinds = ticket_kinds(ticket)
    assert (kinds["gate.sign_off"], kinds["ticket.approved"]) == (1, 1)
    approved = LedgerEntry.objects.get(kind="ticket.approved", subject_id=str(ticket.pk))
    assert approved.payload["details"]["reviewers"] == [sign_off.reviewer.get_username()]
    assert ledger_verify().ok


def test_a_reviewer_signing_fifty_times_at_once_is_recorded_once(
    erin: User, rita: User, baseline: Any, candidate: Any
) -> None:
    """One reviewer double-clicks fifty times on a high-risk decision. A platform sign-off alone
    does not move it (a business owner must sign too), so here the exclusive step is the
    reviewer's one sign-off per decision: one is recorded, the other forty-nine are 409 (not a
    500 from the unique constraint), and the ticket waits for the business owner.
    """
    ticket, decision = evaluated("approve_high_risk", erin, baseline, candidate)
    url = f"/api/v1/tickets/{ticket.pk}/sign-off/"
    body = {"decision": "approve", "reason_code": "evidence_sufficient"}
    clients = [client_for(rita) for _ in range(WRITERS)]

    responses: list[Response] = race(lambda i: clients[i].post(url, body, format="json"))

    assert Counter(r.status_code for r in responses) == {201: 1, 409: WRITERS - 1}
    winner = next(r for r in responses if r.status_code == 201)
    assert winner.data["moved"] is False and winner.data["state"]["missing"] == ["a business owner reviewer"]
    assert all("rita already signed" in r.data["detail"] for r in responses if r.status_code == 409)
    ticket.refresh_from_db()
    decision.refresh_from_db()
    assert ticket.status == TicketStatus.EVALUATED
    assert SignOff.objects.filter(decision=decision).count() == 1 and decision.signed_verdict == ""
    assert ticket_kinds(ticket)["gate.sign_off"] == 1
    assert ledger_verify().ok


def test_it_lets_exactly_one_of_fifty_concurrent_submits_move_the_ticket(erin: User, draft: ReleaseTicket) -> None:
    """The owner submits one draft fifty times at once: one request moves it, forty-nine get 409
    (either the compare-and-swap found the status changed, or they read it already submitted),
    and the ledger records one submission.
    """
    url = f"/api/v1/tickets/{draft.pk}/submit/"
    clients = [client_for(erin) for _ in range(WRITERS)]

    responses: list[Response] = race(lambda i: clients[i].post(url, {}, format="json"))

    assert Counter(r.status_code for r in responses) == {200: 1, 409: WRITERS - 1}
    assert all("submit" in r.data["detail"] for r in responses if r.status_code == 409)
    draft.refresh_from_db()
    assert draft.status == TicketStatus.SUBMITTED and draft.submitted_at is not None
    assert ticket_kinds(draft) == {"ticket.filed": 1, "ticket.submitted": 1}
    submitted = LedgerEntry.objects.get(kind="ticket.submitted", subject_id=str(draft.pk))
    assert (submitted.payload["from"], submitted.payload["to"]) == ("draft", "submitted")
    assert ledger_verify().ok


def test_of_ten_reviewers_completing_one_review_at_once_one_rolls_back(
    erin: User, rita: User, ada: User, baseline: Any, candidate: Any
) -> None:
    """Ten reviewers record a rollback of one review at once. The review row is locked before any
    route moves, so one completion commits its route change, ticket move and ledger entries; the
    other nine find it done (409) having moved nothing.
    """
    ticket = serving_by_default(erin, rita, ada, baseline, candidate)
    review = reviews.review_open(ticket=ticket, reason=ReviewReason.QUARTERLY)
    assert review is not None
    people = reviewers(10)
    versions = RouteTableVersion.objects.count()

    def complete(index: int) -> str:
        try:
            reviews.review_complete(
                review=Review.objects.get(pk=review.pk), outcome="rollback", actor=people[index], comment="drift"
            )
        except DomainError as exc:
            return str(exc)
        return "completed"

    results = race(complete, writers=10)

    assert Counter(results) == {"completed": 1, f"review #{review.pk} is already done": 9}
    assert RouteTableVersion.objects.count() == versions + 1
    assert (ticket_kinds(ticket)["review.completed"], ticket_kinds(ticket)["ticket.rolled_back"]) == (1, 1)
    assert ledger_verify().ok


def test_of_ten_api_completions_of_one_review_one_answers_200_and_nine_409(
    erin: User, rita: User, ada: User, baseline: Any, candidate: Any
) -> None:
    """The same race through ``POST /api/v1/reviews/{id}/complete/``: one rollback commits, the
    others answer 409 and move nothing."""
    ticket = serving_by_default(erin, rita, ada, baseline, candidate)
    review = reviews.review_open(ticket=ticket, reason=ReviewReason.QUARTERLY)
    assert review is not None
    clients = [client_for(user) for user in reviewers(10)]
    versions = RouteTableVersion.objects.count()

    def complete(index: int) -> int:
        response = clients[index].post(
            f"/api/v1/reviews/{review.pk}/complete/", {"outcome": "rollback", "comment": "drift"}, format="json"
        )
        return response.status_code

    assert Counter(race(complete, writers=10)) == {200: 1, 409: 9}
    assert RouteTableVersion.objects.count() == versions + 1
    assert ticket_kinds(ticket)["review.completed"] == 1
    assert ledger_verify().ok


def test_fifty_concurrent_ledger_appends_form_one_unforked_chain(db: None) -> None:
    """Fifty transactions append at once; the head lock queues them, so every entry gets the next
    sequence number and points at the hash of the entry before it."""
    before = LedgerHead.objects.get(id=1).seq

    def append(index: int) -> int:
        with transaction.atomic(durable=True):
            entry = ledger_append(
                kind="test.append",
                subject_type="test",
                subject_id=index,
                subject_name=f"writer {index}",
                actor=None,
                payload={"writer": index},
            )
        return entry.seq

    seqs = race(append)

    assert sorted(seqs) == list(range(before + 1, before + WRITERS + 1))
    chain = list(LedgerEntry.objects.order_by("seq").values_list("seq", "prev_hash", "hash"))
    assert [seq for seq, _, _ in chain] == list(range(1, before + WRITERS + 1))
    for (_, _, previous_hash), (_, prev_hash, _) in itertools.pairwise(chain):
        assert prev_hash == previous_hash
    assert sorted(LedgerEntry.objects.filter(kind="test.append").values_list("payload__writer", flat=True)) == list(
        range(WRITERS)
    )
    head = LedgerHead.objects.get(id=1)
    assert (head.seq, head.hash) == chain[-1][0::2]
    report = ledger_verify()
    assert report.ok and report.checked == before + WRITERS
