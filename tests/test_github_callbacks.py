"""GitHub deployment reviews are posted by a worker, retried on transient failures only,
against a real local HTTP server standing in for GitHub."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gates.models import GithubCallback
from gates.services import github
from gates.services.notifications import TransientDeliveryError
from workers import tasks

pytestmark = pytest.mark.django_db

REVIEW = {"environment_name": "production", "state": "approved", "comment": "OptGate approve for cand"}


class FakeGithub:
    """Answers each POST with the next status of ``statuses`` and keeps the bodies it received."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.received: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                fake.received.append(json.loads(self.rfile.read(length)))
                self.send_response(fake.statuses.pop(0) if fake.statuses else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:  # keep the test output quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/repos/acme/llm/actions/runs/42/protection"


@pytest.fixture
def fake_github() -> Iterator[FakeGithub]:
    fake = FakeGithub()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def recorded(url: str) -> GithubCallback:
    # The webhook accepts only https callbacks; the worker posts to whatever was recorded.
    return github.github_callback_record(url=url, review=REVIEW, delivery_id="d-42")


def test_the_worker_retries_5xx_until_github_accepts(fake_github: FakeGithub) -> None:
    fake_github.statuses = [502, 503]
    callback = recorded(fake_github.url)
    for _ in range(2):
        with pytest.raises(TransientDeliveryError):
            github.github_callback_deliver(callback_id=callback.pk)
    assert github.github_callback_deliver(callback_id=callback.pk) is True
    assert fake_github.received == [REVIEW] * 3
    attempts = list(callback.attempts.values_list("number", "ok", "response_status", "error"))
    assert attempts == [(1, False, 502, "HTTP 502"), (2, False, 503, "HTTP 503"), (3, True, 204, "")]
    callback.refresh_from_db()
    assert callback.delivered_at is not None and callback.given_up_at is None
    assert github.github_callback_deliver(callback_id=callback.pk) is True  # a redelivered message posts nothing
    assert len(fake_github.received) == 3


def test_the_worker_stops_at_a_4xx(fake_github: FakeGithub) -> None:
    fake_github.statuses = [422]
    callback = recorded(fake_github.url)
    assert github.github_callback_deliver(callback_id=callback.pk) is False
    assert github.github_callback_deliver(callback_id=callback.pk) is False
    assert len(fake_github.received) == 1
    assert list(callback.attempts.values_list("ok", "response_status")) == [(False, 422)]
    callback.refresh_from_db()
    assert callback.given_up_at is not None and callback.delivered_at is None


def test_the_worker_gives_up_after_the_allowed_tries(fake_github: FakeGithub, settings: Any) -> None:
    settings.OPTGATE_NOTIFY_MAX_ATTEMPTS = 2
    fake_github.statuses = [500, 500, 500]
    callback = recorded(fake_github.url)
    with pytest.raises(TransientDeliveryError):
        github.github_callback_deliver(callback_id=callback.pk)
    assert github.github_callback_deliver(callback_id=callback.pk) is False
    assert len(fake_github.received) == 2
    callback.refresh_from_db()
    assert callback.given_up_at is not None


def test_a_refused_connection_is_transient(fake_github: FakeGithub) -> None:
    url = fake_github.url
    fake_github.server.shutdown()
    fake_github.server.server_close()
    callback = recorded(url)
    with pytest.raises(TransientDeliveryError):
        github.github_callback_deliver(callback_id=callback.pk)
    attempt = callback.attempts.get()
    assert attempt.response_status is None and attempt.error.startswith("ConnectError")


def test_the_celery_task_retries_through_to_delivery(fake_github: FakeGithub, settings: Any) -> None:
    fake_github.statuses = [503, 500]
    callback = recorded(fake_github.url)
    # Run in-process: Celery re-applies an eager task's retries at once, with the same arguments.
    result = tasks.deliver_github_callback.apply(args=[callback.pk])
    assert result.successful(), result.traceback
    assert [a.response_status for a in callback.attempts.all()] == [503, 500, 204]
    callback.refresh_from_db()
    assert callback.delivered_at is not None
