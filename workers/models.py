"""Workers' records: outbound notifications with one row per delivery try, and periodic reviews."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Notification(models.Model):
    """One message to people (email) and to the team channel (webhook)."""

    event = models.CharField(max_length=60)
    subject = models.CharField(max_length=200)
    text = models.TextField()
    recipients = models.JSONField(default=list, help_text="email addresses")
    webhook_url = models.URLField(blank=True)
    ticket = models.ForeignKey("gates.ReleaseTicket", null=True, blank=True, on_delete=models.CASCADE,
                               related_name="notifications")  # fmt: skip
    email_sent_at = models.DateTimeField(null=True, blank=True)
    webhook_sent_at = models.DateTimeField(null=True, blank=True)
    given_up_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.event}: {self.subject}"

    @property
    def pending_channels(self) -> list[str]:
        channels = []
        if self.recipients and self.email_sent_at is None:
            channels.append("email")
        if self.webhook_url and self.webhook_sent_at is None:
            channels.append("webhook")
        return channels


class NotificationAttempt(models.Model):
    """One try to deliver a notification on one channel, kept whether it worked or not."""

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="attempts")
    channel = models.CharField(max_length=10, choices=[("email", "email"), ("webhook", "webhook")])
    number = models.PositiveSmallIntegerField()
    ok = models.BooleanField()
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["notification", "channel", "number"]
        constraints = [
            models.UniqueConstraint(fields=["notification", "channel", "number"], name="unique_notification_attempt")
        ]

    def __str__(self) -> str:
        return f"{self.channel} try {self.number} of notification #{self.notification_id}"


class ReviewReason(models.TextChoices):
    QUARTERLY = "quarterly"
    APPROVAL_EXPIRED = "approval_expired"
    ENGINE_CHANGED = "engine_changed"
    HARDWARE_CHANGED = "hardware_changed"


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
    reviewed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="+")  # fmt: skip
    reminders_sent = models.PositiveSmallIntegerField(default=0)
    last_reminded_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["due_at", "id"]
        constraints = [
            # At most one open review per ticket and reason: a schedule that fires twice is harmless.
            models.UniqueConstraint(fields=["ticket", "reason"], condition=models.Q(status="open"),
                                    name="one_open_review_per_reason"),
        ]  # fmt: skip

    def __str__(self) -> str:
        return f"{self.reason} review of ticket #{self.ticket_id} ({self.status})"
