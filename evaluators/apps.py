from __future__ import annotations

from django.apps import AppConfig


class EvaluatorsConfig(AppConfig):
    name = "evaluators"
    default_auto_field = "django.db.models.BigAutoField"
