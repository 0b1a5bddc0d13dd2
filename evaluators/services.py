"""Write paths of the evaluators app: requesting, executing, cancelling and retrying runs.

``run_execute`` is what a GPU worker calls with a run id. It is safe to call twice for the same
run: only the caller that moves the run from queued to running does the work.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from backends.engine_args import ensure_model_allowed, validate_engine_args
from backends.models import Backend
from backends.prefix_cache import cache_salt
from core.canonical import canonical_json, sha256_hex
from core.errors import DomainError, InvalidInput
from evaluators import pipeline, warm
from evaluators.engine import AttachedEngine, EngineHandle, EngineStartError, attach_engine, launch_engine
from evaluators.interleave import BASELINE, CANDIDATE, Endpoint
from evaluators.models import EvaluationAttempt, EvaluationRun, RunErrorKind, RunStatus, SampleRecord, TaskResult
from evaluators.suites import get_suite
from ledger.services import ledger_append

logger = logging.getLogger(__name__)

# Progress budget: engine start-up takes the first 10%, the tasks share the rest evenly.
ENGINE_SHARE = 10

# Per task, each side's pass/fail by sample id (baseline, candidate).
Answers = dict[str, tuple[dict[str, bool], dict[str, bool]]]


@dataclass(frozen=True)
class LoadChecks:
    """Whether the load still to come in a pair can change its verdict: each check answers with a
    reason (text) to skip that load, or None, and is given the candidate run's id.

    ``answers`` is asked once every task's answers are in, before any load, with those answers;
    ``loads`` after each task's load is stored while other tasks' loads remain, with the tasks
    whose load is stored so far. A skipped task's result stores the reason and no requests.
    """

    answers: Callable[[int, Answers], str | None] | None = None
    loads: Callable[[int, list[str]], str | None] | None = None


class RunCancelled(Exception):
    """The run was cancelled while it executed (by request or by SIGTERM)."""


def run_reuse_key(backend: Backend, profile: dict[str, Any], hardware_class: str, attach: str) -> str:
    """What makes two runs' evidence interchangeable, apart from which tasks they cover."""
    return sha256_hex(
        canonical_json(
            {
                "fingerprint": backend.fingerprint,
                "engine_version": backend.engine_version,
                "hardware_class": hardware_class,
                "profile": profile,
                "attach": attach,
            }
        )
    )


def _covers(run: EvaluationRun, suite_versions: dict[str, str]) -> bool:
    """True when ``run`` measured (or will measure) every requested task on the same suite version."""
    return all(run.suite_versions.get(slug) == version for slug, version in suite_versions.items())


def run_request(
    *,
    backend: Backend,
    tasks: list[str],
    load_profile: dict[str, Any] | None = None,
    attach_base_url: str = "",
    attach_model: str = "",
    allow_reuse: bool = True,
    exclude: Collection[int] = (),
) -> tuple[EvaluationRun, bool]:
    """Ask for evidence on ``backend``; returns ``(run, reused)``.

    A run with the same backend fingerprint, engine version, hardware class and load profile
    that covers every requested task on the same suite version, and that succeeded (no task
    broken) or is still in flight, is reused instead of measuring again; runs whose ids are in
    ``exclude`` are not.
    """
    suite_versions = _suite_versions(tasks)
    profile = {**pipeline.DEFAULT_LOAD_PROFILE, **(load_profile or {})}
    hardware_class = backend.hardware_class
    key = run_reuse_key(backend, profile, hardware_class, attach_base_url)
    with transaction.atomic(durable=True):
        if allow_reuse:
            candidates = (
                EvaluationRun.objects.select_for_update()
                .filter(reuse_key=key, status__in=[RunStatus.SUCCEEDED, RunStatus.QUEUED, RunStatus.RUNNING])
                .exclude(pk__in=list(exclude))
                .exclude(task_results__error__gt="")  # a task that broke is measured again
                .filter(paired_run__isnull=True)  # an interleaved pair's timing belongs to its pair
                .order_by("-created_at")
            )
            # Prefer finished evidence over a run still in flight.
            covering = sorted(
                (r for r in candidates if _covers(r, suite_versions)), key=lambda r: r.status != RunStatus.SUCCEEDED
            )
            if covering:
                return covering[0], True
        run = _run_create(
            backend, tasks, suite_versions, profile, attach_base_url=attach_base_url, attach_model=attach_model
        )
    return run, False


def _suite_versions(tasks: list[str]) -> dict[str, str]:
    if not tasks:
        raise InvalidInput({"tasks": "name at least one task type"})
    try:
        return {slug: get_suite(slug).version for slug in tasks}
    except ValueError as exc:
        raise InvalidInput({"tasks": str(exc)}) from None


