"""Read paths of the evaluators app."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from evaluators.models import EvaluationRun


def request_latencies_ms(records: list[dict[str, Any]], key: str) -> list[float]:
    """One latency (``ttft_s``, ``tpot_s``, ``e2e_s``…) of every request that succeeded, in milliseconds."""
    return [float(r[key]) * 1000.0 for r in records if r.get("error") is None and isinstance(r.get(key), int | float)]


def run_list() -> QuerySet[EvaluationRun]:
    """Every run, newest first, with its backend and per-task results loaded."""
    return EvaluationRun.objects.select_related("backend").prefetch_related("task_results").order_by("-id")
