"""Reviews of active optimizations and the time-driven checks that open them.

The scans here are what the beat schedules run. Each is idempotent: one open review per ticket
and reason (a database constraint), reminders and prompts keyed on stored timestamps, so a
schedule that fires twice or late does the right thing once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from backends.models import Backend
from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import ADMIN, REVIEWER, has_role
from gates.models import Notification, ReleaseTicket, Review, ReviewOutcome, ReviewReason, ReviewStatus, TicketStatus
from gates.services import routing
from gates.services.notifications import notify
from ledger.services import ledger_append

ACTIVE = (TicketStatus.CANARY, TicketStatus.DEFAULT)


def _reviewers() -> list[User]:
    return list(User.objects.filter(groups__name=REVIEWER, is_active=True).distinct())


def review_open(
    *, ticket: ReleaseTicket, reason: str, details: dict[str, object] | None = None, due_at: datetime | None = None
) -> Review | None:
    """Open a review and notify the owner and reviewers; None when one is already open for this reason."""
    with transaction.atomic(durable=True):
        return review_open_within(ticket=ticket, reason=reason, details=details, due_at=due_at)


def review_open_within(
    *, ticket: ReleaseTicket, reason: str, details: dict[str, object] | None = None, due_at: datetime | None = None
) -> Review | None:
    """``review_open`` inside the caller's transaction (a canary round opens one with its record)."""
    now = timezone.now()
    try:
        # A savepoint: a duplicate open review (the constraint) undoes only this, not the caller's work.
        with transaction.atomic():
            review = Review.objects.create(
                ticket=ticket,
                reason=reason,
                details=details or {},
                due_at=due_at or now + timedelta(days=settings.OPTGATE_REVIEW_DUE_DAYS),
                last_reminded_at=now,
            )
    except IntegrityError:
        return None
    ledger_append(
        kind="review.opened",
        subject_type="ticket",
        subject_id=ticket.pk,
        subject_name=ticket.title,
        actor=None,
        payload={
            "review": review.pk,
            "reason": reason,
            "details": details or {},
            "due_at": review.due_at.isoformat(),
        },
    )
    notify(
        event="review.opened",
        subject=f"Review due for ticket #{ticket.pk} ({reason.replace('_', ' ')})",
        text=f"{ticket.title} ({ticket.status}) needs a {reason.replace('_', ' ')} review by "
        f"{review.due_at:%Y-%m-%d}: keep default, restrict, roll back or observe more.",
        users=[ticket.owner, *_reviewers()],
        ticket=ticket,
    )
    return review


def reviews_open_due(*, now: datetime | None = None) -> list[Review]:
    """Open a quarterly review for every optimization in canary or default whose last one is a quarter old."""
    now = now or timezone.now()
    interval = timedelta(days=settings.OPTGATE_REVIEW_INTERVAL_DAYS)
    opened = []
    for ticket in ReleaseTicket.objects.filter(status__in=ACTIVE).select_related("owner"):
        if ticket.reviews.filter(reason=ReviewReason.QUARTERLY, status=ReviewStatus.OPEN).exists():
            continue
        last = ticket.reviews.filter(reason=ReviewReason.QUARTERLY, status=ReviewStatus.DONE).order_by("-completed_at")
        anchor = last.first().completed_at if last.exists() else ticket.canary_started_at  # type: ignore[union-attr]
        if anchor is None or anchor + interval > now:
            continue
        review = review_open(ticket=ticket, reason=ReviewReason.QUARTERLY, details={"since": anchor.isoformat()})
        if review is not None:
            opened.append(review)
    return opened


def reviews_remind(*, now: datetime | None = None) -> list[Review]:
    """Remind owner and reviewers of every open review not reminded for ``OPTGATE_REVIEW_REMINDER_HOURS``."""
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.OPTGATE_REVIEW_REMINDER_HOURS)
    reminded = []
    for review in Review.objects.filter(status=ReviewStatus.OPEN, last_reminded_at__lte=cutoff).select_related(
        "ticket__owner"
    ):
        with transaction.atomic(durable=True):
            # Compare-and-swap on the last reminder: two overlapping sweeps remind once.
            claimed = Review.objects.filter(
                pk=review.pk, status=ReviewStatus.OPEN, last_reminded_at=review.last_reminded_at
            ).update(last_reminded_at=now, reminders_sent=review.reminders_sent + 1)
            if not claimed:
                continue
            overdue = " (overdue)" if review.due_at <= now else ""
            notify(
                event="review.reminder",
                subject=f"Reminder: review of ticket #{review.ticket_id}{overdue}",
                text=f"{review.ticket.title}: the {review.reason.replace('_', ' ')} review is due "
                f"{review.due_at:%Y-%m-%d}{overdue}.",
                users=[review.ticket.owner, *_reviewers()],
                ticket=review.ticket,
            )
        reminded.append(review)
    return reminded


