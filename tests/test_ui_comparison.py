"""The ticket page's comparison view: per task, baseline vs candidate, each verdict row followed by
the evidence it rests on (the latency charts after the latency verdicts, a lost sample's outputs as
a word diff after the failed per-sample verdict)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from evaluators.models import SampleRecord
from tests.factories import store_run, task_spec
from tests.ui_helpers import client_for, evaluated_ticket

pytestmark = pytest.mark.django_db

CHART_FOR = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}


def task_rows(html: str, task: str) -> list[str]:
    """The table rows of one task's comparison, in page order."""
    article = re.search(rf'<article class="comparison" data-task="{task}">(.*?)</article>', html, re.S)
    assert article, f"no comparison of {task}"
    return re.findall(r"<tr\b.*?</tr>", article.group(1).split("<tbody>", 1)[1], re.S)


def test_each_latency_verdict_is_followed_by_the_chart_it_rests_on(
    erin: Any, rita: Any, baseline: Any, candidate: Any
) -> None:
    ticket, decision = evaluated_ticket("approve", erin, baseline, candidate)
    html = client_for(rita).get(f"/tickets/{ticket.pk}/").content.decode()
    for task, verdict in decision.verdicts.items():
        rows = task_rows(html, task)
        metrics = [re.search(r'data-metric="([^"]+)"', row) for row in rows]
        judged = [m.group(1) for m in metrics if m]
        assert sorted(judged) == sorted(m["metric"] for m in verdict["metrics"])
        charted = [name for name in judged if re.fullmatch(r"(ttft|tpot|e2e)_p\d+", name)]
        assert {"ttft_p95", "e2e_p95"} <= set(charted), judged
        for name in charted:
            at = next(i for i, m in enumerate(metrics) if m and m.group(1) == name)
            # The rows sharing the chart come together, then the chart: nothing else between.
            after = rows[at + 1 :]
            evidence_at = next(i for i, row in enumerate(after) if "evidence-row" in row)
            between = [m.group(1) for m in metrics[at + 1 : at + 1 + evidence_at] if m]
            key = CHART_FOR[name.split("_")[0]]
            assert all(CHART_FOR[other.split("_")[0]] == key for other in between), (name, between)
            chart = after[evidence_at]
            supports = re.search(r'data-supports="([^"]*)"', chart)
            assert supports is not None and name in supports.group(1).split()
            assert f'aria-labelledby="{task}-{key}-cdf-title' in chart and f"{task}-{key}-box-title" in chart
    # Every chart is shown once: two tasks × (TTFT, TPOT, E2E) × (CDF, box plot), none repeated elsewhere.
    assert html.count("<svg") == 12


def test_a_lost_sample_follows_the_failed_pass_rate_as_a_word_diff(
    erin: Any, rita: Any, baseline: Any, candidate: Any
) -> None:
    ticket, _ = evaluated_ticket("restrict", erin, baseline, candidate)
    lost = (
        SampleRecord.objects.filter(run=ticket.candidate_run, task="knowledge_qa", passed=False)
        .filter(sample_id__in=SampleRecord.objects.filter(run=ticket.baseline_run, passed=True).values("sample_id"))
        .order_by("sample_id")
        .first()
    )
    assert lost is not None
    SampleRecord.objects.filter(run=ticket.baseline_run, task="knowledge_qa", sample_id=lost.sample_id).update(
        output="Paris is the capital [doc-3]."
    )
    SampleRecord.objects.filter(pk=lost.pk).update(output="Lyon is the <b>capital</b>.", failure_reason="wrong_answer")
    html = client_for(rita).get(f"/tickets/{ticket.pk}/").content.decode()

    rows = task_rows(html, "knowledge_qa")
    at = next(i for i, row in enumerate(rows) if 'data-metric="pass_rate"' in row)
    # The per-sample verdicts (pass rate, graded score) come together, then the lost sample.
    assert 'data-metric="score"' in rows[at + 1]
    example = rows[at + 2]
    assert 'class="evidence-row" data-supports="pass_rate score"' in example
    assert f"<code>{lost.sample_id}</code>, wrong_answer" in example
    diff = "<del>Paris</del><ins>Lyon</ins> is the <del>capital [doc-3].</del><ins>&lt;b&gt;capital&lt;/b&gt;.</ins>"
    assert diff in example
    assert "?task=knowledge_qa&amp;show=regressions#samples" in example
    # The passing task has no lost sample to show.
    assert not any("A sample the candidate lost" in row for row in task_rows(html, "cs_summary"))


def test_tasks_measured_but_not_judged_yet_show_their_charts_alone(
    erin: Any, rita: Any, baseline: Any, candidate: Any
) -> None:
    from tests.factories import evaluating_ticket, outcomes, tasks

    good = outcomes(50, 0.9, 1)
    ticket = evaluating_ticket(
        erin,
        baseline,
        candidate,
        store_run(baseline, {"cs_summary": task_spec(good, seed=1)}),
        store_run(candidate, {"cs_summary": task_spec(good, speed=0.8, seed=1)}),
        beneficiary_tasks=tasks("cs_summary"),
        risk_tasks=[],
    )
    response = client_for(rita).get(f"/tickets/{ticket.pk}/")
    [row] = response.context["comparison"]
    assert row["items"] == [] and [lat.key for lat in row["other_charts"]] == ["ttft_s", "tpot_s", "e2e_s"]
    html = response.content.decode()
    assert "not judged yet" in html and html.count("<svg") == 6
