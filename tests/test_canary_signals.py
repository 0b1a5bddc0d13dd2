"""The business-signal contract: the exporter, the API for systems without Prometheus, /metrics,
the judge of live counts, the canary section of the policy, and what rollout tools see of rounds.

The rounds themselves run against a real Prometheus in tests/test_canary_rounds.py.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from unittest import mock

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient
from scipy import stats as scipy_stats

from core import queue
from evaluators.engine_metrics import MetricsSnapshot, histogram_quantile
from gates.canary.contract import BUCKET_GROWTH, DURATION_BUCKETS, DURATION_METRIC, OutcomeExporter
from gates.canary.judge import judge_latency_quantile
from gates.canary.queries import Prometheus, Slice
from gates.canary.queries import slice_numbers as slice_numbers_of
from gates.judge.counts import judge_bad_rate
from gates.judge.rules import Rule
from gates.judge.stats import quantile_bounds
from gates.models import CanaryRound, OutcomeCount, ReleaseTicket
from gates.policy.parse import load_policy
from gates.selectors.verdicts import backend_verdict
from gates.services import canary, routing, signoff
from tests.factories import canary_round, decided
from tests.prometheus_server import free_port
from workers import tasks
from workers.schedules import SCHEDULES, Every

pytestmark = pytest.mark.django_db

RATE = Rule(metric="error_rate", kind="guardrail", label="error rate", margin=0.01, critical=True, min_n=50)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def labels(**values: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(values.items()))


# --- the exporter ------------------------------------------------------------------------------


def test_the_exporter_speaks_the_documented_contract() -> None:
    exporter = OutcomeExporter()
    exporter.prepare(tasks=["tool_calling"], backends=["cand"], tenants=["acme"])
    exporter.record(task="tool_calling", backend="cand", tenant="acme", outcome="tool_arg_error", count=3, e2e_s=0.4)
    exporter.record(task="tool_calling", backend="cand", tenant="acme", outcome="ok", ttft_s=0.05, e2e_s=0.3)
    scraped = samples(generate_latest(exporter.registry).decode())
    base = {"task": "tool_calling", "backend": "cand", "tenant": "acme"}
    assert scraped[("optgate_outcome_total", labels(**base, outcome="tool_arg_error"))] == 3
    assert scraped[("optgate_outcome_total", labels(**base, outcome="ok"))] == 1
    assert scraped[("optgate_outcome_total", labels(**base, outcome="refusal"))] == 0  # prepared at zero
    assert scraped[("optgate_request_duration_seconds_count", labels(**base, phase="e2e"))] == 4
    assert scraped[("optgate_request_duration_seconds_count", labels(**base, phase="ttft"))] == 1


@pytest.mark.parametrize(
    ("median_s", "spread", "n"), [(0.03, 0.3, 90), (0.08, 0.5, 90), (0.4, 0.8, 200), (3.0, 1.0, 500)]
)
def test_a_latency_quantile_read_from_the_exporter_histogram_is_within_a_fifth_of_the_exact_one(
    median_s: float, spread: float, n: int
) -> None:
    # What a canary round reads: Prometheus' histogram_quantile over the contract's buckets (the
    # engine-metrics helper interpolates the same way). Inside one bucket, so off by less than a
    # bucket's width; with buckets a factor 2.5 apart, a few requests crossing 100 ms moved a P95 by half.
    latencies = np.random.default_rng(n).lognormal(np.log(median_s), spread, size=n)
    exporter = OutcomeExporter()
    for seconds in latencies:
        exporter.record(task="knowledge_qa", backend="cand", tenant="acme", outcome="ok", ttft_s=float(seconds))
    scraped = MetricsSnapshot.from_text(generate_latest(exporter.registry).decode())
    for q in (0.5, 0.9, 0.95, 0.99):
        read = histogram_quantile(MetricsSnapshot.from_text(""), scraped, DURATION_METRIC, q)
        exact = float(np.sort(latencies)[math.ceil(q * n) - 1])  # the order statistic at Prometheus' rank
        assert read is not None
        assert 1 / BUCKET_GROWTH - 0.01 <= read / exact <= BUCKET_GROWTH + 0.01, (q, read, exact)


def test_the_exporter_buckets_cover_interactive_latencies_evenly() -> None:
    assert DURATION_BUCKETS[0] <= 0.005 and DURATION_BUCKETS[-1] >= 120
    growth = [upper / lower for lower, upper in itertools.pairwise(DURATION_BUCKETS)]
    assert all(1.15 < step <= BUCKET_GROWTH + 0.01 for step in growth), growth


def test_the_exporter_refuses_an_outcome_outside_the_contract() -> None:
    exporter = OutcomeExporter()
    with pytest.raises(ValueError, match="outcome must be one of ok, error, parse_error"):
        exporter.record(task="t", backend="b", tenant="x", outcome="timeout")
    with pytest.raises(ValueError, match="count must be at least 1"):
        exporter.record(task="t", backend="b", tenant="x", outcome="ok", count=0)


# --- the API for systems without Prometheus ----------------------------------------------------


def post(client: APIClient, *counts: dict[str, Any], key: str | None = None) -> Any:
    extra: dict[str, Any] = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return client.post("/api/v1/canary/outcomes/", {"counts": list(counts)}, format="json", **extra)


def count(**overrides: Any) -> dict[str, Any]:
    return {"task": "tool_calling", "backend": "kit-bf16", "tenant": "acme", "outcome": "ok", "count": 5, **overrides}


def test_posted_counts_add_up_and_are_exported_at_metrics(
    api_for: Callable[[User | None], APIClient], erin: User, baseline: Any
) -> None:
    client = api_for(erin)
    first = post(client, count(), count(outcome="tool_arg_error", count=2), key="batch-1")
    assert first.status_code == 201, first.data
    assert post(client, count(), count(outcome="tool_arg_error", count=2), key="batch-1").status_code == 201  # replay
    assert post(client, count(count=7), key="batch-2").status_code == 201
    totals = {row.outcome: row.total for row in OutcomeCount.objects.all()}
    assert totals == {"ok": 12, "tool_arg_error": 2}  # the retried batch counted once
    listed = client.get("/api/v1/canary/outcomes/", {"task": "tool_calling"})
    assert [(row["outcome"], row["total"]) for row in listed.data] == [("ok", 12), ("tool_arg_error", 2)]
    scraped = samples(APIClient().get("/metrics").content.decode())
    base = {"task": "tool_calling", "backend": "kit-bf16", "tenant": "acme"}
    assert scraped[("optgate_outcome_total", labels(**base, outcome="ok"))] == 12
    assert scraped[("optgate_outcome_total", labels(**base, outcome="tool_arg_error"))] == 2


@pytest.mark.parametrize(
    ("item", "field", "words"),
    [
        (count(outcome="timeout"), "outcome", "is not a valid choice"),
        (count(count=0), "count", "greater than or equal to 1"),
        (count(tenant="a b"), "tenant", "letters, digits"),
        ({**count(), "region": "eu"}, "region", "unknown field"),
        ({k: v for k, v in count().items() if k != "backend"}, "backend", "required"),
    ],
)
def test_a_bad_count_is_refused_naming_its_field(
    api_for: Callable[[User | None], APIClient], erin: User, baseline: Any, item: dict[str, Any], field: str, words: str
) -> None:
    response = post(api_for(erin), count(), item)
    assert response.status_code == 400
    assert words in str(response.data["counts"][1][field])
    assert not OutcomeCount.objects.exists()  # all or nothing


def test_unknown_tasks_and_backends_are_named_by_position(
    api_for: Callable[[User | None], APIClient], erin: User, baseline: Any
) -> None:
    response = post(api_for(erin), count(), count(task="poetry", backend="gpt-x"))
    assert response.status_code == 400
    assert response.data == {
        "counts[1].task": ["unknown task type 'poetry'"],
        "counts[1].backend": ["unknown backend 'gpt-x'"],
    }


def test_only_engineers_and_admins_post_counts(
    api_for: Callable[[User | None], APIClient], rita: User, olga: User, baseline: Any
) -> None:
    assert post(api_for(rita), count()).status_code == 403
    assert post(api_for(olga), count()).status_code == 403
    assert post(api_for(None), count()).status_code in (401, 403)
    assert not OutcomeCount.objects.exists()


# --- the judge of live counts ------------------------------------------------------------------


def test_a_clear_rise_in_a_bad_rate_fails_and_says_so_with_the_counts() -> None:
    verdict = judge_bad_rate(RATE, "tool_calling", base_events=2, base_n=1000, cand_events=60, cand_n=1000)
    assert verdict.status == "fail" and verdict.critical
    assert verdict.reason.startswith("Error rate rose from 0.2% to 6.0% (+5.8 points")
    assert "60 of 1000 candidate requests, 2 of 1000 baseline requests" in verdict.reason
    assert verdict.interval is not None and verdict.interval[0] > 0.01


def test_no_errors_on_either_side_pass_only_with_enough_requests_to_show_it() -> None:
    assert judge_bad_rate(RATE, "t", base_events=0, base_n=1000, cand_events=0, cand_n=1000).status == "pass"
    # 0 of 100 cannot rule out a 1-point rise: inconclusive, with how many more would settle it.
    thin = judge_bad_rate(RATE, "t", base_events=0, base_n=100, cand_events=0, cand_n=100)
    assert thin.status == "inconclusive" and thin.samples_needed and thin.samples_needed > 0
    few = judge_bad_rate(RATE, "t", base_events=0, base_n=20, cand_events=0, cand_n=20)
    assert few.status == "inconclusive" and "fewer than the 50 the policy requires" in few.reason
    empty = judge_bad_rate(RATE, "t", base_events=0, base_n=0, cand_events=0, cand_n=500)
    assert empty.status == "inconclusive"


def histogram(latencies_s: Any) -> list[tuple[float, float]]:
    """Cumulative counts over the contract's buckets, in ms, as a round reads them from Prometheus."""
    sorted_ms = np.sort(np.asarray(latencies_s) * 1000)
    bounds = [bound * 1000 for bound in DURATION_BUCKETS] + [math.inf]
    return [(bound, float(np.searchsorted(sorted_ms, bound, side="right"))) for bound in bounds]


