"""The versioned route table: task type (optionally one tenant) → backend."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from gates.models.tickets import ReleaseTicket, TaskType


class RouteTableVersion(models.Model):
    """One version of the whole route table; its ``routes`` are the complete table at that version."""

    number = models.PositiveIntegerField(unique=True)
    kind = models.CharField(max_length=20, help_text="set | canary | promote | rollback")
    reason = models.TextField(blank=True)
    ticket = models.ForeignKey(ReleaseTicket, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    changes = models.JSONField(default=list, help_text="[{task, tenant, from, to}] against the previous version")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"route table v{self.number}"


class Route(models.Model):
    """Task type (optionally for one tenant) → backend, as of one route-table version."""

    version = models.ForeignKey(RouteTableVersion, on_delete=models.CASCADE, related_name="routes")
    task = models.ForeignKey(TaskType, on_delete=models.PROTECT, related_name="+")
    tenant = models.CharField(max_length=100, blank=True, help_text="empty: every tenant without its own route")
    backend = models.ForeignKey("backends.Backend", on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["task__slug", "tenant"]
        constraints = [models.UniqueConstraint(fields=["version", "task", "tenant"], name="one_route_per_scope")]

    def __str__(self) -> str:
        scope = f"@{self.tenant}" if self.tenant else ""
        return f"{self.task_id}{scope} → {self.backend_id} (v{self.version_id})"
