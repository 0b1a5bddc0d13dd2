"""Notifications: email and Slack-compatible webhook, one attempt row per try, retries only when useful."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.core import mail

from gates.models import Notification, NotificationAttempt, ReleaseTicket
from gates.services.notifications import TransientDeliveryError, notification_deliver, notify

pytestmark = pytest.mark.django_db


class Hook:
    """A local webhook receiver answering with the queued statuses, recording each JSON body."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.bodies: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                hook.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(hook.statuses.pop(0) if hook.statuses else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def hook(settings: Any) -> Iterator[Hook]:
    receiver = Hook()
    settings.OPTGATE_NOTIFY_WEBHOOK_URL = receiver.url
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    yield receiver
    receiver.server.shutdown()


def _notification(draft: ReleaseTicket, *users: User) -> Notification:
    with mock.patch("core.queue.enqueue"):
        return notify(event="review.opened", subject="Review due", text="Please review.", users=users, ticket=draft)


def test_it_sends_email_and_a_slack_compatible_webhook(
    draft: ReleaseTicket, erin: User, rita: User, hook: Hook
) -> None:
    notification = _notification(draft, erin, rita)
    assert notification_deliver(notification_id=notification.pk) == []
    assert mail.outbox[0].to == ["erin@example.com", "rita@example.com"]
    assert hook.bodies[0]["text"] == "*Review due*\nPlease review."
    assert hook.bodies[0]["ticket"] == draft.pk
    tries = list(NotificationAttempt.objects.values_list("channel", "number", "ok"))
    assert tries == [("email", 1, True), ("webhook", 1, True)]


def test_it_retries_a_webhook_answering_503_and_records_each_try(draft: ReleaseTicket, erin: User, hook: Hook) -> None:
    hook.statuses = [503]
    notification = _notification(draft, erin)
    with pytest.raises(TransientDeliveryError):
        notification_deliver(notification_id=notification.pk)
    assert notification_deliver(notification_id=notification.pk) == []
    assert len(mail.outbox) == 1  # the email went out once, not again on the webhook's retry
    tries = list(NotificationAttempt.objects.filter(channel="webhook").values_list("number", "ok", "response_status"))
    assert tries == [(1, False, 503), (2, True, 200)]


def test_it_gives_up_at_once_on_a_webhook_that_rejects_the_request(
    draft: ReleaseTicket, erin: User, hook: Hook
) -> None:
    hook.statuses = [404]
    notification = _notification(draft, erin)
    assert notification_deliver(notification_id=notification.pk) == ["webhook"]
    notification.refresh_from_db()
    assert notification.given_up_at is not None
    assert NotificationAttempt.objects.get(channel="webhook").error == "permanent: HTTP 404"


def test_it_stops_after_the_configured_number_of_tries(
    draft: ReleaseTicket, erin: User, hook: Hook, settings: Any
) -> None:
    settings.OPTGATE_NOTIFY_MAX_ATTEMPTS = 2
    hook.statuses = [500, 500, 500]
    notification = _notification(draft, erin)
    with pytest.raises(TransientDeliveryError):
        notification_deliver(notification_id=notification.pk)
    assert notification_deliver(notification_id=notification.pk) == ["webhook"]
    assert notification_deliver(notification_id=notification.pk) == []  # given up: nothing more is tried
    assert NotificationAttempt.objects.filter(channel="webhook").count() == 2


def test_a_broken_mail_server_never_blocks_the_transition(
    draft: ReleaseTicket, erin: User, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from gates.services import tickets as gate_services

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_PORT = 1  # nothing listens there
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        ticket = gate_services.ticket_submit(ticket=draft, actor=erin)
        notification = _notification(ticket, erin)
    assert ticket.status == "submitted"
    with pytest.raises(TransientDeliveryError):
        notification_deliver(notification_id=notification.pk)
    attempt = NotificationAttempt.objects.get()
    assert attempt.ok is False and "ConnectionRefusedError" in attempt.error
    assert len(callbacks) == 1  # delivery is enqueued after commit, outside the transition