def _run_create(
    backend: Backend,
    tasks: list[str],
    suite_versions: dict[str, str],
    profile: dict[str, Any],
    *,
    attach_base_url: str = "",
    attach_model: str = "",
    pair: dict[str, Any] | None = None,
) -> EvaluationRun:
    """Create a queued run and its ledger entry (inside the caller's transaction)."""
    run = EvaluationRun.objects.create(
        backend=backend,
        tasks=list(tasks),
        suite_versions=suite_versions,
        engine_version=backend.engine_version,
        hardware_class=backend.hardware_class,
        load_profile=profile,
        reuse_key=run_reuse_key(backend, profile, backend.hardware_class, attach_base_url),
        attach_base_url=attach_base_url,
        attach_model=attach_model,
        deadline_at=timezone.now() + timedelta(seconds=settings.OPTGATE_RUN_TIMEOUT_S),
        **(pair or {}),
    )
    ledger_append(
        kind="evaluation.requested",
        subject_type="run",
        subject_id=run.pk,
        subject_name=f"{backend.name} on {', '.join(tasks)}",
        actor=None,
        payload={
            "backend": backend.name,
            "fingerprint": backend.fingerprint,
            "tasks": tasks,
            "suite_versions": suite_versions,
            "load_profile": profile,
            "attach": attach_base_url,
            **({"pair_side": pair["pair_side"], "paired_run": pair["paired_run"].pk} if pair else {}),
        },
    )
    return run


def pair_request(
    *, baseline: Backend, candidate: Backend, tasks: list[str], load_profile: dict[str, Any] | None = None
) -> tuple[EvaluationRun, EvaluationRun]:
    """Ask for a baseline and a candidate run measured together, interleaved, on one worker.

    Both runs are new (timing is never reused); the candidate's run carries the pair's message, a
    message for either run executes both (:func:`pair_execute`). A profile with ``stage`` ≥ 2
    (and ``quality_only``) asks for a later stage's held-out samples, whose pool version the runs
    record.
    """
    suite_versions = _suite_versions(tasks)
    profile = {**pipeline.DEFAULT_LOAD_PROFILE, **(load_profile or {})}
    if int(profile.get("stage") or 1) > 1:
        suite_versions = {slug: get_suite(slug).held_out_version for slug in tasks}
    with transaction.atomic(durable=True):
        cand_run = _run_create(candidate, tasks, suite_versions, profile)
        base_run = _run_create(
            baseline, tasks, suite_versions, profile, pair={"paired_run": cand_run, "pair_side": BASELINE}
        )
        EvaluationRun.objects.filter(pk=cand_run.pk).update(paired_run=base_run, pair_side=CANDIDATE)
        cand_run.refresh_from_db()
    return base_run, cand_run


def _progress(run: EvaluationRun, phase: str, progress: int) -> None:
    EvaluationRun.objects.filter(pk=run.pk).update(phase=phase, progress=min(100, max(0, progress)))
    EvaluationAttempt.objects.filter(run=run, status=RunStatus.RUNNING).update(phase=phase)


def _claim(run_id: int, worker: str) -> tuple[EvaluationRun, EvaluationAttempt] | None:
    """Move the run from queued to running and open an attempt; None when someone else has it."""
    with transaction.atomic(durable=True):
        run = EvaluationRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status != RunStatus.QUEUED:
            return None
        if run.cancel_requested:
            run.move(RunStatus.CANCELLED, phase="cancelled before start")
            return None
        run.move(RunStatus.RUNNING, phase="engine starting", progress=0, error="", error_kind=RunErrorKind.NONE)
        number = run.attempts.count() + 1
        attempt = EvaluationAttempt.objects.create(run=run, number=number, worker=worker, phase="engine starting")
    return run, attempt


