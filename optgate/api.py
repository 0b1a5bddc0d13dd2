"""Shared API plumbing: the exception handler, role permissions and idempotent creates."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.http import QueryDict
from rest_framework import permissions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from optgate.canonical import canonical_json, json_problem, sha256_hex
from optgate.errors import DomainError, InvalidInput, NotAllowed
from optgate.roles import ADMIN, ENGINEER, REVIEWER, has_role


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
        key: [value if isinstance(value, str) else f"<upload {getattr(value, 'name', '')} "
              f"{getattr(value, 'size', '')}>" for value in data.getlist(key)]
        for key in data
    }  # fmt: skip


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


class IsReviewer(permissions.BasePermission):
    message = "only reviewers and admins do this"

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated and has_role(request.user, REVIEWER, ADMIN))


IDEMPOTENCY_HEADER = "Idempotency-Key"


def idempotent_create(request: Request, endpoint: str, create: Callable[[], Response]) -> Response:
    """Run ``create`` once per (user, Idempotency-Key, endpoint) and replay its first response.

    The same key with a different body is refused (422) rather than silently returning a
    result for another request.
    """
    from gates.models import IdempotencyRecord

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
    try:
        with transaction.atomic():
            record = IdempotencyRecord.objects.create(
                user=user, key=key, endpoint=endpoint, request_hash=request_hash, response_status=0,
                response_body={},
            )  # fmt: skip
    except IntegrityError:
        previous = IdempotencyRecord.objects.get(user=user, key=key, endpoint=endpoint)
        return _replay(previous, request_hash)
    try:
        response = create()
    except BaseException:
        IdempotencyRecord.objects.filter(pk=record.pk).delete()
        raise
    if not status.is_success(response.status_code):
        # Failed requests are not remembered: the client may fix the body and retry the key.
        IdempotencyRecord.objects.filter(pk=record.pk).delete()
        return response
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        response_status=response.status_code, response_body=json.loads(json.dumps(response.data, default=str))
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
