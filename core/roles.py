"""The three roles, kept as Django groups."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User

ENGINEER = "engineer"
REVIEWER = "reviewer"
ADMIN = "admin"
ROLES = (ENGINEER, REVIEWER, ADMIN)

# Finer grants on top of the reviewer role: the capacities a reviewer may sign in
# (``gates.models.ReviewerCapacity``; every reviewer signs as platform without a group).
CAPACITY_GROUP_PREFIX = "reviewer:"
CAPACITY_GROUPS = tuple(f"{CAPACITY_GROUP_PREFIX}{name}" for name in ("platform", "sre", "business_owner", "security"))
# Every group ``accounts.services.group_grant`` hands out; nothing else confers a permission.
GRANTABLE_GROUPS = (*ROLES, *CAPACITY_GROUPS)

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
