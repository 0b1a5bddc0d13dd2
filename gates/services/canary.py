"""Canary analysis rounds: measure a ticket's canary on Prometheus and act on the evidence.

While a ticket is in canary, every ``canary.interval_minutes`` of the gate policy a round asks
Prometheus, per task still routed to the candidate, for the candidate slice (the canary tenants on
the candidate) and the baseline slice (the other tenants on the baseline) over the last interval,
judges them with the gate's judge (``gates.canary.judge``) and decides:

* a critical signal broken on a task → that task alone rolls back to the rollback target
  (``canary.auto_rollback``), or a review proposes it to reviewers;
* another signal broken, or more than ``canary.max_inconclusive_rounds`` inconclusive rounds in a
  row → pause: automatic promotion is off for this canary and people are told;
* at the window's end, promote only when every round passed and every task's candidate slice saw
  ``canary.min_requests`` requests (automatic for the risk tiers in
  ``OPTGATE_AUTO_PROMOTE_RISK_TIERS``, else proposed to people); time alone never promotes. A
  round that was only inconclusive (its own interval could not tell) is settled by more evidence:
  the round at the window's end also judges the whole window since the first round, pooled, and
  that judgement must pass too (a failure in it rolls back or pauses as a failing round would; a
  window that still cannot tell is an inconclusive round, so the next one judges a longer window);
  a failed round still holds promotion back;
* otherwise continue.

A reviewer or admin resumes a paused canary (``canary_resume``): the rounds before the resume no
longer pause it or hold promotion back.

Each round — its queries, numbers, verdicts and action — is a ``CanaryRound`` row and a ledger
entry, written in one transaction with the route change or review it causes. Prometheus
unreachable makes an error round (recorded, then ``CanaryRoundError`` so the task retries), never
a pass.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import ADMIN, REVIEWER, Actor, has_role, person
from gates.canary.judge import SEVERITY, TaskRound, judge_task_round, latency_quantiles
from gates.canary.queries import Prometheus, PrometheusError, Slice, peak_reading, requests_since, slice_numbers
from gates.models import CanaryRound, ReleaseTicket, ReviewReason, RoundAction, RoundVerdict, TicketStatus
from gates.policy.rules import CanaryRule, Policy
from gates.selectors.canary import canary_pause, canary_rounds_since_resume
from gates.selectors.routes import route_table
from gates.services import routing
from gates.services.notifications import notify
from gates.services.policy import gate_policy
from gates.services.reviews import review_open_within
from ledger.services import ledger_append

logger = logging.getLogger(__name__)


class CanaryRoundError(Exception):
    """A round could not measure (Prometheus unreachable or refusing): recorded; worth a retry."""


@dataclass
class Plan:
    """What a round decided, before it is written."""

    verdict: str
    action: str
    reason: str
    rollback_tasks: list[str] = field(default_factory=list)
    # What else the round measured to decide, kept in its details (the whole window's judgement).
    details: dict[str, Any] = field(default_factory=dict)


def _reviewers() -> list[User]:
    return list(User.objects.filter(groups__name="reviewer", is_active=True).distinct())


def canary_resume(*, ticket: ReleaseTicket, actor: Actor, reason: str) -> ReleaseTicket:
    """A reviewer or admin lets a canary that analysis rounds paused go on.

    What the rounds found before the resume is settled: the pause, failing and inconclusive rounds
    no longer stop automatic promotion, and the inconclusive streak starts again. The rounds go on
    measuring; a later failure pauses (and notifies) again. The observation window, the traffic
    minimum and the passing round at a peak still count from the canary's start.
    """
    user = person(actor)
    if user is None or not has_role(user, REVIEWER, ADMIN):
        raise NotAllowed("resuming a paused canary is for: admin or reviewer")
    if not reason.strip():
        raise InvalidInput({"reason": "say why the canary may go on"})
    with transaction.atomic(durable=True):
        locked = ReleaseTicket.objects.select_for_update().get(pk=ticket.pk)
        if locked.status != TicketStatus.CANARY:
            raise DomainError(f"ticket #{locked.pk} is {locked.status}; only a canary in progress is resumed")
        paused = canary_pause(locked)
        if paused is None:
            since = "its last resume" if locked.canary_resumed_at else "it started"
            raise DomainError(f"the canary of ticket #{locked.pk} is not paused: no round has paused it since {since}")
        now = timezone.now()
        ReleaseTicket.objects.filter(pk=locked.pk).update(canary_resumed_at=now, updated_at=now)
        ledger_append(
            kind="canary.resumed",
            subject_type="ticket",
            subject_id=locked.pk,
            subject_name=locked.title,
            actor=user,
            payload={"paused_round": paused.number, "paused_reason": paused.reason, "reason": reason},
        )
    ticket.canary_resumed_at, ticket.updated_at = now, now
    return ticket


def canary_tenants(ticket: ReleaseTicket) -> tuple[str, ...]:
    return tuple(sorted(set((ticket.canary_scope or {}).get("tenants") or [])))


def canary_tasks(ticket: ReleaseTicket) -> list[str]:
    """The tasks whose canary routes still point at the candidate (a rolled-back task drops out)."""
    tenants = canary_tenants(ticket)
    routes = route_table().filter(backend=ticket.candidate_id, tenant__in=tenants)
    return sorted(set(routes.values_list("task__slug", flat=True)))


def rounds_of_canary(ticket: ReleaseTicket) -> QuerySet[CanaryRound]:
    """The rounds of the ticket's current canary period, oldest first."""
    rounds = CanaryRound.objects.filter(ticket=ticket)
    if ticket.canary_started_at is not None:
        rounds = rounds.filter(started_at__gte=ticket.canary_started_at)
    return rounds.order_by("number")