def approvals_expire(*, now: datetime | None = None) -> list[Review]:
    """Approved or restricted tickets that never reached canary within the TTL go back under review."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.OPTGATE_APPROVAL_TTL_DAYS)
    opened = []
    stale = ReleaseTicket.objects.filter(
        status__in=(TicketStatus.APPROVED, TicketStatus.RESTRICTED), decided_at__lte=cutoff
    ).select_related("owner")
    for ticket in stale:
        decided = ticket.decided_at.isoformat() if ticket.decided_at else None
        review = review_open(ticket=ticket, reason=ReviewReason.APPROVAL_EXPIRED, details={"decided_at": decided})
        if review is not None:
            opened.append(review)
    return opened


def observation_windows_close(*, now: datetime | None = None) -> list[tuple[int, str]]:
    """Canary tickets whose observation window has ended: prompt the owner and reviewers once.

    Time alone never promotes: promotion on evidence is the canary rounds' (``gates.services.canary``),
    automatic only for the risk tiers in ``OPTGATE_AUTO_PROMOTE_RISK_TIERS``.
    """
    now = now or timezone.now()
    done: list[tuple[int, str]] = []
    for ticket in ReleaseTicket.objects.filter(status=TicketStatus.CANARY).select_related("owner"):
        ends = ticket.observation_window_ends
        if ends is None or ends > now:
            continue
        if Notification.objects.filter(
            ticket=ticket, event="ticket.promotion_due", created_at__gte=ticket.canary_started_at
        ).exists():
            continue  # prompted once for this canary period
        with transaction.atomic():
            notify(
                event="ticket.promotion_due",
                subject=f"Ticket #{ticket.pk}: observation window ended",
                text=f"{ticket.title} has been in canary for {ticket.observation_window_hours} h: promote it to "
                "default or roll it back, on the canary rounds' evidence.",
                users=[ticket.owner, *_reviewers()],
                ticket=ticket,
            )
        done.append((ticket.pk, "prompted"))
    return done


def backends_recheck() -> list[Review]:
    """Active optimizations whose candidate now exists on another engine version or hardware class.

    Backends are immutable, so an upgrade registers a new backend with the same weights and
    arguments: the active ticket's evidence is then for a configuration no longer served as
    measured, and it is queued for a re-check review.
    """
    opened = []
    for ticket in ReleaseTicket.objects.filter(status__in=ACTIVE).select_related("candidate", "owner"):
        old = ticket.candidate
        same_weights = Backend.objects.filter(model_id=old.model_id, model_revision=old.model_revision)
        newer = same_weights.filter(created_at__gt=old.created_at).exclude(pk=old.pk).order_by("created_at")
        for backend in newer:
            if backend.engine_args != old.engine_args or backend.sampling_params != old.sampling_params:
                continue
            for field, reason in (
                ("engine_version", ReviewReason.ENGINE_CHANGED),
                ("hardware_class", ReviewReason.HARDWARE_CHANGED),
            ):
                if getattr(backend, field) == getattr(old, field):
                    continue
                details = {
                    "field": field,
                    "from": getattr(old, field),
                    "to": getattr(backend, field),
                    "backend": backend.name,
                }
                review = review_open(ticket=ticket, reason=reason, details=details)
                if review is not None:
                    opened.append(review)
    return opened


def review_complete(
    *, review: Review, outcome: str, actor: User, comment: str = "", restrict_tasks: list[str] | None = None
) -> Review:
    """Record a review's outcome and apply it: all of it commits in one transaction or none of it does.

    keep_default changes nothing; restrict moves the named tasks back to the baseline route;
    rollback rolls the ticket back; observe_more opens a follow-up review of the same reason.
    The review row is locked first, so of two concurrent completions one wins and the other
    raises ``DomainError`` (HTTP 409) without having moved a route.
    """
    if outcome not in ReviewOutcome.values:
        raise InvalidInput({"outcome": f"must be one of {', '.join(ReviewOutcome.values)}"})
    if not has_role(actor, REVIEWER, ADMIN):
        raise NotAllowed("reviews are completed by reviewers")
    if review.ticket.owner_id == actor.pk:
        raise NotAllowed("the ticket's owner cannot review their own optimization")
    if outcome == ReviewOutcome.RESTRICT and not restrict_tasks:
        raise InvalidInput({"restrict_tasks": "name the tasks to move back to the baseline"})
    if outcome in (ReviewOutcome.ROLLBACK, ReviewOutcome.RESTRICT) and not comment.strip():
        raise InvalidInput({"comment": "say why routes move back to the rollback target"})
    with transaction.atomic(durable=True):
        locked = Review.objects.select_for_update().select_related("ticket").get(pk=review.pk)
        if locked.status != ReviewStatus.OPEN:
            raise DomainError(f"review #{review.pk} is already {locked.status}")
        ticket = locked.ticket
        applied: dict[str, object] = {}
        if outcome in (ReviewOutcome.ROLLBACK, ReviewOutcome.RESTRICT):
            reason = f"review #{review.pk} ({outcome}): {comment}"
            # Route changes (and the ticket's move to rolled_back) are the routing service's, with their
            # ledger entries, in this transaction: a failure after the first one undoes them all.
            tasks: list[str | None] = [None] if outcome == ReviewOutcome.ROLLBACK else list(restrict_tasks or [])
            applied["route_versions"] = [
                routing.routes_rollback_within(ticket=ticket, actor=actor, reason=reason, task=task).number
                for task in tasks
            ]
        # Compare-and-swap as well as the lock: a database without row locks (SQLite) still closes once.
        closed = Review.objects.filter(pk=review.pk, status=ReviewStatus.OPEN).update(
            status=ReviewStatus.DONE, outcome=outcome, comment=comment, reviewed_by=actor, completed_at=timezone.now()
        )
        if closed != 1:
            raise DomainError(f"review #{review.pk} was completed concurrently")
        ledger_append(
            kind="review.completed",
            subject_type="ticket",
            subject_id=ticket.pk,
            subject_name=ticket.title,
            actor=actor,
            payload={
                "review": review.pk,
                "reason": locked.reason,
                "outcome": outcome,
                "comment": comment,
                "restrict_tasks": restrict_tasks or [],
                "applied": applied,
            },
        )
        if outcome == ReviewOutcome.OBSERVE_MORE:
            review_open_within(ticket=ticket, reason=locked.reason, details={"follows": review.pk, "comment": comment})
    review.refresh_from_db()
    return review