@contextmanager
def _sigterm_cancels() -> Iterator[None]:
    """Turn SIGTERM (a revoked Celery task, a stopping worker) into RunCancelled so teardown runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise RunCancelled("terminated by signal")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _device() -> Literal["cpu", "gpu"]:
    return "gpu" if settings.OPTGATE_ENGINE_DEVICE == "gpu" else "cpu"


def _launch_key(run: EvaluationRun) -> str | None:
    """How :mod:`evaluators.warm` recognises this run's engine; None for an attached endpoint, or
    when the launch itself would fail (the launch then says why)."""
    if run.attach_base_url:
        return None
    backend = run.backend
    try:
        model_dir = ensure_model_allowed(backend.model_path, list(settings.OPTGATE_MODEL_ROOTS))
        engine_args = validate_engine_args(backend.engine_args)
    except Exception:
        return None
    return warm.launch_key(
        model_dir=model_dir, served_model_name=backend.name, engine_args=engine_args, device=_device()
    )


def _take_warm(runs: Collection[EvaluationRun]) -> dict[int, tuple[EngineHandle, dict[str, Any]]]:
    """By run id, the engines this worker process kept warm that ``runs`` would launch exactly (any
    other parked engine is stopped before the new starts)."""
    keyed = [(key, run) for run in runs if (key := _launch_key(run)) is not None]
    found: dict[int, tuple[EngineHandle, dict[str, Any]]] = {}
    for key, engine, info in warm.take(*(key for key, _ in keyed)):
        run = next(run for run_key, run in keyed if run_key == key and run.pk not in found)
        found[run.pk] = (engine, info)
    return found


def _open_engine(
    run: EvaluationRun, attempt: EvaluationAttempt, warm_engine: tuple[EngineHandle, dict[str, Any]] | None = None
) -> EngineHandle | AttachedEngine:
    if run.attach_base_url:
        return attach_engine(run.attach_base_url, run.attach_model or run.backend.name)
    if warm_engine is not None:
        engine, info = warm_engine
        # The attempt owns the engine now: a lost attempt's recovery kills its group as for a new one.
        EvaluationAttempt.objects.filter(pk=attempt.pk).update(
            engine_pid=engine.pid,
            engine_pgid=engine.pgid,
            engine_log=info["engine_log"],
            artifacts={"warm_engine": info},
        )
        return engine
    backend = run.backend
    log_path = Path(settings.OPTGATE_ARTIFACTS_DIR) / "runs" / str(run.pk) / f"attempt-{attempt.number}" / "engine.log"

    def record_process(handle: EngineHandle) -> None:
        # Recorded before the long health wait, so a sweeper can kill the group if this worker dies.
        EvaluationAttempt.objects.filter(pk=attempt.pk).update(
            engine_pid=handle.pid, engine_pgid=handle.pgid, engine_log=str(log_path)
        )

    return backend_engine_launch(backend, log_path=log_path, on_spawn=record_process)


def backend_engine_launch(
    backend: Backend,
    *,
    log_path: Path,
    on_spawn: Callable[[EngineHandle], None] | None = None,
    cpu_threads_bind: str | None = None,
) -> EngineHandle:
    """Start ``backend``'s engine as this deployment's settings say (model roots, start-up timeout, device).

    ``cpu_threads_bind`` is where a CPU engine's model threads run instead of the default (engines
    serving side by side: ``side_by_side_cpu_binds``); a GPU engine ignores it."""
    device = _device()
    bind = {"VLLM_CPU_OMP_THREADS_BIND": cpu_threads_bind} if cpu_threads_bind and device == "cpu" else None
    return launch_engine(
        model_path=backend.model_path,
        served_model_name=backend.name,
        engine_args=backend.engine_args,
        log_path=log_path,
        model_roots=list(settings.OPTGATE_MODEL_ROOTS),
        startup_timeout_s=settings.OPTGATE_ENGINE_STARTUP_TIMEOUT_S,
        device=device,
        env_extra=bind,
        on_spawn=on_spawn,
    )


def _park_or_stop(engine: EngineHandle | AttachedEngine, run: EvaluationRun, worker: str, keep: bool) -> None:
    """Keep the engine up for this worker's next run when the run went well (:mod:`evaluators.warm`), else stop it."""
    key = _launch_key(run) if keep and isinstance(engine, EngineHandle) else None
    if key is None or not isinstance(engine, EngineHandle):
        engine.stop()
        return
    warm.park(engine, key=key, worker=worker, run_id=run.pk, backend_id=run.backend_id)


def _store_task(run: EvaluationRun, outcome: pipeline.TaskOutcome) -> None:
    with transaction.atomic():
        TaskResult.objects.update_or_create(
            run=run,
            task=outcome.task,
            defaults={
                "suite_version": outcome.suite_version,
                "quality": outcome.quality,
                "performance": outcome.performance,
                "requests": outcome.requests,
                "engine_evidence": outcome.engine_evidence,
                "error": "",
            },
        )
        samples_replace(run=run, task=outcome.task, samples=outcome.samples)


def samples_replace(*, run: EvaluationRun, task: str, samples: list[pipeline.SampleOutcome]) -> None:
    """Store ``samples`` as the run's per-sample records of ``task``, in place of any stored before.

    Runs inside the caller's transaction, next to the task's result.
    """
    SampleRecord.objects.filter(run=run, task=task).delete()
    SampleRecord.objects.bulk_create(
        SampleRecord(
            run=run,
            task=task,
            sample_id=s.sample_id,
            prompt=s.prompt,
            target=s.target,
            output=s.output,
            passed=s.passed,
            score=s.score,
            failure_reason=s.failure_reason,
            detail=s.detail,
            latency_ms=s.latency_ms,
        )
        for s in samples
    )


