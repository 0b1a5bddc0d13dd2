"""API tokens: hashed storage, authentication and its refusals, rotation and revocation through the
REST API and the management commands, keys carried over from the old plaintext table, and the
OpenAPI description of the scheme.

Cast (tests/conftest.py): ``erin`` an engineer, ``olga`` an outsider, ``ada`` an admin.
"""

from __future__ import annotations

import hashlib
import importlib
import io
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.services import api_token_issue, api_token_revoke, api_token_rotate, key_prefix
from core.errors import InvalidInput
from ledger.models import LedgerEntry
from ledger.selectors import ledger_verify

pytestmark = pytest.mark.django_db

TICKETS = "/api/v1/tickets/"
TOKENS = "/api/v1/tokens/"


def client_with(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def session_of(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


# --- storage and authentication ----------------------------------------------------------------


def test_it_stores_only_the_hash_of_the_secret(erin: User) -> None:
    issued = api_token_issue(actor=erin, user=erin, name="ci")
    _, prefix, secret = issued.key.split("_", 2)
    assert issued.key.startswith("og_") and len(prefix) == 10 and len(secret) >= 40
    row = ApiToken.objects.get(pk=issued.token.pk)
    assert row.prefix == prefix and row.name == "ci"
    assert row.key_hash == hashlib.sha256(secret.encode()).hexdigest()
    stored = " ".join(str(value) for value in ApiToken.objects.filter(pk=row.pk).values().get().values())
    assert secret not in stored


def test_it_authenticates_a_valid_key_and_refuses_a_wrong_one(erin: User) -> None:
    key = api_token_issue(actor=erin, user=erin).key
    assert client_with(key).get(TICKETS).status_code == 200
    wrong_secret = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    response = client_with(wrong_secret).get(TICKETS)
    assert response.status_code == 401 and response.json() == {"detail": "invalid token"}
    assert response["WWW-Authenticate"] == "Token"
    unknown_prefix = "og_0123456789_" + key.split("_", 2)[2]
    assert client_with(unknown_prefix).get(TICKETS).status_code == 401
    assert client_with("not-a-key").get(TICKETS).json() == {"detail": "malformed token"}
    two_parts = APIClient()
    two_parts.credentials(HTTP_AUTHORIZATION=f"Token {key} extra")
    assert two_parts.get(TICKETS).status_code == 401


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda token: api_token_revoke(actor=None, token=token), "token revoked; ask for a new one"),
        (
            lambda token: ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1)),
            "token expired; rotate it or ask for a new one",
        ),
        (
            lambda token: User.objects.filter(pk=token.user_id).update(is_active=False),
            "user inactive: the account was deactivated",
        ),
    ],
    ids=["revoked", "expired", "inactive-user"],
)
def test_it_refuses_revoked_expired_and_inactive_user_tokens_with_401(erin: User, spoil: Any, message: str) -> None:
    issued = api_token_issue(actor=erin, user=erin)
    assert client_with(issued.key).get(TICKETS).status_code == 200
    spoil(issued.token)
    response = client_with(issued.key).get(TICKETS)
    assert response.status_code == 401
    assert response.json() == {"detail": message}


def test_it_records_last_use_at_most_once_a_minute(erin: User) -> None:
    issued = api_token_issue(actor=erin, user=erin)
    assert issued.token.last_used_at is None
    start = timezone.now().replace(microsecond=0)
    with time_machine.travel(start, tick=False):
        client_with(issued.key).get(TICKETS)
    first = ApiToken.objects.get(pk=issued.token.pk).last_used_at
    assert first == start
    with time_machine.travel(start + timedelta(seconds=30), tick=False):
        client_with(issued.key).get(TICKETS)
    assert ApiToken.objects.get(pk=issued.token.pk).last_used_at == first
    with time_machine.travel(start + timedelta(seconds=61), tick=False):
        client_with(issued.key).get(TICKETS)
    assert ApiToken.objects.get(pk=issued.token.pk).last_used_at == start + timedelta(seconds=61)


