"""The gate's judge: paired statistics, per-task verdicts and the decision (pure Python, no DB)."""

from __future__ import annotations

from gates.judge.decision import Decision, decide, evaluate
from gates.judge.resampling import bootstrap_diff, bootstrap_ratio, mann_whitney, paired_bootstrap_mean_diff
from gates.judge.stats import (
    BootstrapResult,
    MannWhitneyResult,
    PairedProportionResult,
    mcnemar_noninferiority,
    samples_needed,
)
from gates.judge.verdicts import MetricVerdict, RunTaskEvidence, TaskEvidence, TaskVerdict, judge_task

__all__ = [
    "BootstrapResult",
    "Decision",
    "MannWhitneyResult",
    "MetricVerdict",
    "PairedProportionResult",
    "RunTaskEvidence",
    "TaskEvidence",
    "TaskVerdict",
    "bootstrap_diff",
    "bootstrap_ratio",
    "decide",
    "evaluate",
    "judge_task",
    "mann_whitney",
    "mcnemar_noninferiority",
    "paired_bootstrap_mean_diff",
    "samples_needed",
]
