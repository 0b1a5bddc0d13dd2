"""Read paths of the backends app."""

from __future__ import annotations

from django.db.models import QuerySet

from backends.models import Backend


def backend_list() -> QuerySet[Backend]:
    """Every registered backend, newest first, with who registered it."""
    return Backend.objects.select_related("created_by")


def backend_get(*, name: str) -> Backend | None:
    return Backend.objects.select_related("created_by", "args_check").filter(name=name).first()
