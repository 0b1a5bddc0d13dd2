from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from accounts.api import ApiTokenViewSet
from accounts.api_roles import PersonViewSet
from accounts.views import RateLimitedLoginView
from backends.api import BackendViewSet
from gates.api import calibrations, canary, integrations
from gates.api.policies import PolicyViewSet
from gates.api.reviews import ReviewViewSet
from gates.api.routes import RouteViewSet
from gates.api.runs import RunViewSet
from gates.api.tickets import TaskTypeViewSet, TicketViewSet
from ledger.api import LedgerViewSet
from optgate import views
from optgate.metrics import metrics_view

router = DefaultRouter()
router.register("task-types", TaskTypeViewSet, basename="task-type")
router.register("backends", BackendViewSet, basename="backend")
router.register("tickets", TicketViewSet, basename="ticket")
router.register("ledger", LedgerViewSet, basename="ledger")
router.register("policies", PolicyViewSet, basename="policy")
router.register("routes", RouteViewSet, basename="route")
router.register("runs", RunViewSet, basename="run")
router.register("reviews", ReviewViewSet, basename="review")
router.register("tokens", ApiTokenViewSet, basename="token")
router.register("users", PersonViewSet, basename="user")

urlpatterns = [
    path("", include("gates.urls")),
    path("healthz", views.healthz, name="healthz"),
    # Ahead of django.contrib.auth.urls, whose unlimited LoginView it replaces.
    path("accounts/login/", RateLimitedLoginView.as_view(), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/integrations/argo/verdict/", integrations.argo_verdict, name="argo-verdict"),
    path(
        "api/v1/integrations/flagger/confirm-promotion/",
        integrations.flagger_confirm_promotion,
        name="flagger-confirm-promotion",
    ),
    path(
        "api/v1/integrations/github/deployment-protection/",
        integrations.github_deployment_protection,
        name="github-deployment-protection",
    ),
    path("api/v1/canary/outcomes/", canary.canary_outcomes, name="canary-outcomes"),
    # Ahead of the router, like the calibrations below.
    path("api/v1/tickets/<int:pk>/canary-rounds/", canary.ticket_canary_rounds, name="ticket-canary-rounds"),
    # Ahead of the router: a backend's calibrations, by its name.
    path("api/v1/backends/<slug:name>/calibrate/", calibrations.backend_calibrate, name="backend-calibrate"),
    path(
        "api/v1/backends/<slug:name>/calibrations/",
        calibrations.backend_calibration_list,
        name="backend-calibrations",
    ),
    path("api/v1/", include(router.urls)),
    path("metrics", metrics_view, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]