def canary_latest_round(ticket: ReleaseTicket) -> CanaryRound | None:
    return rounds_of_canary(ticket).order_by("-number").first()


def _auto_promotes(ticket: ReleaseTicket) -> bool:
    tiers = set(settings.OPTGATE_AUTO_PROMOTE_RISK_TIERS)
    touched = {t.risk_tier for t in ticket.beneficiary_tasks.all()} | {t.risk_tier for t in ticket.risk_tasks.all()}
    return bool(tiers) and touched <= tiers


def _interval(rule: CanaryRule) -> timedelta:
    return timedelta(minutes=rule.interval_minutes)


def _warm_from(ticket: ReleaseTicket, rule: CanaryRule) -> datetime:
    """When the canary's judged traffic begins: its start plus the policy's warm-up."""
    assert ticket.canary_started_at is not None
    return ticket.canary_started_at + timedelta(minutes=rule.warmup_minutes)


def canary_rounds_due(*, now: datetime | None = None, policy: Policy | None = None) -> list[int]:
    """Ids of canary tickets due a round: one interval after the canary's warm-up ended or after
    their last round. Empty when no Prometheus is configured (then nothing is measured, and nothing
    promotes)."""
    if not settings.OPTGATE_PROMETHEUS_URL:
        return []
    now = now or timezone.now()
    rule = (policy or gate_policy()).canary
    interval = _interval(rule)
    due = []
    for ticket in ReleaseTicket.objects.filter(status=TicketStatus.CANARY, canary_started_at__isnull=False):
        latest = canary_latest_round(ticket)
        anchor = latest.started_at if latest is not None else _warm_from(ticket, rule)
        if anchor is not None and anchor + interval <= now:
            due.append(ticket.pk)
    return due


def canary_round_if_due(*, ticket_id: int) -> CanaryRound | None:
    """Run the ticket's round when it is due (what the worker calls; a duplicate message is harmless)."""
    if ticket_id not in canary_rounds_due():
        return None
    return canary_round_run(ticket_id=ticket_id)


