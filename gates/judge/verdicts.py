"""Per-task, per-metric verdicts: baseline and candidate evidence in, plain-English verdicts out.

Inputs are plain dataclasses (the lead wires them from ``EvaluationRun`` rows). Quality samples
may be lists aligned by position or dicts keyed by sample id; dicts are paired on the intersection
of ids and the unmatched ids are reported. A run error yields status ``error``, never ``fail``.

The work lives in modules by concern; this module keeps the names callers import:

* ``records`` — the evidence and verdict dataclasses;
* ``pairing`` — lining up per-sample values of the two runs;
* ``rules`` and ``wording`` — what a verdict checks, and how its sentence reads;
* ``quality`` and ``performance`` — the judges of each metric family, ``metric_judge`` picks one;
* ``mechanisms`` — speculative-decoding, prefix-cache and targeted-bottleneck rules;
* ``validity`` — whether the two runs' client-side timings can be compared at all;
* ``task`` — ``judge_task``.
"""

from __future__ import annotations

from gates.judge.metric_judge import judge_metric
from gates.judge.pairing import Pairing, pair_samples
from gates.judge.records import (
    Kind,
    MetricVerdict,
    Role,
    RunTaskEvidence,
    Samples,
    Status,
    TaskEvidence,
    TaskVerdict,
)
from gates.judge.rules import Rule
from gates.judge.task import judge_task

__all__ = [
    "Kind",
    "MetricVerdict",
    "Pairing",
    "Role",
    "Rule",
    "RunTaskEvidence",
    "Samples",
    "Status",
    "TaskEvidence",
    "TaskVerdict",
    "judge_metric",
    "judge_task",
    "pair_samples",
]
