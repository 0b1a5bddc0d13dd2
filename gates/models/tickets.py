"""Task types and release tickets, with the ticket's guarded state machine."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from core.errors import DomainError


class RiskTier(models.TextChoices):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class TaskType(models.Model):
    """A business workload family with its versioned regression suite."""

    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    risk_tier = models.CharField(max_length=10, choices=RiskTier.choices)
    suite_ref = models.CharField(max_length=200, help_text="Where the suite lives, e.g. evaluators/suites/cs_summary")
    suite_version = models.CharField(max_length=40)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Mechanism(models.TextChoices):
    KV_CACHE_MANAGEMENT = "kv_cache_management"
    PREFIX_CACHE = "prefix_cache"
    SPECULATIVE_DECODING = "speculative_decoding"
    WEIGHT_QUANTIZATION = "weight_quantization"
    KV_CACHE_QUANTIZATION = "kv_cache_quantization"
    BATCHING = "batching"
    PARALLELISM = "parallelism"
    CONTEXT_LIMIT = "context_limit"


class Bottleneck(models.TextChoices):
    QUEUEING = "queueing"
    PREFILL = "prefill"
    DECODE = "decode"
    KV_MEMORY = "kv_memory"
    STRUCTURED_OUTPUT = "structured_output"


# A canary's observation window, in hours: from 36 seconds (a demo's) to a year.
MIN_WINDOW_HOURS = 0.01
MAX_WINDOW_HOURS = 24 * 366


class TicketStatus(models.TextChoices):
    DRAFT = "draft"
    SUBMITTED = "submitted"
    EVALUATING = "evaluating"
    EVALUATED = "evaluated"
    NEEDS_EVIDENCE = "needs_evidence"
    APPROVED = "approved"
    RESTRICTED = "restricted"
    REJECTED = "rejected"
    CANARY = "canary"
    DEFAULT = "default"
    ROLLED_BACK = "rolled_back"
    RETIRED = "retired"


S = TicketStatus

# The whole lifecycle in one place: (action, from-states, to-state).
TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    "submit": (frozenset({S.DRAFT}), S.SUBMITTED),
    "start_evaluation": (frozenset({S.SUBMITTED, S.NEEDS_EVIDENCE}), S.EVALUATING),
    "finish_evaluation": (frozenset({S.EVALUATING}), S.EVALUATED),
    "approve": (frozenset({S.EVALUATED}), S.APPROVED),
    "restrict": (frozenset({S.EVALUATED}), S.RESTRICTED),
    "reject": (frozenset({S.EVALUATED}), S.REJECTED),
    "request_evidence": (frozenset({S.EVALUATED}), S.NEEDS_EVIDENCE),
    "start_canary": (frozenset({S.APPROVED, S.RESTRICTED}), S.CANARY),
    "promote": (frozenset({S.CANARY}), S.DEFAULT),
    "roll_back": (frozenset({S.CANARY, S.DEFAULT}), S.ROLLED_BACK),
    "retire": (frozenset({S.DEFAULT, S.ROLLED_BACK, S.REJECTED}), S.RETIRED),
}


class IllegalTransition(DomainError):
    pass


def allowed_actions(status: str) -> list[str]:
    """The transitions a ticket in ``status`` may take."""
    return [action for action, (sources, _) in TRANSITIONS.items() if status in sources]


class ReleaseTicket(models.Model):
    """An optimization release: what changes, for which tasks, with what evidence and way back."""

    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    mechanisms = models.JSONField(default=list)
    bottleneck = models.CharField(max_length=20, choices=Bottleneck.choices)
    bottleneck_evidence = models.TextField()
    baseline = models.ForeignKey("backends.Backend", on_delete=models.PROTECT, related_name="baseline_tickets")
    candidate = models.ForeignKey("backends.Backend", on_delete=models.PROTECT, related_name="candidate_tickets")
    beneficiary_tasks = models.ManyToManyField(TaskType, related_name="beneficiary_tickets")
    risk_tasks = models.ManyToManyField(TaskType, related_name="risk_tickets", blank=True)
    benefit_metrics = models.JSONField(default=list)
    guardrail_metrics = models.JSONField(default=list)
    rollback_target = models.ForeignKey("backends.Backend", on_delete=models.PROTECT, related_name="rollback_tickets")
    rollback_plan = models.JSONField(default=dict)
    # Hours, fractions allowed (0.05 = 3 minutes: a demo's or a staging fleet's canary); time alone
    # never promotes, the policy's traffic and peak conditions still apply.
    observation_window_hours = models.FloatField(
        default=168, validators=[MinValueValidator(MIN_WINDOW_HOURS), MaxValueValidator(MAX_WINDOW_HOURS)]
    )
    canary_scope = models.JSONField(default=dict)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="tickets")
    status = models.CharField(max_length=20, choices=TicketStatus.choices, default=TicketStatus.DRAFT, db_index=True)
    # The evaluation runs the current decision is based on; set by the evaluation orchestration.
    baseline_run = models.ForeignKey(
        "evaluators.EvaluationRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    candidate_run = models.ForeignKey(
        "evaluators.EvaluationRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    # When the current canary started: the observation window and the first quarterly review count from it.
    canary_started_at = models.DateTimeField(null=True, blank=True)
    # When a reviewer last resumed the canary after rounds paused it: pauses and failures before it are settled.
    canary_resumed_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        # The list's order: its first page reads 50 index entries instead of sorting every ticket.
        indexes = [models.Index(fields=["-created_at", "-id"], name="ticket_newest_first")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.title}"

    @property
    def observation_window_ends(self) -> datetime | None:
        """When the canary's observation window ends; None before the canary starts."""
        if self.canary_started_at is None:
            return None
        return self.canary_started_at + timedelta(hours=self.observation_window_hours)

    def transition(self, action: str) -> str:
        """Move to the state ``action`` leads to, or raise ``IllegalTransition``.

        Compare-and-swap on the current status: when another process moved the ticket first,
        the update matches no row and this call fails instead of overwriting that move.
        Returns the previous status.
        """
        if action not in TRANSITIONS:
            raise IllegalTransition(f"unknown ticket action {action!r}")
        sources, target = TRANSITIONS[action]
        if self.status not in sources:
            allowed = ", ".join(sorted(sources))
            raise IllegalTransition(
                f"cannot {action.replace('_', ' ')} a ticket that is {self.status} (allowed from: {allowed})"
            )
        now = timezone.now()
        changes: dict[str, Any] = {"status": target, "updated_at": now}
        if target == S.SUBMITTED:
            changes["submitted_at"] = now
        if target in {S.APPROVED, S.RESTRICTED, S.REJECTED}:
            changes["decided_at"] = now
        if target == S.CANARY:
            changes["canary_started_at"] = now
        if target in {S.REJECTED, S.RETIRED}:
            changes["closed_at"] = now
        updated = ReleaseTicket.objects.filter(pk=self.pk, status=self.status).update(**changes)
        if updated != 1:
            current = ReleaseTicket.objects.filter(pk=self.pk).values_list("status", flat=True).first()
            raise IllegalTransition(f"ticket #{self.pk} changed concurrently (now {current}); reload and retry")
        previous = self.status
        for field, value in changes.items():
            setattr(self, field, value)
        return previous

    def allowed_actions(self) -> list[str]:
        return allowed_actions(self.status)
