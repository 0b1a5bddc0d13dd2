"""Canary analysis rounds on a real Prometheus scraping a real exporter of the business signals.

The ticket is the factories' ``approve`` scenario in canary for ``tenant-a``: ``cs_summary`` (the
beneficiary) and ``code_assistant`` (the risk task) route to the candidate for that tenant; the
other tenants stay on the baseline. The test drives the contract's counters and histograms for
both slices, lets Prometheus scrape them (every second) and runs rounds with a six-second window.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.utils import timezone

from gates.models import CanaryRound, Notification, ReleaseTicket, Review, ReviewReason, RoundAction, TicketStatus
from gates.policy.parse import load_policy
from gates.policy.rules import POLICY_DIR, Policy
from gates.selectors.routes import route_table
from gates.selectors.verdicts import backend_verdict
from gates.services import canary, routing, signoff
from ledger.models import LedgerEntry
from tests.factories import decided
from tests.prometheus_server import Exporter, PrometheusServer

pytestmark = [pytest.mark.prometheus, pytest.mark.django_db]

TASKS = ("cs_summary", "code_assistant")
CANARY_TENANT = "tenant-a"
OTHER_TENANTS = ("tenant-b", "tenant-c")


def canary_policy(tmp_path: Path, **canary_overrides: Any) -> Policy:
    """The default policy with a canary section sized for seconds instead of minutes."""
    document = yaml.safe_load((POLICY_DIR / "default.yaml").read_text())
    document["canary"].update(
        {
            "interval_minutes": 0.1,  # a six-second window
            "min_requests_per_round": 20,
            "min_requests": 2000,
            "max_inconclusive_rounds": 1,
            # A peak period of six seconds, looked for over the last six minutes.
            "peak_period_minutes": 0.1,
            "peak_lookback_hours": 0.1,
            **canary_overrides,
        }
    )
    path = tmp_path / "canary-policy.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_policy(path)


@pytest.fixture
def in_canary(ada: Any, erin: Any, rita: Any, baseline: Any, candidate: Any) -> ReleaseTicket:
    for task in (*TASKS, "knowledge_qa"):
        routing.routes_set(task=task, backend=baseline, actor=ada, reason="initial fleet")
    ticket = decided("approve", erin, baseline, candidate, observation_window_hours=1)
    assert signoff.signoff_record(ticket=ticket, actor=rita, verdict="approve", reason_code="evidence_sufficient").moved
    ticket.refresh_from_db()
    routing.routes_start_canary(ticket=ticket, actor=erin)
    # Ten minutes into a one-hour window (the rounds' windows never reach back before the canary).
    started = timezone.now() - timedelta(minutes=10)
    ReleaseTicket.objects.filter(pk=ticket.pk).update(canary_started_at=started)
    ticket.refresh_from_db()
    return ticket


def window_ended(ticket: ReleaseTicket) -> None:
    ReleaseTicket.objects.filter(pk=ticket.pk).update(canary_started_at=timezone.now() - timedelta(hours=2))
    ticket.refresh_from_db()


def prepare(exporter: Exporter, ticket: ReleaseTicket, prometheus: PrometheusServer) -> None:
    exporter.signals.prepare(
        tasks=TASKS, backends=[ticket.candidate.name, ticket.baseline.name], tenants=[CANARY_TENANT, *OTHER_TENANTS]
    )
    prometheus.wait_for_scrapes(2)  # the zeros are in before the first request counts


def drive(
    exporter: Exporter,
    ticket: ReleaseTicket,
    *,
    requests: int = 40,
    broken: dict[str, dict[str, int]] | None = None,
    candidate_ttft_s: float = 0.2,
) -> None:
    """``requests`` per task and slice; ``broken[task][outcome]`` of the candidate's end badly; the
    baseline answers its first token in 0.2 s, the candidate in ``candidate_ttft_s``."""
    for task in TASKS:
        bad = (broken or {}).get(task, {})
        for outcome, count in {**bad, "ok": requests - sum(bad.values())}.items():
            if count:
                exporter.signals.record(
                    task=task,
                    backend=ticket.candidate.name,
                    tenant=CANARY_TENANT,
                    outcome=outcome,
                    count=count,
                    ttft_s=candidate_ttft_s,
                    e2e_s=1.5,
                )
        for index, tenant in enumerate(OTHER_TENANTS):
            share = requests // 2 + (requests % 2 if index == 0 else 0)
            exporter.signals.record(
                task=task,
                backend=ticket.baseline.name,
                tenant=tenant,
                outcome="ok",
                count=share,
                ttft_s=0.2,
                e2e_s=1.5,
            )


def run_round(ticket: ReleaseTicket, policy: Policy, prometheus: PrometheusServer) -> CanaryRound:
    round_ = canary.canary_round_run(ticket_id=ticket.pk, policy=policy, prometheus_url=prometheus.url)
    assert round_ is not None
    ticket.refresh_from_db()
    return round_


def canary_routes(ticket: ReleaseTicket) -> dict[str, str]:
    return {r.task.slug: r.backend.name for r in route_table().filter(tenant=CANARY_TENANT)}


@pytest.mark.parametrize("auto_rollback", [True, False], ids=["automatic", "proposed"])
def test_a_risk_task_breaking_its_tool_arguments_is_rolled_back_alone(
    in_canary: ReleaseTicket,
    exporter: Exporter,
    prometheus: PrometheusServer,
    tmp_path: Path,
    auto_rollback: bool,
) -> None:
    ticket = in_canary
    policy = canary_policy(tmp_path, auto_rollback=auto_rollback)
    prepare(exporter, ticket, prometheus)
    drive(exporter, ticket, requests=600, broken={"code_assistant": {"tool_arg_error": 150}})
    prometheus.wait_for_scrapes(2)

    round_ = run_round(ticket, policy, prometheus)

    assert round_.verdict == "fail"
    assert round_.tasks["cs_summary"]["status"] == "pass"
    risk = round_.tasks["code_assistant"]
    assert risk["status"] == "fail" and risk["critical_failures"] == ["tool_arg_error_rate"]
    # The numbers Prometheus returned: a quarter of the candidate's requests broke, none of the baseline's.
    assert risk["candidate"]["outcomes"]["tool_arg_error"] / risk["candidate"]["requests"] == pytest.approx(
        0.25, abs=0.03
    )
    assert risk["baseline"]["outcomes"].get("tool_arg_error", 0) == 0
    assert risk["reason"].startswith("Tool-argument error rate rose from 0.0% to 25")
    assert ticket.status == TicketStatus.CANARY  # the beneficiary task keeps the candidate
    if auto_rollback:
        assert round_.action == RoundAction.ROLLBACK and round_.details["rolled_back"] == ["code_assistant"]
        assert canary_routes(ticket) == {"cs_summary": ticket.candidate.name, "code_assistant": ticket.baseline.name}
    else:
        assert round_.action == RoundAction.PROPOSE_ROLLBACK
        review = Review.objects.get(ticket=ticket, reason=ReviewReason.CANARY_GUARDRAIL)
        assert review.details["tasks"] == ["code_assistant"] and review.pk == round_.details["review"]
        assert canary_routes(ticket) == {task: ticket.candidate.name for task in TASKS}
    entry = LedgerEntry.objects.get(kind="canary.round", subject_id=ticket.pk)
    assert entry.payload["action"] == round_.action and entry.payload["tasks"]["code_assistant"]["status"] == "fail"
    assert any("optgate_outcome_total" in q["query"] for q in entry.payload["queries"])
    # The rollout tools follow the live state: the broken task's route is refused with the round's reason.
    refused = backend_verdict(backend_name=ticket.candidate.name, route=f"code_assistant@{CANARY_TENANT}")
    assert (
        not refused.allowed and refused.verdict == "canary_fail" and "Tool-argument error rate rose" in refused.reason
    )
    assert backend_verdict(backend_name=ticket.candidate.name, route="cs_summary").allowed


def test_a_healthy_canary_promotes_only_after_the_window_and_the_traffic_minimum(
    in_canary: ReleaseTicket, exporter: Exporter, prometheus: PrometheusServer, tmp_path: Path, settings: Any
) -> None:
    settings.OPTGATE_AUTO_PROMOTE_RISK_TIERS = ["low", "medium", "high"]
    ticket = in_canary
    policy = canary_policy(tmp_path)
    prepare(exporter, ticket, prometheus)

    # Enough requests per round to show a zero error rate within the policy's 1-point margin.
    drive(exporter, ticket, requests=600)
    prometheus.wait_for_scrapes(2)
    first = run_round(ticket, policy, prometheus)
    assert (first.verdict, first.action) == ("pass", RoundAction.CONTINUE)
    assert "window runs until" in first.reason

    window_ended(ticket)
    drive(exporter, ticket, requests=600)
    prometheus.wait_for_scrapes(2)
    second = run_round(ticket, policy, prometheus)
    assert (second.verdict, second.action) == ("pass", RoundAction.CONTINUE)
    assert "too little traffic" in second.reason and 1000 <= second.traffic["code_assistant"] < 2000
    assert ticket.status == TicketStatus.CANARY

    drive(exporter, ticket, requests=1500)
    prometheus.wait_for_scrapes(2)
    third = run_round(ticket, policy, prometheus)
    assert (third.verdict, third.action) == ("pass", RoundAction.PROMOTE), third.reason
    assert all(seen >= 2000 for seen in third.traffic.values())
    assert ticket.status == TicketStatus.DEFAULT
    defaults = {r.task.slug: r.backend.name for r in route_table().filter(tenant="")}
    assert defaults["cs_summary"] == defaults["code_assistant"] == ticket.candidate.name


def test_a_canary_promotes_only_after_a_passing_round_at_a_peak_period(
    in_canary: ReleaseTicket, exporter: Exporter, prometheus: PrometheusServer, tmp_path: Path, settings: Any
) -> None:
    settings.OPTGATE_AUTO_PROMOTE_RISK_TIERS = ["low", "medium", "high"]
    ticket = in_canary
    policy = canary_policy(tmp_path, min_requests=1000)
    prepare(exporter, ticket, prometheus)
    # The busy period came before: 3,000 requests per slice in one burst, then quieter traffic.
    drive(exporter, ticket, requests=3000)
    prometheus.wait_for_scrapes(2)
    time.sleep(7)  # past one round's window: the next round no longer sees the burst itself

    window_ended(ticket)
    drive(exporter, ticket, requests=600)
    prometheus.wait_for_scrapes(2)
    quiet = run_round(ticket, policy, prometheus)
    assert (quiet.verdict, quiet.action) == ("pass", RoundAction.CONTINUE), quiet.reason
    assert "no passing round has yet seen a peak period" in quiet.reason and "code_assistant (" in quiet.reason
    peak = quiet.tasks["code_assistant"]["peak"]
    assert not peak["at_peak"] and 0 < peak["rate"] < 0.8 * peak["busiest"], peak
    assert all(seen >= 1000 for seen in quiet.traffic.values())  # traffic was not what held it back
    assert ticket.status == TicketStatus.CANARY

    drive(exporter, ticket, requests=4500)
    prometheus.wait_for_scrapes(2)
    busy = run_round(ticket, policy, prometheus)
    assert busy.tasks["code_assistant"]["peak"]["at_peak"], busy.tasks["code_assistant"]["peak"]
    assert (busy.verdict, busy.action) == ("pass", RoundAction.PROMOTE), busy.reason
    assert ticket.status == TicketStatus.DEFAULT


def test_prometheus_down_makes_an_error_round_never_a_pass(
    in_canary: ReleaseTicket, exporter: Exporter, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    ticket = in_canary
    window_ended(ticket)  # even at the window's end, an unanswered round promotes nothing
    policy = canary_policy(tmp_path, min_requests=1)
    prepare(exporter, ticket, prometheus)
    drive(exporter, ticket, requests=600)
    prometheus.wait_for_scrapes(2)
    prometheus.stop()

    with pytest.raises(canary.CanaryRoundError, match="could not be reached"):
        canary.canary_round_run(ticket_id=ticket.pk, policy=policy, prometheus_url=prometheus.url)

    round_ = CanaryRound.objects.get(ticket=ticket)
    assert (round_.verdict, round_.action) == ("error", RoundAction.RETRY) and round_.error
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.CANARY
    entry = LedgerEntry.objects.get(kind="canary.round", subject_id=ticket.pk)
    assert entry.payload["verdict"] == "error" and entry.payload["queries"][0]["error"]
    live = backend_verdict(backend_name=ticket.candidate.name, route="cs_summary")
    assert not live.allowed and live.verdict == "canary_error"


def test_an_inconclusive_canary_pauses_for_people_past_the_policy_limit(
    in_canary: ReleaseTicket, exporter: Exporter, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    ticket = in_canary
    policy = canary_policy(tmp_path)  # 20 requests per slice and round; one inconclusive round allowed
    prepare(exporter, ticket, prometheus)

    drive(exporter, ticket, requests=6)
    prometheus.wait_for_scrapes(2)
    first = run_round(ticket, policy, prometheus)
    assert (first.verdict, first.action) == ("inconclusive", RoundAction.CONTINUE)
    assert "fewer than the 20 the policy requires" in first.tasks["cs_summary"]["reason"]

    drive(exporter, ticket, requests=6)
    prometheus.wait_for_scrapes(2)
    second = run_round(ticket, policy, prometheus)
    assert (second.verdict, second.action) == ("inconclusive", RoundAction.PAUSE)
    assert "2 inconclusive rounds in a row" in second.reason
    assert Notification.objects.filter(ticket=ticket, event="canary.paused").count() == 1
    assert ticket.status == TicketStatus.CANARY
    live = backend_verdict(backend_name=ticket.candidate.name)
    assert (
        not live.allowed
        and live.verdict == "canary_paused"
        and live.live
        == {
            "round": 2,
            "verdict": "inconclusive",
            "action": "pause",
            "at": second.window_end.isoformat(),
            "reason": second.reason,
        }
    )


def test_a_resumed_canary_counts_its_inconclusive_rounds_afresh_and_pauses_again(
    in_canary: ReleaseTicket, exporter: Exporter, prometheus: PrometheusServer, tmp_path: Path, rita: Any
) -> None:
    ticket = in_canary
    policy = canary_policy(tmp_path)  # 20 requests per slice and round; one inconclusive round allowed
    prepare(exporter, ticket, prometheus)
    for _ in range(2):
        drive(exporter, ticket, requests=6)
        prometheus.wait_for_scrapes(2)
        paused = run_round(ticket, policy, prometheus)
    assert paused.action == RoundAction.PAUSE

    canary.canary_resume(ticket=ticket, actor=rita, reason="small slices; the evening peak is coming")
    ticket.refresh_from_db()

    drive(exporter, ticket, requests=6)
    prometheus.wait_for_scrapes(2)
    third = run_round(ticket, policy, prometheus)
    assert (third.verdict, third.action) == ("inconclusive", RoundAction.CONTINUE)
    assert "(1 in a row)" in third.reason
    assert backend_verdict(backend_name=ticket.candidate.name).verdict == "canary_inconclusive"

    drive(exporter, ticket, requests=6)
    prometheus.wait_for_scrapes(2)
    fourth = run_round(ticket, policy, prometheus)
    assert fourth.action == RoundAction.PAUSE
    # People hear of the new pause too: once per pause, not once per canary.
    assert Notification.objects.filter(ticket=ticket, event="canary.paused").count() == 2
    assert backend_verdict(backend_name=ticket.candidate.name).verdict == "canary_paused"


def test_an_inconclusive_round_is_settled_at_the_windows_end_by_the_whole_window(
    in_canary: ReleaseTicket, exporter: Exporter, prometheus: PrometheusServer, tmp_path: Path, settings: Any
) -> None:
    """A round whose own slices were too small to tell holds promotion back only until the round at
    the window's end judges every round's traffic pooled, and that passes."""
    settings.OPTGATE_AUTO_PROMOTE_RISK_TIERS = ["low", "medium", "high"]
    ticket = in_canary
    policy = canary_policy(tmp_path, min_requests=500, peak_fraction=0)
    prepare(exporter, ticket, prometheus)

    drive(exporter, ticket, requests=6)
    prometheus.wait_for_scrapes(2)
    first = run_round(ticket, policy, prometheus)
    assert (first.verdict, first.action) == ("inconclusive", RoundAction.CONTINUE)
    assert "whole_window" not in first.details  # inside the window, nothing is pooled

    window_ended(ticket)
    drive(exporter, ticket, requests=600)
    prometheus.wait_for_scrapes(2)
    second = run_round(ticket, policy, prometheus)

    assert (second.verdict, second.action) == ("pass", RoundAction.PROMOTE), second.reason
    assert "round 1 could not tell, and the whole window since" in second.reason
    assert "the whole window passed and every task saw enough traffic" in second.reason
    whole = second.details["whole_window"]
    assert whole["since"] == first.window_start.isoformat()
    assert {task: result["status"] for task, result in whole["tasks"].items()} == dict.fromkeys(TASKS, "pass")
    assert all(result["candidate"]["requests"] >= 600 for result in whole["tasks"].values()), whole
    assert ticket.status == TicketStatus.DEFAULT
    entry = LedgerEntry.objects.get(kind="canary.round", subject_id=ticket.pk, payload__round=2)
    assert entry.payload["details"]["whole_window"] == whole


def test_the_whole_window_keeps_what_an_inconclusive_round_saw_and_a_breach_in_it_stops_promotion(
    in_canary: ReleaseTicket, exporter: Exporter, prometheus: PrometheusServer, tmp_path: Path, settings: Any
) -> None:
    """A hundred requests, sixty of them ten times slower to their first token, are too few for their
    round to tell (the policy asks 150 per slice); the next round's own window is fast, but pooled
    with them the window's TTFT P95 breaks its margin: paused for people, no promotion."""
    settings.OPTGATE_AUTO_PROMOTE_RISK_TIERS = ["low", "medium", "high"]
    ticket = in_canary
    policy = canary_policy(tmp_path, min_requests=500, min_requests_per_round=150, peak_fraction=0)
    prepare(exporter, ticket, prometheus)

    # Earlier traffic, as a live canary has, outside every judged window. Prometheus extrapolates an
    # increase towards the window's start no further than to where the counter would reach zero, so a
    # bucket whose counter is small beside its increase is stretched less than its neighbours: with
    # only the forty fast requests below it, the 0.25 s bucket of the next round's 600 fell short of
    # the 2.5 s bucket by more than the 5 % tail, and that round's own P95 read 1.8 s.
    drive(exporter, ticket, requests=2000)
    prometheus.wait_for_scrapes(2)
    time.sleep(7)  # past one round's window: round 1 sees only what follows

    drive(exporter, ticket, requests=40)
    drive(exporter, ticket, requests=60, candidate_ttft_s=2.0)
    prometheus.wait_for_scrapes(2)
    first = run_round(ticket, policy, prometheus)
    assert (first.verdict, first.action) == ("inconclusive", RoundAction.CONTINUE), first.reason
    time.sleep(7)  # past one round's window: the next round's own slices no longer hold the slow ones

    window_ended(ticket)
    drive(exporter, ticket, requests=600)
    prometheus.wait_for_scrapes(2)
    second = run_round(ticket, policy, prometheus)

    own = {task: result["status"] for task, result in second.tasks.items()}
    assert own == dict.fromkeys(TASKS, "pass"), (second.window_start, first.window_end, second.tasks)
    assert (second.verdict, second.action) == ("fail", RoundAction.PAUSE), second.reason
    assert "round 1 could not tell" in second.reason and "TTFT P95" in second.reason
    pooled = second.details["whole_window"]["tasks"]
    assert {task: result["status"] for task, result in pooled.items()} == dict.fromkeys(TASKS, "fail"), pooled
    # Round 1 on: the 700 of each slice, none of the 2,000 before it.
    assert all(700 <= result["candidate"]["requests"] < 1000 for result in pooled.values()), pooled
    assert Notification.objects.filter(ticket=ticket, event="canary.paused").count() == 1
    assert ticket.status == TicketStatus.CANARY
    assert backend_verdict(backend_name=ticket.candidate.name).verdict == "canary_paused"
