"""Write paths of the core app: the records behind idempotent creates."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from core.models import IdempotencyRecord


def idempotency_reserve(*, user: User, key: str, endpoint: str, request_hash: str) -> IdempotencyRecord | None:
    """Reserve ``key`` before anything is created, so two concurrent requests cannot both create.

    Returns the new (pending) record, or None when the key is taken: then ``idempotency_get``
    finds the request that took it.
    """
    try:
        with transaction.atomic():
            return IdempotencyRecord.objects.create(
                user=user, key=key, endpoint=endpoint, request_hash=request_hash, response_status=0, response_body={}
            )
    except IntegrityError:
        return None


def idempotency_get(*, user: User, key: str, endpoint: str) -> IdempotencyRecord:
    return IdempotencyRecord.objects.get(user=user, key=key, endpoint=endpoint)


def idempotency_release(*, record: IdempotencyRecord) -> None:
    """Forget a reservation whose request failed: the client may fix the body and retry the key."""
    IdempotencyRecord.objects.filter(pk=record.pk).delete()


def idempotency_store(*, record: IdempotencyRecord, status: int, body: Any) -> None:
    """Keep the first response to replay it to later requests with the same key."""
    IdempotencyRecord.objects.filter(pk=record.pk).update(response_status=status, response_body=body)
