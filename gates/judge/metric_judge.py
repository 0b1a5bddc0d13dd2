"""``judge_metric``: judge one metric of one task with the test its family calls for."""

from __future__ import annotations

from collections.abc import Sequence

from gates.judge import stats
from gates.judge.pairing import scalar
from gates.judge.performance import judge_blocks, judge_goodput, judge_point, judge_ratio
from gates.judge.quality import judge_pass_fail, judge_score
from gates.judge.records import MetricVerdict, RunTaskEvidence, TaskEvidence
from gates.judge.rules import Rule, metric_seed
from gates.policy.metrics import MetricSpec, metric_spec
from gates.policy.rules import TaskPolicy


def has_evidence(spec: MetricSpec, ev: TaskEvidence) -> bool:
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
    rule: Rule, ev: TaskEvidence, task_policy: TaskPolicy, *, seed: int = 0, n_boot: int = stats.DEFAULT_N_BOOT
) -> MetricVerdict:
    """Judge one metric of one task with the test its family calls for."""
    spec = metric_spec(rule.metric)
    seed = metric_seed(seed, ev.task, rule.metric, rule.source)
    if spec.family == "pass_fail":
        return judge_pass_fail(rule, spec, ev.task, ev)
    if spec.family == "score":
        return judge_score(rule, ev.task, ev, seed, n_boot)
    if spec.family == "latency":
        base, cand = getattr(ev.base, spec.field), getattr(ev.cand, spec.field)
        return judge_ratio(rule, spec, ev.task, base, cand, seed, n_boot, "ms", ev.base.chunks)
    if spec.family == "throughput":
        base_tp, cand_tp = ev.base.output_throughput, ev.cand.output_throughput
        if ev.base.blocks and ev.cand.blocks and isinstance(base_tp, Sequence) and isinstance(cand_tp, Sequence):
            return judge_blocks(rule, spec, ev.task, base_tp, cand_tp, " tok/s")
        if isinstance(base_tp, Sequence) and isinstance(cand_tp, Sequence) and len(base_tp) > 1 and len(cand_tp) > 1:
            return judge_ratio(rule, spec, ev.task, base_tp, cand_tp, seed, n_boot, " tok/s")
        return judge_point(rule, ev.task, scalar(base_tp), scalar(cand_tp), " tok/s", hib=True)
    if spec.family == "goodput":
        return judge_goodput(rule, ev.task, ev, task_policy, seed, n_boot)
    unit = "%" if spec.field.endswith(("_rate", "_usage")) else " ms" if spec.field.endswith("_ms") else ""
    per_block = _block_pairs(ev, spec.field)
    if per_block is not None:
        return judge_blocks(rule, spec, ev.task, *per_block, unit)
    return judge_point(
        rule, ev.task, ev.base.engine.get(spec.field), ev.cand.engine.get(spec.field), unit, spec.higher_is_better
    )


# Engine figures of the configuration (the same in every block): one point per side says it all.
CONFIGURATION_FIGURES = ("kv_capacity_tokens", "max_concurrency")


def _block_pairs(ev: TaskEvidence, key: str) -> tuple[list[float], list[float]] | None:
    """Both sides' per-block values of an engine figure, paired by chunk, when at least two pairs
    are positive on both sides (a ratio needs them); otherwise None and the judge compares the
    sides' single figures (a counter at 0, a configuration figure)."""
    if key in CONFIGURATION_FIGURES:
        return None
    base, cand = ev.base.engine_blocks.get(key), ev.cand.engine_blocks.get(key)
    if not base or not cand or len(base) != len(cand):
        return None
    pairs = [(float(b), float(c)) for b, c in zip(base, cand, strict=True) if b and c and b > 0 and c > 0]
    if len(pairs) < 2:
        return None
    return [b for b, _ in pairs], [c for _, c in pairs]
