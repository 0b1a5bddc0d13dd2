"""The comparison view of the ticket page: per task, baseline vs candidate, each verdict row with the
evidence it rests on right after it.

A latency verdict (``ttft_p95``, ``e2e_p50``, …) is followed by that latency's CDF and box plot of
both runs, the rows that share a chart kept together; a failed or unsettled per-sample verdict
(``pass_rate``, ``score``) by the first sample the candidate lost, its two outputs as a word diff and
a link to the rest. Tasks the runs measured but no decision judged yet show their charts alone.
"""

from __future__ import annotations

import re
from typing import Any

from evaluators.models import SampleRecord
from gates.models import ReleaseTicket
from gates.selectors.evidence import first_regressions, sample_records
from gates.selectors.summary import FINDING_STATUSES
from gates.views.evidence import Evidence, LatencyPanel, SamplePair

# ttft_p95 → the TTFT chart; open-loop and stress verdicts ("open_loop:ttft_p95") come from other
# requests than the charted closed-loop load, so they have no chart.
_LATENCY_VERDICT = re.compile(r"^(ttft|tpot|e2e)_p\d+$")
# Verdicts computed from the paired per-sample outcomes: a lost sample shows what they count.
SAMPLE_METRICS = frozenset({"pass_rate", "score"})


def _evidence_key(metric: str) -> str:
    """Which evidence a verdict row rests on: ``chart:ttft_s``, ``sample`` or "" (its numbers alone)."""
    latency = _LATENCY_VERDICT.match(metric)
    if latency:
        return f"chart:{latency.group(1)}_s"
    return "sample" if metric in SAMPLE_METRICS else ""


def regression_examples(ticket: ReleaseTicket, rows: list[dict[str, Any]]) -> dict[str, SamplePair]:
    """Per task whose per-sample verdict failed (or is unsettled): its first lost sample, both sides."""
    tasks = [
        row["task"]
        for row in rows
        if row["status"] in FINDING_STATUSES
        and any(m.get("metric") in SAMPLE_METRICS and m.get("status") == row["status"] for m in row["metrics"])
    ]
    base, cand = ticket.baseline_run_id, ticket.candidate_run_id
    if not tasks or base is None or cand is None:
        return {}
    keys = first_regressions(baseline_run=base, candidate_run=cand, tasks=tasks)
    if not keys:
        return {}
    records: dict[tuple[str, str, int], SampleRecord] = sample_records([base, cand], keys)
    return {
        task: SamplePair(task, sample_id, records.get((task, sample_id, base)), records.get((task, sample_id, cand)))
        for task, sample_id in keys
    }


def comparison_tasks(
    rows: list[dict[str, Any]], evidence: Evidence, examples: dict[str, SamplePair]
) -> list[dict[str, Any]]:
    """Per task: its verdict rows as ``items``, each piece of evidence right after the rows it supports.

    An item is ``{"kind": "metric", "metric": row}``, ``{"kind": "chart", "panel": LatencyPanel,
    "supports": [metric, …]}`` or ``{"kind": "sample", "pair": SamplePair, "supports": [metric, …]}``.
    ``rows`` are ``verdict_rows`` of the decision (empty before one). ``other_charts`` are the task's
    charts no verdict rests on, shown after its table; a task the runs measured but no verdict judged
    (yet) comes last with all its charts there and no items.
    """
    panels = {panel.task: panel for panel in evidence.panels}
    tasks = []
    for row in rows:
        charts: dict[str, LatencyPanel] = {
            f"chart:{lat.key}": lat for lat in (panels[row["task"]].latency if row["task"] in panels else [])
        }
        groups: dict[str, list[dict[str, Any]]] = {}
        order: list[str] = []
        for i, metric in enumerate(row["metrics"]):
            key = _evidence_key(str(metric.get("metric", "")))
            # Rows without evidence of their own stay where they were; rows sharing a chart (or the
            # sample) move up to the first of them, so the evidence follows all of them at once.
            group = key if key and (key in charts or key == "sample") else f"alone:{i}"
            if group not in groups:
                groups[group] = []
                order.append(group)
            groups[group].append(metric)
        items: list[dict[str, Any]] = []
        for group in order:
            metrics = groups[group]
            items += [{"kind": "metric", "metric": m} for m in metrics]
            supports = [str(m.get("metric", "")) for m in metrics]
            if group in charts:
                items.append({"kind": "chart", "panel": charts[group], "supports": supports})
            elif group == "sample" and row["task"] in examples:
                items.append({"kind": "sample", "pair": examples[row["task"]], "supports": supports})
        others = [panel for key, panel in charts.items() if key not in groups]
        tasks.append({**row, "items": items, "other_charts": others, "panel": panels.get(row["task"])})
    judged = {row["task"] for row in rows}
    return tasks + [
        {"task": p.task, "role": p.role, "status": "", "items": [], "other_charts": p.latency, "panel": p}
        for p in evidence.panels
        if p.task not in judged
    ]
