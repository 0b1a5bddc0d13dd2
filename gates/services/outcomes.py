"""Business signals posted by systems without Prometheus: running totals of the outcome counter.

``POST /api/v1/canary/outcomes/`` adds counts; ``/metrics`` exports the totals as
``optgate_outcome_total`` (``gates.canary.contract``), so Prometheus scrapes them with everything
else and the canary rounds read one metric whichever way the counts arrived. Totals only grow
(a Prometheus counter); an ``Idempotency-Key`` on the request keeps a retried post from counting twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F

from backends.models import Backend
from core.errors import InvalidInput, NotAllowed
from core.roles import ADMIN, ENGINEER, Actor, has_role
from gates.canary.contract import OUTCOMES
from gates.models import OutcomeCount, TaskType


def outcomes_record(*, counts: Sequence[dict[str, Any]], actor: Actor) -> list[OutcomeCount]:
    """Add each ``{task, backend, tenant, outcome, count}`` to its running total, all or none.

    Unknown task types and backends are refused naming the item (``counts[2].backend``).
    """
    if not has_role(actor, ENGINEER, ADMIN):
        raise NotAllowed("business signals are posted by engineers' and admins' tokens")
    tasks = set(TaskType.objects.filter(slug__in={item["task"] for item in counts}).values_list("slug", flat=True))
    backends = set(Backend.objects.filter(name__in={item["backend"] for item in counts}).values_list("name", flat=True))
    errors = {}
    for index, item in enumerate(counts):
        if item["task"] not in tasks:
            errors[f"counts[{index}].task"] = f"unknown task type {item['task']!r}"
        if item["backend"] not in backends:
            errors[f"counts[{index}].backend"] = f"unknown backend {item['backend']!r}"
        if item["outcome"] not in OUTCOMES:
            errors[f"counts[{index}].outcome"] = f"must be one of {', '.join(OUTCOMES)}"
    if errors:
        raise InvalidInput(errors)
    touched = []
    with transaction.atomic(durable=True):
        for item in counts:
            labels = {key: item[key] for key in ("task", "backend", "tenant", "outcome")}
            touched.append(_add(labels, int(item["count"])))
    return touched


def _add(labels: dict[str, str], count: int) -> OutcomeCount:
    # An atomic increment, never read-modify-write: concurrent posts add up.
    if not OutcomeCount.objects.filter(**labels).update(total=F("total") + count):
        try:
            with transaction.atomic():
                OutcomeCount.objects.create(**labels, total=count)
        except IntegrityError:  # another request created the row first
            OutcomeCount.objects.filter(**labels).update(total=F("total") + count)
    return OutcomeCount.objects.get(**labels)