def test_quantile_bounds_take_the_order_statistics_ranks_from_the_binomial_and_widen_them_to_buckets() -> None:
    # 100 requests, one in each of 100 known buckets (bounds 1..100 ms): the 95th percentile's
    # ranks at 95 % are Binomial(100, 0.95)'s 2.5 % point and one past its 97.5 % point.
    counts = [(float(k), float(k)) for k in range(1, 101)] + [(math.inf, 100.0)]
    low_rank = int(scipy_stats.binom.ppf(0.025, 100, 0.95))
    high_rank = int(scipy_stats.binom.ppf(0.975, 100, 0.95)) + 1
    assert (low_rank, high_rank) == (90, 100)
    assert quantile_bounds(counts, 0.95, 0.95) == (89.0, 100.0)  # rank 90 lies in (89, 90], rank 100 in (99, 100]
    median = quantile_bounds(counts, 0.5, 0.95)
    assert median is not None and median[0] < 50 < median[1]
    assert quantile_bounds([(math.inf, 0.0)], 0.95, 0.95) is None
    # Too few requests for an upper rank: the interval is open above.
    assert quantile_bounds([(10.0, 5.0), (math.inf, 5.0)], 0.95, 0.95) == (0.0, math.inf)


def test_quantile_bounds_cover_the_true_quantile_at_least_as_often_as_asked() -> None:
    rng = np.random.default_rng(7)
    true_p95 = math.exp(math.log(0.1) + 0.5 * scipy_stats.norm.ppf(0.95)) * 1000
    covered = 0
    for _ in range(400):
        low, high = quantile_bounds(histogram(rng.lognormal(math.log(0.1), 0.5, size=90)), 0.95, 0.95) or (0, 0)
        covered += low <= true_p95 <= high
    assert covered / 400 >= 0.93, covered


