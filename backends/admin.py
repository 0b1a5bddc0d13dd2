from __future__ import annotations

from django.contrib import admin

from backends.models import Backend
from core.admin import ReadOnlyAdmin


@admin.register(Backend)
class BackendAdmin(ReadOnlyAdmin):
    list_display = ["name", "model_id", "engine_version", "hardware_class", "fingerprint", "created_at"]
    search_fields = ["name", "model_id", "fingerprint"]
