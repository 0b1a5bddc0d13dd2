from __future__ import annotations

from django.apps import AppConfig


class GatesConfig(AppConfig):
    name = "gates"
    default_auto_field = "django.db.models.BigAutoField"