def test_a_round_asks_for_each_phases_buckets_once_whatever_quantiles_it_reads() -> None:
    asked: list[str] = []

    class Recorder(Prometheus):
        def query(self, promql: str, *, at: Any, purpose: str) -> list[dict[str, Any]]:
            asked.append(promql)
            return []

    quantiles = [("e2e_p50", "e2e", 0.5), ("e2e_p95", "e2e", 0.95), ("ttft_p95", "ttft", 0.95)]
    numbers = slice_numbers_of(
        Recorder("http://prometheus.invalid"),
        Slice("knowledge_qa", "cand", ("acme",)),
        at=timezone.now(),
        window_s=60,
        quantiles=quantiles,
    )
    assert sum("histogram_quantile" in promql for promql in asked) == 3
    bucket_queries = [promql for promql in asked if promql.startswith("sum by (le) (increase(")]
    assert len(bucket_queries) == 2 and set(numbers.latency_buckets) == {"e2e", "ttft"}, asked


LATENCY = Rule(metric="ttft_p95", kind="guardrail", label="TTFT P95", margin=0.5, min_n=50, source="canary")


def test_a_latency_quantile_beyond_the_margin_fails_only_when_the_buckets_interval_is_beyond_it_too() -> None:
    rng = np.random.default_rng(3)
    same = rng.lognormal(math.log(0.06), 0.4, size=(2, 88))
    # The demo's paused round: 94 → 151 ms read on one minute of the same kind of traffic.
    noise = judge_latency_quantile(
        LATENCY, "knowledge_qa", q=0.95, baseline=(93.9, histogram(same[0])), candidate=(151.0, histogram(same[1]))
    )
    assert noise.status == "inconclusive", noise.reason
    assert "cannot tell a regression from its own noise" in noise.reason
    assert noise.interval is not None and noise.interval[0] < 1.5 < noise.interval[1]
    # Three times slower over two hundred requests: a breach the interval shows.
    slower = rng.lognormal(math.log(0.06), 0.4, size=(2, 200)) * np.array([[1.0], [3.0]])
    base_p95, cand_p95 = (float(np.quantile(side, 0.95)) * 1000 for side in slower)
    broken = judge_latency_quantile(
        LATENCY,
        "knowledge_qa",
        q=0.95,
        baseline=(base_p95, histogram(slower[0])),
        candidate=(cand_p95, histogram(slower[1])),
    )
    assert broken.status == "fail", broken.reason
    assert broken.interval is not None and broken.interval[0] > 1.5
    # Within the margin: a pass, as before; and a breach with no buckets to bound it is no failure.
    assert judge_latency_quantile(LATENCY, "t", q=0.95, baseline=(100.0, []), candidate=(120.0, [])).status == "pass"
    assert (
        judge_latency_quantile(LATENCY, "t", q=0.95, baseline=(100.0, []), candidate=(400.0, [])).status
        == "inconclusive"
    )