def run_execute(
    *,
    run_id: int,
    worker: str = "",
    cancel_check: Callable[[], bool] | None = None,
    load_checks: LoadChecks | None = None,
) -> EvaluationRun:
    """Execute a queued run end to end and store its evidence; return the run as it ended.

    The engine is always torn down, whether the run succeeds, fails, times out or is cancelled.
    An engine that exits during start-up ends the run in ``error`` of kind ``start_failed`` with
    the root cause from its log: that configuration cannot serve on this hardware. A task whose
    evaluation breaks is stored with its error and the other tasks go on; an engine that dies
    ends the run in ``error``. Requests the engine refuses are failed samples, not errors (see
    :mod:`evaluators.pipeline`).
    """
    worker = worker or socket.gethostname()
    if EvaluationRun.objects.filter(pk=run_id, paired_run__isnull=False).exists():
        pair_execute(run_id=run_id, worker=worker, cancel_check=cancel_check, load_checks=load_checks)
        return EvaluationRun.objects.get(pk=run_id)
    claimed = _claim(run_id, worker)
    if claimed is None:
        return EvaluationRun.objects.get(pk=run_id)
    run, attempt = claimed

    def cancelled() -> bool:
        requested = EvaluationRun.objects.filter(pk=run.pk, cancel_requested=True).exists()
        return requested or bool(cancel_check and cancel_check())

    timings: dict[str, float] = {}
    started = time.monotonic()
    status, error, kind = RunStatus.SUCCEEDED, "", RunErrorKind.NONE
    engine: EngineHandle | AttachedEngine | None = None
    try:
        with _sigterm_cancels():
            try:
                engine = _open_engine(run, attempt, _take_warm([run]).get(run.pk))
            except EngineStartError as exc:
                kind = RunErrorKind.START_FAILED if exc.exit_code is not None else RunErrorKind.OTHER
                raise
            timings["engine_up_s"] = round(time.monotonic() - started, 3)
            _progress(run, "engine ready", ENGINE_SHARE)
            failed_tasks = _execute_tasks(run, engine, cancelled, timings)
            if failed_tasks == len(run.tasks):
                status, kind = RunStatus.ERROR, RunErrorKind.OTHER
                error = f"every task failed to evaluate: {_task_errors(run)}"
    except RunCancelled as exc:
        status, error, kind = RunStatus.CANCELLED, str(exc), RunErrorKind.NONE
    except EngineStartError as exc:
        status, error, kind = RunStatus.ERROR, str(exc), kind or RunErrorKind.OTHER
    except Exception as exc:  # any other failure ends the run in error, with its log tail
        status, error, kind = RunStatus.ERROR, f"{type(exc).__name__}: {exc}", RunErrorKind.OTHER
        if engine is not None and not engine.is_alive():
            error = "the engine died during the run: " + error + "\n" + "\n".join(engine.last_log_lines(30))
        logger.exception("run %s failed", run.pk)
    finally:
        if engine is not None:
            _park_or_stop(engine, run, worker, keep=status == RunStatus.SUCCEEDED)
    timings["total_s"] = round(time.monotonic() - started, 3)
    return _finish(run, attempt, status, error, kind, timings)


def _claim_pair(run_id: int, worker: str) -> dict[str, tuple[EvaluationRun, EvaluationAttempt]] | None:
    """Move both runs of a pair from queued to running, each with an attempt; None when the pair
    is not entirely queued (another worker has it, or it finished)."""
    with transaction.atomic(durable=True):
        first = EvaluationRun.objects.filter(pk=run_id).values_list("paired_run_id", flat=True).first()
        runs = list(EvaluationRun.objects.select_for_update().filter(pk__in=[run_id, first]).order_by("pk"))
        if len(runs) != 2 or any(run.status != RunStatus.QUEUED for run in runs):
            return None
        if any(run.cancel_requested for run in runs):
            for run in runs:
                run.move(RunStatus.CANCELLED, phase="cancelled before start")
            return None
        claimed = {}
        for run in runs:
            run.move(RunStatus.RUNNING, phase="engines starting", progress=0, error="", error_kind=RunErrorKind.NONE)
            number = run.attempts.count() + 1
            attempt = EvaluationAttempt.objects.create(run=run, number=number, worker=worker, phase="engines starting")
            claimed[run.pair_side] = (run, attempt)
    return claimed


