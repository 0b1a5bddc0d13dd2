"""The bridge from stored evaluation runs to the judge's inputs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Exists, Min, OuterRef, Subquery

from evaluators.models import (
    EvaluationAttempt,
    EvaluationRun,
    RunErrorKind,
    RunSource,
    RunStatus,
    SampleRecord,
    TaskResult,
)
from evaluators.pipeline import LOAD_SKIPPED
from evaluators.selectors import request_latencies_ms
from gates.judge.records import RequestTiming
from gates.judge.verdicts import RunTaskEvidence
from gates.models import EvidenceAcceptance, GateDecision, ReleaseTicket


def run_task_evidence(run: EvaluationRun, task: str) -> RunTaskEvidence:
    """What ``run`` measured on ``task``, shaped for the judge.

    Per-sample quality is keyed by sample id so the judge pairs baseline and candidate on the
    same samples. A run that failed, or a task that errored, is reported as an error, never as
    bad evidence.
    """
    if run.status == RunStatus.ERROR and run.error_kind == RunErrorKind.START_FAILED:
        # The headline names the root cause; the log tail below it stays on the run's page.
        headline = run.error.splitlines()[0] if run.error else "the engine exited during start-up"
        return RunTaskEvidence(run_id=str(run.pk), error=headline, start_failed=True)
    if run.status != RunStatus.SUCCEEDED:
        return RunTaskEvidence(run_id=str(run.pk), error=f"run #{run.pk} is {run.status}: {run.error}".strip(": "))
    return stored_task_evidence(run, task)


def stored_task_evidence(run: EvaluationRun, task: str) -> RunTaskEvidence:
    """What ``run`` has stored on ``task`` so far, whatever the run's status: a run still measuring
    its other tasks (the worker asking whether their load can still change the outcome) included."""
    result = TaskResult.objects.filter(run=run, task=task).first()
    if result is None:
        return RunTaskEvidence(run_id=str(run.pk), error=f"run #{run.pk} has no result for {task}")
    if result.error:
        return RunTaskEvidence(run_id=str(run.pk), error=result.error)
    samples = SampleRecord.objects.filter(run=run, task=task).values_list("sample_id", "passed", "score")
    passed = {sample_id: ok for sample_id, ok, _ in samples}
    scores = {sample_id: score for sample_id, _, score in samples}
    engine = _numbers(result.engine_evidence)
    return _load_evidence(run, list(result.requests or []), result.performance or {}, engine, passed, scores)


def _load_evidence(
    run: EvaluationRun,
    records: list[dict[str, Any]],
    performance: dict[str, Any],
    engine: dict[str, float],
    passed: dict[str, bool] | None = None,
    scores: dict[str, float] | None = None,
) -> RunTaskEvidence:
    """A load point's evidence (the closed loop with the quality samples, or the open-loop point)."""
    # Interleaved blocks send the same prompts to both sides: latencies pair by sample id.
    paired = bool(performance.get("blocks"))
    itl = [float(v) * 1000.0 for r in records if r.get("error") is None for v in (r.get("itl_s") or [])]
    open_loop = performance.get("open_loop")
    stress = performance.get("stress") or {}
    return RunTaskEvidence(
        run_id=str(run.pk),
        passed=passed or {},
        scores=scores or {},
        ttft_ms=_latencies(records, "ttft_s", paired),
        tpot_ms=_latencies(records, "tpot_s", paired),
        itl_ms=itl,
        e2e_ms=_latencies(records, "e2e_s", paired),
        requests=[_timing(r) for r in records],
        output_throughput=performance.get("block_output_throughput") or performance.get("output_token_throughput"),
        blocks=bool(performance.get("blocks")),
        chunks={str(r["sample_id"]): int(r["chunk"]) for r in records if paired and "sample_id" in r and "chunk" in r},
        drift=performance.get("drift") or {},
        engine=engine,
        engine_blocks=_engine_blocks(performance.get("blocks") or []),
        open_loop=None
        if not open_loop
        else _load_evidence(
            run,
            list(open_loop.get("requests") or []),
            open_loop,
            _numbers(open_loop.get("engine")),
        ),
        offered_rate=performance.get("request_rate"),
        stress_plan=stress.get("plan") or {},
        stress=None
        if not (point := stress.get("point"))
        else _load_evidence(run, [], point, _numbers(point.get("engine"))),
        load_skipped=str(performance.get(LOAD_SKIPPED) or ""),
    )


