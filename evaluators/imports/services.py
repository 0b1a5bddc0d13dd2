"""Storing imported evidence: open an import run, attach bench and lm-eval files, close it for reuse."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from backends.models import Backend
from core.canonical import canonical_json, sha256_hex
from core.errors import DomainError, InvalidInput
from core.roles import Actor, person
from evaluators import pipeline
from evaluators.imports.matching import check_bench_matches, check_lm_eval_matches
from evaluators.imports.parsing import IMPORT_PHASE, LM_EVAL, VLLM_BENCH, parse_lm_eval, parse_vllm_bench
from evaluators.models import EvaluationRun, RunSource, RunStatus, TaskResult
from evaluators.services import run_reuse_key, samples_replace
from evaluators.suites import get_suite
from ledger.services import ledger_append


def _reuse_key(backend: Backend, profile: dict[str, Any]) -> str:
    return run_reuse_key(backend, profile, backend.hardware_class, "")


def run_open_for_import(
    *, backend: Backend, tasks: list[str], actor: Actor, load_profile: dict[str, Any] | None = None
) -> EvaluationRun:
    """Create a run that collects imported evidence for ``tasks`` on ``backend``.

    It waits in ``running`` / "importing evidence" with no deadline (so the sweeper leaves it
    alone) and a private reuse key (so no ticket reuses it half-filled) until ``run_close_import``.
    """
    if not tasks:
        raise InvalidInput({"tasks": "name at least one task type"})
    try:
        suite_versions = {slug: get_suite(slug).version for slug in tasks}
    except ValueError as exc:
        raise InvalidInput({"tasks": str(exc)}) from None
    profile = {**pipeline.DEFAULT_LOAD_PROFILE, **dict(settings.OPTGATE_LOAD_PROFILE), **(load_profile or {})}
    with transaction.atomic(durable=True):
        run = EvaluationRun.objects.create(
            backend=backend,
            tasks=list(dict.fromkeys(tasks)),
            suite_versions=suite_versions,
            engine_version=backend.engine_version,
            hardware_class=backend.hardware_class,
            load_profile=profile,
            reuse_key=sha256_hex(f"import-pending:{uuid.uuid4()}"),
            status=RunStatus.RUNNING,
            phase=IMPORT_PHASE,
            deadline_at=None,
            source=RunSource.IMPORTED,
            imported_by=person(actor),
        )
        ledger_append(
            kind="evaluation.import_opened",
            subject_type="run",
            subject_id=run.pk,
            subject_name=f"{backend.name} on {', '.join(run.tasks)}",
            actor=actor,
            payload={
                "backend": backend.name,
                "fingerprint": backend.fingerprint,
                "tasks": run.tasks,
                "suite_versions": suite_versions,
                "load_profile": profile,
            },
        )
    return run


def _open_run(run_id: int) -> EvaluationRun:
    run = EvaluationRun.objects.select_for_update().select_related("backend").get(pk=run_id)
    if run.status != RunStatus.RUNNING or run.phase != IMPORT_PHASE:
        raise DomainError(
            f"run #{run.pk} is {run.status} ({run.phase or 'no phase'}); evidence is imported only into a run "
            "opened for import and not yet closed"
        )
    return run


def _archive(run: EvaluationRun, name: str, content: bytes) -> str:
    """Keep the original file next to the run's other artifacts; returns its sha256."""
    digest = sha256_hex(content.decode("utf-8", errors="replace"))
    folder = Path(settings.OPTGATE_ARTIFACTS_DIR) / "runs" / str(run.pk) / "imports"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{digest[:16]}-{Path(name).name or 'evidence'}").write_bytes(content)
    return digest


def _record_import(
    run: EvaluationRun, task: str, actor: Actor, kind: str, digest: str, filename: str, **details: Any
) -> None:
    """The ledger entry of one imported file: which run and task, which file (by hash), what it held."""
    ledger_append(
        kind="evaluation.evidence_imported",
        subject_type="run",
        subject_id=run.pk,
        subject_name=f"{run.backend.name} on {task}",
        actor=actor,
        payload={"kind": kind, "task": task, "file_sha256": digest, "filename": filename, **details},
    )


