"""Roles and reviewer capacities change only through the ledgered grant service: commands, admin, API."""

from __future__ import annotations

from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from accounts.services import group_grant, group_revoke
from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import CAPACITY_GROUPS, user_roles
from gates.models import ReviewerCapacity
from ledger.models import LedgerEntry
from ledger.selectors import ledger_verify
from tests.ui_helpers import client_for

pytestmark = pytest.mark.django_db


def groups_of(user: User) -> set[str]:
    return set(user.groups.values_list("name", flat=True))


def test_a_role_grant_appears_in_the_ledger(ada: User, rita: User) -> None:
    assert group_grant(actor=ada, user=rita, group="reviewer:security", reason="joins the security rota")
    entry = LedgerEntry.objects.get(kind="user.group_granted")
    assert (entry.actor, entry.subject_name) == (ada, "rita")
    assert entry.payload == {"username": "rita", "group": "reviewer:security", "reason": "joins the security rota"}
    assert "reviewer:security" in groups_of(rita)
    assert not group_grant(actor=ada, user=rita, group="reviewer:security")  # nothing new, nothing ledgered
    assert LedgerEntry.objects.filter(kind="user.group_granted").count() == 1
    assert ledger_verify().ok


def test_a_revoke_is_ledgered_and_takes_the_permission_away(ada: User, rita: User) -> None:
    assert group_revoke(actor=ada, user=rita, group="reviewer", reason="left the team")
    assert user_roles(rita) == set()
    entry = LedgerEntry.objects.get(kind="user.group_revoked")
    assert entry.payload["group"] == "reviewer" and entry.actor == ada
    assert not group_revoke(actor=ada, user=rita, group="reviewer")
    assert LedgerEntry.objects.filter(kind="user.group_revoked").count() == 1


def test_only_admins_grant_and_only_known_groups(rita: User, erin: User, ada: User) -> None:
    with pytest.raises(NotAllowed):
        group_grant(actor=rita, user=erin, group="reviewer")
    with pytest.raises(NotAllowed):
        group_revoke(actor=erin, user=rita, group="reviewer")
    with pytest.raises(InvalidInput, match="group"):
        group_grant(actor=ada, user=erin, group="superuser")
    assert groups_of(erin) == {"engineer"} and not LedgerEntry.objects.exists()


def test_granting_admin_makes_staff_and_the_last_admin_keeps_the_role(ada: User, erin: User) -> None:
    with pytest.raises(DomainError, match="last admin"):
        group_revoke(actor=None, user=ada, group="admin")
    group_grant(actor=ada, user=erin, group="admin")
    erin.refresh_from_db()
    assert erin.is_staff and erin.is_superuser
    assert group_revoke(actor=erin, user=ada, group="admin")
    ada.refresh_from_db()
    assert not ada.is_staff and "admin" not in groups_of(ada)


def test_every_reviewer_capacity_has_a_grantable_group() -> None:
    assert {f"reviewer:{capacity}" for capacity in ReviewerCapacity.values} == set(CAPACITY_GROUPS)


def test_the_command_grants_and_revokes_through_the_service(rita: User) -> None:
    out = StringIO()
    call_command("grant_role", "rita", "reviewer:business_owner", "--reason", "finance sign-off", stdout=out)
    assert "granted reviewer:business_owner for rita" in out.getvalue()
    call_command("grant_role", "rita", "reviewer:business_owner", "--revoke", stdout=out)
    kinds = list(LedgerEntry.objects.order_by("seq").values_list("kind", "actor", "payload__reason"))
    assert kinds == [("user.group_granted", None, "finance sign-off"), ("user.group_revoked", None, "")]
    with pytest.raises(CommandError, match="no user"):
        call_command("grant_role", "nobody", "reviewer")


def test_the_api_grants_for_admins_only(api_for: Callable[[User | None], APIClient], ada: User, rita: User) -> None:
    body = {"group": "reviewer:sre", "reason": "on call this quarter"}
    refused = api_for(rita).post("/api/v1/users/rita/grant/", body, format="json")
    assert refused.status_code == 403 and not LedgerEntry.objects.filter(kind="user.group_granted").exists()
    granted = api_for(ada).post("/api/v1/users/rita/grant/", body, format="json")
    assert granted.status_code == 200
    assert granted.json() == {
        "username": "rita",
        "is_active": True,
        "groups": ["reviewer", "reviewer:sre"],
        "changed": True,
    }
    entry = LedgerEntry.objects.get(kind="user.group_granted")
    assert (entry.actor, entry.payload["reason"]) == (ada, "on call this quarter")
    again = api_for(ada).post("/api/v1/users/rita/grant/", body, format="json")
    assert again.json()["changed"] is False
    unknown = api_for(ada).post("/api/v1/users/rita/grant/", {"group": "root"}, format="json")
    assert unknown.status_code == 400
    last_admin = api_for(ada).post("/api/v1/users/ada/revoke/", {"group": "admin"}, format="json")
    assert last_admin.status_code == 409


def test_the_api_shows_others_their_own_groups_only(
    api_for: Callable[[User | None], APIClient], ada: User, rita: User
) -> None:
    assert [row["username"] for row in api_for(rita).get("/api/v1/users/").json()["results"]] == ["rita"]
    assert api_for(rita).get("/api/v1/users/ada/").status_code == 404
    assert {row["username"] for row in api_for(ada).get("/api/v1/users/").json()["results"]} == {"ada", "rita"}


def test_the_admin_site_changes_groups_only_through_the_ledgered_actions(rita: User) -> None:
    root = User.objects.create_superuser(username="root", password="pw-root", email="root@example.com")
    client = client_for(root)
    page = client.get(f"/admin/auth/user/{rita.pk}/change/")
    assert page.status_code == 200 and "groups" in page.context["adminform"].readonly_fields
    response = client.post(
        "/admin/auth/user/",
        {"action": "grant_reviewer_security", "_selected_action": [rita.pk]},
    )
    assert response.status_code == 302
    entry = LedgerEntry.objects.get(kind="user.group_granted")
    assert (entry.actor, entry.payload["group"], entry.payload["reason"]) == (root, "reviewer:security", "admin site")
    assert "reviewer:security" in groups_of(rita)


def test_the_admin_site_does_not_rename_roles(rita: Any) -> None:
    root = User.objects.create_superuser(username="root", password="pw-root", email="root@example.com")
    reviewer = rita.groups.get(name="reviewer")
    response = client_for(root).post(f"/admin/auth/group/{reviewer.pk}/change/", {"name": "renamed"})
    assert response.status_code == 403
    reviewer.refresh_from_db()
    assert reviewer.name == "reviewer"
