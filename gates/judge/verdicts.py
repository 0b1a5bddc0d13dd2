"""Per-task, per-metric verdicts: baseline and candidate evidence in, plain-English verdicts out.

Inputs are plain dataclasses (the lead wires them from ``EvaluationRun`` rows). Quality samples
may be lists aligned by position or dicts keyed by sample id; dicts are paired on the intersection
of ids and the unmatched ids are reported. A run error yields status ``error``, never ``fail``.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from gates.judge import stats
from gates.judge.metrics import MetricSpec, is_quality, metric_spec

if TYPE_CHECKING:
    from gates.policy import MetricRule, Policy, TaskPolicy

Status = Literal["pass", "fail", "inconclusive", "error"]
Kind = Literal["guardrail", "objective", "tradeable", "mechanism"]
Role = Literal["beneficiary", "risk"]
Samples = Sequence[Any] | Mapping[str, Any]


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
    queue_ms: Samples = ()
    # tokens/s: one measurement, or several (per repeat) for an interval.
    output_throughput: float | Sequence[float] | None = None
    # Engine counters: prefix_cache_hit_rate, spec_decode_acceptance_rate, preemptions, ...
    engine: Mapping[str, float] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class TaskEvidence:
    """Both runs on the same samples of one task type."""

    task: str
    base: RunTaskEvidence
    cand: RunTaskEvidence


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


@dataclass(frozen=True)
class Pairing:
    base: list[Any]
    cand: list[Any]
    by_id: bool
    unmatched_base: tuple[str, ...] = ()
    unmatched_cand: tuple[str, ...] = ()


def pair_samples(base: Samples, cand: Samples) -> Pairing:
    """Pair per-sample values: dicts on the intersection of ids, lists by position."""
    if isinstance(base, Mapping) or isinstance(cand, Mapping):
        base_map = base if isinstance(base, Mapping) else {str(i): v for i, v in enumerate(base)}
        cand_map = cand if isinstance(cand, Mapping) else {str(i): v for i, v in enumerate(cand)}
        common = sorted(set(base_map) & set(cand_map), key=str)
        return Pairing(
            base=[base_map[k] for k in common],
            cand=[cand_map[k] for k in common],
            by_id=True,
            unmatched_base=tuple(sorted(str(k) for k in set(base_map) - set(cand_map))),
            unmatched_cand=tuple(sorted(str(k) for k in set(cand_map) - set(base_map))),
        )
    n = min(len(base), len(cand))
    return Pairing(
        base=list(base[:n]),
        cand=list(cand[:n]),
        by_id=False,
        unmatched_base=tuple(str(i) for i in range(n, len(base))),
        unmatched_cand=tuple(str(i) for i in range(n, len(cand))),
    )


def _values(samples: Samples) -> list[float]:
    return [float(v) for v in (samples.values() if isinstance(samples, Mapping) else samples)]


# ---- formatting: every reason is one sentence with the numbers ----------------------------------


def _signed(value: float, digits: int = 1) -> str:
    text = f"{abs(value):.{digits}f}"
    return f"−{text}" if value < 0 and float(text) != 0 else f"+{text}"


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def _points_ci(interval: tuple[float, float], confidence: float) -> str:
    return f"{confidence:.0%} CI {_signed(interval[0] * 100)} to {_signed(interval[1] * 100)}"


def _rel_ci(interval: tuple[float, float], confidence: float) -> str:
    return f"{confidence:.0%} CI {_signed(interval[0] * 100)}% to {_signed(interval[1] * 100)}%"


def _amount(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:.0f} ms" if value >= 100 else f"{value:.1f} ms"
    if unit == "%":
        return _pct(value)
    return f"{value:.3g}{unit}"


def _moved(delta: float) -> str:
    if delta == 0:
        return "held"
    return "rose" if delta > 0 else "fell"


# ---- judging one metric ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    """What a verdict checks: non-inferiority (guardrail), improvement, or report only."""

    metric: str
    kind: Kind
    label: str
    confidence: float = 0.95
    margin: float = 0.0
    min_improvement: float = 0.0
    critical: bool = False
    min_n: int = 1
    source: str = "policy"
    note: str = ""  # why the rule applies, e.g. "critical under weight_quantization"

    @property
    def check(self) -> str:
        if self.kind == "guardrail":
            return "noninferiority"
        if self.kind == "tradeable":
            return "report"
        return "improvement"


def _seed(base_seed: int, task: str, metric: str, source: str) -> int:
    # A stable per-metric stream: reproducible, and metrics do not share random draws.
    return (base_seed + zlib.crc32(f"{task}/{metric}/{source}".encode())) % (2**32)


def _threshold(rule: _Rule, effect: float) -> float:
    """The boundary an inconclusive effect must be shown to clear (for samples-needed)."""
    if rule.check == "noninferiority":
        return -rule.margin
    return 0.0 if effect >= rule.min_improvement else rule.min_improvement


def _classify(rule: _Rule, effect: float, interval: tuple[float, float], significant_regression: bool) -> str:
    if rule.check == "noninferiority":
        return stats.classify_noninferiority(effect, interval, rule.margin, significant_regression)
    if rule.check == "improvement":
        return stats.classify_improvement(effect, interval, rule.min_improvement)
    return "pass"


def _size(fraction: float, unit_word: str) -> str:
    """0.05 → "5-point" (rates), "5%" (relative), "0.05" (scores)."""
    if unit_word == "point":
        return f"{fraction * 100:g}-point"
    if unit_word == "percent":
        return f"{fraction * 100:g}%"
    return f"{fraction:g}"


def _tail(rule: _Rule, status: str, unit_word: str) -> str:
    """The clause that says why, relative to the margin or minimum."""
    if rule.check == "noninferiority":
        bound = f"the {_size(rule.margin, unit_word)} margin"
        return {
            "pass": f"within {bound}",
            "fail": f"beyond {bound}",
            "inconclusive": f"so a regression beyond {bound} can be neither ruled out nor confirmed",
        }[status]
    if rule.check == "improvement":
        bound = f"the {_size(rule.min_improvement, unit_word)} minimum improvement"
        return {
            "pass": f"meeting {bound}",
            "fail": f"short of {bound}",
            "inconclusive": f"so whether it meets {bound} is not yet clear",
        }[status]
    return "a tradeable metric, reported only"


def _finish(
    rule: _Rule,
    task: str,
    *,
    status: str,
    n: int,
    baseline: float | None,
    candidate: float | None,
    effect: float | None,
    interval: tuple[float, float] | None,
    test: str,
    sentence: str,
    good_effect: float,
    std_error: float,
    p_value: float | None = None,
    details: Mapping[str, Any] | None = None,
) -> MetricVerdict:
    """Apply the minimum sample count and the samples-needed estimate, then build the verdict."""
    needed = None
    if status != "fail" and n < rule.min_n and rule.check != "report":
        status = "inconclusive"
        sentence += f"; that is fewer than the {rule.min_n} the policy requires"
    if status == "inconclusive":
        estimate = stats.samples_needed(
            n=max(n, 1),
            effect=good_effect,
            threshold=_threshold(rule, good_effect),
            std_error=std_error,
            confidence=rule.confidence,
        )
        needed = max(estimate, rule.min_n - n)
        sentence += f"; about {needed} more samples would likely settle it"
    return MetricVerdict(
        task=task,
        metric=rule.metric,
        kind=rule.kind,
        status=status,  # type: ignore[arg-type]
        n=n,
        baseline=baseline,
        candidate=candidate,
        effect=effect,
        interval=interval,
        test=test,
        reason=sentence[0].upper() + sentence[1:] + ".",
        samples_needed=needed,
        critical=rule.critical,
        p_value=p_value,
        source=rule.source,
        details={**(details or {}), **({"note": rule.note} if rule.note else {})},
    )


def _missing(rule: _Rule, task: str, what: str) -> MetricVerdict:
    """No evidence for a metric: inconclusive (more evidence needed), never a failure."""
    return MetricVerdict(
        task=task,
        metric=rule.metric,
        kind=rule.kind,
        status="inconclusive",
        n=0,
        baseline=None,
        candidate=None,
        effect=None,
        interval=None,
        test="none (no evidence)",
        reason=f"No {what} was recorded for {rule.label} in one or both runs, so it could not be judged.",
        samples_needed=rule.min_n,
        critical=rule.critical,
        source=rule.source,
    )


def _judge_pass_fail(rule: _Rule, spec: MetricSpec, task: str, ev: TaskEvidence) -> MetricVerdict:
    if spec.field == "passed":
        base_raw, cand_raw = ev.base.passed, ev.cand.passed
    else:
        base_raw, cand_raw = ev.base.checks.get(spec.field, ()), ev.cand.checks.get(spec.field, ())
    pairing = pair_samples(base_raw, cand_raw)
    if not pairing.base:
        return _missing(rule, task, "paired per-sample result")
    # Judge on the "good" outcome so one test serves metrics where True is bad (truncation).
    base_ok = [bool(v) == spec.higher_is_better for v in pairing.base]
    cand_ok = [bool(v) == spec.higher_is_better for v in pairing.cand]
    margin = rule.margin if rule.check == "noninferiority" else 0.0
    result = stats.mcnemar_noninferiority(base_ok, cand_ok, margin, rule.confidence)
    significant = result.p_value < 1 - rule.confidence and result.losses > result.gains
    status = _classify(rule, result.effect, result.interval, significant)
    sign = 1 if spec.higher_is_better else -1
    base_rate = result.base_rate if sign > 0 else 1 - result.base_rate
    cand_rate = result.cand_rate if sign > 0 else 1 - result.cand_rate
    effect = sign * result.effect
    low, high = sorted((sign * result.interval[0], sign * result.interval[1]))
    sentence = (
        f"{rule.label} {_moved(cand_rate - base_rate)} from {_pct(base_rate)} to {_pct(cand_rate)} "
        f"({_signed(effect * 100)} points, {_points_ci((low, high), rule.confidence)}) on {result.n} paired "
        f"samples ({result.losses} lost, {result.gains} gained), {_tail(rule, status, 'point')}"
    )
    return _finish(
        rule,
        task,
        status=status,
        n=result.n,
        baseline=base_rate,
        candidate=cand_rate,
        effect=effect,
        interval=(low, high),
        test=result.test,
        sentence=sentence,
        good_effect=result.effect,
        std_error=result.std_error,
        p_value=result.p_value,
        details={
            "losses": result.losses,
            "gains": result.gains,
            "unmatched_base": len(pairing.unmatched_base),
            "unmatched_cand": len(pairing.unmatched_cand),
        },
    )


def _judge_score(rule: _Rule, task: str, ev: TaskEvidence, seed: int, n_boot: int) -> MetricVerdict:
    pairing = pair_samples(ev.base.scores, ev.cand.scores)
    if not pairing.base:
        return _missing(rule, task, "paired per-sample score")
    result = stats.paired_bootstrap_mean_diff(pairing.base, pairing.cand, rule.confidence, n_boot, seed)
    significant = result.interval[1] < 0
    status = _classify(rule, result.effect, result.interval, significant)
    sentence = (
        f"{rule.label} {_moved(result.effect)} from {result.baseline:.3f} to {result.candidate:.3f} "
        f"({_signed(result.effect, 3)}, {rule.confidence:.0%} CI {_signed(result.interval[0], 3)} to "
        f"{_signed(result.interval[1], 3)}) on {result.n_base} paired samples, {_tail(rule, status, 'unit')}"
    )
    return _finish(
        rule,
        task,
        status=status,
        n=result.n_base,
        baseline=result.baseline,
        candidate=result.candidate,
        effect=result.effect,
        interval=result.interval,
        test=result.test,
        sentence=sentence,
        good_effect=result.effect,
        std_error=result.std_error,
        p_value=result.p_value,
        details={"unmatched_base": len(pairing.unmatched_base), "unmatched_cand": len(pairing.unmatched_cand)},
    )


def _judge_ratio(
    rule: _Rule, spec: MetricSpec, task: str, base_raw: Samples, cand_raw: Samples, seed: int, n_boot: int, unit: str
) -> MetricVerdict:
    """Latency or throughput lists: bootstrap interval of the ratio of a statistic."""
    paired = isinstance(base_raw, Mapping) and isinstance(cand_raw, Mapping)
    if paired:
        pairing = pair_samples(base_raw, cand_raw)
        base_values, cand_values = [float(v) for v in pairing.base], [float(v) for v in pairing.cand]
    else:
        base_values, cand_values = _values(base_raw), _values(cand_raw)
    if not base_values or not cand_values:
        return _missing(rule, task, "measurement")
    stat = spec.stat or "mean"
    try:
        result = stats.bootstrap_ratio(base_values, cand_values, stat, rule.confidence, n_boot, seed, paired)  # type: ignore[arg-type]
    except ValueError as exc:
        return _missing(rule, task, f"usable measurement ({exc})")
    # "Good" scale: + means better. Latency: 1 − ratio (faster); throughput: ratio − 1.
    if spec.higher_is_better:
        good, good_interval = result.effect - 1, (result.interval[0] - 1, result.interval[1] - 1)
    else:
        good, good_interval = 1 - result.effect, (1 - result.interval[1], 1 - result.interval[0])
    significant = good_interval[1] < 0
    status = _classify(rule, good, good_interval, significant)
    change = result.effect - 1
    rel_interval = (result.interval[0] - 1, result.interval[1] - 1)
    counts = f"{result.n_base} paired samples" if paired else f"{result.n_base} vs {result.n_cand} measurements"
    sentence = (
        f"{rule.label} went from {_amount(result.baseline, unit)} to {_amount(result.candidate, unit)} "
        f"({_signed(change * 100)}%, {_rel_ci(rel_interval, rule.confidence)}) over {counts}, "
        f"{_tail(rule, status, 'percent')}"
    )
    return _finish(
        rule,
        task,
        status=status,
        n=min(result.n_base, result.n_cand),
        baseline=result.baseline,
        candidate=result.candidate,
        effect=result.effect,
        interval=result.interval,
        test=result.test,
        sentence=sentence,
        good_effect=good,
        std_error=result.std_error,
        p_value=result.p_value,
        details={"n_base": result.n_base, "n_cand": result.n_cand, "effect_is": "ratio cand/base"},
    )


def _judge_point(rule: _Rule, task: str, base: float | None, cand: float | None, unit: str, hib: bool) -> MetricVerdict:
    """A single measurement per run (engine counters, one throughput figure): no interval."""
    # One figure summarises a whole run, so the per-sample minimum count does not apply to it.
    rule = replace(rule, min_n=0)
    if base is None or cand is None:
        return _missing(rule, task, "measurement")
    if base == 0:
        good = 0.0 if cand == 0 else (1.0 if (cand > 0) == hib else -1.0)
        ratio = None
    else:
        ratio = cand / base
        good = ratio - 1 if hib else 1 - ratio
    if rule.check == "noninferiority":
        status = "pass" if good >= -rule.margin else "fail"
    elif rule.check == "improvement":
        status = "pass" if good >= rule.min_improvement and good > 0 else "fail"
    else:
        status = "pass"
    change = f" ({_signed((ratio - 1) * 100)}%)" if ratio is not None else ""
    sentence = (
        f"{rule.label} went from {_amount(base, unit)} to {_amount(cand, unit)}{change} in a single measurement "
        f"per run, {_tail(rule, status, 'percent')}"
    )
    return _finish(
        rule,
        task,
        status=status,
        n=1,
        baseline=base,
        candidate=cand,
        effect=ratio,
        interval=None,
        test="point comparison (one measurement per run, no interval)",
        sentence=sentence,
        good_effect=good,
        std_error=math.inf,
    )


def _slo_attainment(run: RunTaskEvidence, task_policy: TaskPolicy) -> list[float] | None:
    """Per request: 1.0 when every SLO the task sets is met; None if requests cannot be aligned."""
    slos = task_policy.slos
    columns = [
        (_values(values), limit)
        for values, limit in ((run.ttft_ms, slos.ttft_ms), (run.tpot_ms, slos.tpot_ms), (run.e2e_ms, slos.e2e_ms))
        if limit is not None and len(values)
    ]
    if not columns or len({len(values) for values, _ in columns}) != 1:
        return None
    return [float(all(values[i] <= limit for values, limit in columns)) for i in range(len(columns[0][0]))]


def _judge_goodput(
    rule: _Rule, task: str, ev: TaskEvidence, task_policy: TaskPolicy, seed: int, n_boot: int
) -> MetricVerdict:
    base, cand = _slo_attainment(ev.base, task_policy), _slo_attainment(ev.cand, task_policy)
    if not base or not cand:
        return _missing(rule, task, "set of per-request latencies aligned across TTFT/TPOT/E2E")
    result = stats.bootstrap_diff(base, cand, "mean", rule.confidence, n_boot, seed)
    status = _classify(rule, result.effect, result.interval, result.interval[1] < 0)
    sentence = (
        f"{rule.label} {_moved(result.effect)} from {_pct(result.baseline)} to {_pct(result.candidate)} "
        f"({_signed(result.effect * 100)} points, {_points_ci(result.interval, rule.confidence)}) over "
        f"{result.n_base} vs {result.n_cand} requests, {_tail(rule, status, 'point')}"
    )
    return _finish(
        rule,
        task,
        status=status,
        n=min(result.n_base, result.n_cand),
        baseline=result.baseline,
        candidate=result.candidate,
        effect=result.effect,
        interval=result.interval,
        test=result.test,
        sentence=sentence,
        good_effect=result.effect,
        std_error=result.std_error,
        p_value=result.p_value,
    )


def _has_evidence(spec: MetricSpec, ev: TaskEvidence) -> bool:
    """Whether both runs carry data for ``spec`` (bottleneck rules judge the first that does)."""

    def present(run: RunTaskEvidence) -> bool:
        if spec.family == "pass_fail":
            return bool(run.passed) if spec.field == "passed" else bool(run.checks.get(spec.field))
        if spec.family == "score":
            return bool(run.scores)
        if spec.family == "latency":
            return bool(getattr(run, spec.field))
        if spec.family == "throughput":
            return run.output_throughput is not None
        if spec.family == "engine":
            return spec.field in run.engine
        return bool(run.ttft_ms or run.e2e_ms)

    return present(ev.base) and present(ev.cand)


def judge_metric(
    rule: _Rule, ev: TaskEvidence, task_policy: TaskPolicy, *, seed: int = 0, n_boot: int = stats.DEFAULT_N_BOOT
) -> MetricVerdict:
    """Judge one metric of one task with the test its family calls for."""
    spec = metric_spec(rule.metric)
    metric_seed = _seed(seed, ev.task, rule.metric, rule.source)
    if spec.family == "pass_fail":
        return _judge_pass_fail(rule, spec, ev.task, ev)
    if spec.family == "score":
        return _judge_score(rule, ev.task, ev, metric_seed, n_boot)
    if spec.family == "latency":
        base, cand = getattr(ev.base, spec.field), getattr(ev.cand, spec.field)
        return _judge_ratio(rule, spec, ev.task, base, cand, metric_seed, n_boot, "ms")
    if spec.family == "throughput":
        base_tp, cand_tp = ev.base.output_throughput, ev.cand.output_throughput
        if isinstance(base_tp, Sequence) and isinstance(cand_tp, Sequence) and len(base_tp) > 1 and len(cand_tp) > 1:
            return _judge_ratio(rule, spec, ev.task, base_tp, cand_tp, metric_seed, n_boot, " tok/s")
        return _judge_point(rule, ev.task, _scalar(base_tp), _scalar(cand_tp), " tok/s", hib=True)
    if spec.family == "goodput":
        return _judge_goodput(rule, ev.task, ev, task_policy, metric_seed, n_boot)
    unit = "%" if spec.field.endswith("_rate") or spec.field.endswith("_usage") else ""
    return _judge_point(
        rule, ev.task, ev.base.engine.get(spec.field), ev.cand.engine.get(spec.field), unit, spec.higher_is_better
    )


def _scalar(value: float | Sequence[float] | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, Sequence):
        return sum(value) / len(value) if len(value) else None
    return float(value)


# ---- mechanism rules ------------------------------------------------------------------------


def _acceptance_verdict(task: str, ev: TaskEvidence, floor: float) -> MetricVerdict:
    rate = ev.cand.engine.get("spec_decode_acceptance_rate")
    common: dict[str, Any] = {
        "task": task,
        "metric": "spec_decode_acceptance_rate",
        "kind": "mechanism",
        "n": 1,
        "baseline": None,
        "effect": None,
        "interval": None,
        "test": "floor check on the candidate's engine counters",
        "source": "speculative_decoding",
    }
    if rate is None:
        return MetricVerdict(
            **common,
            status="inconclusive",
            candidate=None,
            reason="No speculative-decoding acceptance counters were scraped from the candidate, so the "
            "draft acceptance rate could not be checked.",
            samples_needed=None,
        )
    ok = rate >= floor
    return MetricVerdict(
        **common,
        status="pass" if ok else "fail",
        candidate=rate,
        reason=f"Draft acceptance rate is {_pct(rate)}, {'at or above' if ok else 'below'} the "
        f"{_pct(floor)} floor{'' if ok else ', so drafting wastes target-model compute on this task'}.",
    )


def _hit_rate_verdict(task: str, ev: TaskEvidence, floor: float) -> MetricVerdict:
    rate = ev.cand.engine.get("prefix_cache_hit_rate")
    common: dict[str, Any] = {
        "task": task,
        "metric": "prefix_cache_hit_rate",
        "kind": "mechanism",
        "n": 1,
        "baseline": ev.base.engine.get("prefix_cache_hit_rate"),
        "effect": None,
        "interval": None,
        "test": "floor check on the candidate's engine counters",
        "source": "prefix_cache",
    }
    if rate is None:
        return MetricVerdict(
            **common,
            status="inconclusive",
            candidate=None,
            reason="No prefix-cache counters were scraped from the candidate, so the hit rate could not be checked.",
        )
    ok = rate >= floor
    why = (
        ""
        if ok
        else "; a per-request prefix (such as a trace id at the front of the prompt) or a changing system "
        "prompt keeps the cache from hitting"
    )
    return MetricVerdict(
        **common,
        status="pass" if ok else "fail",
        candidate=rate,
        reason=(
            f"Prefix-cache hit rate is {_pct(rate)}, {'at or above' if ok else 'below'} the {_pct(floor)} floor{why}."
        ),
    )


def _explain_prefix_ttft(verdict: MetricVerdict, hit: MetricVerdict) -> MetricVerdict:
    """A cache that hits without a TTFT gain means prefill was not the bottleneck: say so."""
    if hit.status != "pass" or verdict.status != "fail" or hit.candidate is None:
        return verdict
    reason = (
        verdict.reason[:-1] + f", although the prefix cache hits {_pct(hit.candidate)} of the time, so the "
        "bottleneck is elsewhere (queueing or decode), not prefill."
    )
    return replace(verdict, reason=reason)


def _mechanism_verdicts(
    policy: Policy, ev: TaskEvidence, task_policy: TaskPolicy, mechanisms: Sequence[str], seed: int
) -> list[MetricVerdict]:
    verdicts: list[MetricVerdict] = []
    if "speculative_decoding" in mechanisms:
        rule = policy.speculative_decoding
        verdicts.append(_acceptance_verdict(ev.task, ev, rule.min_acceptance_rate))
        for metric in ("e2e_p50", "e2e_p95"):
            r = _Rule(
                metric,
                "mechanism",
                metric_spec(metric).label,
                rule.confidence,
                min_improvement=rule.min_e2e_improvement,
                min_n=task_policy.min_samples.latency,
                source="speculative_decoding",
            )
            verdicts.append(judge_metric(r, ev, task_policy, seed=seed, n_boot=policy.n_boot))
    if "prefix_cache" in mechanisms:
        rule_pc = policy.prefix_cache
        hit = _hit_rate_verdict(ev.task, ev, rule_pc.min_hit_rate)
        r = _Rule(
            "ttft_p50",
            "mechanism",
            "TTFT P50 on the shared-prefix workload",
            rule_pc.confidence,
            min_improvement=rule_pc.min_ttft_improvement,
            min_n=task_policy.min_samples.latency,
            source="prefix_cache",
        )
        ttft = judge_metric(r, ev, task_policy, seed=seed, n_boot=policy.n_boot)
        verdicts += [hit, _explain_prefix_ttft(ttft, hit)]
    return verdicts


def _bottleneck_verdict(
    policy: Policy, ev: TaskEvidence, task_policy: TaskPolicy, bottleneck: str, seed: int
) -> MetricVerdict:
    rule = policy.bottlenecks.get(bottleneck)
    if rule is None:
        return MetricVerdict(
            task=ev.task,
            metric=f"bottleneck:{bottleneck}",
            kind="mechanism",
            status="error",
            n=0,
            baseline=None,
            candidate=None,
            effect=None,
            interval=None,
            test="none",
            reason=f"Policy {policy.version_label} has no rule for the targeted bottleneck {bottleneck!r}.",
            source=f"bottleneck:{bottleneck}",
        )
    metric = next((m for m in rule.metrics if _has_evidence(metric_spec(m), ev)), rule.metrics[0])
    spec = metric_spec(metric)
    r = _Rule(
        metric,
        "mechanism",
        f"{spec.label} (targeted {bottleneck} bottleneck)",
        rule.confidence,
        min_improvement=rule.min_improvement,
        min_n=task_policy.min_samples.quality if is_quality(metric) else task_policy.min_samples.latency,
        source=f"bottleneck:{bottleneck}",
    )
    return judge_metric(r, ev, task_policy, seed=seed, n_boot=policy.n_boot)


# ---- judging a task -------------------------------------------------------------------------


def _policy_rules(
    task_policy: TaskPolicy, role: Role, critical_override: str | None
) -> list[tuple[MetricRule, Kind, bool, str]]:
    """(rule, kind as judged, critical, note); objectives only decide for beneficiary tasks."""
    out: list[tuple[MetricRule, Kind, bool, str]] = []
    for rule in task_policy.guardrails:
        forced = critical_override is not None and is_quality(rule.metric) and not rule.critical
        note = f"critical under {critical_override}" if forced else ""
        out.append((rule, "guardrail", rule.critical or forced, note))
    out += [(rule, "tradeable", False, "") for rule in task_policy.tradeable]
    for rule in task_policy.objectives:
        # On a risk task an objective is not promised, so it is reported like a tradeable metric.
        out.append((rule, "objective" if role == "beneficiary" else "tradeable", False, ""))
    return out


def _to_rule(rule: MetricRule, kind: Kind, critical: bool, note: str, task_policy: TaskPolicy) -> _Rule:
    min_n = task_policy.min_samples.quality if is_quality(rule.metric) else task_policy.min_samples.latency
    return _Rule(
        metric=rule.metric,
        kind=kind,
        label=rule.label,
        confidence=rule.confidence,
        margin=rule.margin or 0.0,
        min_improvement=rule.min_improvement or 0.0,
        critical=critical,
        min_n=min_n,
        note=note,
    )


def _error_task(task: str, role: Role, reason: str, ev: TaskEvidence | None) -> TaskVerdict:
    verdict = MetricVerdict(
        task=task,
        metric="run",
        kind="guardrail",
        status="error",
        n=0,
        baseline=None,
        candidate=None,
        effect=None,
        interval=None,
        test="none (not judged)",
        reason=reason,
    )
    return TaskVerdict(
        task=task,
        role=role,
        status="error",
        metrics=(verdict,),
        reason=reason,
        base_run=ev.base.run_id if ev else None,
        cand_run=ev.cand.run_id if ev else None,
    )


def judge_task(
    policy: Policy,
    evidence: TaskEvidence,
    role: Role = "risk",
    mechanisms: Sequence[str] = (),
    bottleneck: str | None = None,
    *,
    seed: int | None = None,
) -> TaskVerdict:
    """Judge every metric the policy names for one task, plus mechanism and bottleneck rules.

    Guardrails decide for every task; objectives, mechanism rules and the targeted bottleneck
    decide only for beneficiary tasks (that is where the benefit is promised). Quality guardrails
    of tasks listed under an active quantization mechanism become critical.
    """
    task = evidence.task
    task_policy = policy.task(task)
    if task_policy is None:
        return _error_task(task, role, f"Policy {policy.version_label} has no rules for task {task!r}.", evidence)
    errors = [
        f"the {side} run failed ({run.error})"
        for side, run in (("baseline", evidence.base), ("candidate", evidence.cand))
        if run.error
    ]
    if errors:
        reason = f"{task} was not judged because {' and '.join(errors)}; a run error is not a verdict."
        return _error_task(task, role, reason[0].upper() + reason[1:], evidence)

    base_seed = policy.seed if seed is None else seed
    active_quant = next((m for m in mechanisms if task in policy.critical_tasks_for([m])), None)
    verdicts = [
        judge_metric(_to_rule(rule, kind, critical, note, task_policy), evidence, task_policy, seed=base_seed,
                     n_boot=policy.n_boot)
        for rule, kind, critical, note in _policy_rules(task_policy, role, active_quant)
    ]  # fmt: skip
    if role == "beneficiary":
        verdicts += _mechanism_verdicts(policy, evidence, task_policy, mechanisms, base_seed)
        if bottleneck:
            verdicts.append(_bottleneck_verdict(policy, evidence, task_policy, bottleneck, base_seed))
    return TaskVerdict(
        task=task,
        role=role,
        status=_task_status(verdicts),
        metrics=tuple(verdicts),
        reason=_task_reason(task, role, verdicts),
        base_run=evidence.base.run_id,
        cand_run=evidence.cand.run_id,
    )


def _task_status(verdicts: Sequence[MetricVerdict]) -> Status:
    deciding = [v.status for v in verdicts if v.deciding]
    for status in ("error", "fail", "inconclusive"):
        if status in deciding:
            return status  # type: ignore[return-value]
    return "pass"


def _task_reason(task: str, role: Role, verdicts: Sequence[MetricVerdict]) -> str:
    status = _task_status(verdicts)
    deciding = [v for v in verdicts if v.deciding]
    if status == "pass":
        return f"{task} ({role}) passes all {len(deciding)} deciding checks."
    picked = [v for v in deciding if v.status == status]
    head = {"fail": "fails", "inconclusive": "is inconclusive on", "error": "could not be judged on"}[status]
    names = ", ".join(v.metric for v in picked)
    return f"{task} ({role}) {head} {names}: {picked[0].reason}"