def test_the_flagger_webhook_verifies_keys_the_same_way(olga: User) -> None:
    issued = api_token_issue(actor=olga, user=olga)
    body = '{"name": "gw", "metadata": {"backend": "no-such-backend", "token": "%s"}}'
    post = Client().post
    flagger = "/api/v1/integrations/flagger/confirm-promotion/"
    assert post(flagger, data=body % issued.key, content_type="application/json").status_code == 403  # known, denied
    api_token_revoke(actor=olga, token=issued.token)
    refused = post(flagger, data=body % issued.key, content_type="application/json")
    assert refused.status_code == 401 and refused.json() == {"detail": "token revoked; ask for a new one"}


# --- the REST API ------------------------------------------------------------------------------


def test_creating_a_token_returns_its_key_once(erin: User) -> None:
    response = session_of(erin).post(TOKENS, {"name": "ci-deploy", "expires_in_days": 30}, format="json")
    assert response.status_code == 201
    assert response["Cache-Control"] == "no-store"
    created = response.json()
    assert created["user"] == "erin" and created["name"] == "ci-deploy" and created["state"] == "active"
    assert key_prefix(created["key"]) == created["prefix"]
    assert client_with(created["key"]).get(TICKETS).status_code == 200
    listed = session_of(erin).get(TOKENS).json()["results"]
    detail = session_of(erin).get(f"{TOKENS}{created['id']}/").json()
    for shown in (*listed, detail):
        assert "key" not in shown and "key_hash" not in shown
        assert created["key"].split("_", 2)[2] not in str(shown)
    expires = ApiToken.objects.get(pk=created["id"]).expires_at
    assert expires is not None and timedelta(days=29) < expires - timezone.now() <= timedelta(days=30)


def test_everyone_sees_only_their_own_tokens_and_admins_see_all(erin: User, olga: User, ada: User) -> None:
    mine = api_token_issue(actor=erin, user=erin, name="erin-ci")
    theirs = api_token_issue(actor=olga, user=olga, name="olga-ci")
    erins = {t["prefix"] for t in session_of(erin).get(TOKENS).json()["results"]}
    assert erins == {mine.token.prefix}
    assert session_of(erin).get(f"{TOKENS}{theirs.token.pk}/").status_code == 404
    everyone = {t["prefix"] for t in session_of(ada).get(TOKENS).json()["results"]}
    assert {mine.token.prefix, theirs.token.prefix} <= everyone
    only_olga = session_of(ada).get(TOKENS, {"user": "olga"}).json()["results"]
    assert [t["prefix"] for t in only_olga] == [theirs.token.prefix]


def test_only_admins_create_tokens_for_other_users(erin: User, olga: User, ada: User) -> None:
    refused = session_of(erin).post(TOKENS, {"name": "x", "user": "olga"}, format="json")
    assert refused.status_code == 403
    assert not ApiToken.objects.filter(user=olga).exists()
    made = session_of(ada).post(TOKENS, {"name": "olga-bot", "user": "olga"}, format="json")
    assert made.status_code == 201 and made.json()["user"] == "olga"
    assert session_of(erin).post(TOKENS, {"name": "x", "key": "mine"}, format="json").status_code == 400


def test_rotating_revokes_the_old_key_and_returns_a_new_one(erin: User) -> None:
    old = api_token_issue(actor=erin, user=erin, name="ci", expires_at=timezone.now() + timedelta(days=10))
    response = client_with(old.key).post(f"{TOKENS}{old.token.pk}/rotate/", {}, format="json")
    assert response.status_code == 201
    new = response.json()
    assert new["name"] == "ci" and new["prefix"] != old.token.prefix and new["key"] != old.key
    assert client_with(old.key).get(TICKETS).json() == {"detail": "token revoked; ask for a new one"}
    assert client_with(new["key"]).get(TICKETS).status_code == 200
    # The replacement keeps the old lifetime, counted from the rotation.
    lifetime = ApiToken.objects.get(pk=new["id"]).expires_at - timezone.now()  # type: ignore[operator]
    assert timedelta(days=9, hours=23) < lifetime <= timedelta(days=10)
    again = client_with(new["key"]).post(f"{TOKENS}{old.token.pk}/rotate/", {}, format="json")
    assert again.status_code == 409


