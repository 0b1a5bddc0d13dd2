"""GitHub deployment reviews: recorded in the webhook's request, posted by a worker.

``github_callback_record`` stores the review the ``deployment_protection_rule`` webhook decided,
with its ledger entry, and enqueues ``optgate.deliver_github_callback`` after commit: the request
never waits on GitHub. ``github_callback_deliver`` (the task's body) posts it once through the
outbound choke point, writing one ``GithubCallbackAttempt`` per try. A timeout, a refused
connection, 5xx, 408 or 429 may work later and raises ``TransientDeliveryError`` for the task to
retry with back-off; any other answer is final.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from core import http, queue
from gates.models import GithubCallback, GithubCallbackAttempt
from gates.services.notifications import TransientDeliveryError
from ledger.services import ledger_append

logger = logging.getLogger(__name__)


def github_callback_record(*, url: str, review: dict[str, Any], delivery_id: str = "") -> GithubCallback:
    """Store the review owed to ``url``, ledger it, and deliver it from a worker once committed."""
    with transaction.atomic(durable=True):
        callback = GithubCallback.objects.create(url=url, review=review, delivery_id=delivery_id[:100])
        ledger_append(
            kind="integration.github_review",
            subject_type="github_deployment",
            subject_id=callback.pk,
            subject_name=str(review.get("environment_name") or "")[:300],
            actor=None,
            payload={"callback_url": url, "delivery_id": delivery_id, "review": review},
        )
        transaction.on_commit(lambda: queue.enqueue(queue.DELIVER_GITHUB_CALLBACK, callback.pk), robust=True)
    return callback


def _try(callback: GithubCallback) -> tuple[bool, int | None, str, bool]:
    """(delivered, HTTP status, error, worth another try)."""
    try:
        status = http.post_json(callback.url, callback.review, timeout_s=float(settings.OPTGATE_NOTIFY_TIMEOUT_S))
    except httpx.HTTPError as exc:
        return False, None, f"{type(exc).__name__}: {exc}", True
    if 200 <= status < 300:
        return True, status, "", False
    return False, status, f"HTTP {status}", status >= 500 or status in (408, 429)


def github_callback_deliver(*, callback_id: int) -> bool:
    """Try once to post the review; True once delivered. Raises ``TransientDeliveryError`` when a
    later try may succeed; a permanent refusal or the last allowed try gives up (and returns False)."""
    callback = GithubCallback.objects.filter(pk=callback_id).first()
    if callback is None or callback.given_up_at is not None:
        return False
    if callback.delivered_at is not None:
        return True  # a redelivered message: nothing left to do
    ok, status, error, transient = _try(callback)
    number = (callback.attempts.aggregate(top=Max("number"))["top"] or 0) + 1
    GithubCallbackAttempt.objects.create(
        callback=callback, number=number, ok=ok, response_status=status, error=error[:2000]
    )
    if ok:
        GithubCallback.objects.filter(pk=callback.pk).update(delivered_at=timezone.now())
        return True
    if transient and number < settings.OPTGATE_NOTIFY_MAX_ATTEMPTS:
        raise TransientDeliveryError(f"GitHub callback {callback.pk}: try {number} failed: {error}")
    GithubCallback.objects.filter(pk=callback.pk, given_up_at=None).update(given_up_at=timezone.now())
    logger.warning("GitHub callback %s: giving up after %s tries: %s", callback.pk, number, error)
    return False