def _engine_blocks(blocks: list[dict[str, Any]]) -> dict[str, list[float | None]]:
    """Each engine figure per interleaved block, in chunk order."""
    ordered = sorted(blocks, key=lambda block: block.get("chunk", 0))
    keys = {key for block in ordered for key in (block.get("engine") or {})}
    return {
        key: [v if isinstance(v := (block.get("engine") or {}).get(key), int | float) else None for block in ordered]
        for key in keys
    }


def _numbers(values: dict[str, Any] | None) -> dict[str, float]:
    return {k: float(v) for k, v in (values or {}).items() if isinstance(v, int | float)}


def _latencies(records: list[dict[str, Any]], key: str, paired: bool) -> list[float] | dict[str, float]:
    if not paired:
        return request_latencies_ms(records, key)
    return {
        str(r["sample_id"]): float(r[key]) * 1000.0
        for r in records
        if r.get("error") is None and isinstance(r.get(key), int | float) and "sample_id" in r
    }


def _timing(record: dict[str, Any]) -> RequestTiming:
    def ms(key: str) -> float | None:
        value = record.get(key)
        return float(value) * 1000.0 if isinstance(value, int | float) else None

    return RequestTiming(ok=record.get("error") is None, ttft_ms=ms("ttft_s"), tpot_ms=ms("tpot_s"), e2e_ms=ms("e2e_s"))


# --- what the ticket page shows of two runs --------------------------------------------------------


def task_results(run_ids: list[int], tasks: list[str]) -> dict[tuple[int, str], TaskResult]:
    """The runs' per-task results, by (run id, task)."""
    return {(r.run_id, r.task): r for r in TaskResult.objects.filter(run_id__in=run_ids, task__in=tasks)}


def sample_filter_choices(run_ids: list[int]) -> tuple[list[str], list[str]]:
    """The tasks the runs have samples of, and the failure reasons they recorded."""
    samples = SampleRecord.objects.filter(run_id__in=run_ids)
    tasks = sorted(set(samples.values_list("task", flat=True).distinct()))
    failing = samples.filter(passed=False).exclude(failure_reason="")
    reasons = sorted(set(failing.values_list("failure_reason", flat=True).distinct()))
    return tasks, reasons


def failing_sample_keys(run_ids: list[int], *, task: str, reason: str, only_run: int | None) -> list[tuple[str, str]]:
    """(task, sample id) of every failed sample of the runs (or of ``only_run``), in order, once each."""
    failing = SampleRecord.objects.filter(run_id__in=run_ids, passed=False)
    if task:
        failing = failing.filter(task=task)
    if reason:
        failing = failing.filter(failure_reason=reason)
    if only_run is not None:
        failing = failing.filter(run_id=only_run)
    return list(dict.fromkeys(failing.order_by("task", "sample_id").values_list("task", "sample_id")))


def first_regressions(*, baseline_run: int, candidate_run: int, tasks: Iterable[str]) -> list[tuple[str, str]]:
    """Per task, the first sample (by id) the baseline passed and the candidate failed: (task, sample id)."""
    passed_on_baseline = SampleRecord.objects.filter(
        run_id=baseline_run, task=OuterRef("task"), sample_id=OuterRef("sample_id"), passed=True
    )
    regressed = SampleRecord.objects.filter(run_id=candidate_run, task__in=list(tasks), passed=False).filter(
        Exists(passed_on_baseline)
    )
    firsts = regressed.values("task").annotate(first=Min("sample_id")).order_by("task")
    return [(row["task"], row["first"]) for row in firsts]


