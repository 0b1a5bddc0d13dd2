"""Routes of the server-rendered web UI (namespace ``ui``); the REST API lives under /api/v1/."""

from __future__ import annotations

from django.urls import path

from gates import views
from ledger import views as ledger_views
from optgate import views as dashboard_views

app_name = "ui"

urlpatterns = [
    path("", dashboard_views.dashboard, name="dashboard"),
    path("runs/active/", dashboard_views.runs_partial, name="runs-partial"),
    path("tickets/", views.ticket_index, name="tickets"),
    path("tickets/new/", views.ticket_new, name="ticket-new"),
    path("tickets/<int:pk>/", views.ticket_detail, name="ticket"),
    path("tickets/<int:pk>/edit/", views.ticket_edit, name="ticket-edit"),
    path("tickets/<int:pk>/action/", views.ticket_action, name="ticket-action"),
    path("tickets/<int:pk>/sign-off/", views.ticket_signoff, name="ticket-signoff"),
    path("tickets/<int:pk>/samples/", views.ticket_samples, name="ticket-samples"),
    path("kv-calculator/", views.kv_calculator, name="kv-calculator"),
    path("routes/", views.route_table, name="routes"),
    path("reviews/", views.reviews, name="reviews"),
    path("reviews/<int:pk>/", views.review_outcome, name="review-outcome"),
    path("backends/", ledger_views.backend_index, name="backends"),
    path("backends/new/", ledger_views.backend_new, name="backend-new"),
    path("backends/<slug:name>/", ledger_views.backend_detail, name="backend"),
    path("ledger/", ledger_views.ledger_index, name="ledger"),
    path("ledger/verify/", ledger_views.ledger_verify_view, name="ledger-verify"),
]
