from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from ledger.models import LedgerEntry


class ReadOnlyAdmin(admin.ModelAdmin):
    """Shows rows without any way to add, change or delete them: writes go through services."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["seq", "kind", "subject_type", "subject_name", "actor_name", "created_at"]
    list_filter = ["kind", "subject_type"]
    search_fields = ["subject_name", "actor_name", "kind"]
    ordering = ["-seq"]
