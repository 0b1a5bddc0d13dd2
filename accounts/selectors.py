"""Read paths of the accounts app."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import QuerySet

from accounts.models import ApiToken
from core.roles import ADMIN, Actor, has_role, person


def api_tokens_visible(*, actor: Actor) -> QuerySet[ApiToken]:
    """Tokens ``actor`` may see and manage: everyone's for an admin, otherwise their own."""
    user = person(actor)
    if user is None:
        return ApiToken.objects.none()
    tokens = ApiToken.objects.select_related("user")
    return tokens if has_role(user, ADMIN) else tokens.filter(user=user)


def users_visible(*, actor: Actor) -> QuerySet[User]:
    """People and their groups ``actor`` may see: everyone for an admin, otherwise only themselves."""
    user = person(actor)
    if user is None:
        return User.objects.none()
    people = User.objects.prefetch_related("groups").order_by("username")
    return people if has_role(user, ADMIN) else people.filter(pk=user.pk)