def test_rotating_someone_elses_token_needs_an_admin(erin: User, olga: User, ada: User) -> None:
    erins = api_token_issue(actor=erin, user=erin)
    assert session_of(olga).post(f"{TOKENS}{erins.token.pk}/rotate/", {}, format="json").status_code == 404
    assert client_with(erins.key).get(TICKETS).status_code == 200
    rotated = session_of(ada).post(f"{TOKENS}{erins.token.pk}/rotate/", {}, format="json")
    assert rotated.status_code == 201 and rotated.json()["user"] == "erin"
    assert client_with(erins.key).get(TICKETS).status_code == 401


def test_deleting_a_token_revokes_it_and_keeps_the_row(erin: User, olga: User) -> None:
    issued = api_token_issue(actor=erin, user=erin)
    assert session_of(olga).delete(f"{TOKENS}{issued.token.pk}/").status_code == 404
    assert session_of(erin).delete(f"{TOKENS}{issued.token.pk}/").status_code == 204
    assert client_with(issued.key).get(TICKETS).status_code == 401
    row = ApiToken.objects.get(pk=issued.token.pk)
    assert row.revoked_at is not None
    assert session_of(erin).delete(f"{TOKENS}{issued.token.pk}/").status_code == 204  # harmless twice
    assert ApiToken.objects.get(pk=row.pk).revoked_at == row.revoked_at
    assert session_of(erin).get(f"{TOKENS}{row.pk}/").json()["state"] == "revoked"


def test_services_refuse_anonymous_actors(erin: User) -> None:
    from django.contrib.auth.models import AnonymousUser

    from core.errors import NotAllowed

    issued = api_token_issue(actor=erin, user=erin)
    with pytest.raises(NotAllowed):
        api_token_rotate(actor=AnonymousUser(), token=issued.token)
    with pytest.raises(NotAllowed):
        api_token_issue(actor=AnonymousUser(), user=erin)


# --- the ledger ---------------------------------------------------------------------------------


def _token_events() -> list[tuple[str, str, str, dict[str, Any]]]:
    entries = LedgerEntry.objects.filter(subject_type="api_token").order_by("seq")
    return [(e.kind, e.actor_name, e.subject_name, e.payload) for e in entries]


def test_issuing_rotating_and_revoking_are_in_the_ledger_without_any_secret(erin: User, ada: User) -> None:
    made = session_of(erin).post(TOKENS, {"name": "ci"}, format="json").json()
    rotated = session_of(erin).post(f"{TOKENS}{made['id']}/rotate/", {}, format="json").json()
    assert session_of(ada).delete(f"{TOKENS}{rotated['id']}/").status_code == 204
    assert session_of(ada).delete(f"{TOKENS}{rotated['id']}/").status_code == 204  # again: nothing new
    old, new = made["prefix"], rotated["prefix"]
    owner, rotation = {"owner": "erin", "name": "ci", "expires_at": None}, f"rotated: replaced by {new}"
    assert _token_events() == [
        ("token.issued", "erin", f"erin/ci ({old})", {**owner, "prefix": old}),
        ("token.issued", "erin", f"erin/ci ({new})", {**owner, "prefix": new, "replaces": old}),
        ("token.revoked", "erin", f"erin/ci ({old})", {**owner, "prefix": old, "reason": rotation}),
        ("token.revoked", "ada", f"erin/ci ({new})", {**owner, "prefix": new, "reason": "revoked"}),
    ]
    # Neither key nor stored hash reaches the ledger, and the chain holds.
    stored = [e.payload for e in LedgerEntry.objects.all()] + [e.subject_name for e in LedgerEntry.objects.all()]
    for key, token in ((made["key"], made["id"]), (rotated["key"], rotated["id"])):
        secret = key.rsplit("_", 1)[1]
        assert secret not in str(stored) and ApiToken.objects.get(pk=token).key_hash not in str(stored)
    assert ledger_verify().ok


