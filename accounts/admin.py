from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.models import ApiToken
from accounts.services import api_token_revoke, group_grant, group_revoke
from core.admin import ReadOnlyAdmin
from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import GRANTABLE_GROUPS


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens without their secrets (only hashes are stored); revoking goes through the service."""

    list_display = ["prefix", "name", "user", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = ["name"]
    search_fields = ["prefix", "name", "user__username"]
    exclude = ["key_hash"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset.select_related("user"):
            api_token_revoke(actor=request.user, token=token)


GroupChange = Callable[..., bool]
Action = Callable[[Any, HttpRequest, QuerySet[User]], None]


def _group_action(change: GroupChange, group: str) -> Action:
    def act(modeladmin: Any, request: HttpRequest, queryset: QuerySet[User]) -> None:
        changed = []
        for user in queryset:
            try:
                if change(actor=request.user, user=user, group=group, reason="admin site"):
                    changed.append(user.get_username())
            except (NotAllowed, DomainError, InvalidInput) as exc:
                modeladmin.message_user(request, f"{user.get_username()}: {exc}", messages.ERROR)
        modeladmin.message_user(request, f"{group}: {', '.join(changed) or 'nobody'} changed")

    return act


admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class PersonAdmin(UserAdmin):  # type: ignore[type-arg]
    """People. Roles and reviewer capacities are read-only here: the grant and revoke actions
    go through ``accounts.services`` so that every change is a ledger entry."""

    readonly_fields = ["groups", "user_permissions", "is_staff", "is_superuser", "last_login", "date_joined"]
    list_filter = ["groups", "is_active"]

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions: dict[str, Any] = dict(super().get_actions(request))
        for group in GRANTABLE_GROUPS:
            for verb, change in (("grant", group_grant), ("revoke", group_revoke)):
                name = f"{verb}_{group.replace(':', '_')}"
                actions[name] = (_group_action(change, group), name, f"{verb.capitalize()} {group}")
        return actions


@admin.register(Group)
class RoleAdmin(ReadOnlyAdmin, GroupAdmin):
    """Groups are the roles and capacities the code checks by name: renaming one would revoke it silently."""
