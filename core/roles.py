"""The three roles, kept as Django groups."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User

ENGINEER = "engineer"
REVIEWER = "reviewer"
ADMIN = "admin"
ROLES = (ENGINEER, REVIEWER, ADMIN)

# Who acts: a person, an anonymous request, or None for the system itself (workers, schedules).
Actor = User | AnonymousUser | None


def person(actor: Actor) -> User | None:
    """The signed-in user behind ``actor``, or None for the system and anonymous requests."""
    return actor if isinstance(actor, User) and actor.is_authenticated else None


def user_roles(user: Actor) -> set[str]:
    if user is None or not user.is_authenticated:
        return set()
    roles = set(user.groups.values_list("name", flat=True)) & set(ROLES)
    if getattr(user, "is_superuser", False):
        roles.add(ADMIN)
    return roles


def has_role(user: Actor, *roles: str) -> bool:
    return bool(user_roles(user) & set(roles))
