"""DRF authentication with hashed API tokens: ``Authorization: Token og_<prefix>_<secret>``."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from accounts.models import ApiToken
from accounts.services import TokenRejected, api_token_authenticate, key_prefix

logger = logging.getLogger(__name__)

KEYWORD = "Token"


def key_from_header(header: str) -> str | None:
    """The key of an ``Authorization: Token <key>`` header; None for other schemes or no header.

    Raises ``TokenRejected`` for a ``Token`` header without exactly one key.
    """
    parts = header.split()
    if not parts or parts[0].lower() != KEYWORD.lower():
        return None
    if len(parts) != 2:
        raise TokenRejected("invalid token header: send 'Authorization: Token <key>' with one key and no spaces")
    return parts[1]


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """Looks the key up by its public prefix and compares the secret's hash in constant time."""

    keyword = KEYWORD

    def authenticate(self, request: Request) -> tuple[User, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        try:
            key = key_from_header(header)
            if key is None:
                return None
            token = api_token_authenticate(key)
        except TokenRejected as exc:
            # Only the public prefix is logged, never the key.
            logger.info("api token rejected (%s): prefix %s", exc, key_prefix(header.split()[-1]) or "(none)")
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (with WWW-Authenticate) rather than 403 to unauthenticated requests.
        return self.keyword


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Documents the token scheme in the OpenAPI schema (drf-spectacular finds it on import)."""

    target_class = "accounts.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": (
                "API token: `Authorization: Token og_<prefix>_<secret>`. Create one with "
                "`POST /api/v1/tokens/` or `manage.py create_token USER`; the key is shown once."
            ),
        }
