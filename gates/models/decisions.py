"""Gate decisions and the reviewers' sign-offs on them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from gates.models.tickets import ReleaseTicket


class DecisionOutcome(models.TextChoices):
    APPROVE = "approve"
    RESTRICT = "restrict"
    REJECT = "reject"
    NEEDS_EVIDENCE = "needs_evidence"
    # An engine could not start: nothing was measured and more evidence would not help.
    ERROR = "error"


class GateDecision(models.Model):
    """One judgement of a ticket's baseline and candidate runs under one policy version.

    A ticket collects several over time (re-evaluations); the latest binding one (not dry-run)
    is the current decision. Rows are written once; only the reviewers' binding verdict
    (``signed_verdict``/``signed_tasks``) is filled in later, once, by compare-and-swap.
    """

    ticket = models.ForeignKey(ReleaseTicket, on_delete=models.CASCADE, related_name="decisions")
    policy_version = models.CharField(max_length=120)
    dry_run = models.BooleanField(default=False)
    baseline_run = models.ForeignKey("evaluators.EvaluationRun", on_delete=models.PROTECT, related_name="+")
    candidate_run = models.ForeignKey("evaluators.EvaluationRun", on_delete=models.PROTECT, related_name="+")
    outcome = models.CharField(max_length=20, choices=DecisionOutcome.choices)
    verdicts = models.JSONField(default=dict, help_text="per task: the judge's TaskVerdict.to_dict()")
    reasons = models.JSONField(default=list)
    proposed_routes = models.JSONField(default=dict, help_text="task → candidate | baseline")
    allowed_tasks = models.JSONField(default=list)
    samples_needed = models.JSONField(default=dict)
    warnings = models.JSONField(default=list, help_text="governance findings, e.g. cross-tenant prefix cache")
    seed = models.BigIntegerField(null=True, blank=True)
    stages = models.JSONField(
        default=dict,
        blank=True,
        help_text="a staged evaluation's stages, design and per-task looks; {} for one fixed stage",
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    signed_verdict = models.CharField(max_length=20, blank=True, choices=DecisionOutcome.choices)
    signed_tasks = models.JSONField(default=list, help_text="tasks the signed verdict lets the candidate serve")
    signed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["ticket", "dry_run", "-id"])]

    def __str__(self) -> str:
        return f"decision #{self.pk} on ticket #{self.ticket_id}: {self.outcome}"


class ReviewerCapacity(models.TextChoices):
    """The hat a reviewer signs in; a risk tier requires some of them (see ``gates.services.signoff``)."""

    PLATFORM = "platform"
    SRE = "sre"
    BUSINESS_OWNER = "business_owner"
    SECURITY = "security"


class SignOffVerdict(models.TextChoices):
    APPROVE = "approve"
    RESTRICT = "restrict"
    REJECT = "reject"


class ReasonCode(models.TextChoices):
    EVIDENCE_SUFFICIENT = "evidence_sufficient"
    GUARDRAIL_REGRESSION = "guardrail_regression"
    INSUFFICIENT_SAMPLES = "insufficient_samples"
    BENEFIT_NOT_SHOWN = "benefit_not_shown"
    BUSINESS_RISK = "business_risk"
    SECURITY_RISK = "security_risk"
    CAPACITY_NEED = "capacity_need"
    POLICY_OVERRIDE = "policy_override"


class SignOff(models.Model):
    """One reviewer's verdict on one decision, in one capacity. Never the ticket owner's."""

    ticket = models.ForeignKey(ReleaseTicket, on_delete=models.CASCADE, related_name="sign_offs")
    decision = models.ForeignKey(GateDecision, on_delete=models.CASCADE, related_name="sign_offs")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="sign_offs")
    capacity = models.CharField(max_length=20, choices=ReviewerCapacity.choices)
    verdict = models.CharField(max_length=10, choices=SignOffVerdict.choices)
    tasks = models.JSONField(default=list, help_text="tasks the candidate may serve under this verdict")
    reason_code = models.CharField(max_length=40, choices=ReasonCode.choices)
    comment = models.TextField(blank=True)
    override = models.BooleanField(default=False, help_text="the verdict differs from the policy's outcome")
    override_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["decision", "reviewer"], name="one_sign_off_per_reviewer")]

    def __str__(self) -> str:
        return f"{self.verdict} by {self.reviewer_id} ({self.capacity}) on decision #{self.decision_id}"


class EvidenceAcceptance(models.Model):
    """A reviewer's acceptance of imported evidence the ticket's owner supplied (see the policy's
    ``evidence.owner_imported``): until one exists, that evidence informs but approves nothing."""

    ticket = models.ForeignKey("gates.ReleaseTicket", on_delete=models.CASCADE, related_name="evidence_acceptances")
    run = models.ForeignKey("evaluators.EvaluationRun", on_delete=models.PROTECT, related_name="+")
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    reason = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["ticket", "run"], name="unique_evidence_acceptance")]

    def __str__(self) -> str:
        return f"run #{self.run_id} accepted for ticket #{self.ticket_id}"
