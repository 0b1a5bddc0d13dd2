"""Reads through queries a web process compiles once (``core.compiled``): the ticket detail and the
decision read answer exactly what the same reads through the ORM answer."""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import pytest
from django.db.models.sql.compiler import SQLCompiler
from rest_framework.renderers import JSONRenderer

from core.compiled import CompiledQuery
from gates.api import decisions as decisions_api
from gates.api.tickets import TicketSerializer
from gates.models import GateDecision, ReleaseTicket, SignOff
from gates.selectors.decisions import decision_current
from gates.selectors.evidence import PROVENANCE_ROW_FIELDS, ticket_provenance
from gates.selectors.tickets import TICKET_ROW_FIELDS, ticket_rows_with
from tests.factories import serving_by_default

# The compiled SQL and its value conversion are the database backend's own: CI runs these again on PostgreSQL.
pytestmark = [pytest.mark.django_db, pytest.mark.database]


def _ticket_rows(pk: int) -> Any:
    return ReleaseTicket.objects.filter(pk=pk).order_by().values(*TICKET_ROW_FIELDS)


def _json(data: Any) -> Any:
    return json.loads(JSONRenderer().render(data))


@pytest.fixture
def promoted(erin: Any, rita: Any, ada: Any, baseline: Any, candidate: Any) -> ReleaseTicket:
    """A rich ticket: a signed approval and a dry run since, runs with stages, a canary started
    and promoted."""
    ticket = serving_by_default(erin, rita, ada, baseline, candidate)
    # Test set-up: the decision's stages as a staged evaluation stores them, and a dry run of the
    # same runs since, for the decision read's history.
    look = {"look": 1, "n": 100, "statistic": -0.41, "efficacy_bound": 2.96, "alpha_spent": 0.0012, "outcome": "go_on"}
    guardrail = {"label": "Pass rate", "design": {"alpha_spending": "obrien_fleming", "looks": 3}, "looks": [look]}
    stages = {
        "count": 2,
        "pairs": [{"stage": 1, "n": 100}],
        "tasks": {"cs_summary": {"guardrails": {"pass_rate": guardrail}}},
    }
    GateDecision.objects.filter(ticket=ticket).update(stages=stages)
    dry_run = GateDecision.objects.get(ticket=ticket)
    dry_run.pk, dry_run.dry_run, dry_run.outcome = None, True, "needs_evidence"
    dry_run.signed_verdict, dry_run.signed_tasks, dry_run.signed_at = "", [], None
    dry_run.save()
    return ticket


def test_it_reads_the_rows_and_values_the_orm_reads(draft: ReleaseTicket, promoted: ReleaseTicket) -> None:
    query = CompiledQuery(_ticket_rows)
    for pk in (draft.pk, promoted.pk, promoted.pk + 1000):
        assert query.rows(pk) == list(_ticket_rows(pk))  # JSON fields, times and missing backends alike
    assert query.rows(promoted.pk)[0]["rollback_plan"] == promoted.rollback_plan


def test_it_compiles_its_query_once_per_connection(draft: ReleaseTicket, promoted: ReleaseTicket) -> None:
    query = CompiledQuery(_ticket_rows)
    with mock.patch.object(SQLCompiler, "as_sql", autospec=True, side_effect=SQLCompiler.as_sql) as compiled:
        first, second = query.rows(draft.pk), query.rows(promoted.pk)
    assert compiled.call_count == 1
    assert [first[0]["id"], second[0]["id"]] == [draft.pk, promoted.pk]


def test_it_answers_no_rows_for_a_key_no_integer_column_holds(draft: ReleaseTicket) -> None:
    query = CompiledQuery(_ticket_rows)
    assert query.rows(2**63) == query.rows(-(2**63) - 1) == []
    assert query.rows(2**63 - 1) == []


def test_it_refuses_a_query_that_does_not_take_its_key(draft: ReleaseTicket) -> None:
    query = CompiledQuery(lambda pk: ReleaseTicket.objects.filter(title="x").values("id"))
    with pytest.raises(ValueError, match="takes its key"):
        query.rows(draft.pk)


def test_the_ticket_detail_answers_what_the_orm_and_the_serializer_describe(
    api_for: Any, rita: Any, promoted: ReleaseTicket
) -> None:
    detail = api_for(rita).get(f"/api/v1/tickets/{promoted.pk}/").json()

    [(through_orm, row)] = ticket_rows_with(ReleaseTicket.objects.filter(pk=promoted.pk), also=PROVENANCE_ROW_FIELDS)
    assert detail == _json({**through_orm, "provenance": ticket_provenance(promoted.pk)})
    assert detail["provenance"] == _json(ticket_provenance(promoted.pk, row=row))
    described = _json(TicketSerializer(ReleaseTicket.objects.get(pk=promoted.pk)).data)
    assert {k: v for k, v in detail.items() if k != "provenance"} == described
    assert detail["status"] == "default" and [p["role"] for p in detail["provenance"]] == ["baseline", "candidate"]


def test_the_decision_read_answers_what_it_answers_from_orm_loaded_parts(
    api_for: Any, rita: Any, erin: Any, promoted: ReleaseTicket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decisions_api, "_shown", {})  # the read formats the decision it loaded itself
    for reader in (rita, erin):
        read = api_for(reader).get(f"/api/v1/tickets/{promoted.pk}/decision/").json()

        monkeypatch.setattr(decisions_api, "_shown", {})
        current = decision_current(ticket=promoted)
        assert current is not None
        sign_offs = list(SignOff.objects.filter(decision=current).select_related("reviewer"))
        earlier = GateDecision.objects.filter(ticket=promoted).exclude(pk=current.pk).order_by("-id")
        history = [dict(row) for row in earlier.values("id", "outcome", "policy_version", "dry_run", "created_at")]
        through_orm = decisions_api.decision_response(promoted, reader, current, sign_offs, history)
        assert read == _json(through_orm.data)

    assert read["sign_offs"] and read["stages"]["count"] == 2 and read["verdicts"]
    assert [d["outcome"] for d in read["history"]] == ["needs_evidence"]
    assert read["summary"]["signed_verdict"] == "approve" and read["summary"]["next_action"]["action"] == "none"