# --- the policy --------------------------------------------------------------------------------


def test_the_default_policy_carries_the_canary_section() -> None:
    policy = load_policy("default")
    assert policy.version_label == "default@7"
    rule = policy.canary
    assert rule.interval_minutes == 5 and rule.min_requests == 1000 and not rule.auto_rollback
    critical = {signal.metric for signal in rule.signals if signal.critical}
    assert critical == {"error_rate", "parse_error_rate", "tool_arg_error_rate"}
    # A peak period: a round at 80 % or more of the task's busiest hour of the last week.
    assert (rule.peak_fraction, rule.peak_period_minutes, rule.peak_lookback_hours) == (0.8, 60, 168)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("peak_fraction", 1.5),
        ("peak_fraction", "most"),
        ("peak_period_minutes", 0),
        ("peak_lookback_hours", -1),
        ("warmup_minutes", -1),
    ],
)
def test_a_canary_setting_out_of_range_is_refused_naming_it(key: str, value: Any) -> None:
    import yaml

    from gates.policy.parse import PolicyError, validate_policy_text
    from gates.policy.rules import POLICY_DIR

    document = yaml.safe_load((POLICY_DIR / "default.yaml").read_text())
    document["canary"][key] = value
    with pytest.raises(PolicyError) as refused:
        validate_policy_text(yaml.safe_dump(document), source="edited")
    assert f"canary.{key}" in str(refused.value) and "must be a number between" in str(refused.value)


# --- the live state for rollout tools, and the schedule -----------------------------------------


@pytest.fixture
def in_canary(ada: User, erin: User, rita: User, baseline: Any, candidate: Any) -> ReleaseTicket:
    for task in ("cs_summary", "code_assistant"):
        routing.routes_set(task=task, backend=baseline, actor=ada, reason="initial fleet")
    ticket = decided("approve", erin, baseline, candidate)
    assert signoff.signoff_record(ticket=ticket, actor=rita, verdict="approve", reason_code="evidence_sufficient").moved
    ticket.refresh_from_db()
    return routing.routes_start_canary(ticket=ticket, actor=erin)


def test_rollout_tools_see_the_signed_verdict_until_a_round_has_run(in_canary: ReleaseTicket) -> None:
    before = backend_verdict(backend_name=in_canary.candidate.name, route="cs_summary")
    assert before.allowed and before.live is None
    canary_round(in_canary, 1, "pass", "continue", {"cs_summary": "pass", "code_assistant": "pass"})
    after = backend_verdict(backend_name=in_canary.candidate.name, route="cs_summary")
    assert after.allowed and after.live and after.live["round"] == 1 and "canary round 1" in after.reason