def canary_round_run(
    *, ticket_id: int, now: datetime | None = None, policy: Policy | None = None, prometheus_url: str | None = None
) -> CanaryRound | None:
    """Run one analysis round of the ticket's canary; None when the ticket is not in canary or a
    concurrent worker stored this round first. Raises ``CanaryRoundError`` after recording an
    error round when Prometheus could not answer."""
    ticket = (
        ReleaseTicket.objects.select_related("baseline", "candidate", "owner")
        .filter(pk=ticket_id, status=TicketStatus.CANARY)
        .first()
    )
    if ticket is None or ticket.canary_started_at is None:
        return None
    policy = policy or gate_policy()
    rule = policy.canary
    now = now or timezone.now()
    # Never before the warm-up's end: a round run early (by hand) judges an empty window, inconclusive.
    window_start = min(max(now - _interval(rule), _warm_from(ticket, rule)), now)
    latest = canary_latest_round(ticket)
    number = (latest.number if latest else CanaryRound.objects.filter(ticket=ticket).count()) + 1
    prometheus = Prometheus(
        prometheus_url or settings.OPTGATE_PROMETHEUS_URL, timeout_s=settings.OPTGATE_PROMETHEUS_TIMEOUT_S
    )
    record: dict[str, Any] = {
        "ticket": ticket,
        "number": number,
        "started_at": now,
        "window_start": window_start,
        "window_end": now,
        "policy_version": policy.version_label,
    }
    tasks = canary_tasks(ticket)
    tenants = canary_tenants(ticket)
    whole_from = _whole_window_from(ticket, now=now)
    # Slow I/O first, outside any transaction; the decision and its effects are written together.
    try:
        if not prometheus.url:
            raise PrometheusError("no Prometheus is configured (OPTGATE_PROMETHEUS_URL)")
        results, traffic = _measure(prometheus, ticket, tasks, tenants, rule=rule, now=now, since=window_start)
        whole = None
        if whole_from is not None and tasks and tenants:
            pooled = {
                task: _judge(prometheus, ticket, task, tenants, rule=rule, now=now, since=whole_from) for task in tasks
            }
            whole = WholeWindow(whole_from, list(_inconclusive_rounds(ticket).values_list("number", flat=True)), pooled)
    except PrometheusError as exc:
        round_ = _store(
            record,
            Plan(RoundVerdict.ERROR, RoundAction.RETRY, f"Round {number} could not measure, so it is no pass: {exc}"),
            prometheus,
            results={},
            traffic={},
            error=str(exc),
        )
        if round_ is not None:
            raise CanaryRoundError(str(exc)) from exc
        return None
    plan = _decide(ticket, rule, results, traffic, tenants=tenants, now=now, whole=whole)
    return _store(record, plan, prometheus, results=results, traffic=traffic)


@dataclass
class WholeWindow:
    """Every task judged over the canary's rounds pooled, from the first round's window to now, to
    settle the inconclusive ``rounds``."""

    since: datetime
    rounds: list[int]
    results: dict[str, TaskRound]

    def to_dict(self) -> dict[str, Any]:
        return {"since": self.since.isoformat(), "tasks": {task: r.to_dict() for task, r in self.results.items()}}


def _inconclusive_rounds(ticket: ReleaseTicket) -> QuerySet[CanaryRound]:
    return canary_rounds_since_resume(ticket).filter(verdict=RoundVerdict.INCONCLUSIVE)


def _whole_window_from(ticket: ReleaseTicket, *, now: datetime) -> datetime | None:
    """Where the whole-window judgement starts, when this round needs one: the window has ended and
    a round since the last resume was inconclusive. None otherwise."""
    if now < _window_ends(ticket):
        return None
    if not _inconclusive_rounds(ticket).exists():
        return None
    judged = canary_rounds_since_resume(ticket).exclude(verdict=RoundVerdict.ERROR).order_by("number").first()
    return judged.window_start if judged is not None else None


def _window_ends(ticket: ReleaseTicket) -> datetime:
    ends = ticket.observation_window_ends
    assert ends is not None, "rounds run only on a started canary"
    return ends


def _judge(
    prometheus: Prometheus,
    ticket: ReleaseTicket,
    task: str,
    tenants: tuple[str, ...],
    *,
    rule: CanaryRule,
    now: datetime,
    since: datetime,
) -> TaskRound:
    """The task's candidate slice against its baseline slice from ``since`` to ``now``."""
    quantiles = latency_quantiles(rule)
    window_s = (now - since).total_seconds()
    canary_slice = Slice(task, ticket.candidate.name, tenants)
    baseline_slice = Slice(task, ticket.baseline.name, tenants, exclude=True)
    candidate = slice_numbers(prometheus, canary_slice, at=now, window_s=window_s, quantiles=quantiles)
    baseline = slice_numbers(prometheus, baseline_slice, at=now, window_s=window_s, quantiles=quantiles)
    return judge_task_round(task, candidate=candidate, baseline=baseline, rule=rule)


def _measure(
    prometheus: Prometheus,
    ticket: ReleaseTicket,
    tasks: list[str],
    tenants: tuple[str, ...],
    *,
    rule: CanaryRule,
    now: datetime,
    since: datetime,
) -> tuple[dict[str, TaskRound], dict[str, int]]:
    window_s = (now - since).total_seconds()
    results: dict[str, TaskRound] = {}
    traffic: dict[str, int] = {}
    for task in tasks:
        results[task] = _judge(prometheus, ticket, task, tenants, rule=rule, now=now, since=since)
        if rule.peak_fraction > 0:
            results[task].peak = peak_reading(
                prometheus,
                task,
                at=now,
                window_s=window_s,
                period_s=rule.peak_period_minutes * 60,
                lookback_s=rule.peak_lookback_hours * 3600,
                fraction=rule.peak_fraction,
            )
        assert ticket.canary_started_at is not None
        canary_slice = Slice(task, ticket.candidate.name, tenants)
        traffic[task] = requests_since(prometheus, canary_slice, at=now, since=ticket.canary_started_at)
    return results, traffic