def test_replacing_named_tokens_records_each_one_revoked_and_a_refused_issue_records_nothing(erin: User) -> None:
    first = api_token_issue(actor=None, user=erin, name="deploy")
    second = api_token_issue(actor=None, user=erin, name="deploy")
    call_command("create_token", "erin", "--name", "deploy", "--rotate", stdout=io.StringIO())
    revoked = [(kind, payload["prefix"]) for kind, _, _, payload in _token_events() if kind == "token.revoked"]
    assert sorted(revoked) == sorted([("token.revoked", first.token.prefix), ("token.revoked", second.token.prefix)])
    assert {actor for _, actor, _, _ in _token_events()} == {"system"}
    before = LedgerEntry.objects.count()
    erin.is_active = False
    erin.save()
    with pytest.raises(InvalidInput):
        api_token_issue(actor=None, user=erin, name="late")
    assert LedgerEntry.objects.count() == before


def test_the_schema_documents_token_auth(erin: User) -> None:
    schema = session_of(erin).get("/api/schema/", {"format": "json"}).json()
    scheme = schema["components"]["securitySchemes"]["tokenAuth"]
    assert scheme["type"] == "apiKey" and scheme["in"] == "header" and scheme["name"] == "Authorization"
    assert {"tokenAuth": []} in schema["paths"]["/api/v1/tickets/"]["get"]["security"]
    assert set(schema["paths"]["/api/v1/tokens/{id}/rotate/"]) == {"post"}


# --- management commands -----------------------------------------------------------------------


def test_create_token_prints_a_working_key_and_rotate_replaces_same_named_ones(erin: User) -> None:
    out = io.StringIO()
    call_command("create_token", "erin", "--name", "deploy", stdout=out)
    first = out.getvalue().strip()
    assert client_with(first).get(TICKETS).status_code == 200
    other = api_token_issue(actor=None, user=erin, name="laptop")
    out = io.StringIO()
    call_command("create_token", "erin", "--name", "deploy", "--rotate", "--expires-in-days", "7", stdout=out)
    second = out.getvalue().strip()
    assert second != first and "\n" not in second
    assert client_with(first).get(TICKETS).status_code == 401
    assert client_with(second).get(TICKETS).status_code == 200
    assert client_with(other.key).get(TICKETS).status_code == 200  # another name is left alone
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        call_command("create_token", "nobody")


def test_create_user_with_token_prints_a_working_key(db: None) -> None:
    out = io.StringIO()
    call_command("create_user", "ci-bot", "--role", "engineer", "--token", stdout=out)
    key = out.getvalue().split("token: ", 1)[1].strip()
    assert client_with(key).get(TICKETS).status_code == 200
    out = io.StringIO()
    call_command("create_user", "ci-bot", "--role", "engineer", "--token", stdout=out)
    assert client_with(key).get(TICKETS).status_code == 401  # replaced by the new one
    assert client_with(out.getvalue().split("token: ", 1)[1].strip()).get(TICKETS).status_code == 200


# --- keys from rest_framework.authtoken ---------------------------------------------------------


def test_the_migration_hashes_old_plaintext_keys_so_clients_keep_working(erin: User) -> None:
    legacy_key = "9f" * 20  # the 40 hex digits rest_framework.authtoken generated
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamp NOT NULL, "
            "user_id integer NOT NULL)"
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, %s)", [legacy_key, timezone.now(), erin.pk])
    migration = importlib.import_module("gates.migrations.0005_apitoken")
    # The models as that migration saw them (API tokens lived in the gates app then).
    historical = MigrationLoader(connection).project_state(("gates", "0005_apitoken")).apps
    migration.carry_over_authtoken_keys(historical, SimpleNamespace(connection=connection))
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0  # the plaintext is gone
    row = ApiToken.objects.get(user=erin)
    assert row.prefix == "legacy-" + legacy_key[:12]
    assert row.key_hash == hashlib.sha256(legacy_key.encode()).hexdigest()
    assert client_with(legacy_key).get(TICKETS).status_code == 200
    rotated = client_with(legacy_key).post(f"{TOKENS}{row.pk}/rotate/", {}, format="json").json()
    assert rotated["key"].startswith("og_")
    assert client_with(legacy_key).get(TICKETS).status_code == 401