def test_the_argo_metric_answers_from_the_latest_round_per_route(
    in_canary: ReleaseTicket, api_for: Callable[[User | None], APIClient], erin: User
) -> None:
    canary_round(in_canary, 1, "pass", "continue", {"cs_summary": "pass", "code_assistant": "pass"})
    canary_round(in_canary, 2, "inconclusive", "continue", {"cs_summary": "pass", "code_assistant": "inconclusive"})
    client = api_for(erin)
    url = "/api/v1/integrations/argo/verdict/"
    name = in_canary.candidate.name
    assert client.get(url, {"backend": name, "route": "cs_summary"}).data["allowed"] is True
    unsettled = client.get(url, {"backend": name, "route": "code_assistant"}).data
    assert unsettled["allowed"] is False and unsettled["verdict"] == "canary_inconclusive"
    assert unsettled["reason"] == "canary round 2: code_assistant inconclusive"
    whole = client.get(url, {"backend": name}).data
    assert whole["allowed"] is False and whole["live"]["action"] == "continue"


def test_the_beat_queues_a_round_once_per_interval_and_only_with_prometheus(
    in_canary: ReleaseTicket, settings: Any
) -> None:
    settings.OPTGATE_PROMETHEUS_URL = ""
    assert canary.canary_rounds_due(now=timezone.now() + timedelta(hours=1)) == []
    settings.OPTGATE_PROMETHEUS_URL = "http://prometheus.invalid:9090"
    assert canary.canary_rounds_due() == []  # the first interval has not passed
    later = timezone.now() + timedelta(minutes=6)
    assert canary.canary_rounds_due(now=later) == [in_canary.pk]
    canary_round(in_canary, 1, "pass", "continue", {"cs_summary": "pass"})  # a round just ran
    assert canary.canary_rounds_due(now=timezone.now() + timedelta(minutes=4)) == []
    assert canary.canary_rounds_due(now=timezone.now() + timedelta(minutes=6)) == [in_canary.pk]

    with (
        mock.patch.object(tasks.run_canary_round, "delay") as delay,
        mock.patch.object(canary, "canary_rounds_due", return_value=[in_canary.pk]),
    ):
        tasks.schedule_canary_rounds()
    delay.assert_called_once_with(in_canary.pk)


@pytest.mark.parametrize("phase_s", [0.0, 7.0, 14.5])
def test_on_the_installed_beat_schedule_rounds_come_every_interval_not_every_other(
    in_canary: ReleaseTicket, settings: Any, phase_s: float
) -> None:
    """Beat ticks on the schedule ``install_schedules`` installs; each tick queues the rounds due and
    the worker starts one a second later (its ``started_at``, the next round's anchor). Under the
    demo policy's one-minute interval, the shortest any shipped policy has, every round is queued
    within a quarter of an interval of falling due: ticking once a minute, each round missed its
    tick by that second and was queued a whole minute late, two minutes after the last."""
    settings.OPTGATE_PROMETHEUS_URL = "http://prometheus.invalid:9090"
    policy = load_policy("demo")
    interval = timedelta(minutes=policy.canary.interval_minutes)
    (entry,) = [item for item in SCHEDULES if item.task == queue.SCHEDULE_CANARY_ROUNDS]
    assert isinstance(entry.when, Every)
    tick, lag = timedelta(seconds=entry.when.seconds), timedelta(seconds=1)
    assert in_canary.canary_started_at is not None
    # The first round falls due one interval after the policy's warm-up.
    anchor = in_canary.canary_started_at + timedelta(minutes=policy.canary.warmup_minutes)
    now, end = anchor + timedelta(seconds=phase_s), anchor + 10 * interval
    late = []
    while now < end:
        if canary.canary_rounds_due(now=now, policy=policy) == [in_canary.pk]:
            late.append((now - (anchor + interval)).total_seconds())
            anchor = now + lag
            round_ = canary_round(in_canary, len(late), "pass", "continue", {"cs_summary": "pass"})
            CanaryRound.objects.filter(pk=round_.pk).update(started_at=anchor)
        now += tick
    assert len(late) >= 8 and max(late) <= interval.total_seconds() / 4, late


def test_the_worker_records_an_error_round_when_nobody_answers_and_raises_for_a_retry(
    in_canary: ReleaseTicket, settings: Any
) -> None:
    settings.OPTGATE_PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    ReleaseTicket.objects.filter(pk=in_canary.pk).update(canary_started_at=timezone.now() - timedelta(minutes=10))
    with pytest.raises(canary.CanaryRoundError, match="could not be reached"):
        tasks.run_canary_round(in_canary.pk)
    round_ = CanaryRound.objects.get(ticket=in_canary)
    assert (round_.verdict, round_.action) == ("error", "retry") and "could not be reached" in round_.error
    tasks.run_canary_round(in_canary.pk)  # the same message again: the round is not due, nothing runs
    assert CanaryRound.objects.filter(ticket=in_canary).count() == 1
    assert backend_verdict(backend_name=in_canary.candidate.name).verdict == "canary_error"