def sample_records(run_ids: list[int], keys: list[tuple[str, str]]) -> dict[tuple[str, str, int], SampleRecord]:
    """The runs' records of the samples ``keys`` names, by (task, sample id, run id)."""
    records = SampleRecord.objects.filter(
        run_id__in=run_ids, task__in={t for t, _ in keys}, sample_id__in={s for _, s in keys}
    )
    return {(r.task, r.sample_id, r.run_id): r for r in records}


def ticket_runs(ticket: ReleaseTicket) -> list[tuple[str, EvaluationRun]]:
    """The ticket's evidence runs by role (baseline, candidate), those it has."""
    runs = (("baseline", ticket.baseline_run), ("candidate", ticket.candidate_run))
    return [(role, run) for role, run in runs if run is not None]


def owner_imported_unaccepted(ticket: ReleaseTicket, runs: Iterable[EvaluationRun | None]) -> list[EvaluationRun]:
    """Those of ``runs`` whose evidence the ticket's owner imported and no other reviewer accepted yet."""
    owned = [
        r for r in runs if r is not None and r.source == RunSource.IMPORTED and r.imported_by_id == ticket.owner_id
    ]
    accepted = set(EvidenceAcceptance.objects.filter(ticket=ticket, run__in=owned).values_list("run_id", flat=True))
    return [run for run in owned if run.pk not in accepted]


SIDES = ("baseline", "candidate")
_RUN_PROVENANCE_FIELDS = ("id", "source", "imported_by_id", "imported_by__username")
# What ``ticket_provenance`` reads of the ticket's row: a caller reading that row anyway passes them.
PROVENANCE_ROW_FIELDS = ("owner_id", *(f"{side}_run__{f}" for side in SIDES for f in _RUN_PROVENANCE_FIELDS))


