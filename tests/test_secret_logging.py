"""Secrets never reach log output: API keys (refused or accepted), Authorization headers, passwords
in service URLs and the values of secret settings are masked in what pytest captures (caplog)
and in what the handlers configured by settings.LOGGING write.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from accounts.services import api_token_issue
from core.log_redaction import MASK, RedactSecretsFilter, redact

pytestmark = pytest.mark.django_db

logger = logging.getLogger("optgate.tests.secrets")


class Captured:
    """What pytest's caplog and the configured console handler received."""

    def __init__(self, caplog: pytest.LogCaptureFixture, console: io.StringIO) -> None:
        self.caplog = caplog
        self.console = console

    def text(self) -> str:
        return self.caplog.text + "\n" + self.console.getvalue()

    def assert_clean(self, *secrets: str) -> None:
        written = self.text()
        for secret in secrets:
            assert secret not in written


@pytest.fixture
def captured(caplog: pytest.LogCaptureFixture) -> Iterator[Captured]:
    caplog.set_level(logging.INFO)
    console = next(h for h in logging.getLogger().handlers if h.get_name() == "console")
    assert isinstance(console, logging.StreamHandler)
    buffer = io.StringIO()
    previous = console.setStream(buffer)
    try:
        yield Captured(caplog, buffer)
    finally:
        console.setStream(previous)


def test_every_configured_handler_redacts(settings: Any) -> None:
    attached = [*logging.getLogger().handlers, *logging.getLogger("django.server").handlers]
    configured = {h.get_name(): h for h in attached if h.get_name() in settings.LOGGING["handlers"]}
    assert set(configured) == set(settings.LOGGING["handlers"])  # every configured handler is in use
    for handler in configured.values():
        assert any(isinstance(f, RedactSecretsFilter) for f in handler.filters), handler


def test_a_refused_key_is_logged_by_prefix_only(captured: Captured, erin: User) -> None:
    key = api_token_issue(actor=erin, user=erin).key
    prefix, secret = key.split("_", 2)[1:]
    wrong = f"og_{prefix}_{'x' * 43}"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {wrong}")
    assert client.get("/api/v1/tickets/").status_code == 401
    assert f"api token rejected (invalid token): prefix {prefix}" in captured.text()
    captured.assert_clean(secret, "x" * 43)


def test_issuing_and_using_a_key_logs_no_secret(captured: Captured, erin: User) -> None:
    session = APIClient()
    session.force_authenticate(erin)
    created = session.post("/api/v1/tokens/", {"name": "ci"}, format="json").json()
    secret = created["key"].split("_", 2)[2]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {created['key']}")
    assert client.get("/api/v1/tickets/").status_code == 200
    # A careless line elsewhere: the key in a message, an argument and a header dump.
    logger.warning("calling with %s", created["key"])
    logger.warning("headers: %s", {"Authorization": f"Token {created['key']}"})
    logger.warning(f"request GET /api/v1/tickets/?token={created['key']}")
    assert f"api token {created['prefix']} (ci) issued for erin" in captured.text()
    assert captured.text().count(f"og_{created['prefix']}_{MASK}") >= 2
    captured.assert_clean(secret)


def test_passwords_in_service_urls_are_masked(captured: Captured) -> None:
    logger.info("database: %s", "postgres://optgate:db-pass-4711@db.internal:5432/optgate")
    logger.info("broker: redis://:redis-pass-0815@redis.internal:6379/0")
    logger.info("options %r", {"password": "plain-pass-1234", "user": "optgate"})
    captured.assert_clean("db-pass-4711", "redis-pass-0815", "plain-pass-1234")
    assert f"postgres://optgate:{MASK}@db.internal:5432/optgate" in captured.text()
    assert "user': 'optgate'" in captured.text()  # only the secret goes


def test_secret_settings_and_bearer_headers_are_masked(captured: Captured, settings: Any) -> None:
    settings.OPTGATE_METRICS_TOKEN = "scrape-token-9876"
    settings.OPTGATE_GITHUB_WEBHOOK_SECRET = "hook-secret-5432"
    logger.error("scrape refused for %s", "scrape-token-9876")
    logger.error("signature computed with hook-secret-5432 did not match")
    logger.error("Authorization: Bearer some-opaque-credential")
    logger.error("secret key is %s", settings.SECRET_KEY)
    captured.assert_clean("scrape-token-9876", "hook-secret-5432", "some-opaque-credential", settings.SECRET_KEY)


def test_exception_text_is_masked(captured: Captured) -> None:
    try:
        raise ConnectionError("could not connect to postgres://optgate:exc-pass-2468@db:5432/optgate")
    except ConnectionError:
        logger.exception("database unavailable")
    assert "ConnectionError" in captured.text()
    captured.assert_clean("exc-pass-2468")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("HTTP_AUTHORIZATION='Token og_0123456789_abcdefghij'", f"HTTP_AUTHORIZATION='{MASK}'"),
        ("sqla+sqlite:////var/broker.sqlite3", "sqla+sqlite:////var/broker.sqlite3"),
        ("https://example.com/a@b", "https://example.com/a@b"),
        ("tokens of 12 prefixes", "tokens of 12 prefixes"),
        ("og_0123456789_short", "og_0123456789_short"),
        ("max_tokens: 128, num_speculative_tokens=3", "max_tokens: 128, num_speculative_tokens=3"),
        ("DB_PASSWORD=hunter22 next", f"DB_PASSWORD={MASK} next"),
        ("GET /x?token=og_0123456789_abcdefghijkl&y=1", f"GET /x?token=og_0123456789_{MASK}&y=1"),
        ("OPTGATE_GITHUB_WEBHOOK_SECRET is not configured", "OPTGATE_GITHUB_WEBHOOK_SECRET is not configured"),
    ],
)
def test_redaction_masks_secrets_and_leaves_ordinary_text_alone(text: str, expected: str) -> None:
    assert redact(text) == expected