def evidence_import_bench(
    *, run: EvaluationRun, task: str, document: dict[str, Any], actor: Actor, filename: str = "bench.json"
) -> TaskResult:
    """Attach a ``vllm bench serve`` result as ``task``'s performance evidence in ``run``."""
    evidence = parse_vllm_bench(document)
    raw = canonical_json(document).encode()
    with transaction.atomic(durable=True):
        locked = _open_run(run.pk)
        if task not in locked.tasks:
            raise InvalidInput({"task": f"run #{locked.pk} measures {', '.join(locked.tasks)}, not {task!r}"})
        check_bench_matches(evidence, run=locked)
        digest = _archive(locked, filename, raw)
        evidence.performance["file_sha256"] = digest
        result, _ = TaskResult.objects.get_or_create(
            run=locked, task=task, defaults={"suite_version": locked.suite_versions[task]}
        )
        result.performance = evidence.performance
        result.requests = evidence.requests
        result.engine_evidence = {**(result.engine_evidence or {}), **evidence.engine_evidence}
        result.save(update_fields=["performance", "requests", "engine_evidence"])
        _record_import(
            locked,
            task,
            actor,
            VLLM_BENCH,
            digest,
            filename,
            model_id=evidence.model_id,
            max_concurrency=evidence.max_concurrency,
            completed=evidence.performance.get("completed"),
            per_request=evidence.performance["per_request"],
        )
    return result


def evidence_import_lm_eval(
    *,
    run: EvaluationRun,
    task: str,
    results: dict[str, Any],
    samples: list[dict[str, Any]] | None,
    actor: Actor,
    filename: str = "results.json",
) -> TaskResult:
    """Attach lm-eval results (and per-sample logs) as ``task``'s quality evidence in ``run``."""
    evidence = parse_lm_eval(results, samples, task=task)
    stored = {k: v for k, v in results.items() if k != "samples"}
    raw = canonical_json({"results": stored, "samples": samples or []}).encode()
    with transaction.atomic(durable=True):
        locked = _open_run(run.pk)
        if task not in locked.tasks:
            raise InvalidInput({"task": f"run #{locked.pk} measures {', '.join(locked.tasks)}, not {task!r}"})
        check_lm_eval_matches(evidence, run=locked)
        digest = _archive(locked, filename, raw)
        quality = pipeline.quality_summary(evidence.samples)
        quality.update({"source": "lm-eval", "file_sha256": digest, "lm_eval_reported": evidence.reported})
        result, _ = TaskResult.objects.get_or_create(
            run=locked, task=task, defaults={"suite_version": locked.suite_versions[task]}
        )
        result.quality = quality
        result.save(update_fields=["quality"])
        samples_replace(run=locked, task=task, samples=evidence.samples)
        _record_import(
            locked,
            task,
            actor,
            LM_EVAL,
            digest,
            filename,
            model=evidence.model,
            suite_version=evidence.suite_version,
            n=quality["n"],
            pass_rate=quality["pass_rate"],
        )
    return result


def run_close_import(*, run: EvaluationRun, actor: Actor) -> EvaluationRun:
    """Finish an import run: every task needs quality evidence; it then becomes reusable evidence."""
    with transaction.atomic(durable=True):
        locked = _open_run(run.pk)
        results = {r.task: r for r in locked.task_results.all()}
        missing = [task for task in locked.tasks if task not in results or not results[task].quality]
        if missing:
            raise InvalidInput({"tasks": f"no quality evidence yet for {', '.join(missing)}; import lm-eval results"})
        locked.move(
            RunStatus.SUCCEEDED,
            phase=RunStatus.SUCCEEDED,
            progress=100,
            reuse_key=_reuse_key(locked.backend, locked.load_profile),
        )
        ledger_append(
            kind="evaluation.succeeded",
            subject_type="run",
            subject_id=locked.pk,
            subject_name=f"{locked.backend.name} on {', '.join(locked.tasks)}",
            actor=actor,
            payload={
                "backend": locked.backend.name,
                "fingerprint": locked.backend.fingerprint,
                "imported": True,
                "quality": {t: r.quality for t, r in results.items()},
                "with_performance": sorted(t for t, r in results.items() if r.performance),
            },
        )
    return locked