class PairStartError(Exception):
    """One or both engines of a pair could not start: the error of each side that failed."""

    def __init__(self, errors: dict[str, EngineStartError]) -> None:
        super().__init__("; ".join(f"{side}: {error}" for side, error in errors.items()))
        self.errors = errors


def _open_pair(
    claimed: dict[str, tuple[EvaluationRun, EvaluationAttempt]], worker: str
) -> dict[str, EngineHandle | AttachedEngine]:
    """Start both engines at once (start-up dominates on small machines), or take those this
    worker kept warm. If one cannot start, the other is kept warm when it came up healthy (the
    failure is the other configuration's: the next run of this backend takes it); a cancellation
    or any other error stops it."""
    taken = _take_warm([run for run, _ in claimed.values()])
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="engine-start") as pool:
        futures = {
            side: pool.submit(_open_engine, run, attempt, taken.get(run.pk)) for side, (run, attempt) in claimed.items()
        }
        engines: dict[str, EngineHandle | AttachedEngine] = {}
        errors: dict[str, EngineStartError] = {}
        failure: BaseException | None = None
        for side, future in futures.items():
            try:
                engines[side] = future.result()
            except EngineStartError as exc:
                errors[side] = exc
            except BaseException as exc:  # cancellation, attach errors: stop what started, then re-raise
                failure = failure or exc
    if failure is not None:
        for engine in engines.values():
            engine.stop()
        raise failure
    if errors:
        runs = {side: run for side, (run, _) in claimed.items()}
        for side, engine in engines.items():
            _park_or_stop(engine, runs[side], worker, keep=True)
        raise PairStartError(errors)
    return engines


def pair_execute(
    *,
    run_id: int,
    worker: str = "",
    cancel_check: Callable[[], bool] | None = None,
    load_checks: LoadChecks | None = None,
) -> None:
    """Execute an interleaved pair (either run's id): both engines up, every task's quality on each
    (the baseline's reused from a matching earlier run when there is one), then every task's load
    in alternating blocks unless ``load_checks`` find the verdict settled without it; store both
    runs' evidence and finish both. Engines always stop.
    """
    worker = worker or socket.gethostname()
    claimed = _claim_pair(run_id, worker)
    if claimed is None:
        return
    runs = {side: run for side, (run, _) in claimed.items()}

    def cancelled() -> bool:
        requested = EvaluationRun.objects.filter(pk__in=[r.pk for r in runs.values()], cancel_requested=True).exists()
        return requested or bool(cancel_check and cancel_check())

    timings: dict[str, float] = {}
    started = time.monotonic()
    outcome: dict[str, tuple[str, str, str]] = {side: (RunStatus.SUCCEEDED, "", "") for side in runs}
    engines: dict[str, EngineHandle | AttachedEngine] = {}
    try:
        with _sigterm_cancels():
            engines = _open_pair(claimed, worker)
            timings["engines_up_s"] = round(time.monotonic() - started, 3)
            for run in runs.values():
                _progress(run, "engines ready", ENGINE_SHARE)
            failed = _execute_pair_tasks(runs, engines, cancelled, timings, load_checks)
            if failed == len(runs[CANDIDATE].tasks):
                for side, run in runs.items():
                    why = f"every task failed to evaluate: {_task_errors(run)}"
                    outcome[side] = (RunStatus.ERROR, why, RunErrorKind.OTHER)
    except RunCancelled as exc:
        outcome = {side: (RunStatus.CANCELLED, str(exc), RunErrorKind.NONE) for side in runs}
    except PairStartError as exc:
        for side in runs:
            start_error = exc.errors.get(side)
            if start_error is not None:
                kind = RunErrorKind.START_FAILED if start_error.exit_code is not None else RunErrorKind.OTHER
                outcome[side] = (RunStatus.ERROR, str(start_error), kind)
            else:
                why = f"not measured: the {next(iter(exc.errors))} engine of its pair could not start"
                outcome[side] = (RunStatus.ERROR, why, RunErrorKind.OTHER)
    except Exception as exc:  # a dead engine or anything else ends both runs in error
        message = f"{type(exc).__name__}: {exc}"
        dead = [side for side, engine in engines.items() if not engine.is_alive()]
        for side in dead:
            message += f"\nthe {side} engine died:\n" + "\n".join(engines[side].last_log_lines(30))
        outcome = {side: (RunStatus.ERROR, message, RunErrorKind.OTHER) for side in runs}
        logger.exception("pair %s failed", [r.pk for r in runs.values()])
    finally:
        # Both engines stay up for this worker's next pair when this one went well: the next
        # ticket usually shares the baseline, and a staged evaluation's next stage needs both.
        went_well = all(status == RunStatus.SUCCEEDED for status, _, _ in outcome.values())
        for side, engine in engines.items():
            _park_or_stop(engine, runs[side], worker, keep=went_well)
    timings["total_s"] = round(time.monotonic() - started, 3)
    for side, (run, attempt) in claimed.items():
        status, message, error_kind = outcome[side]
        _finish(run, attempt, status, message, error_kind, timings)


