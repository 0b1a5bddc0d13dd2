"""Judges of serving performance: latency and throughput ratios, single figures, and goodput."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from scipy import stats as sps

from gates.judge.pairing import pair_samples, sample_values
from gates.judge.records import MetricVerdict, RequestTiming, RunTaskEvidence, Samples, TaskEvidence
from gates.judge.resampling import TAIL_STATS, block_tail_ratio, bootstrap_diff, bootstrap_ratio
from gates.judge.rules import Rule, classify, finish, finish_bootstrap, missing, rate_sentence, tail
from gates.judge.wording import amount, rel_ci, signed
from gates.policy.metrics import MetricSpec
from gates.policy.rules import TaskPolicy

# Fewer interleaved chunks than this resample too coarsely as whole chunks: pairs are resampled.
MIN_CHUNKS = 4


def judge_ratio(
    rule: Rule,
    spec: MetricSpec,
    task: str,
    base_raw: Samples,
    cand_raw: Samples,
    seed: int,
    n_boot: int,
    unit: str,
    chunks: Mapping[str, int] | None = None,
) -> MetricVerdict:
    """Latency or throughput lists: bootstrap interval of the ratio of a statistic.

    Latencies of interleaved blocks pair by sample id, and with ``chunks`` (each sample's chunk:
    the two blocks, one per side, that sent it) whole chunks are resampled: requests of one block
    share the machine's state while it ran, so they are not independent draws, and an interval
    that treats them as such finds two identical engines "different" whenever one block was
    unlucky."""
    paired = isinstance(base_raw, Mapping) and isinstance(cand_raw, Mapping)
    clusters: list[int] | None = None
    if paired:
        pairing = pair_samples(base_raw, cand_raw)
        base_values, cand_values = [float(v) for v in pairing.base], [float(v) for v in pairing.cand]
        common = sorted(set(base_raw) & set(cand_raw), key=str)  # pair_samples' order
        if chunks and all(key in chunks for key in common) and len({chunks[k] for k in common}) >= MIN_CHUNKS:
            clusters = [chunks[key] for key in common]
    else:
        base_values, cand_values = sample_values(base_raw), sample_values(cand_raw)
    if not base_values or not cand_values:
        return missing(rule, task, "measurement")
    stat = spec.stat or "mean"
    by_block_pairs = clusters is not None and stat in TAIL_STATS
    try:
        if by_block_pairs:
            result = block_tail_ratio(base_values, cand_values, clusters, stat, rule.confidence)  # type: ignore[arg-type]
        else:
            result = bootstrap_ratio(base_values, cand_values, stat, rule.confidence, n_boot, seed, paired, clusters)  # type: ignore[arg-type]
    except ValueError as exc:
        return missing(rule, task, f"usable measurement ({exc})")
    # "Good" scale: + means better. Latency: 1 − ratio (faster); throughput: ratio − 1.
    if spec.higher_is_better:
        good, good_interval = result.effect - 1, (result.interval[0] - 1, result.interval[1] - 1)
    else:
        good, good_interval = 1 - result.effect, (1 - result.interval[1], 1 - result.interval[0])
    stated = rule
    rule = with_slack(rule, result.baseline, unit)
    significant = good_interval[1] < 0
    status = classify(rule, good, good_interval, significant)
    change = result.effect - 1
    rel_interval = (result.interval[0] - 1, result.interval[1] - 1)
    counts = f"{result.n_base} paired samples" if paired else f"{result.n_base} vs {result.n_cand} measurements"
    if clusters is not None:
        counts += f" in {len(set(clusters))} interleaved chunks"
    if by_block_pairs:
        sentence = (
            f"{rule.label} went from {amount(result.baseline, unit)} to {amount(result.candidate, unit)} over "
            f"{counts}; block pair by block pair the candidate's was {signed(change * 100)}% "
            f"({rel_ci(rel_interval, rule.confidence)}, Hodges–Lehmann), {tail(rule, status, 'percent')}"
        )
    else:
        sentence = (
            f"{rule.label} went from {amount(result.baseline, unit)} to {amount(result.candidate, unit)} "
            f"({signed(change * 100)}%, {rel_ci(rel_interval, rule.confidence)}) over {counts}, "
            f"{tail(rule, status, 'percent')}"
        )
    details: dict[str, object] = {"n_base": result.n_base, "n_cand": result.n_cand, "effect_is": "ratio cand/base"}
    if rule.margin != stated.margin:
        sentence += (
            f" (the {rule.slack_ms:g} ms slack on a {amount(result.baseline, unit)} baseline; "
            f"the policy's margin is {stated.margin * 100:g}%)"
        )
        details.update(slack_ms=rule.slack_ms, stated_margin=stated.margin, margin=rule.margin)
    return finish_bootstrap(rule, task, result, status, sentence, good_effect=good, details=details)


def with_slack(rule: Rule, baseline: float, unit: str) -> Rule:
    """A latency guardrail's margin widened to its absolute slack where that is the larger: on a
    30 ms baseline a 50 ms slack allows +167 %, on a 300 ms one the 50 % margin stands."""
    if rule.check != "noninferiority" or not rule.slack_ms or unit != "ms" or baseline <= 0:
        return rule
    allowed = rule.slack_ms / baseline
    return replace(rule, margin=allowed) if allowed > rule.margin else rule


def judge_blocks(
    rule: Rule, spec: MetricSpec, task: str, base: Sequence[float], cand: Sequence[float], unit: str
) -> MetricVerdict:
    """Per-block figures of interleaved blocks (block k of each side ran back to back): the ratio's
    geometric mean over the block pairs with a paired t-interval on the log ratios."""
    pairs = [(b, c) for b, c in zip(base, cand, strict=False) if b and c and b > 0 and c > 0]
    if len(pairs) < 2:
        return missing(rule, task, "pair of interleaved blocks")
    logs = [math.log(c / b) for b, c in pairs]
    n = len(logs)
    mean = statistics.fmean(logs)
    half = float(sps.t.ppf(0.5 + rule.confidence / 2, n - 1)) * statistics.stdev(logs) / math.sqrt(n)
    ratio, low, high = math.exp(mean), math.exp(mean - half), math.exp(mean + half)
    if spec.higher_is_better:
        good, good_interval = ratio - 1, (low - 1, high - 1)
    else:
        good, good_interval = 1 - ratio, (1 - high, 1 - low)
    status = classify(replace(rule, min_n=0), good, good_interval, good_interval[1] < 0)
    base_mean, cand_mean = statistics.fmean(b for b, _ in pairs), statistics.fmean(c for _, c in pairs)
    sentence = (
        f"{rule.label} went from {amount(base_mean, unit)} to {amount(cand_mean, unit)} "
        f"({signed((ratio - 1) * 100)}%, {rel_ci((low - 1, high - 1), rule.confidence)}) over {n} pairs of "
        f"interleaved blocks, {tail(rule, status, 'percent')}"
    )
    return finish(
        replace(rule, min_n=0),
        task,
        status=status,
        n=n,
        baseline=base_mean,
        candidate=cand_mean,
        effect=ratio,
        interval=(low, high),
        test=f"paired t-interval of the log ratio over {n} interleaved block pairs",
        sentence=sentence,
        good_effect=good,
        std_error=(high - low) / 4 if high > low else math.inf,
        details={"block_ratios": [c / b for b, c in pairs], "effect_is": "ratio cand/base"},
    )


def judge_point(rule: Rule, task: str, base: float | None, cand: float | None, unit: str, hib: bool) -> MetricVerdict:
    """A single measurement per run (engine counters, one throughput figure): no interval."""
    # One figure summarises a whole run, so the per-sample minimum count does not apply to it.
    rule = replace(rule, min_n=0)
    if base is None or cand is None:
        return missing(rule, task, "measurement")
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
    change = f" ({signed((ratio - 1) * 100)}%)" if ratio is not None else ""
    sentence = (
        f"{rule.label} went from {amount(base, unit)} to {amount(cand, unit)}{change} in a single measurement "
        f"per run, {tail(rule, status, 'percent')}"
    )
    return finish(
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
    """Per request: 1.0 when it succeeded and every SLO the task sets is met, else 0.0.

    A request the engine refused or failed is a miss, as in vLLM's goodput; a one-token answer
    has no TPOT and passes that bound. Evidence without per-request records falls back to the
    latency lists of successful requests (None if they cannot be aligned).
    """
    slos = task_policy.slos
    bounds = {"ttft_ms": slos.ttft_ms, "tpot_ms": slos.tpot_ms, "e2e_ms": slos.e2e_ms}
    limits = {key: float(limit) for key, limit in bounds.items() if limit is not None}
    if run.requests and limits:
        return [float(_meets(request, limits)) for request in run.requests]
    columns = [
        (sample_values(values), limit)
        for values, limit in ((run.ttft_ms, slos.ttft_ms), (run.tpot_ms, slos.tpot_ms), (run.e2e_ms, slos.e2e_ms))
        if limit is not None and len(values)
    ]
    if not columns or len({len(values) for values, _ in columns}) != 1:
        return None
    return [float(all(values[i] <= limit for values, limit in columns)) for i in range(len(columns[0][0]))]


def _meets(request: RequestTiming, limits: Mapping[str, float]) -> bool:
    if not request.ok:
        return False
    for key, limit in limits.items():
        value = getattr(request, key)
        if value is None:
            if key == "tpot_ms":
                continue
            return False
        if value > limit:
            return False
    return True


def judge_goodput(
    rule: Rule, task: str, ev: TaskEvidence, task_policy: TaskPolicy, seed: int, n_boot: int
) -> MetricVerdict:
    """Share of requests meeting every SLO of the task: unpaired bootstrap of the difference."""
    base, cand = _slo_attainment(ev.base, task_policy), _slo_attainment(ev.cand, task_policy)
    if not base or not cand:
        return missing(rule, task, "set of per-request latencies aligned across TTFT/TPOT/E2E")
    result = bootstrap_diff(base, cand, "mean", rule.confidence, n_boot, seed)
    status = classify(rule, result.effect, result.interval, result.interval[1] < 0)
    sentence = rate_sentence(
        rule,
        status,
        baseline=result.baseline,
        candidate=result.candidate,
        effect=result.effect,
        interval=result.interval,
        counts=f"over {result.n_base} vs {result.n_cand} requests",
    )
    return finish_bootstrap(rule, task, result, status, sentence, good_effect=result.effect)