def _decide(
    ticket: ReleaseTicket,
    rule: CanaryRule,
    results: dict[str, TaskRound],
    traffic: dict[str, int],
    *,
    tenants: tuple[str, ...],
    now: datetime,
    whole: WholeWindow | None = None,
) -> Plan:
    """The round's verdict and action from its task results and the canary's history."""
    if not tenants or not results:
        why = "the canary scope names no tenants" if not tenants else "no task is routed to the candidate"
        return _inconclusive(ticket, rule, f"Nothing to compare: {why}.")
    verdict = min((r.status for r in results.values()), key=SEVERITY.index)
    broken = _on_failure(rule, results)
    if broken is not None:
        return broken
    if verdict == "inconclusive":
        unsettled = "; ".join(f"{task}: {r.reason}" for task, r in results.items() if r.status == "inconclusive")
        return _inconclusive(ticket, rule, unsettled)
    return _on_pass(ticket, rule, results, traffic, now=now, whole=whole)


def _on_failure(rule: CanaryRule, results: dict[str, TaskRound], *, prefix: str = "") -> Plan | None:
    """Roll back the tasks whose critical signal broke, or pause on any other failure; None if none failed."""
    critical = {task: r for task, r in results.items() if r.critical_failures}
    if critical:
        words = "; ".join(f"{task}: {r.reason}" for task, r in critical.items())
        action = RoundAction.ROLLBACK if rule.auto_rollback else RoundAction.PROPOSE_ROLLBACK
        return Plan(RoundVerdict.FAIL, action, f"{prefix}Critical guardrail broken — {words}", sorted(critical))
    failing = "; ".join(f"{task}: {r.reason}" for task, r in results.items() if r.status == "fail")
    if failing:
        return Plan(RoundVerdict.FAIL, RoundAction.PAUSE, f"{prefix}Paused for people — {failing}")
    return None


def _inconclusive(ticket: ReleaseTicket, rule: CanaryRule, reason: str) -> Plan:
    streak = 1
    for earlier in canary_rounds_since_resume(ticket).exclude(verdict=RoundVerdict.ERROR).order_by("-number"):
        if earlier.verdict != RoundVerdict.INCONCLUSIVE:
            break
        streak += 1
    if streak > rule.max_inconclusive_rounds:
        return Plan(
            RoundVerdict.INCONCLUSIVE,
            RoundAction.PAUSE,
            f"Paused for people: {streak} inconclusive rounds in a row, more than the policy's "
            f"{rule.max_inconclusive_rounds} — {reason}",
        )
    return Plan(RoundVerdict.INCONCLUSIVE, RoundAction.CONTINUE, f"Inconclusive ({streak} in a row) — {reason}")


def _without_peak(ticket: ReleaseTicket, results: dict[str, TaskRound]) -> list[str]:
    """Tasks no passing round of the canary (this one included) has seen at a peak period."""
    seen = {task for task, result in results.items() if result.peak is not None and result.peak.at_peak}
    for earlier in rounds_of_canary(ticket).filter(verdict=RoundVerdict.PASS).only("tasks"):
        seen |= {task for task, stored in earlier.tasks.items() if (stored.get("peak") or {}).get("at_peak")}
    return sorted(set(results) - seen)