# Profile keys that decide which answers a run has: how lm-eval asked, and on which samples.
QUALITY_KEYS = ("quality_concurrency", "quality_samples", "stage", "stage_size", "stage_sizes")


def _reusable_quality(run: EvaluationRun, task: str) -> tuple[int, list[pipeline.SampleOutcome]] | None:
    """Per-sample quality of ``task`` from the newest succeeded run of the same backend fingerprint,
    engine version, hardware and endpoint on the same suite version, asked with the same quality
    concurrency: greedy decoding makes those outcomes deterministic, so they are reused whatever
    load the other run measured (or none); timing never is."""
    candidates = (
        TaskResult.objects.filter(
            run__backend__fingerprint=run.backend.fingerprint,
            run__engine_version=run.engine_version,
            run__hardware_class=run.hardware_class,
            run__attach_base_url=run.attach_base_url,
            run__status=RunStatus.SUCCEEDED,
            task=task,
            suite_version=run.suite_versions.get(task, ""),
            error="",
        )
        .exclude(run=run)
        .select_related("run")
        .order_by("-run__finished_at", "-run_id")
    )
    asked = {key: run.load_profile.get(key) for key in QUALITY_KEYS}
    source = next(
        (r for r in candidates[:20] if {key: r.run.load_profile.get(key) for key in QUALITY_KEYS} == asked), None
    )
    if source is None:
        return None
    records = SampleRecord.objects.filter(run_id=source.run_id, task=task).order_by("sample_id")
    samples = [
        pipeline.SampleOutcome(
            sample_id=r.sample_id,
            prompt=r.prompt,
            target=r.target,
            output=r.output,
            passed=r.passed,
            score=r.score,
            failure_reason=r.failure_reason,
            detail=r.detail,
        )
        for r in records
    ]
    return (source.run_id, samples) if samples else None


def _gateway_endpoint(backend: Backend, engine: EngineHandle | AttachedEngine) -> Endpoint:
    """The engine as the gateway reaches it: the backend's sampling params on every request and
    each load tenant's cache salt (one salt for all unless the recipe partitions by tenant)."""
    salts = {tenant: cache_salt(backend, tenant) for tenant in pipeline.LOAD_TENANTS}
    return Endpoint(engine.base_url, engine.model, sampling=dict(backend.sampling_params or {}), salts=salts)


