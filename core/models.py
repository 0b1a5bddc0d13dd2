"""Records the shared API plumbing keeps: the first response to an idempotent create."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class IdempotencyRecord(models.Model):
    """The first response to a create request carrying an ``Idempotency-Key`` header."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    endpoint = models.CharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # The table keeps the name it had when this model lived in the gates app.
        db_table = "gates_idempotencyrecord"
        constraints = [models.UniqueConstraint(fields=["user", "key", "endpoint"], name="unique_idempotency_key")]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.key}"
