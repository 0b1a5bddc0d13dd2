"""API tokens for scripts and CI."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    """An API key for scripts and CI. Only the sha256 of its secret is stored.

    The full key, ``og_<prefix>_<secret>``, is shown once when the token is issued or rotated;
    ``prefix`` is public and finds the row, the secret is checked against ``key_hash``. A token is
    never deleted: revoking stamps ``revoked_at`` so its history (and who held it) stays readable.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, default="default", help_text="what the token is for, e.g. ci-deploy")
    prefix = models.CharField(max_length=24, unique=True, help_text="public part of the key; finds the token")
    key_hash = models.CharField(max_length=64, help_text="sha256 hex of the secret part of the key")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # The table keeps the name it had when API tokens lived in the gates app.
        db_table = "gates_apitoken"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}) of user {self.user_id}"

    def state_at(self, now: datetime) -> str:
        """``active``, ``expired`` or ``revoked`` at ``now``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"
