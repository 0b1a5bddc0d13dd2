from __future__ import annotations

from django.contrib import admin

from core.admin import ReadOnlyAdmin
from gates.models import GateDecision, ReleaseTicket, RouteTableVersion, SignOff, TaskType


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
