"""A ticket's canary as its page shows it: the analysis rounds as a timeline, and per task the two
slices (candidate for the canary tenants, baseline for the others) over the rounds.

Everything comes from the stored rounds (``CanaryRound``): what Prometheus answered then, not
what it would answer now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.utils.safestring import SafeString

from evaluators.charts import rounds_svg
from gates.models import CanaryRound, ReleaseTicket, RoundAction

GOOD_OUTCOME = "ok"


@dataclass(frozen=True)
class RoundRow:
    """One round in the timeline: when, what it found, what it did, and each task's status."""

    number: int
    window_end: datetime
    verdict: str
    action: str
    action_label: str
    reason: str
    task_status: dict[str, str]
    error: str


@dataclass(frozen=True)
class TaskCharts:
    task: str
    bad_outcomes: SafeString
    ttft_p95: SafeString


@dataclass(frozen=True)
class CanaryTimeline:
    rounds: list[RoundRow]
    charts: list[TaskCharts] = field(default_factory=list)
    # Candidate requests per task since the canary started, as the latest round counted them.
    traffic: dict[str, int] = field(default_factory=dict)
    # The round that paused the canary for people (None when it runs on), and the last resume.
    paused: RoundRow | None = None
    resumed_at: datetime | None = None


def canary_rounds_since_resume(ticket: ReleaseTicket) -> QuerySet[CanaryRound]:
    """The rounds of the ticket's current canary period since a reviewer last resumed it, oldest first.

    A resume settles what came before it: the rounds' pauses, failures and inconclusive streaks.
    """
    rounds = CanaryRound.objects.filter(ticket=ticket)
    since = [at for at in (ticket.canary_started_at, ticket.canary_resumed_at) if at is not None]
    if since:
        rounds = rounds.filter(started_at__gte=max(since))
    return rounds.order_by("number")


def canary_pause(ticket: ReleaseTicket) -> CanaryRound | None:
    """The round that paused the ticket's canary for people, unless a reviewer has resumed it since."""
    return canary_rounds_since_resume(ticket).filter(action=RoundAction.PAUSE).first()


def _bad_share(numbers: dict[str, Any] | None) -> float | None:
    """Percent of a slice's requests with any outcome other than ``ok``; None when it served none."""
    if not numbers or not numbers.get("requests"):
        return None
    outcomes = numbers.get("outcomes") or {}
    bad = sum(count for outcome, count in outcomes.items() if outcome != GOOD_OUTCOME)
    return 100.0 * bad / numbers["requests"]


def _ttft_p95(numbers: dict[str, Any] | None) -> float | None:
    value = ((numbers or {}).get("latency_ms") or {}).get("ttft_p95")
    return float(value) if isinstance(value, int | float) else None


def _slices_chart(
    task: str,
    sides: list[dict[str, Any]],
    numbers: list[int],
    read: Callable[[dict[str, Any] | None], float | None],
    *,
    title: str,
    unit: str,
    chart_id: str,
) -> SafeString:
    """One chart over the rounds: the baseline slice against the candidate slice, as ``read`` reads them."""
    return rounds_svg(
        {
            "baseline (other tenants)": [read(side.get("baseline")) for side in sides],
            "candidate (canary tenants)": [read(side.get("candidate")) for side in sides],
        },
        numbers,
        title=f"{task}: {title}",
        unit=unit,
        chart_id=chart_id,
    )


def canary_timeline(ticket: ReleaseTicket) -> CanaryTimeline | None:
    """The rounds of the ticket's canary, oldest first; None when it never went into canary."""
    if ticket.canary_started_at is None:
        return None
    rounds = list(CanaryRound.objects.filter(ticket=ticket).order_by("number"))
    rows = [
        RoundRow(
            number=r.number,
            window_end=r.window_end,
            verdict=r.verdict,
            action=r.action,
            action_label=r.get_action_display(),
            reason=r.reason,
            task_status={task: result.get("status", "") for task, result in sorted(r.tasks.items())},
            error=r.error,
        )
        for r in rounds
    ]
    numbers = [r.number for r in rounds]
    charts = []
    for task in sorted({task for r in rounds for task in r.tasks}):
        sides = [(r.tasks.get(task) or {}) for r in rounds]
        slug = f"canary-{ticket.pk}-{task}"
        charts.append(
            TaskCharts(
                task=task,
                bad_outcomes=_slices_chart(
                    task,
                    sides,
                    numbers,
                    _bad_share,
                    title="requests with a bad outcome",
                    unit="%",
                    chart_id=f"{slug}-bad",
                ),
                ttft_p95=_slices_chart(
                    task, sides, numbers, _ttft_p95, title="TTFT P95", unit="ms", chart_id=f"{slug}-ttft"
                ),
            )
        )
    traffic = dict(rounds[-1].traffic) if rounds else {}
    # The pause from the rounds already read (the same rule as ``canary_pause``, without a query).
    since = max(at for at in (ticket.canary_started_at, ticket.canary_resumed_at) if at is not None)
    pause = next((n for n, r in enumerate(rounds) if r.action == RoundAction.PAUSE and r.started_at >= since), None)
    return CanaryTimeline(
        rounds=rows,
        charts=charts,
        traffic=traffic,
        paused=rows[pause] if pause is not None else None,
        resumed_at=ticket.canary_resumed_at,
    )