def ticket_provenance(ticket_id: int, *, row: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Who produced each of ticket ``ticket_id``'s runs, whether the owner imported it, and who accepted it.

    Read from plain rows, afresh: one query for the ticket's runs and their importers (none when
    ``row`` already holds ``PROVENANCE_ROW_FIELDS`` of the ticket); the acceptances and the imported
    files' hashes only when there is imported evidence to show.
    """
    sides = SIDES
    if row is None:
        row = ReleaseTicket.objects.filter(pk=ticket_id).values(*PROVENANCE_ROW_FIELDS).first()
    if row is None:
        return []
    runs = [
        (side, {f: row[f"{side}_run__{f}"] for f in _RUN_PROVENANCE_FIELDS})
        for side in sides
        if row[f"{side}_run__id"] is not None
    ]
    imported = [run["id"] for _, run in runs if run["source"] == RunSource.IMPORTED]
    owner_imported = {
        run["id"] for _, run in runs if run["id"] in imported and run["imported_by_id"] == row["owner_id"]
    }
    files: dict[int, dict[str, dict[str, str]]] = {run_id: {} for run_id in imported}
    if imported:
        parts = ("quality", "performance")
        results = TaskResult.objects.filter(run_id__in=imported).order_by("task")
        for result in results.values("run_id", "task", *(f"{part}__file_sha256" for part in parts)):
            hashes = {part: str(result[f"{part}__file_sha256"]) for part in parts if result[f"{part}__file_sha256"]}
            if hashes:
                files[result["run_id"]][result["task"]] = hashes
    acceptances: dict[int, dict[str, Any]] = {}
    if owner_imported:
        accepted = EvidenceAcceptance.objects.filter(ticket_id=ticket_id, run_id__in=owner_imported)
        for a in accepted.values("run_id", "accepted_by__username", "reason", "created_at"):
            acceptances[a["run_id"]] = {
                "by": a["accepted_by__username"],
                "reason": a["reason"],
                "at": a["created_at"].isoformat(),
            }
    return [
        {
            "role": role,
            "run": run["id"],
            "source": "import" if run["id"] in files else "optgate_worker",
            "imported_by": run["imported_by__username"] if run["id"] in files else None,
            "files": files.get(run["id"], {}),
            "owner_imported": run["id"] in owner_imported,
            "accepted": acceptances.get(run["id"]),
        }
        for role, run in runs
    ]


# --- which run, and so which producer, each of a decision's numbers came from -------------------

_HASH_SHOWN = 12  # hex digits of a file's sha256 shown in the one-line text; the API has the whole hash


def _producer_text(side: dict[str, Any]) -> str:
    """The line a reviewer reads next to a number: "OptGate worker gpu@host:41", or
    "imported by erin (quality sha256 ab12…)"."""
    if side["source"] == "import":
        files = ", ".join(f"{part} sha256 {sha[:_HASH_SHOWN]}…" for part, sha in side["files"].items())
        return f"imported by {side['imported_by'] or 'an unknown user'}" + (f" ({files})" if files else "")
    text = f"OptGate worker {side['worker']}" if side["worker"] else "OptGate worker"
    if side["quality_from_run"] is not None:
        text += f" (quality answers reused from run #{side['quality_from_run']})"
    return text


def decision_provenance(decision: GateDecision) -> dict[str, dict[str, dict[str, Any]]]:
    """Per task of ``decision``, per side (baseline, candidate): the run its numbers came from and who produced it.

    A side is ``{run, source, worker, imported_by, files, quality_from_run, producer}``: ``source``
    is ``optgate_worker`` (``worker`` names the worker process of the run's last attempt) or
    ``import`` (``imported_by`` the person, ``files`` the sha256 of each imported file of this
    task); ``quality_from_run`` names the earlier run whose greedy answers a measured baseline
    reused; ``producer`` says all that in one line. Two queries, whatever the number of tasks.
    """
    verdicts: dict[str, Any] = decision.verdicts or {}
    # The judge records each task's runs; older decisions name only the decision's two.
    task_runs = {
        task: {
            "baseline": int(verdict.get("base_run") or decision.baseline_run_id),
            "candidate": int(verdict.get("cand_run") or decision.candidate_run_id),
        }
        for task, verdict in verdicts.items()
    }
    run_ids = {run_id for sides in task_runs.values() for run_id in sides.values()}
    last_worker = EvaluationAttempt.objects.filter(run=OuterRef("pk")).order_by("-number").values("worker")[:1]
    runs: dict[int, dict[str, Any]] = {
        row["pk"]: dict(row)
        for row in EvaluationRun.objects.filter(pk__in=run_ids)
        .annotate(last_worker=Subquery(last_worker))
        .values("pk", "source", "imported_by__username", "last_worker")
    }
    # Only the few keys provenance needs, not the results' whole JSON.
    results: dict[tuple[int, str], dict[str, Any]] = {
        (row["run_id"], row["task"]): dict(row)
        for row in TaskResult.objects.filter(run_id__in=run_ids, task__in=list(verdicts)).values(
            "run_id", "task", "quality__file_sha256", "performance__file_sha256", "quality__reused_from_run"
        )
    }
    shown: dict[str, dict[str, dict[str, Any]]] = {}
    for task, sides in task_runs.items():
        shown[task] = {}
        for side_name, run_id in sides.items():
            run = runs.get(run_id, {})
            result = results.get((run_id, task), {})
            imported = run.get("source") == RunSource.IMPORTED
            files = {
                part: str(result[f"{part}__file_sha256"])
                for part in ("quality", "performance")
                if imported and result.get(f"{part}__file_sha256")
            }
            reused = result.get("quality__reused_from_run")
            side = {
                "run": run_id,
                "source": "import" if imported else "optgate_worker",
                "worker": None if imported else (run.get("last_worker") or None),
                "imported_by": run.get("imported_by__username") if imported else None,
                "files": files,
                "quality_from_run": int(reused) if isinstance(reused, int) and not imported else None,
            }
            side["producer"] = _producer_text(side)
            shown[task][side_name] = side
    return shown
