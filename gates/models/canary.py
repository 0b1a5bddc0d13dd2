"""Live canary analysis: the rounds that judge a ticket's canary on Prometheus, and the business
signals posted by systems that have no Prometheus of their own."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class RoundVerdict(models.TextChoices):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    ERROR = "error"  # Prometheus could not be asked: no evidence, never a pass


class RoundAction(models.TextChoices):
    CONTINUE = "continue"
    PAUSE = "pause"  # for people: automatic promotion is off for this canary
    ROLLBACK = "rollback"  # one or more tasks rolled back to the rollback target
    PROPOSE_ROLLBACK = "propose_rollback"  # a review asks reviewers to roll tasks back
    PROMOTE = "promote"
    PROPOSE_PROMOTE = "propose_promote"  # the evidence allows promotion; people promote
    RETRY = "retry"  # an error round: the round runs again


class CanaryRound(models.Model):
    """One analysis round of a ticket's canary: what was asked, what came back, what it did.

    Numbered per ticket; the number is unique, so two workers running the same round store one.
    """

    ticket = models.ForeignKey("gates.ReleaseTicket", on_delete=models.CASCADE, related_name="canary_rounds")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    policy_version = models.CharField(max_length=80)
    verdict = models.CharField(max_length=12, choices=RoundVerdict.choices)
    action = models.CharField(max_length=20, choices=RoundAction.choices)
    reason = models.TextField()
    tasks = models.JSONField(default=dict, help_text="task → status, both slices' numbers and the verdicts")
    traffic = models.JSONField(default=dict, help_text="task → candidate requests since the canary started")
    queries = models.JSONField(default=list, help_text="every PromQL query sent, with what it returned")
    details = models.JSONField(default=dict, blank=True, help_text="what the action changed: route versions, review")
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["ticket", "number"]
        constraints = [models.UniqueConstraint(fields=["ticket", "number"], name="one_canary_round_per_number")]

    def __str__(self) -> str:
        return f"canary round {self.number} of ticket #{self.ticket_id}: {self.verdict}, {self.action}"


class OutcomeCount(models.Model):
    """Running totals of the business-signal counter posted through the API, one row per label set.

    Exported at ``/metrics`` as ``optgate_outcome_total`` (``gates.canary.contract``).
    """

    task = models.CharField(max_length=60)
    backend = models.CharField(max_length=100)
    tenant = models.CharField(max_length=100)
    outcome = models.CharField(max_length=20)
    total = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["task", "backend", "tenant", "outcome"], name="one_outcome_count_per_labels"
            )
        ]

    def __str__(self) -> str:
        return f"{self.task}/{self.backend}/{self.tenant}/{self.outcome}: {self.total}"
