"""Routes of the server-rendered web UI (namespace ``ui``); the REST API lives under /api/v1/."""

from __future__ import annotations

from django.urls import path

from gates.views import backends, calculator, dashboard, review_queue, routes, tickets
from ledger import views as ledger_views

app_name = "ui"

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    path("runs/active/", dashboard.runs_partial, name="runs-partial"),
    path("tickets/", tickets.ticket_index, name="tickets"),
    path("tickets/new/", tickets.ticket_new, name="ticket-new"),
    path("tickets/plan-preview/", tickets.ticket_plan_preview, name="ticket-plan-preview"),
    path("tickets/<int:pk>/", tickets.ticket_detail, name="ticket"),
    path("tickets/<int:pk>/edit/", tickets.ticket_edit, name="ticket-edit"),
    path("tickets/<int:pk>/action/", tickets.ticket_action, name="ticket-action"),
    path("tickets/<int:pk>/sign-off/", tickets.ticket_signoff, name="ticket-signoff"),
    path("tickets/<int:pk>/accept-evidence/", tickets.ticket_accept_evidence, name="ticket-accept-evidence"),
    path("tickets/<int:pk>/samples/", tickets.ticket_samples, name="ticket-samples"),
    path("kv-calculator/", calculator.kv_calculator, name="kv-calculator"),
    path("routes/", routes.route_table, name="routes"),
    path("reviews/", review_queue.reviews, name="reviews"),
    path("reviews/<int:pk>/", review_queue.review_outcome, name="review-outcome"),
    path("backends/", backends.backend_index, name="backends"),
    path("backends/new/", backends.backend_new, name="backend-new"),
    path("backends/<slug:name>/", backends.backend_detail, name="backend"),
    path("backends/<slug:name>/calibrate/", backends.backend_calibrate, name="backend-calibrate"),
    path("ledger/", ledger_views.ledger_index, name="ledger"),
    path("ledger/verify/", ledger_views.ledger_verify_view, name="ledger-verify"),
]