def _on_pass(
    ticket: ReleaseTicket,
    rule: CanaryRule,
    results: dict[str, TaskRound],
    traffic: dict[str, int],
    *,
    now: datetime,
    whole: WholeWindow | None = None,
) -> Plan:
    ends = _window_ends(ticket)
    paused = canary_pause(ticket)
    if paused is not None:
        return Plan(
            RoundVerdict.PASS, RoundAction.CONTINUE, f"Passed; paused since round {paused.number}: people decide."
        )
    if now < ends:
        return Plan(
            RoundVerdict.PASS,
            RoundAction.CONTINUE,
            f"Passed; the observation window runs until {ends:%Y-%m-%d %H:%M} UTC.",
        )
    earlier = canary_rounds_since_resume(ticket).exclude(
        verdict__in=(RoundVerdict.PASS, RoundVerdict.ERROR, RoundVerdict.INCONCLUSIVE)
    )
    if earlier.exists():
        numbers = ", ".join(str(n) for n in earlier.values_list("number", flat=True))
        return Plan(
            RoundVerdict.PASS,
            RoundAction.PAUSE,
            f"The window has ended but rounds {numbers} did not pass; paused for people to decide.",
        )
    if whole is None:  # measured whenever a round since the last resume was inconclusive
        return _on_pass_at_end(ticket, rule, results, traffic, passed="every round passed")
    settled = _on_whole_window(ticket, rule, whole)
    if (settled.verdict, settled.action) != (RoundVerdict.PASS, RoundAction.CONTINUE):
        return settled
    plan = _on_pass_at_end(ticket, rule, results, traffic, passed="the whole window passed")
    plan.reason, plan.details = f"{settled.reason} {plan.reason}", settled.details
    return plan


def _on_whole_window(ticket: ReleaseTicket, rule: CanaryRule, whole: WholeWindow) -> Plan:
    """Judge the inconclusive rounds' evidence pooled with the rest of the window's.

    A pass (verdict PASS, action CONTINUE) lets the caller go on to the traffic and peak conditions.
    A failure rolls back or pauses as a failing round would; a window still inconclusive is an
    inconclusive round, so the next round judges a longer window, up to the policy's streak.
    """
    rounds = f"round{'s' if len(whole.rounds) > 1 else ''} {', '.join(str(n) for n in whole.rounds)}"
    details = {"whole_window": whole.to_dict()}
    prefix = f"The window has ended; {rounds} could not tell, and the whole window since {whole.since:%H:%M:%S} UTC: "
    plan = _on_failure(rule, whole.results, prefix=prefix)
    if plan is None:
        unsettled = "; ".join(f"{task}: {r.reason}" for task, r in whole.results.items() if r.status != "pass")
        if unsettled:
            plan = _inconclusive(ticket, rule, f"{prefix}still inconclusive — {unsettled}")
        else:
            requests = ", ".join(f"{task} {r.candidate.requests}" for task, r in sorted(whole.results.items()))
            reason = f"{prefix}every signal within its margin ({requests} candidate requests)."
            plan = Plan(RoundVerdict.PASS, RoundAction.CONTINUE, reason)
    plan.details = details
    return plan


def _on_pass_at_end(
    ticket: ReleaseTicket, rule: CanaryRule, results: dict[str, TaskRound], traffic: dict[str, int], *, passed: str
) -> Plan:
    """At the window's end with nothing left unsettled: promote on traffic and a peak, or wait for them."""
    short = {task: seen for task, seen in traffic.items() if seen < rule.min_requests}
    if short:
        words = ", ".join(f"{task} {seen}" for task, seen in sorted(short.items()))
        return Plan(
            RoundVerdict.PASS,
            RoundAction.CONTINUE,
            f"The window has ended and {passed}, but the candidate has served too little traffic "
            f"to promote ({words} requests; the policy asks {rule.min_requests} per task).",
        )
    unpeaked = _without_peak(ticket, results) if rule.peak_fraction > 0 else []
    if unpeaked:
        words = "; ".join(_peak_words(task, results[task]) for task in unpeaked)
        return Plan(
            RoundVerdict.PASS,
            RoundAction.CONTINUE,
            f"The window has ended, {passed} and every task saw enough traffic, but no passing round "
            f"has yet seen a peak period (at least {rule.peak_fraction:.0%} of the busiest "
            f"{rule.peak_period_minutes:g} minutes of the last {rule.peak_lookback_hours:g} hours) for {words}.",
        )
    action = RoundAction.PROMOTE if _auto_promotes(ticket) else RoundAction.PROPOSE_PROMOTE
    seen = ", ".join(f"{task} {count}" for task, count in sorted(traffic.items()))
    return Plan(
        RoundVerdict.PASS,
        action,
        f"The window has ended, {passed} and every task saw enough traffic ({seen} requests).",
    )


def _peak_words(task: str, result: TaskRound) -> str:
    peak = result.peak
    if peak is None or not peak.busiest:
        return task
    return f"{task} ({peak.rate * 60:.0f} requests/min this round, busiest {peak.busiest * 60:.0f})"