def test_the_first_round_comes_an_interval_after_the_warm_up_and_judges_from_its_end(
    in_canary: ReleaseTicket, settings: Any
) -> None:
    settings.OPTGATE_PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"  # nothing listens: an error round
    policy = load_policy("demo")  # a 20-second warm-up, then a round every minute
    assert load_policy("default").canary.warmup_minutes == 0
    started = in_canary.canary_started_at
    assert started is not None
    warm_from = started + timedelta(minutes=policy.canary.warmup_minutes)
    assert warm_from > started
    assert canary.canary_rounds_due(now=started + timedelta(minutes=1), policy=policy) == []
    first = warm_from + timedelta(minutes=1)
    assert canary.canary_rounds_due(now=first, policy=policy) == [in_canary.pk]
    with pytest.raises(canary.CanaryRoundError):
        canary.canary_round_run(ticket_id=in_canary.pk, now=first, policy=policy)
    round_ = CanaryRound.objects.get(ticket=in_canary)
    assert (round_.window_start, round_.window_end) == (warm_from, first)


def slice_numbers(requests: int, bad: int, ttft_p95_ms: float) -> dict[str, Any]:
    return {
        "requests": requests,
        "outcomes": {"ok": requests - bad, "tool_arg_error": bad},
        "latency_ms": {"ttft_p95": ttft_p95_ms},
    }


def test_the_ticket_page_shows_the_rounds_as_a_timeline_with_each_tasks_slices_over_the_rounds(
    in_canary: ReleaseTicket, erin: User
) -> None:
    from tests.ui_helpers import client_for

    first = canary_round(in_canary, 1, "pass", "continue", {"cs_summary": "pass", "code_assistant": "pass"})
    second = canary_round(in_canary, 2, "fail", "propose_rollback", {"cs_summary": "pass", "code_assistant": "fail"})
    for stored, bad in ((first, 1), (second, 20)):
        stored.tasks["code_assistant"].update(
            candidate=slice_numbers(200, bad, 410.0), baseline=slice_numbers(800, 4, 400.0)
        )
        stored.traffic = {"code_assistant": 200 * stored.number, "cs_summary": 150 * stored.number}
        stored.save()

    page = client_for(erin).get(f"/tickets/{in_canary.pk}/").content.decode()

    assert "Canary analysis rounds" in page and 'id="canary-fold" open' in page  # open while in canary
    assert page.index('id="canary-round-1"') < page.index('id="canary-round-2"')
    assert "round 2 said fail" in page and "propose rollback" in page
    assert "code_assistant: fail" in page
    assert "candidate requests so far: code_assistant 400, cs_summary 300" in page
    # The latest round's candidate slice: 20 of 200 requests with a bad outcome; the baseline's 4 of 800.
    assert "candidate (canary tenants): latest 10 %" in page and "baseline (other tenants): latest 0.5 %" in page
    assert "code_assistant: TTFT P95" in page and "candidate (canary tenants): latest 410 ms" in page
    # A task whose rounds carry no slice numbers gets its charts, empty rather than drawn as zeros.
    assert "cs_summary: requests with a bad outcome" in page and "no measurements" in page


def test_a_ticket_that_never_went_into_canary_has_no_rounds_section(erin: User, baseline: Any, candidate: Any) -> None:
    from tests.ui_helpers import client_for

    ticket = decided("approve", erin, baseline, candidate)
    page = client_for(erin).get(f"/tickets/{ticket.pk}/").content.decode()
    assert page.count("Canary analysis rounds") == 0


def test_a_round_chart_breaks_its_line_where_nothing_was_measured() -> None:
    from evaluators.charts import rounds_svg

    svg = rounds_svg({"candidate": [1.0, None, 3.0]}, [1, 2, 3], title="t", unit="%", chart_id="c")
    path = svg.split('<path d="', 1)[1].split('"', 1)[0]
    assert path.count("M") == 2 and path.count("L") == 0  # two separate points, no line across the gap
    assert svg.count("<circle") == 2
    assert "no measurements" in rounds_svg({"candidate": [None, None]}, [1, 2], title="t", unit="%")
