"""Read paths of the evaluators app."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from evaluators.models import EvaluationRun, RunSource


def request_latencies_ms(records: list[dict[str, Any]], key: str) -> list[float]:
    """One latency (``ttft_s``, ``tpot_s``, ``e2e_s``…) of every request that succeeded, in milliseconds."""
    return [float(r[key]) * 1000.0 for r in records if r.get("error") is None and isinstance(r.get(key), int | float)]


def run_list() -> QuerySet[EvaluationRun]:
    """Every run, newest first, with its backend, importer and per-task results loaded."""
    runs = EvaluationRun.objects.select_related("backend", "imported_by")
    return runs.prefetch_related("task_results").order_by("-id")


def run_provenance(run: EvaluationRun) -> dict[str, Any]:
    """Who produced ``run``'s evidence: an OptGate worker, or an import by a person with the
    sha256 of each imported file per task (``quality`` from lm-eval, ``performance`` from a bench)."""
    if run.source != RunSource.IMPORTED:
        return {"source": "optgate_worker", "imported_by": None, "files": {}}
    files: dict[str, dict[str, str]] = {}
    for result in run.task_results.all():
        hashes = {
            part: str(evidence["file_sha256"])
            for part, evidence in (("quality", result.quality), ("performance", result.performance))
            if isinstance(evidence, dict) and evidence.get("file_sha256")
        }
        if hashes:
            files[result.task] = hashes
    importer = run.imported_by.get_username() if run.imported_by else None
    return {"source": "import", "imported_by": importer, "files": files}
