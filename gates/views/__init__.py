"""Web UI of the gates app: tickets (list, form, page, actions), the KV calculator, routes, reviews.

Views parse input with the forms in ``gates.forms`` and call the services; they never save models.
Service errors come back as pages: ``InvalidInput`` as inline field errors (400), ``NotAllowed``
as 403 and ``DomainError`` as 409, each with the service's own message.

The pages live in modules by page; this package keeps the names ``gates.urls`` and other apps use:

* ``tickets`` — ticket list, form, page, lifecycle actions and sign-off;
* ``evidence`` and ``decision`` — what the ticket page shows of the runs and of the gate decision;
* ``calculator`` — the KV-cache calculator;
* ``routes`` — the route table (and a backend's routes, for its page);
* ``review_queue`` — reviews of active optimizations;
* ``errors`` — the refusal page for a service's 403 or 409.
"""

from __future__ import annotations

from gates.views.calculator import kv_calculator
from gates.views.decision import latest_decision, proposed_route_changes, signoff_context, verdict_rows
from gates.views.errors import refuse
from gates.views.evidence import (
    ENGINE_KEYS,
    LATENCY_METRICS,
    SAMPLE_LIMIT,
    Evidence,
    LatencyPanel,
    SamplePair,
    TaskPanel,
    build_evidence,
    sample_pairs,
)
from gates.views.review_queue import review_outcome, reviews, reviews_due
from gates.views.routes import backend_routes, route_table, signed_route_changes
from gates.views.tickets import (
    ACTION_LABELS,
    EVALUABLE,
    LIST_PAGE_SIZE,
    ticket_action,
    ticket_detail,
    ticket_edit,
    ticket_index,
    ticket_new,
    ticket_samples,
    ticket_signoff,
)

__all__ = [
    "ACTION_LABELS",
    "ENGINE_KEYS",
    "EVALUABLE",
    "LATENCY_METRICS",
    "LIST_PAGE_SIZE",
    "SAMPLE_LIMIT",
    "Evidence",
    "LatencyPanel",
    "SamplePair",
    "TaskPanel",
    "backend_routes",
    "build_evidence",
    "kv_calculator",
    "latest_decision",
    "proposed_route_changes",
    "refuse",
    "review_outcome",
    "reviews",
    "reviews_due",
    "route_table",
    "sample_pairs",
    "signed_route_changes",
    "signoff_context",
    "ticket_action",
    "ticket_detail",
    "ticket_edit",
    "ticket_index",
    "ticket_new",
    "ticket_samples",
    "ticket_signoff",
    "verdict_rows",
]
