"""Shared API plumbing: the exception handler, role permissions and idempotent creates."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

from django.contrib.auth.models import User
from django.http import QueryDict
from rest_framework import permissions, serializers, status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.canonical import canonical_json, json_problem, sha256_hex
from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import ADMIN, ENGINEER, has_role
from core.services import idempotency_get, idempotency_release, idempotency_reserve, idempotency_store


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Map the domain exceptions to HTTP: conflict 409, invalid input 400, not allowed 403."""
    if isinstance(exc, DomainError):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, InvalidInput):
        return Response({field: [message] for field, message in exc.errors.items()}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, NotAllowed):
        return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
    return drf_exception_handler(exc, context)


def _plain(data: Any) -> Any:
    """Request data as JSON values: a form's fields as lists of strings, uploads by name and size."""
    if not isinstance(data, QueryDict):
        return data
    return {
        key: [
            value if isinstance(value, str) else f"<upload {getattr(value, 'name', '')} {getattr(value, 'size', '')}>"
            for value in data.getlist(key)
        ]
        for key in data
    }


class StrictInputSerializer(serializers.Serializer):
    """An input serializer that refuses fields it does not know, instead of ignoring typos, and
    values the database could not store (NUL characters, absurd nesting) instead of crashing on them.
    """

    read_only_hint: dict[str, str] = {}

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: [self.read_only_hint.get(name, "unknown field")] for name in unknown}
                )
            for name, value in _plain(data).items():
                problem = json_problem(value)
                if problem:
                    path, message = problem
                    raise serializers.ValidationError({name: [f"{path}: {message}" if path else message]})
        return super().to_internal_value(data)


class IsEngineerOrReadOnly(permissions.BasePermission):
    """Anyone signed in reads; engineers and admins create."""

    message = "only engineers and admins create these"

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in permissions.SAFE_METHODS or has_role(request.user, ENGINEER, ADMIN)


class Pagination(LimitOffsetPagination):
    """``?limit=&offset=`` pages with bounds the database can hold: a page has at most ``max_limit``
    rows and an offset past ``MAX_OFFSET`` is clamped (SQLite and PostgreSQL take 64-bit integers).
    """

    default_limit = 50
    max_limit = 1000
    MAX_OFFSET = 2**62

    def get_offset(self, request: Request) -> int:
        return min(super().get_offset(request), self.MAX_OFFSET)


IDEMPOTENCY_HEADER = "Idempotency-Key"


def idempotent_create(request: Request, endpoint: str, create: Callable[[], Response]) -> Response:
    """Run ``create`` once per (user, Idempotency-Key, endpoint) and replay its first response.

    The same key with a different body is refused (422) rather than silently returning a
    result for another request.
    """
    user = cast(User, request.user)  # the view's permission class has required a signed-in user
    key = request.headers.get(IDEMPOTENCY_HEADER, "").strip()
    if not key:
        return create()
    if len(key) > 200:
        return Response({IDEMPOTENCY_HEADER: ["at most 200 characters"]}, status=status.HTTP_400_BAD_REQUEST)
    body = _plain(request.data)
    if json_problem(body):
        # Canonical JSON cannot hold it, and the input serializer refuses it: nothing to remember.
        return create()
    request_hash = sha256_hex(canonical_json(body))
    # Reserve the key before creating anything, so two concurrent requests cannot both create.
    record = idempotency_reserve(user=user, key=key, endpoint=endpoint, request_hash=request_hash)
    if record is None:
        return _replay(idempotency_get(user=user, key=key, endpoint=endpoint), request_hash)
    try:
        response = create()
    except BaseException:
        idempotency_release(record=record)
        raise
    if not status.is_success(response.status_code):
        # Failed requests are not remembered: the client may fix the body and retry the key.
        idempotency_release(record=record)
        return response
    idempotency_store(
        record=record, status=response.status_code, body=json.loads(json.dumps(response.data, default=str))
    )
    return response


def _replay(record: Any, request_hash: str) -> Response:
    if record.response_status == 0:
        return Response(
            {"detail": f"a request with this {IDEMPOTENCY_HEADER} is still being processed"},
            status=status.HTTP_409_CONFLICT,
        )
    if record.request_hash != request_hash:
        return Response(
            {"detail": f"{IDEMPOTENCY_HEADER} was already used with a different request body"},
            status=status.HTTP_422_UNPROCESSABLE_ENTITY,
        )
    response = Response(record.response_body, status=record.response_status)
    response["Idempotent-Replayed"] = "true"
    return response
