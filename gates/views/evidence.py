"""The evidence shown on the ticket page: per-task latency charts, quality aggregates, engine
counters, and the failing samples of both runs side by side.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from evaluators.charts import Summary, box_svg, cdf_svg, summarise
from evaluators.models import EvaluationRun, SampleRecord
from evaluators.selectors import request_latencies_ms
from gates.forms.review import SampleFilterForm
from gates.models import ReleaseTicket
from gates.selectors.evidence import failing_sample_keys, sample_filter_choices, sample_records, task_results

# Engine counters worth a reviewer's eye, in display order; other numeric keys follow.
ENGINE_KEYS = (
    "prefix_cache_hit_rate",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "saved_prefill_tokens",
    "spec_decode_acceptance_rate",
    "spec_decode_mean_accepted_length",
    "spec_decode_draft_tokens",
    "spec_decode_accepted_tokens",
    "kv_cache_usage_peak",
    "preemptions",
)
# Per-request latencies charted per task; the judge's percentile verdicts on each (ttft_p95, e2e_p50,
# …) sit next to its chart in the comparison view (gates.views.comparison).
LATENCY_METRICS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
SAMPLE_LIMIT = 25
# Word-level diffs of two outputs; longer outputs are shown side by side only (the diff is quadratic).
DIFF_MAX_CHARS = 20_000
_WORDS = re.compile(r"\s+|[^\s]+")


def output_diff(before: str, after: str) -> list[tuple[str, str]]:
    """``before`` → ``after`` word by word: ``(op, text)`` with op ``equal``, ``removed`` or ``added``."""
    if len(before) + len(after) > DIFF_MAX_CHARS:
        return []
    a, b = _WORDS.findall(before), _WORDS.findall(after)
    segments: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            segments.append(("equal", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            segments.append(("removed", "".join(a[i1:i2])))
        if j2 > j1:
            segments.append(("added", "".join(b[j1:j2])))
    return segments


@dataclass
class LatencyPanel:
    """One latency metric of one task: summaries, CDF and box plot, baseline vs candidate."""

    key: str  # the requests' field: ttft_s, tpot_s or e2e_s
    label: str
    baseline: Summary
    candidate: Summary
    cdf: str
    box: str

    @property
    def rows(self) -> list[tuple[str, Summary]]:
        return [("Baseline", self.baseline), ("Candidate", self.candidate)]


@dataclass
class TaskPanel:
    task: str
    role: str
    quality: dict[str, Any]
    latency: list[LatencyPanel]
    engine: list[tuple[str, Any, Any]]
    errors: list[str]


@dataclass
class Evidence:
    tasks: list[str]
    baseline_run: EvaluationRun | None
    candidate_run: EvaluationRun | None
    panels: list[TaskPanel] = field(default_factory=list)
    run_engine: list[tuple[str, Any, Any]] = field(default_factory=list)


def _task_roles(ticket: ReleaseTicket) -> dict[str, str]:
    roles = {t.slug: "beneficiary" for t in ticket.beneficiary_tasks.all()}
    for task in ticket.risk_tasks.all():
        roles.setdefault(task.slug, "risk")
    return roles


def _engine_rows(base: dict[str, Any], cand: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    keys = [k for k in ENGINE_KEYS if k in base or k in cand]
    keys += sorted(k for k in {*base, *cand} - set(ENGINE_KEYS) if isinstance((base | cand).get(k), int | float))
    return [(key, base.get(key), cand.get(key)) for key in keys]


def build_evidence(ticket: ReleaseTicket) -> Evidence:
    """Per-task latency charts, quality aggregates and engine counters of the ticket's two runs."""
    roles = _task_roles(ticket)
    base_run, cand_run = ticket.baseline_run, ticket.candidate_run
    evidence = Evidence(list(roles), base_run, cand_run)
    if base_run is None and cand_run is None:
        return evidence
    results = task_results([r.pk for r in (base_run, cand_run) if r], list(roles))
    evidence.run_engine = _engine_rows(
        base_run.engine_evidence if base_run else {}, cand_run.engine_evidence if cand_run else {}
    )
    for task, role in roles.items():
        base = results.get((base_run.pk, task)) if base_run else None
        cand = results.get((cand_run.pk, task)) if cand_run else None
        if base is None and cand is None:
            continue
        latency = []
        for key, label in LATENCY_METRICS:
            series = {
                "baseline": request_latencies_ms(base.requests if base else [], key),
                "candidate": request_latencies_ms(cand.requests if cand else [], key),
            }
            chart_id = f"{task}-{key}"
            latency.append(
                LatencyPanel(
                    key,
                    label,
                    summarise(series["baseline"]),
                    summarise(series["candidate"]),
                    cdf_svg(series, title=f"{task} {label} CDF", chart_id=f"{chart_id}-cdf"),
                    box_svg(series, title=f"{task} {label} distribution", chart_id=f"{chart_id}-box"),
                )
            )
        evidence.panels.append(
            TaskPanel(
                task,
                role,
                {"baseline": base.quality if base else {}, "candidate": cand.quality if cand else {}},
                latency,
                _engine_rows(base.engine_evidence if base else {}, cand.engine_evidence if cand else {}),
                [f"{side}: {r.error}" for side, r in (("baseline", base), ("candidate", cand)) if r and r.error],
            )
        )
    return evidence


