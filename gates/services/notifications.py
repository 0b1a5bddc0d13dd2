"""Notifications: email through Django's email backend and a JSON webhook with Slack-compatible text.

``notify`` only writes a ``Notification`` row and enqueues its delivery after commit, so a slow or
broken mail server or chat webhook never blocks, nor rolls back, the transition it reports.
``notification_deliver`` (run by a worker's task) tries every pending channel once, writing one
``NotificationAttempt`` per try; the task retries the transient failures with back-off up to a limit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import httpx
from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from core import http, queue
from gates.models import Notification, NotificationAttempt, ReleaseTicket

logger = logging.getLogger(__name__)


def _emails(users: Iterable[User | None]) -> list[str]:
    return sorted({u.email for u in users if u is not None and u.email})


def notify(
    *, event: str, subject: str, text: str, users: Iterable[User | None] = (), ticket: ReleaseTicket | None = None
) -> Notification:
    """Record a notification and deliver it once the current transaction commits."""
    notification = Notification.objects.create(
        event=event,
        subject=subject[:200],
        text=text,
        recipients=_emails(users),
        webhook_url=settings.OPTGATE_NOTIFY_WEBHOOK_URL,
        ticket=ticket,
    )
    transaction.on_commit(lambda: queue.enqueue(queue.DELIVER_NOTIFICATION, notification.pk), robust=True)
    return notification


# --- delivery ----------------------------------------------------------------------------------


class TransientDeliveryError(Exception):
    """At least one channel failed in a way that may work later (timeout, 5xx, refused connection)."""


def _next_number(notification: Notification, channel: str) -> int:
    top = notification.attempts.filter(channel=channel).aggregate(top=Max("number"))["top"]
    return (top or 0) + 1


def _try_email(notification: Notification) -> tuple[bool, int | None, str, bool]:
    try:
        send_mail(notification.subject, notification.text, settings.DEFAULT_FROM_EMAIL, notification.recipients)
    except OSError as exc:  # SMTP refusals and socket errors: worth another try
        return False, None, f"{type(exc).__name__}: {exc}", True
    return True, None, "", False


def _try_webhook(notification: Notification) -> tuple[bool, int | None, str, bool]:
    payload: dict[str, object] = {"text": f"*{notification.subject}*\n{notification.text}", "event": notification.event}
    if notification.ticket_id:
        payload["ticket"] = notification.ticket_id
    try:
        status = http.post_json(notification.webhook_url, payload, timeout_s=settings.OPTGATE_NOTIFY_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return False, None, f"{type(exc).__name__}: {exc}", True
    if 200 <= status < 300:
        return True, status, "", False
    # 4xx other than throttling means the request itself is wrong: another try cannot help.
    transient = status >= 500 or status in (408, 429)
    return False, status, f"HTTP {status}", transient


def notification_deliver(*, notification_id: int) -> list[str]:
    """Try each channel still pending once; return the channels left pending.

    Raises ``TransientDeliveryError`` when a pending channel may still succeed on a later try.
    """
    notification = Notification.objects.filter(pk=notification_id).first()
    if notification is None or notification.given_up_at is not None:
        return []
    transient_left = False
    for channel in notification.pending_channels:
        tries = notification.attempts.filter(channel=channel)
        exhausted = tries.count() >= settings.OPTGATE_NOTIFY_MAX_ATTEMPTS
        if exhausted or tries.filter(error__startswith="permanent").exists():
            continue
        sender = _try_email if channel == "email" else _try_webhook
        ok, status, error, transient = sender(notification)
        number = _next_number(notification, channel)
        if not ok and not transient:
            error = f"permanent: {error}"
        NotificationAttempt.objects.create(
            notification=notification, channel=channel, number=number, ok=ok, response_status=status, error=error[:2000]
        )
        if ok:
            Notification.objects.filter(pk=notification.pk).update(**{f"{channel}_sent_at": timezone.now()})
        elif transient and number < settings.OPTGATE_NOTIFY_MAX_ATTEMPTS:
            transient_left = True
        else:
            logger.warning(
                "notification %s: giving up on %s after %s tries: %s", notification.pk, channel, number, error
            )
    notification.refresh_from_db()
    if not transient_left and notification.pending_channels:
        Notification.objects.filter(pk=notification.pk, given_up_at=None).update(given_up_at=timezone.now())
    if transient_left:
        raise TransientDeliveryError(f"notification {notification.pk}: {', '.join(notification.pending_channels)}")
    return notification.pending_channels
