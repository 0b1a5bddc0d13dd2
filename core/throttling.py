"""Rate limits for the API and the web sign-in.

Rates live in ``settings.OPTGATE_RATE_LIMITS`` (scope → ``"N/period"`` or None for no limit),
read on every request rather than captured at import as DRF's own classes do, so an operator's
environment and a test's ``settings`` fixture both take effect. Counts live in the default cache;
use a shared cache (``CACHE_URL=redis://…``) when several web processes serve the site.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class SettingsRateThrottle(SimpleRateThrottle):
    """A throttle whose rate is looked up in ``settings.OPTGATE_RATE_LIMITS`` at request time."""

    def get_rate(self) -> str | None:
        rates: dict[str, str | None] = settings.OPTGATE_RATE_LIMITS
        if self.scope not in rates:
            raise ImproperlyConfigured(f"OPTGATE_RATE_LIMITS has no rate for scope {self.scope!r}")
        return rates[self.scope]

    def user_or_address(self, request: Any) -> str:
        """The signed-in user's id, else the client address: whose requests share one counter."""
        user = getattr(request, "user", None)
        return str(user.pk) if user and user.is_authenticated else str(self.get_ident(request))


def web_refusals(request: Any, *throttles: SettingsRateThrottle) -> tuple[list[SettingsRateThrottle], int]:
    """For a plain Django view: count the request against every throttle; return those that refuse
    it and the seconds to wait before all of them would allow it again (0 when none refuses)."""
    refused = [throttle for throttle in throttles if not throttle.allow_request(request, None)]  # type: ignore[arg-type]
    return refused, max((math.ceil(throttle.wait() or 1) for throttle in refused), default=0)


class AnonThrottle(SettingsRateThrottle):
    """Every request without a signed-in user, per client address."""

    scope = "anon"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if request.user and request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class UserWriteThrottle(SettingsRateThrottle):
    """POST, PUT, PATCH and DELETE per signed-in user; reads are not limited."""

    scope = "write"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if request.method not in WRITE_METHODS or not (request.user and request.user.is_authenticated):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


class TokenIssueThrottle(SettingsRateThrottle):
    """Creating and rotating API tokens, per user (or address): stricter than ordinary writes."""

    scope = "token"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if request.method not in WRITE_METHODS:
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.user_or_address(request)}


class LedgerVerifyThrottle(SettingsRateThrottle):
    """Recomputing the whole hash chain (seconds of CPU per million entries), per user or address."""

    scope = "ledger_verify"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": self.user_or_address(request)}


class LoginIpThrottle(SettingsRateThrottle):
    """Sign-in attempts per client address."""

    scope = "login_ip"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class LoginUsernameThrottle(SettingsRateThrottle):
    """Sign-in attempts per username, from any address (slows password guessing spread over IPs)."""

    scope = "login_username"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        username = str(request.POST.get("username", "")).strip().lower()
        if not username:
            return None
        # Hashed: cache keys stay short and printable whatever the user typed.
        ident = hashlib.sha256(username.encode()).hexdigest()[:32]
        return self.cache_format % {"scope": self.scope, "ident": ident}
