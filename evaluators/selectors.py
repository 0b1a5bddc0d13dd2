"""Read paths of the evaluators app, including the bridge from stored runs to the judge's inputs."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from evaluators.models import EvaluationRun, RunStatus, SampleRecord, TaskResult
from gates.judge.verdicts import RunTaskEvidence


def _ms(records: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) * 1000.0 for r in records if r.get("error") is None and r.get(key) is not None]


def run_task_evidence(run: EvaluationRun, task: str) -> RunTaskEvidence:
    """What ``run`` measured on ``task``, shaped for the judge.

    Per-sample quality is keyed by sample id so the judge pairs baseline and candidate on the
    same samples. A run that failed, or a task that errored, is reported as an error, never as
    bad evidence.
    """
    if run.status != RunStatus.SUCCEEDED:
        return RunTaskEvidence(run_id=str(run.pk), error=f"run #{run.pk} is {run.status}: {run.error}".strip(": "))
    result = TaskResult.objects.filter(run=run, task=task).first()
    if result is None:
        return RunTaskEvidence(run_id=str(run.pk), error=f"run #{run.pk} has no result for {task}")
    if result.error:
        return RunTaskEvidence(run_id=str(run.pk), error=result.error)
    samples = SampleRecord.objects.filter(run=run, task=task).values_list("sample_id", "passed", "score")
    passed = {sample_id: ok for sample_id, ok, _ in samples}
    scores = {sample_id: score for sample_id, _, score in samples}
    records = list(result.requests or [])
    itl = [float(v) * 1000.0 for r in records if r.get("error") is None for v in (r.get("itl_s") or [])]
    engine = {k: float(v) for k, v in (result.engine_evidence or {}).items() if isinstance(v, int | float)}
    return RunTaskEvidence(
        run_id=str(run.pk),
        passed=passed,
        scores=scores,
        ttft_ms=_ms(records, "ttft_s"),
        tpot_ms=_ms(records, "tpot_s"),
        itl_ms=itl,
        e2e_ms=_ms(records, "e2e_s"),
        output_throughput=(result.performance or {}).get("output_token_throughput"),
        engine=engine,
    )


def run_samples(run: EvaluationRun, task: str, *, failed_only: bool = False) -> QuerySet[SampleRecord]:
    samples = SampleRecord.objects.filter(run=run, task=task)
    return samples.filter(passed=False) if failed_only else samples
