"""Periodic reviews of active optimizations."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ReviewReason(models.TextChoices):
    QUARTERLY = "quarterly"
    APPROVAL_EXPIRED = "approval_expired"
    ENGINE_CHANGED = "engine_changed"
    HARDWARE_CHANGED = "hardware_changed"
    # A canary round broke a critical guardrail and the policy leaves the rollback to reviewers.
    CANARY_GUARDRAIL = "canary_guardrail"


class ReviewOutcome(models.TextChoices):
    KEEP_DEFAULT = "keep_default"
    RESTRICT = "restrict"
    ROLLBACK = "rollback"
    OBSERVE_MORE = "observe_more"


class ReviewStatus(models.TextChoices):
    OPEN = "open"
    DONE = "done"


class Review(models.Model):
    """A due look at an active optimization: is it still worth its place in the route table?"""

    ticket = models.ForeignKey("gates.ReleaseTicket", on_delete=models.CASCADE, related_name="reviews")
    reason = models.CharField(max_length=20, choices=ReviewReason.choices)
    status = models.CharField(max_length=10, choices=ReviewStatus.choices, default=ReviewStatus.OPEN, db_index=True)
    details = models.JSONField(default=dict, blank=True, help_text="what triggered the review")
    due_at = models.DateTimeField()
    outcome = models.CharField(max_length=20, choices=ReviewOutcome.choices, blank=True)
    comment = models.TextField(blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    reminders_sent = models.PositiveSmallIntegerField(default=0)
    last_reminded_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # The table keeps the name it had when reviews lived in the workers app.
        db_table = "workers_review"
        ordering = ["due_at", "id"]
        constraints = [
            # At most one open review per ticket and reason: a schedule that fires twice is harmless.
            models.UniqueConstraint(
                fields=["ticket", "reason"], condition=models.Q(status="open"), name="one_open_review_per_reason"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.reason} review of ticket #{self.ticket_id} ({self.status})"
