from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.models import ApiToken
from accounts.services import api_token_revoke
from gates.models import GateDecision, ReleaseTicket, RouteTableVersion, SignOff, TaskType
from ledger.admin import ReadOnlyAdmin


@admin.register(TaskType)
class TaskTypeAdmin(ReadOnlyAdmin):
    list_display = ["slug", "name", "risk_tier", "suite_version"]


@admin.register(ReleaseTicket)
class ReleaseTicketAdmin(ReadOnlyAdmin):
    list_display = ["id", "title", "status", "owner", "created_at"]
    list_filter = ["status", "bottleneck"]
    search_fields = ["title"]


@admin.register(GateDecision)
class GateDecisionAdmin(ReadOnlyAdmin):
    list_display = ["id", "ticket", "outcome", "policy_version", "dry_run", "signed_verdict", "created_at"]
    list_filter = ["outcome", "dry_run"]


@admin.register(SignOff)
class SignOffAdmin(ReadOnlyAdmin):
    list_display = ["id", "ticket", "reviewer", "capacity", "verdict", "reason_code", "override", "created_at"]
    list_filter = ["verdict", "capacity", "override"]


@admin.register(RouteTableVersion)
class RouteTableVersionAdmin(ReadOnlyAdmin):
    list_display = ["number", "kind", "ticket", "actor", "created_at"]
    list_filter = ["kind"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens without their secrets (only hashes are stored); revoking goes through the service."""

    list_display = ["prefix", "name", "user", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = ["name"]
    search_fields = ["prefix", "name", "user__username"]
    exclude = ["key_hash"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset.select_related("user"):
            api_token_revoke(actor=request.user, token=token)
