from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from gates.api import TaskTypeViewSet, TicketViewSet
from ledger.api import BackendViewSet, LedgerViewSet
from optgate import views

router = DefaultRouter()
router.register("task-types", TaskTypeViewSet, basename="task-type")
router.register("backends", BackendViewSet, basename="backend")
router.register("tickets", TicketViewSet, basename="ticket")
router.register("ledger", LedgerViewSet, basename="ledger")

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include(router.urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]
