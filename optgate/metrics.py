"""Prometheus metrics about OptGate itself, served at ``/metrics``.

Everything is read from the database at scrape time (the database is the record of work), so
every web process reports the same numbers and nothing is lost on restart: tickets by state,
evaluation runs by status, the evaluation queue depth (queued runs, and the age of the oldest),
evaluation durations as a histogram, decisions by outcome, notifications waiting, and the
business-signal counts systems without Prometheus posted (``optgate_outcome_total``).

``prometheus_client`` renders the exposition (a custom collector on a private registry).
When ``settings.OPTGATE_METRICS_TOKEN`` is set, scrapes must send ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from evaluators.models import FINISHED_STATUSES, EvaluationRun, RunStatus
from gates.canary.contract import OUTCOME_METRIC
from gates.models import DecisionOutcome, GateDecision, Notification, OutcomeCount, ReleaseTicket, TicketStatus

# Evaluations take minutes to hours: buckets from 30 s to 4 h.
DURATION_BUCKETS = (30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0)


@dataclass
class Family:
    """One metric family: ``samples`` are (suffix, labels, value); histograms carry buckets."""

    name: str
    kind: str  # gauge | counter | histogram
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)
    buckets: list[tuple[str, float]] = field(default_factory=list)  # histogram: (le, cumulative count)
    sum_value: float = 0.0


def _by_label(rows: dict[str, int], label: str, known: list[str]) -> list[tuple[dict[str, str], float]]:
    # Every known value is reported, zeros included, so a state that empties drops to 0 instead of vanishing.
    return [({label: value}, float(rows.get(value, 0))) for value in known]


def collect_families() -> list[Family]:
    """Read the current numbers from the database (a handful of aggregate queries)."""
    tickets = dict(ReleaseTicket.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    runs = dict(EvaluationRun.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    decisions = dict(
        GateDecision.objects.filter(dry_run=False)
        .values_list("outcome")
        .annotate(n=Count("id"))
        .values_list("outcome", "n")
    )
    oldest: Any = EvaluationRun.objects.filter(status=RunStatus.QUEUED).aggregate(oldest=Min("created_at"))["oldest"]
    families = [
        Family(
            "optgate_tickets",
            "gauge",
            "Release tickets by state.",
            _by_label(tickets, "state", [s.value for s in TicketStatus]),
        ),
        Family(
            "optgate_evaluation_runs",
            "gauge",
            "Evaluation runs by status.",
            _by_label(runs, "status", [s.value for s in RunStatus]),
        ),
        Family(
            "optgate_evaluation_queue_depth",
            "gauge",
            "Evaluation runs queued and not yet started.",
            [({}, float(runs.get(RunStatus.QUEUED, 0)))],
        ),
        Family(
            "optgate_evaluation_queue_oldest_age_seconds",
            "gauge",
            "Age of the oldest queued evaluation run (0 when none waits).",
            [({}, (timezone.now() - oldest).total_seconds() if oldest else 0.0)],
        ),
        Family(
            "optgate_evaluations_running",
            "gauge",
            "Evaluation runs executing now.",
            [({}, float(runs.get(RunStatus.RUNNING, 0)))],
        ),
        Family(
            "optgate_gate_decisions",
            "counter",
            "Binding gate decisions stored, by outcome.",
            [({"outcome": o}, float(decisions.get(o, 0))) for o in DecisionOutcome.values],
        ),
    ]
    families.append(_duration_histogram())
    families.append(_notifications_pending())
    families.append(_posted_outcomes())
    return families


def _posted_outcomes() -> Family:
    """Business-signal counts posted through the API, under the contract's own name (docs/canary.md)."""
    rows = OutcomeCount.objects.order_by("task", "backend", "tenant", "outcome").values_list(
        "task", "backend", "tenant", "outcome", "total"
    )
    return Family(
        OUTCOME_METRIC,
        "counter",
        "Answered requests by outcome, as posted to /api/v1/canary/outcomes/.",
        [
            ({"task": task, "backend": backend, "tenant": tenant, "outcome": outcome}, float(total))
            for task, backend, tenant, outcome, total in rows.iterator()
        ],
    )


def _duration_histogram() -> Family:
    durations = EvaluationRun.objects.filter(
        status__in=FINISHED_STATUSES, started_at__isnull=False, finished_at__isnull=False
    ).values_list("started_at", "finished_at")
    seconds = [max(0.0, (end - start).total_seconds()) for start, end in durations.iterator() if start and end]
    family = Family(
        "optgate_evaluation_duration_seconds",
        "histogram",
        "Wall time of finished evaluation runs, from start to finish.",
    )
    for bound in DURATION_BUCKETS:
        family.buckets.append((_format(bound), float(sum(1 for s in seconds if s <= bound))))
    family.buckets.append(("+Inf", float(len(seconds))))
    family.sum_value = float(sum(seconds))
    return family


def _notifications_pending() -> Family:
    pending = Notification.objects.filter(given_up_at=None, email_sent_at=None, webhook_sent_at=None).count()
    return Family(
        "optgate_notifications_pending",
        "gauge",
        "Notifications not yet delivered nor given up.",
        [({}, float(pending))],
    )


def _format(value: float) -> str:
    return str(int(value)) + ".0" if float(value).is_integer() else repr(value)


class OptGateCollector:
    """A prometheus_client collector that reads the database on every scrape."""

    def collect(self) -> Iterator[object]:
        for family in collect_families():
            if family.kind == "histogram":
                yield HistogramMetricFamily(
                    family.name, family.help, buckets=family.buckets, sum_value=family.sum_value
                )
                continue
            label_names = sorted({key for labels, _ in family.samples for key in labels})
            metric_cls = CounterMetricFamily if family.kind == "counter" else GaugeMetricFamily
            metric = metric_cls(family.name, family.help, labels=label_names)
            for labels, value in family.samples:
                metric.add_metric([labels[key] for key in label_names], value)
            yield metric


def render() -> tuple[str, str]:
    """The exposition and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OptGateCollector())  # type: ignore[arg-type]
    return generate_latest(registry).decode(), CONTENT_TYPE_LATEST


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """``/metrics`` for Prometheus; a bearer token is required when one is configured."""
    token = settings.OPTGATE_METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(sent.encode(), token.encode()):
            return HttpResponse("unauthorized\n", status=401, content_type="text/plain")
    body, content_type = render()
    return HttpResponse(body, content_type=content_type)