def _execute_pair_tasks(
    runs: dict[str, EvaluationRun],
    engines: dict[str, EngineHandle | AttachedEngine],
    cancelled: Callable[[], bool],
    timings: dict[str, float],
    load_checks: LoadChecks | None = None,
) -> int:
    """Each task on both engines, in two passes: every task's quality, then every task's load, as
    long as ``load_checks`` do not find the verdict settled without it (after the answers, then
    after each task's load). Returns how many tasks broke (stored with their error on both runs)."""
    tasks = runs[CANDIDATE].tasks
    profile = runs[CANDIDATE].load_profile
    share = (100 - ENGINE_SHARE) / len(tasks)
    endpoints = {side: _gateway_endpoint(runs[side].backend, engine) for side, engine in engines.items()}
    measured: dict[str, tuple[pipeline.TaskOutcome, pipeline.TaskOutcome]] = {}
    checks = load_checks or LoadChecks()
    timed = not profile.get("quality_only")
    failed = 0

    def phases(k: int, slug: str) -> Callable[[str], None]:
        # Every task's answers take the first half of the tasks' share, their loads the second.
        def on_phase(phase: str) -> None:
            step = k + (len(tasks) if phase.startswith("load") else 0)
            for run in runs.values():
                _progress(run, f"{phase} {slug} (task {k + 1} of {len(tasks)})", int(ENGINE_SHARE + step * share / 2))

        return on_phase

    def attempt(slug: str, step: Callable[[], None]) -> bool:
        """Run one task's step; a task that breaks (engines alive) is stored with its error."""
        nonlocal failed
        try:
            step()
        except (RunCancelled, KeyboardInterrupt):
            raise
        except Exception as exc:
            if not all(engine.is_alive() for engine in engines.values()):
                raise
            logger.exception("pair task %s failed", slug)
            for run in runs.values():
                _store_task_error(run, slug, f"{type(exc).__name__}: {exc}")
            failed += 1
            measured.pop(slug, None)
            return False
        if not all(engine.is_alive() for engine in engines.values()):
            raise RuntimeError(f"an engine died while {slug} was measured")
        return True

    for k, slug in enumerate(tasks):
        if cancelled():
            raise RunCancelled("cancel requested")
        task_started = time.monotonic()
        # An A/A calibration answers on both sides afresh ("reuse_quality": false in its profile).
        reuse = runs[BASELINE].load_profile.get("reuse_quality", True)
        reused = _reusable_quality(runs[BASELINE], slug) if reuse else None

        def answer(slug: str = slug, k: int = k, reused: Any = reused) -> None:
            base, cand = pipeline.pair_quality(
                slug,
                baseline=endpoints[BASELINE],
                candidate=endpoints[CANDIDATE],
                profile=profile,
                baseline_samples=reused[1] if reused else None,
                on_phase=phases(k, slug),
            )
            if reused:
                base.quality["reused_from_run"] = reused[0]
            measured[slug] = (base, cand)

        if attempt(slug, answer):
            timings[f"{slug}_s"] = round(time.monotonic() - task_started, 3)

    skipped = None
    if timed and checks.answers is not None and measured:
        answers = {
            slug: ({s.sample_id: s.passed for s in base.samples}, {s.sample_id: s.passed for s in cand.samples})
            for slug, (base, cand) in measured.items()
        }
        skipped = checks.answers(runs[CANDIDATE].pk, answers)
    loaded: list[str] = []
    for k, slug in enumerate(tasks):
        if slug not in measured:
            continue
        base, cand = measured[slug]
        if skipped:
            for outcome in (base, cand):
                outcome.performance = {pipeline.LOAD_SKIPPED: skipped}
        elif timed:
            if cancelled():
                raise RunCancelled("cancel requested")
            task_started = time.monotonic()

            def measure(slug: str = slug, k: int = k, base: Any = base, cand: Any = cand) -> None:
                pipeline.pair_load(
                    base,
                    cand,
                    baseline=endpoints[BASELINE],
                    candidate=endpoints[CANDIDATE],
                    profile=profile,
                    on_phase=phases(k, slug),
                )

            if not attempt(slug, measure):
                continue
            timings[f"{slug}_s"] = round(timings.get(f"{slug}_s", 0.0) + time.monotonic() - task_started, 3)
        _store_task(runs[BASELINE], base)
        _store_task(runs[CANDIDATE], cand)
        if timed and not skipped:
            loaded.append(slug)
            if checks.loads is not None and any(t in measured for t in tasks[k + 1 :]):
                skipped = checks.loads(runs[CANDIDATE].pk, loaded)
    return failed


def _execute_tasks(
    run: EvaluationRun, engine: EngineHandle | AttachedEngine, cancelled: Callable[[], bool], timings: dict[str, float]
) -> int:
    """Evaluate each task in turn and store it; returns how many tasks broke (each stored with its error).

    A dead engine or a cancellation stops the whole run; anything else breaks only its own task.
    """
    share = (100 - ENGINE_SHARE) / len(run.tasks)
    failed = 0
    for k, slug in enumerate(run.tasks):
        if cancelled():
            raise RunCancelled("cancel requested")
        task_started = time.monotonic()

        def on_phase(phase: str, k: int = k, slug: str = slug) -> None:
            offset = 0 if phase == "quality" else share / 2
            label = f"{phase} {slug} (task {k + 1} of {len(run.tasks)})"
            _progress(run, label, int(ENGINE_SHARE + k * share + offset))

        try:
            outcome = pipeline.evaluate_task(
                slug, base_url=engine.base_url, model=engine.model, profile=run.load_profile, on_phase=on_phase
            )
        except (RunCancelled, KeyboardInterrupt):
            raise
        except Exception as exc:
            if not engine.is_alive():
                raise
            logger.exception("run %s: task %s failed", run.pk, slug)
            _store_task_error(run, slug, f"{type(exc).__name__}: {exc}")
            failed += 1
            continue
        if not engine.is_alive():
            raise EngineStartError("the engine died during the run:\n" + "\n".join(engine.last_log_lines(30)))
        _store_task(run, outcome)
        timings[f"{slug}_s"] = round(time.monotonic() - task_started, 3)
    return failed


def _store_task_error(run: EvaluationRun, task: str, error: str) -> None:
    with transaction.atomic():
        TaskResult.objects.update_or_create(
            run=run, task=task, defaults={"suite_version": run.suite_versions.get(task, ""), "error": error[-20000:]}
        )
        samples_replace(run=run, task=task, samples=[])


