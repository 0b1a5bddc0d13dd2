"""Shared set-up for the web UI tests: signed-in clients and tickets at each stage."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.test import Client

from backends.models import Backend
from gates.models import GateDecision, ReleaseTicket
from gates.services import decisions
from tests.factories import scenario


def client_for(user: User | None, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    if user is not None:
        client.force_login(user)
    return client


def evaluated_ticket(
    outcome: str, owner: User, baseline: Backend, candidate: Backend, **overrides: Any
) -> tuple[ReleaseTicket, GateDecision]:
    """A ticket the judge has ruled on (status ``evaluated``) with its stored decision."""
    ticket = scenario(outcome, owner, baseline, candidate, **overrides)
    decision = decisions.decision_make(ticket=ticket)
    ticket.refresh_from_db()
    return ticket, decision
