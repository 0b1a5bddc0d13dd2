from __future__ import annotations

from django.apps import AppConfig


class ToolsConfig(AppConfig):
    """Tooling beside the product: the demo, the tiny model kit builder and the benchmarks."""

    name = "tools"
    default_auto_field = "django.db.models.BigAutoField"