def _task_errors(run: EvaluationRun) -> str:
    return "; ".join(f"{t.task}: {t.error}" for t in run.task_results.exclude(error=""))


def _finish(
    run: EvaluationRun,
    attempt: EvaluationAttempt,
    status: str,
    error: str,
    kind: str,
    timings: dict[str, float],
) -> EvaluationRun:
    results = list(run.task_results.all())
    evidence = {t.task: t.engine_evidence for t in results}
    with transaction.atomic(durable=True):
        run = EvaluationRun.objects.select_for_update().get(pk=run.pk)
        if run.status != RunStatus.RUNNING:
            # The sweeper re-queued or failed this run meanwhile; its decision stands.
            return run
        progress = 100 if status == RunStatus.SUCCEEDED else run.progress
        run.move(
            status, error=error[-20000:], error_kind=kind, phase=status, progress=progress, engine_evidence=evidence
        )
        EvaluationAttempt.objects.filter(pk=attempt.pk).update(
            status=status, error=error[-20000:], timings=timings, finished_at=timezone.now()
        )
        ledger_append(
            kind=f"evaluation.{status}",
            subject_type="run",
            subject_id=run.pk,
            subject_name=f"{run.backend.name} on {', '.join(run.tasks)}",
            actor=None,
            payload={
                "backend": run.backend.name,
                "fingerprint": run.backend.fingerprint,
                "attempt": attempt.number,
                "timings": timings,
                "error": error[-2000:],
                "error_kind": kind,
                "task_errors": {t.task: t.error[-500:] for t in results if t.error},
                "quality": {t.task: t.quality for t in results if not t.error},
            },
        )
    return run


def run_cancel(*, run_id: int) -> EvaluationRun:
    """Ask a run to stop. A queued run is cancelled at once; a running one stops at its next check."""
    with transaction.atomic(durable=True):
        run = EvaluationRun.objects.select_for_update().get(pk=run_id)
        if run.is_finished:
            return run
        EvaluationRun.objects.filter(pk=run.pk).update(cancel_requested=True)
        run.cancel_requested = True
        if run.status == RunStatus.QUEUED:
            run.move(RunStatus.CANCELLED, phase="cancelled")
            ledger_append(
                kind="evaluation.cancelled",
                subject_type="run",
                subject_id=run.pk,
                subject_name=run.backend.name,
                actor=None,
                payload={"while": "queued"},
            )
    return run


def run_retry(*, run_id: int, reason: str = "") -> EvaluationRun:
    """Queue a run that ended in error or was cancelled for another attempt."""
    with transaction.atomic(durable=True):
        run = EvaluationRun.objects.select_for_update().get(pk=run_id)
        if run.status not in (RunStatus.ERROR, RunStatus.CANCELLED, RunStatus.RUNNING):
            raise DomainError(f"run #{run.pk} is {run.status}; only failed, cancelled or stuck runs are retried")
        run.move(
            RunStatus.QUEUED,
            phase="queued for retry",
            progress=0,
            cancel_requested=False,
            deadline_at=timezone.now() + timedelta(seconds=settings.OPTGATE_RUN_TIMEOUT_S),
        )
        EvaluationAttempt.objects.filter(run=run, status=RunStatus.RUNNING).update(
            status=RunStatus.ERROR, error=reason or "abandoned", finished_at=timezone.now()
        )
        ledger_append(
            kind="evaluation.retried",
            subject_type="run",
            subject_id=run.pk,
            subject_name=run.backend.name,
            actor=None,
            payload={"reason": reason},
        )
    return run


def run_claim_unsent(*, run: EvaluationRun, now: datetime, deadline: datetime) -> bool:
    """Claim a queued run whose message never reached the broker, to send it again.

    Compare-and-swap on ``queued_at``: of two sweeps that overlap, one claims it per grace period.
    """
    claimed = EvaluationRun.objects.filter(pk=run.pk, status=RunStatus.QUEUED, queued_at=run.queued_at).update(
        queued_at=now, deadline_at=deadline
    )
    return claimed == 1


def run_claim_overdue(*, run: EvaluationRun, deadline: datetime) -> bool:
    """Claim a queued run past its deadline (its message was lost in the broker), to send it again.

    Compare-and-swap on the deadline: of two sweeps that overlap, one claims it.
    """
    claimed = EvaluationRun.objects.filter(pk=run.pk, status=RunStatus.QUEUED, deadline_at=run.deadline_at).update(
        deadline_at=deadline
    )
    return claimed == 1
