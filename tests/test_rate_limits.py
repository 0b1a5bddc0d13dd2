"""Rate limits: anonymous API requests, writes per user, token issuing, and the web sign-in per
address and per username. Each test lowers one rate (tests/conftest.py lifts them all out of reach)
and shows the request past it answered 429 with Retry-After, while other traffic goes on.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from rest_framework.test import APIClient

from accounts.services import api_token_issue
from core.env import env_rate

pytestmark = pytest.mark.django_db

TICKETS = "/api/v1/tickets/"
TOKENS = "/api/v1/tokens/"
LOGIN = "/accounts/login/"
SCHEMA = "/api/schema/"


@pytest.fixture
def rates(settings: Any) -> dict[str, str | None]:
    """The rate table, for a test to lower; counters from earlier tests are cleared."""
    cache.clear()
    settings.OPTGATE_RATE_LIMITS = dict(settings.OPTGATE_RATE_LIMITS)
    return settings.OPTGATE_RATE_LIMITS


def keyed(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(actor=None, user=user).key}")
    return client


def assert_throttled(response: Any) -> None:
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60
    assert "throttled" in response.data["detail"]


def test_anonymous_requests_are_limited_per_address(rates: dict[str, str | None], erin: User) -> None:
    # The schema is the API's public endpoint; elsewhere an anonymous request is refused (401)
    # before any throttle is consulted.
    rates["anon"] = "2/min"
    anonymous = APIClient()
    assert [anonymous.get(SCHEMA).status_code for _ in range(2)] == [200, 200]
    assert_throttled(anonymous.get(SCHEMA))
    assert APIClient(REMOTE_ADDR="10.0.0.9").get(SCHEMA).status_code == 200  # another address is unaffected
    assert keyed(erin).get(SCHEMA).status_code == 200  # and so is a signed-in user


def test_writes_are_limited_per_user_and_reads_are_not(rates: dict[str, str | None], erin: User, evan: User) -> None:
    rates["write"] = "2/min"
    client = keyed(erin)
    bad_ticket: dict[str, Any] = {"title": ""}  # a refused write still counts
    assert [client.post(TICKETS, bad_ticket, format="json").status_code for _ in range(2)] == [400, 400]
    assert_throttled(client.post(TICKETS, bad_ticket, format="json"))
    assert client.get(TICKETS).status_code == 200
    assert keyed(evan).post(TICKETS, bad_ticket, format="json").status_code == 400


def test_issuing_tokens_has_its_own_stricter_limit(rates: dict[str, str | None], erin: User) -> None:
    rates["token"] = "2/hour"
    client = keyed(erin)
    assert [client.post(TOKENS, {"name": f"t{i}"}, format="json").status_code for i in range(2)] == [201, 201]
    refused = client.post(TOKENS, {"name": "t3"}, format="json")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 60  # counted over the hour
    token_id = erin.api_tokens.order_by("created_at").first().pk  # type: ignore[union-attr]
    assert client.post(f"{TOKENS}{token_id}/rotate/", {}, format="json").status_code == 429
    # Other writes follow the ordinary write limit.
    assert client.post(TICKETS, {"title": ""}, format="json").status_code == 400
    assert erin.api_tokens.count() == 3  # the fixture's key and two more


def login(client: Client, username: str, password: str, address: str = "127.0.0.1") -> Any:
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address)


def test_sign_in_is_limited_per_address(rates: dict[str, str | None], erin: User) -> None:
    rates["login_ip"] = "3/min"
    client = Client()
    assert [login(client, name, "guess").status_code for name in ("a", "b", "c")] == [200, 200, 200]
    refused = login(client, "erin", "pw-erin")  # even the right password waits
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert b"Too many sign-in attempts. Try again in" in refused.content
    assert "_auth_user_id" not in client.session
    assert login(Client(), "erin", "pw-erin", address="10.0.0.7").status_code == 302  # from elsewhere: fine


def test_sign_in_is_limited_per_username_across_addresses(rates: dict[str, str | None], erin: User) -> None:
    rates["login_username"] = "2/min"
    for address in ("10.0.0.1", "10.0.0.2"):
        assert login(Client(), "Erin", "guess", address=address).status_code == 200
    assert login(Client(), "erin", "pw-erin", address="10.0.0.3").status_code == 429  # case does not matter
    assert login(Client(), "evan", "guess", address="10.0.0.3").status_code == 200


def test_the_sign_in_page_itself_is_not_limited(rates: dict[str, str | None]) -> None:
    rates["login_ip"] = "1/min"
    client = Client()
    assert [client.get(LOGIN).status_code for _ in range(3)] == [200, 200, 200]


@pytest.mark.parametrize(
    ("value", "parsed"),
    [("60/min", "60/min"), ("5/S", "5/s"), ("100/hour", "100/hour"), ("2/day", "2/day"), ("off", None), ("", "9/h")],
)
def test_rates_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, parsed: str | None) -> None:
    monkeypatch.setenv("OPTGATE_RATE_ANON", value)
    assert env_rate("OPTGATE_RATE_ANON", "9/h") == parsed


@pytest.mark.parametrize("value", ["60", "60/fortnight", "0/min", "-1/min", "many/min"])
def test_a_bad_rate_stops_start_up_naming_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OPTGATE_RATE_WRITE", value)
    with pytest.raises(ImproperlyConfigured, match="OPTGATE_RATE_WRITE"):
        env_rate("OPTGATE_RATE_WRITE", "300/min")


def test_ledger_verification_is_limited_per_user_on_the_api_and_the_page(
    rates: dict[str, str | None], erin: User, evan: User
) -> None:
    # Each verification recomputes every entry (seconds of CPU at a million entries).
    rates["ledger_verify"] = "2/min"
    api = keyed(erin)
    assert [api.get("/api/v1/ledger/verify/").status_code for _ in range(2)] == [200, 200]
    assert_throttled(api.get("/api/v1/ledger/verify/"))
    assert api.get("/api/v1/ledger/").status_code == 200  # reading the ledger is not limited
    assert keyed(evan).get("/api/v1/ledger/verify/").data["ok"] is True  # another user is unaffected

    page = Client()
    page.force_login(evan)
    assert page.get("/ledger/verify/").status_code == 200  # evan's second verification
    refused = page.get("/ledger/verify/")
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "Try again in" in refused.content.decode()
    assert "The hash chain holds" not in refused.content.decode()


def _ledger_verify_rate_in_a_fresh_process(**env: str) -> str:
    """The ledger-verification rate the settings module reads at start-up, with ``env`` set."""
    code = "import django; django.setup(); from django.conf import settings as s; print(s.OPTGATE_RATE_LIMITS)"
    environ = {k: v for k, v in os.environ.items() if k != "OPTGATE_RATE_LEDGER_VERIFY"}
    environ.update(DJANGO_SETTINGS_MODULE="optgate.settings", **env)
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True)
    return str(ast.literal_eval(done.stdout.strip())["ledger_verify"])


def test_the_ledger_verification_rate_is_read_from_its_variable() -> None:
    assert _ledger_verify_rate_in_a_fresh_process(OPTGATE_RATE_LEDGER_VERIFY="1/hour") == "1/hour"
    assert _ledger_verify_rate_in_a_fresh_process() == "6/min"
