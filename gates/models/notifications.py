"""Outbound notifications, with one row per delivery try."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class Notification(models.Model):
    """One message to people (email) and to the team channel (webhook)."""

    event = models.CharField(max_length=60)
    subject = models.CharField(max_length=200)
    text = models.TextField()
    recipients = models.JSONField(default=list, help_text="email addresses")
    webhook_url = models.URLField(blank=True)
    ticket = models.ForeignKey(
        "gates.ReleaseTicket", null=True, blank=True, on_delete=models.CASCADE, related_name="notifications"
    )
    email_sent_at = models.DateTimeField(null=True, blank=True)
    webhook_sent_at = models.DateTimeField(null=True, blank=True)
    given_up_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        # The tables keep the names they had when notifications lived in the workers app.
        db_table = "workers_notification"
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
        db_table = "workers_notificationattempt"
        ordering = ["notification", "channel", "number"]
        constraints = [
            models.UniqueConstraint(fields=["notification", "channel", "number"], name="unique_notification_attempt")
        ]

    def __str__(self) -> str:
        return f"{self.channel} try {self.number} of notification #{self.notification_id}"


class GithubCallback(models.Model):
    """A deployment review owed to GitHub (``deployment_callback_url``), delivered by a worker.

    The webhook request only records it; ``optgate.deliver_github_callback`` posts it, one
    ``GithubCallbackAttempt`` per try, retrying transient failures only.
    """

    url = models.URLField(max_length=500)
    review = models.JSONField(help_text="the body GitHub expects: environment_name, state, comment")
    delivery_id = models.CharField(max_length=100, blank=True, help_text="GitHub's X-GitHub-Delivery header")
    delivered_at = models.DateTimeField(null=True, blank=True)
    given_up_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"GitHub review {self.review.get('state')} for {self.review.get('environment_name')}"


class GithubCallbackAttempt(models.Model):
    """One try to deliver a GitHub callback, kept whether it worked or not."""

    callback = models.ForeignKey(GithubCallback, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveSmallIntegerField()
    ok = models.BooleanField()
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["callback", "number"]
        constraints = [models.UniqueConstraint(fields=["callback", "number"], name="unique_github_callback_attempt")]

    def __str__(self) -> str:
        return f"try {self.number} of GitHub callback #{self.callback_id}"