@dataclass
class SamplePair:
    task: str
    sample_id: str
    baseline: SampleRecord | None
    candidate: SampleRecord | None

    @property
    def prompt(self) -> str:
        record = self.candidate or self.baseline
        return record.prompt if record else ""

    @property
    def sides(self) -> list[tuple[str, SampleRecord | None]]:
        return [("Baseline", self.baseline), ("Candidate", self.candidate)]

    @property
    def target(self) -> str:
        record = self.candidate or self.baseline
        return record.target if record else ""

    @property
    def diff(self) -> list[tuple[str, str]]:
        """The baseline's output → the candidate's, word by word (empty when one side is missing or equal)."""
        if self.baseline is None or self.candidate is None or self.baseline.output == self.candidate.output:
            return []
        return output_diff(self.baseline.output, self.candidate.output)


def sample_pairs(ticket: ReleaseTicket, params: Any) -> dict[str, Any]:
    """Failing samples with the baseline's and candidate's outputs side by side, filtered.

    ``show`` picks regressions (baseline passed, candidate failed), every candidate failure, or a
    failure on either side; ``task`` and ``reason`` narrow further. At most ``SAMPLE_LIMIT`` pairs.
    """
    base_run, cand_run = ticket.baseline_run_id, ticket.candidate_run_id
    runs = [r for r in (base_run, cand_run) if r]
    if not runs:
        return {"available": False}
    tasks, reasons = sample_filter_choices(runs)
    form = SampleFilterForm(params or None, tasks=tasks, reasons=reasons)
    filters = form.cleaned_data if form.is_bound and form.is_valid() else {}
    show = filters.get("show") or "regressions"
    all_keys = failing_sample_keys(
        runs,
        task=filters.get("task") or "",
        reason=filters.get("reason") or "",
        only_run=cand_run if show in ("candidate_failed", "regressions") else None,
    )
    # Regressions drop pairs whose baseline failed too, so look at a few pages' worth of keys.
    keys = all_keys[: SAMPLE_LIMIT * (4 if show == "regressions" else 1)]
    by_key = sample_records(runs, keys)
    pairs = []
    for task, sample_id in keys:
        pair = SamplePair(
            task, sample_id, by_key.get((task, sample_id, base_run or 0)), by_key.get((task, sample_id, cand_run or 0))
        )
        if show == "regressions" and not (pair.baseline and pair.baseline.passed):
            continue
        pairs.append(pair)
    total = len(pairs) if show == "regressions" else len(all_keys)
    return {"available": True, "form": form, "pairs": pairs[:SAMPLE_LIMIT], "total": total, "limit": SAMPLE_LIMIT}
