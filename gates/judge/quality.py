"""Judges of quality metrics: paired pass/fail outcomes and graded scores, sample by sample."""

from __future__ import annotations

from gates.judge import stats
from gates.judge.pairing import pair_samples
from gates.judge.records import MetricVerdict, TaskEvidence
from gates.judge.resampling import paired_bootstrap_mean_diff
from gates.judge.rules import Rule, classify, finish, finish_bootstrap, missing, rate_sentence, tail
from gates.judge.wording import moved, signed
from gates.policy.metrics import MetricSpec


def judge_pass_fail(rule: Rule, spec: MetricSpec, task: str, ev: TaskEvidence) -> MetricVerdict:
    """Paired pass/fail outcomes: exact McNemar test with a Tango interval, in points."""
    if spec.field == "passed":
        base_raw, cand_raw = ev.base.passed, ev.cand.passed
    else:
        base_raw, cand_raw = ev.base.checks.get(spec.field, ()), ev.cand.checks.get(spec.field, ())
    pairing = pair_samples(base_raw, cand_raw)
    if not pairing.base:
        return missing(rule, task, "paired per-sample result")
    # Judge on the "good" outcome so one test serves metrics where True is bad (truncation).
    base_ok = [bool(v) == spec.higher_is_better for v in pairing.base]
    cand_ok = [bool(v) == spec.higher_is_better for v in pairing.cand]
    margin = rule.margin if rule.check == "noninferiority" else 0.0
    result = stats.mcnemar_noninferiority(base_ok, cand_ok, margin, rule.confidence)
    significant = result.p_value < 1 - rule.confidence and result.losses > result.gains
    status = classify(rule, result.effect, result.interval, significant)
    sign = 1 if spec.higher_is_better else -1
    base_rate = result.base_rate if sign > 0 else 1 - result.base_rate
    cand_rate = result.cand_rate if sign > 0 else 1 - result.cand_rate
    effect = sign * result.effect
    low, high = sorted((sign * result.interval[0], sign * result.interval[1]))
    sentence = rate_sentence(
        rule,
        status,
        baseline=base_rate,
        candidate=cand_rate,
        effect=effect,
        interval=(low, high),
        counts=f"on {result.n} paired samples ({result.losses} lost, {result.gains} gained)",
    )
    return finish(
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
        details={"losses": result.losses, "gains": result.gains, **pairing.unmatched_counts()},
    )


def judge_score(rule: Rule, task: str, ev: TaskEvidence, seed: int, n_boot: int) -> MetricVerdict:
    """Graded per-sample scores: paired bootstrap of the mean difference."""
    pairing = pair_samples(ev.base.scores, ev.cand.scores)
    if not pairing.base:
        return missing(rule, task, "paired per-sample score")
    result = paired_bootstrap_mean_diff(pairing.base, pairing.cand, rule.confidence, n_boot, seed)
    significant = result.interval[1] < 0
    status = classify(rule, result.effect, result.interval, significant)
    sentence = (
        f"{rule.label} {moved(result.effect)} from {result.baseline:.3f} to {result.candidate:.3f} "
        f"({signed(result.effect, 3)}, {rule.confidence:.0%} CI {signed(result.interval[0], 3)} to "
        f"{signed(result.interval[1], 3)}) on {result.n_base} paired samples, {tail(rule, status, 'unit')}"
    )
    return finish_bootstrap(
        rule, task, result, status, sentence, good_effect=result.effect, details=pairing.unmatched_counts()
    )