def _store(
    record: dict[str, Any],
    plan: Plan,
    prometheus: Prometheus,
    *,
    results: dict[str, TaskRound],
    traffic: dict[str, int],
    error: str = "",
) -> CanaryRound | None:
    """Write the round, its ledger entry and its action in one transaction; None if it was stored already."""
    ticket: ReleaseTicket = record["ticket"]
    try:
        with transaction.atomic(durable=True):
            round_ = CanaryRound.objects.create(
                **record,
                verdict=plan.verdict,
                action=plan.action,
                reason=plan.reason,
                tasks={task: result.to_dict() for task, result in results.items()},
                traffic=traffic,
                queries=prometheus.log,
                error=error,
            )
            round_.details = {**_act(ticket, round_, plan), **plan.details}
            round_.save(update_fields=["details", "action", "reason"])
            ledger_append(
                kind="canary.round",
                subject_type="ticket",
                subject_id=ticket.pk,
                subject_name=ticket.title,
                actor=None,
                payload={
                    "round": round_.number,
                    "window": [round_.window_start.isoformat(), round_.window_end.isoformat()],
                    "policy_version": round_.policy_version,
                    "verdict": round_.verdict,
                    "action": round_.action,
                    "reason": round_.reason,
                    "tasks": round_.tasks,
                    "traffic": traffic,
                    "queries": round_.queries,
                    "details": round_.details,
                    "error": error,
                },
            )
    except IntegrityError:
        logger.info("canary round %s of ticket #%s was stored by another worker", record["number"], ticket.pk)
        return None
    return round_


def _act(ticket: ReleaseTicket, round_: CanaryRound, plan: Plan) -> dict[str, Any]:
    """Apply the round's action inside its transaction; returns what changed."""
    subject = f"Ticket #{ticket.pk} canary round {round_.number}"
    people = [ticket.owner, *_reviewers()]
    reason = f"canary round {round_.number}: {plan.reason}"
    if plan.action == RoundAction.ROLLBACK:
        versions, refused = [], {}
        for task in plan.rollback_tasks:
            try:
                with transaction.atomic():  # a savepoint: one task's refusal leaves the others' rollbacks
                    version = routing.routes_rollback_within(ticket=ticket, actor=None, reason=reason[:1000], task=task)
                versions.append(version.number)
            except DomainError as exc:
                refused[task] = str(exc)
        notify(
            event="canary.rollback",
            subject=f"{subject}: rolled back {', '.join(plan.rollback_tasks)}",
            text=plan.reason,
            users=people,
            ticket=ticket,
        )
        return {"rolled_back": plan.rollback_tasks, "route_versions": versions, "refused": refused}
    if plan.action == RoundAction.PROPOSE_ROLLBACK:
        review = review_open_within(
            ticket=ticket,
            reason=ReviewReason.CANARY_GUARDRAIL,
            details={"round": round_.number, "tasks": plan.rollback_tasks, "reason": plan.reason},
            due_at=timezone.now() + timedelta(hours=4),
        )
        return {"proposed_rollback": plan.rollback_tasks, "review": review.pk if review else None}
    if plan.action == RoundAction.PAUSE:
        # Once per pause: again only after a reviewer resumed the canary.
        first = not canary_rounds_since_resume(ticket).filter(action=RoundAction.PAUSE).exclude(pk=round_.pk).exists()
        if first:
            notify(
                event="canary.paused",
                subject=f"{subject}: paused for people",
                text=plan.reason,
                users=people,
                ticket=ticket,
            )
        return {"notified": first}
    if plan.action == RoundAction.PROMOTE:
        try:
            with transaction.atomic():  # a savepoint: a refused promotion leaves the round's record
                routing.routes_promote_within(ticket=ticket, actor=None, reason=reason[:1000])
        except DomainError as exc:
            round_.action, round_.reason = RoundAction.CONTINUE, f"{plan.reason} Not promoted: {exc}"
            return {"promote_refused": str(exc)}
        notify(
            event="ticket.promoted",
            subject=f"Ticket #{ticket.pk} promoted to default on canary evidence",
            text=plan.reason,
            users=people,
            ticket=ticket,
        )
        return {"promoted": True}
    if plan.action == RoundAction.PROPOSE_PROMOTE:
        first = not rounds_of_canary(ticket).filter(action=RoundAction.PROPOSE_PROMOTE).exclude(pk=round_.pk).exists()
        if first:
            notify(
                event="ticket.promotion_ready",
                subject=f"{subject}: the evidence supports promotion",
                text=plan.reason,
                users=people,
                ticket=ticket,
            )
        return {"notified": first}
    return {}
