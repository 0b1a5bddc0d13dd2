"""The judge's records: the evidence it reads (per run, per task) and the verdicts it writes.

Quality samples may be lists aligned by position or dicts keyed by sample id (see ``pairing``).
Verdicts serialise with ``to_dict`` for the ledger; JSON has no inf/nan, so those become None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "inconclusive", "error"]
Kind = Literal["guardrail", "objective", "tradeable", "mechanism"]
Role = Literal["beneficiary", "risk"]
Samples = Sequence[Any] | Mapping[str, Any]


@dataclass(frozen=True)
class RequestTiming:
    """One load request as goodput sees it: whether it succeeded, and its latencies in ms."""

    ok: bool
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None


@dataclass(frozen=True)
class RunTaskEvidence:
    """What one run (one backend) measured on one task type."""

    run_id: str | None = None
    passed: Samples = ()
    scores: Samples = ()
    # Named per-sample checks (fact_accuracy, json_validity, ...), same shapes as ``passed``.
    checks: Mapping[str, Samples] = field(default_factory=dict)
    ttft_ms: Samples = ()
    tpot_ms: Samples = ()
    itl_ms: Samples = ()
    e2e_ms: Samples = ()
    # Every load request, failed ones included (goodput counts them as misses).
    requests: Sequence[RequestTiming] = ()
    # tokens/s: one measurement, or several (per repeat, or per interleaved block) for an interval.
    output_throughput: float | Sequence[float] | None = None
    # Measured in interleaved blocks: per-block figures pair with the other side's by position.
    blocks: bool = False
    # Interleaved: each load sample's chunk (the pair of blocks, one per side, that sent it).
    chunks: Mapping[str, int] = field(default_factory=dict)
    # How far the side's block medians wandered (``evaluators.interleave.drift``).
    drift: Mapping[str, float | None] = field(default_factory=dict)
    # Engine counters: prefix_cache_hit_rate, spec_decode_acceptance_rate, preemptions, ...
    engine: Mapping[str, float] = field(default_factory=dict)
    # The same per interleaved block, in chunk order (block k pairs with the other side's block k).
    engine_blocks: Mapping[str, Sequence[float | None]] = field(default_factory=dict)
    error: str | None = None
    # The engine exited while starting: its configuration cannot serve on this hardware.
    start_failed: bool = False
    # The same prompts again as Poisson arrivals near the baseline's capacity (requests/s offered).
    open_loop: RunTaskEvidence | None = None
    offered_rate: float | None = None
    # The stress profile of the ticket's claimed bottleneck: how it was sized (or why it was not
    # run) and, when it ran, what it measured.
    stress_plan: Mapping[str, Any] = field(default_factory=dict)
    stress: RunTaskEvidence | None = None
    # Why no load was measured, when it was skipped because what was measured before (the
    # answers, or other tasks' loads) already settled the verdict (``evaluators.pipeline.LOAD_SKIPPED``);
    # empty when it ran.
    load_skipped: str = ""


@dataclass(frozen=True)
class TaskEvidence:
    """Both runs on the same samples of one task type."""

    task: str
    base: RunTaskEvidence
    cand: RunTaskEvidence

    @property
    def load_skipped(self) -> str:
        """Why the load of this task was not measured (either side), or empty."""
        return self.cand.load_skipped or self.base.load_skipped

    def open_loop(self) -> TaskEvidence | None:
        """Both sides' open-loop point as task evidence, when both were measured there."""
        if self.base.open_loop is None or self.cand.open_loop is None:
            return None
        return TaskEvidence(task=self.task, base=self.base.open_loop, cand=self.cand.open_loop)

    def stressed(self) -> TaskEvidence | None:
        """Both sides under the stress profile, when both were measured under it."""
        if self.base.stress is None or self.cand.stress is None:
            return None
        return TaskEvidence(task=self.task, base=self.base.stress, cand=self.cand.stress)


# The metric name of the verdict that says an engine could not start.
ENGINE_START = "engine_start"
# The test of a timing or engine verdict whose load was skipped (``TaskEvidence.load_skipped``);
# its ``details["not_measured"]`` says why.
LOAD_NOT_MEASURED = "none (the load was not measured)"


@dataclass(frozen=True)
class MetricVerdict:
    """The judgement of one metric of one task, with its numbers and one sentence saying why."""

    task: str
    metric: str
    kind: Kind
    status: Status
    n: int
    baseline: float | None
    candidate: float | None
    effect: float | None
    interval: tuple[float, float] | None
    test: str
    reason: str
    samples_needed: int | None = None
    critical: bool = False
    p_value: float | None = None
    source: str = "policy"  # "policy", a mechanism name, or "bottleneck:<name>"
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def deciding(self) -> bool:
        return self.kind != "tradeable"

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "metric": self.metric,
            "kind": self.kind,
            "status": self.status,
            "n": self.n,
            "baseline": _clean(self.baseline),
            "candidate": _clean(self.candidate),
            "effect": _clean(self.effect),
            "interval": [_clean(x) for x in self.interval] if self.interval else None,
            "test": self.test,
            "reason": self.reason,
            "samples_needed": self.samples_needed,
            "critical": self.critical,
            "p_value": _clean(self.p_value),
            "source": self.source,
            "details": {k: _clean(v) for k, v in self.details.items()},
        }


def unmeasured_verdict(
    *,
    task: str,
    metric: str,
    kind: Kind,
    status: Status,
    test: str,
    reason: str,
    samples_needed: int | None = None,
    critical: bool = False,
    source: str = "policy",
) -> MetricVerdict:
    """A verdict with no numbers: missing evidence, a run error, or a rule the policy lacks."""
    return MetricVerdict(
        task=task,
        metric=metric,
        kind=kind,
        status=status,
        n=0,
        baseline=None,
        candidate=None,
        effect=None,
        interval=None,
        test=test,
        reason=reason,
        samples_needed=samples_needed,
        critical=critical,
        source=source,
    )


@dataclass(frozen=True)
class TaskVerdict:
    """All metric verdicts of one task and the task's overall status."""

    task: str
    role: Role
    status: Status
    metrics: tuple[MetricVerdict, ...]
    reason: str
    base_run: str | None = None
    cand_run: str | None = None

    @property
    def critical_failures(self) -> tuple[MetricVerdict, ...]:
        return tuple(m for m in self.metrics if m.critical and m.status == "fail")

    @property
    def cannot_start(self) -> bool:
        """An engine of this task's comparison could not start: no sample can ever be measured."""
        return any(m.metric == ENGINE_START and m.status == "error" for m in self.metrics)

    @property
    def samples_needed(self) -> int | None:
        wanted = [m.samples_needed for m in self.metrics if m.deciding and m.samples_needed]
        return max(wanted) if wanted else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "role": self.role,
            "status": self.status,
            "reason": self.reason,
            "base_run": self.base_run,
            "cand_run": self.cand_run,
            "samples_needed": self.samples_needed,
            "metrics": [m.to_dict() for m in self.metrics],
        }


def _clean(value: Any) -> Any:
    """JSON has no inf/nan; None says "not defined" instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
