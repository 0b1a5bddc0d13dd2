from __future__ import annotations

from django.contrib import admin

from gates.models import ReleaseTicket, TaskType
from ledger.admin import ReadOnlyAdmin


@admin.register(TaskType)
class TaskTypeAdmin(ReadOnlyAdmin):
    list_display = ["slug", "name", "risk_tier", "suite_version"]


@admin.register(ReleaseTicket)
class ReleaseTicketAdmin(ReadOnlyAdmin):
    list_display = ["id", "title", "status", "owner", "created_at"]
    list_filter = ["status", "bottleneck"]
    search_fields = ["title"]
