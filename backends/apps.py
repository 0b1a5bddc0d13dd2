from __future__ import annotations

from django.apps import AppConfig


class BackendsConfig(AppConfig):
    name = "backends"
    default_auto_field = "django.db.models.BigAutoField"
