"""Write paths of the accounts app: people and their roles, and API tokens.

Users and roles: ``user_save`` creates or updates a person with one role (a Django group);
``group_grant`` and ``group_revoke`` add or take away a role or a reviewer capacity. Each records
itself in the ledger; commands, the admin and the API all grant through these, nowhere else.

API tokens: issue, rotate, revoke and verify hashed keys.

A key looks like ``og_<prefix>_<secret>``. The prefix (10 hex digits) is public and unique: it
finds the row without scanning. Only ``sha256(secret)`` is stored, compared in constant time, so
a copy of the database does not hand out working keys. Keys carried over from the plaintext
``rest_framework.authtoken`` table (40 hex digits, no ``og_``) are stored the same way under the
prefix ``legacy-<first 12 digits>`` and keep working until they are rotated or revoked.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import Group, User
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import ApiToken
from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import ADMIN, GRANTABLE_GROUPS, ROLES, Actor, has_role, person
from ledger.services import ledger_append

logger = logging.getLogger(__name__)

KEY_PREFIX = "og"
PREFIX_BYTES = 5  # 10 hex digits
LEGACY_PREFIX = "legacy-"
LEGACY_KEY = re.compile(r"^[0-9a-f]{40}$")
KEY_FORMAT = re.compile(r"^og_(?P<prefix>[0-9a-f]{10})_(?P<secret>[A-Za-z0-9_\-]{20,})$")
# How often a token's last_used_at is written: once a minute is enough to see stale keys
# without a database write on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class TokenRejected(Exception):
    """The key is unknown, malformed, revoked, expired or belongs to an inactive user."""


@dataclass(frozen=True)
class IssuedToken:
    """A freshly issued token and its full key; the key exists nowhere else after this."""

    token: ApiToken
    key: str


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def legacy_prefix(key: str) -> str:
    """The prefix a carried-over plaintext key is stored under."""
    return LEGACY_PREFIX + key[:12]


def _split_key(key: str) -> tuple[str, str]:
    """(prefix, secret) of a key in either format; raises ``TokenRejected`` for anything else."""
    match = KEY_FORMAT.match(key)
    if match:
        return match["prefix"], match["secret"]
    if LEGACY_KEY.match(key):
        return legacy_prefix(key), key
    raise TokenRejected("malformed token")


def key_prefix(key: str) -> str | None:
    """The public prefix of ``key`` (safe to log), or None when it is not a key at all."""
    try:
        return _split_key(key)[0]
    except TokenRejected:
        return None


def api_token_authenticate(key: str) -> ApiToken:
    """The active token ``key`` belongs to; raises ``TokenRejected`` saying why not.

    Every caller that accepts a key (the REST API, the deployment-tool webhooks) goes through here.
    """
    prefix, secret = _split_key(key.strip())
    token = ApiToken.objects.select_related("user").filter(prefix=prefix).first()
    # Hash and compare even when no row matched, so timing does not tell a known prefix apart.
    expected = token.key_hash if token is not None else "0" * 64
    if not hmac.compare_digest(hash_secret(secret), expected) or token is None:
        raise TokenRejected("invalid token")
    now = timezone.now()
    state = token.state_at(now)
    if state == "revoked":
        raise TokenRejected("token revoked; ask for a new one")
    if state == "expired":
        raise TokenRejected("token expired; rotate it or ask for a new one")
    if not token.user.is_active:
        raise TokenRejected("user inactive: the account was deactivated")
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        # Compare-and-swap: of concurrent requests in the same minute only one writes.
        ApiToken.objects.filter(pk=token.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
        token.last_used_at = now
    return token


def _check_may_manage(actor: Actor, owner: User) -> None:
    if actor is None:
        return  # the system: a management command run by an operator on the server
    user = person(actor)
    if user is None or not (user.pk == owner.pk or has_role(user, ADMIN)):
        raise NotAllowed("only admins manage other users' tokens")


def _record(kind: str, token: ApiToken, actor: Actor, **details: str | None) -> None:
    """Append a token event to the ledger: who, whose token, which prefix; never key or hash."""
    ledger_append(
        kind=f"token.{kind}",
        subject_type="api_token",
        subject_id=token.pk,
        subject_name=f"{token.user.get_username()}/{token.name} ({token.prefix})",
        actor=actor,
        payload={
            "owner": token.user.get_username(),
            "name": token.name,
            "prefix": token.prefix,
            "expires_at": token.expires_at.isoformat() if token.expires_at else None,
            **details,
        },
    )


def _new_token(*, actor: Actor, user: User, name: str, expires_at: datetime | None, replaces: str = "") -> IssuedToken:
    name = name.strip()
    if not name or len(name) > 100:
        raise InvalidInput({"name": "a name of 1 to 100 characters is required"})
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidInput({"expires_at": "must lie in the future"})
    for _ in range(5):  # a 40-bit prefix collides rarely; draw again when it does
        prefix = secrets.token_hex(PREFIX_BYTES)
        secret = secrets.token_urlsafe(32)
        try:
            with transaction.atomic():
                token = ApiToken.objects.create(
                    user=user, name=name, prefix=prefix, key_hash=hash_secret(secret), expires_at=expires_at
                )
                _record("issued", token, actor, **({"replaces": replaces} if replaces else {}))
        except IntegrityError:
            continue
        logger.info("api token %s (%s) issued for %s", prefix, name, user.get_username())
        return IssuedToken(token=token, key=f"{KEY_PREFIX}_{prefix}_{secret}")
    raise RuntimeError("could not draw an unused token prefix")


def api_token_issue(
    *, actor: Actor, user: User, name: str = "default", expires_at: datetime | None = None
) -> IssuedToken:
    """Issue a new token for ``user``; the returned key is the only copy of the secret."""
    _check_may_manage(actor, user)
    if not user.is_active:
        raise InvalidInput({"user": "the user is inactive"})
    return _new_token(actor=actor, user=user, name=name, expires_at=expires_at)


def api_token_rotate(*, actor: Actor, token: ApiToken, expires_at: datetime | None = None) -> IssuedToken:
    """Revoke ``token`` and issue its replacement (same user and name) in one transaction.

    Without ``expires_at`` the replacement gets the old token's lifetime, counted from now.
    A token already revoked cannot be rotated (409): its replacement, if any, exists already.
    """
    _check_may_manage(actor, token.user)
    now = timezone.now()
    if expires_at is None and token.expires_at is not None:
        expires_at = now + (token.expires_at - token.created_at)
    with transaction.atomic():
        if not ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now):
            raise DomainError(f"token {token.prefix} is revoked; issue a new one instead")
        issued = _new_token(actor=actor, user=token.user, name=token.name, expires_at=expires_at, replaces=token.prefix)
        _record("revoked", token, actor, reason=f"rotated: replaced by {issued.token.prefix}")
    logger.info("api token %s rotated by %s; replaced by %s", token.prefix, _name(actor), issued.token.prefix)
    token.revoked_at = now
    return issued


def api_token_revoke(*, actor: Actor, token: ApiToken) -> ApiToken:
    """Revoke ``token`` from now on; revoking it again changes nothing."""
    _check_may_manage(actor, token.user)
    now = timezone.now()
    with transaction.atomic():
        if ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now):
            token.revoked_at = now
            _record("revoked", token, actor, reason="revoked")
            logger.info("api token %s revoked by %s", token.prefix, _name(actor))
        else:
            token.refresh_from_db(fields=["revoked_at"])
    return token


def api_token_replace_named(
    *, actor: Actor, user: User, name: str = "default", expires_at: datetime | None = None
) -> IssuedToken:
    """Revoke every live token of ``user`` called ``name`` and issue its replacement, atomically."""
    _check_may_manage(actor, user)
    with transaction.atomic():
        live = list(ApiToken.objects.select_for_update().filter(user=user, name=name.strip(), revoked_at__isnull=True))
        ApiToken.objects.filter(pk__in=[token.pk for token in live]).update(revoked_at=timezone.now())
        issued = api_token_issue(actor=actor, user=user, name=name, expires_at=expires_at)
        for token in live:
            _record("revoked", token, actor, reason=f"replaced by {issued.token.prefix}")
    logger.info("%s api token(s) %r of %s replaced by %s", len(live), name, user.get_username(), issued.token.prefix)
    return issued


def _name(actor: Actor) -> str:
    user = person(actor)
    return user.get_username() if user else "system"


# --- users and roles ------------------------------------------------------------------------------


def user_save(
    *, actor: Actor, username: str, role: str, email: str = "", password: str | None = None
) -> tuple[User, bool]:
    """Create ``username`` with ``role`` (or give an existing user that role); True when created.

    Only the system (an operator's command) and admins grant roles. An admin is also Django staff
    and superuser. ``password`` (optional) lets the person sign in to the UI; it is never ledgered.
    """
    if actor is not None and not has_role(actor, ADMIN):
        raise NotAllowed("only admins grant roles")
    username = username.strip()
    if not username:
        raise InvalidInput({"username": "must not be empty"})
    if role not in ROLES:
        raise InvalidInput({"role": f"must be one of {', '.join(ROLES)}"})
    with transaction.atomic(durable=True):
        user, created = User.objects.select_for_update().get_or_create(username=username, defaults={"email": email})
        if password:
            user.set_password(password)
        user.is_staff = user.is_superuser = role == ADMIN
        user.save()
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        ledger_append(
            kind="user.created" if created else "user.role_granted",
            subject_type="user",
            subject_id=user.pk,
            subject_name=username,
            actor=actor,
            payload={"username": username, "role": role, "email": user.email, "password_set": bool(password)},
        )
    return user, created


def _check_grantable(actor: Actor, group: str) -> None:
    if actor is not None and not has_role(actor, ADMIN):
        raise NotAllowed("only admins grant and revoke roles")
    if group not in GRANTABLE_GROUPS:
        raise InvalidInput({"group": f"must be one of {', '.join(GRANTABLE_GROUPS)}"})


def _record_grant(kind: str, *, actor: Actor, user: User, group: str, reason: str) -> None:
    ledger_append(
        kind=kind,
        subject_type="user",
        subject_id=user.pk,
        subject_name=user.get_username(),
        actor=actor,
        payload={"username": user.get_username(), "group": group, "reason": reason},
    )


def group_grant(*, actor: Actor, user: User, group: str, reason: str = "") -> bool:
    """Add ``user`` to ``group`` (a role or a reviewer capacity); True when new, ledgered.

    Granting ``admin`` also makes the person Django staff and superuser, as ``user_save`` does.
    """
    _check_grantable(actor, group)
    with transaction.atomic(durable=True):
        locked = User.objects.select_for_update().get(pk=user.pk)
        granted, _ = Group.objects.get_or_create(name=group)
        if locked.groups.filter(pk=granted.pk).exists():
            return False
        locked.groups.add(granted)
        if group == ADMIN:
            User.objects.filter(pk=user.pk).update(is_staff=True, is_superuser=True)
        _record_grant("user.group_granted", actor=actor, user=locked, group=group, reason=reason)
    return True


def group_revoke(*, actor: Actor, user: User, group: str, reason: str = "") -> bool:
    """Take ``group`` away from ``user``; True when they had it, ledgered.

    Revoking ``admin`` also drops staff and superuser; the last active admin keeps the role (409),
    so somebody can always grant it again.
    """
    _check_grantable(actor, group)
    with transaction.atomic(durable=True):
        locked = User.objects.select_for_update().get(pk=user.pk)
        held = locked.groups.filter(name=group).first()
        if held is None:
            return False
        if group == ADMIN:
            others = User.objects.filter(Q(groups__name=ADMIN) | Q(is_superuser=True), is_active=True).exclude(
                pk=user.pk
            )
            if not others.exists():
                raise DomainError(f"{user.get_username()} is the last admin; grant the role to someone else first")
            User.objects.filter(pk=user.pk).update(is_staff=False, is_superuser=False)
        locked.groups.remove(held)
        _record_grant("user.group_revoked", actor=actor, user=locked, group=group, reason=reason)
    return True
