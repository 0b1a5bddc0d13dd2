"""``/metrics``: Prometheus metrics about OptGate itself, read from the database at scrape time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from backends.models import Backend
from evaluators.models import EvaluationRun, RunStatus
from gates.models import ReleaseTicket
from optgate import metrics

pytestmark = pytest.mark.django_db

# prometheus_client arrives with vLLM (it is not yet a declared dependency): its parser checks the output.
text_string_to_metric_families = pytest.importorskip("prometheus_client.parser").text_string_to_metric_families


def scrape(client: Client | None = None, **headers: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Sample name → labels → value, parsed with prometheus_client's own parser."""
    response = (client or Client()).get("/metrics", headers=headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def run_of(backend: Backend, status: str, *, took_s: float | None = None, queued_for_s: float = 0) -> EvaluationRun:
    now = timezone.now()
    run = EvaluationRun.objects.create(
        backend=backend,
        tasks=["cs_summary"],
        engine_version="0.32.0",
        hardware_class="cpu",
        reuse_key=f"{status}-{took_s}",
        status=status,
    )
    changes: dict[str, Any] = {"created_at": now - timedelta(seconds=queued_for_s)}
    if took_s is not None:
        changes.update(started_at=now - timedelta(seconds=took_s), finished_at=now)
    EvaluationRun.objects.filter(pk=run.pk).update(**changes)
    return run


def test_it_counts_tickets_by_state_including_empty_states(draft: ReleaseTicket) -> None:
    tickets = scrape()["optgate_tickets"]
    assert tickets[(("state", "draft"),)] == 1
    assert tickets[(("state", "approved"),)] == 0
    assert len(tickets) == 12  # every state of the lifecycle, so a state that empties reads 0


def test_it_reports_queue_depth_and_the_oldest_waiting_run(baseline: Backend) -> None:
    run_of(baseline, RunStatus.QUEUED, queued_for_s=120)
    run_of(baseline, RunStatus.QUEUED, queued_for_s=5)
    run_of(baseline, RunStatus.RUNNING)
    samples = scrape()
    assert samples["optgate_evaluation_queue_depth"][()] == 2
    assert samples["optgate_evaluations_running"][()] == 1
    assert 115 <= samples["optgate_evaluation_queue_oldest_age_seconds"][()] <= 600
    assert samples["optgate_evaluation_runs"][(("status", "queued"),)] == 2


def test_it_exposes_evaluation_durations_as_a_histogram(baseline: Backend) -> None:
    run_of(baseline, RunStatus.SUCCEEDED, took_s=45)
    run_of(baseline, RunStatus.SUCCEEDED, took_s=400)
    run_of(baseline, RunStatus.ERROR, took_s=5000)
    run_of(baseline, RunStatus.RUNNING, took_s=None)  # unfinished: not a duration yet
    samples = scrape()
    buckets = {
        dict(labels)["le"]: value for labels, value in samples["optgate_evaluation_duration_seconds_bucket"].items()
    }
    assert (buckets["30.0"], buckets["60.0"], buckets["600.0"], buckets["3600.0"], buckets["+Inf"]) == (0, 1, 2, 2, 3)
    assert samples["optgate_evaluation_duration_seconds_count"][()] == 3
    assert samples["optgate_evaluation_duration_seconds_sum"][()] == pytest.approx(5445, abs=2)


def test_a_configured_token_is_required(settings: Any) -> None:
    settings.OPTGATE_METRICS_TOKEN = "scrape-me"
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert "optgate_tickets" in scrape(Authorization="Bearer scrape-me")


def test_a_scrape_costs_a_fixed_number_of_queries(django_assert_max_num_queries: Any, baseline: Backend) -> None:
    for status in (RunStatus.SUCCEEDED, RunStatus.QUEUED, RunStatus.ERROR):
        run_of(baseline, status, took_s=10)
    with django_assert_max_num_queries(8):
        metrics.render()
