from __future__ import annotations

from django.contrib import admin

from core.admin import ReadOnlyAdmin
from ledger.models import LedgerEntry


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["seq", "kind", "subject_type", "subject_name", "actor_name", "created_at"]
    list_filter = ["kind", "subject_type"]
    search_fields = ["subject_name", "actor_name", "kind"]
    ordering = ["-seq"]
