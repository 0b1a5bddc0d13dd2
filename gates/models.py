"""Task types and release tickets, with the ticket's guarded state machine."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from optgate.errors import DomainError


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
    baseline = models.ForeignKey("ledger.Backend", on_delete=models.PROTECT, related_name="baseline_tickets")
    candidate = models.ForeignKey("ledger.Backend", on_delete=models.PROTECT, related_name="candidate_tickets")
    beneficiary_tasks = models.ManyToManyField(TaskType, related_name="beneficiary_tickets")
    risk_tasks = models.ManyToManyField(TaskType, related_name="risk_tickets", blank=True)
    benefit_metrics = models.JSONField(default=list)
    guardrail_metrics = models.JSONField(default=list)
    rollback_target = models.ForeignKey("ledger.Backend", on_delete=models.PROTECT, related_name="rollback_tickets")
    rollback_plan = models.JSONField(default=dict)
    observation_window_hours = models.PositiveIntegerField(default=168)
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
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        # The list's order: its first page reads 50 index entries instead of sorting every ticket.
        indexes = [models.Index(fields=["-created_at", "-id"], name="ticket_newest_first")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.title}"

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


class IdempotencyRecord(models.Model):
    """The first response to a create request carrying an ``Idempotency-Key`` header."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    endpoint = models.CharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key", "endpoint"], name="unique_idempotency_key")]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.key}"


# --- The gate: decisions, reviewer sign-offs and the versioned route table -------------------


class DecisionOutcome(models.TextChoices):
    APPROVE = "approve"
    RESTRICT = "restrict"
    REJECT = "reject"
    NEEDS_EVIDENCE = "needs_evidence"


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
    """The hat a reviewer signs in; a risk tier requires some of them (see ``gates.signoff``)."""

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


class RouteTableVersion(models.Model):
    """One version of the whole route table; its ``routes`` are the complete table at that version."""

    number = models.PositiveIntegerField(unique=True)
    kind = models.CharField(max_length=20, help_text="set | canary | promote | rollback")
    reason = models.TextField(blank=True)
    ticket = models.ForeignKey(ReleaseTicket, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    changes = models.JSONField(default=list, help_text="[{task, tenant, from, to}] against the previous version")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"route table v{self.number}"


class Route(models.Model):
    """Task type (optionally for one tenant) → backend, as of one route-table version."""

    version = models.ForeignKey(RouteTableVersion, on_delete=models.CASCADE, related_name="routes")
    task = models.ForeignKey(TaskType, on_delete=models.PROTECT, related_name="+")
    tenant = models.CharField(max_length=100, blank=True, help_text="empty: every tenant without its own route")
    backend = models.ForeignKey("ledger.Backend", on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["task__slug", "tenant"]
        constraints = [models.UniqueConstraint(fields=["version", "task", "tenant"], name="one_route_per_scope")]

    def __str__(self) -> str:
        scope = f"@{self.tenant}" if self.tenant else ""
        return f"{self.task_id}{scope} → {self.backend_id} (v{self.version_id})"


# --- API access --------------------------------------------------------------------------------


class ApiToken(models.Model):
    """An API key for scripts and CI. Only the sha256 of its secret is stored.

    The full key, ``og_<prefix>_<secret>``, is shown once when the token is issued or rotated;
    ``prefix`` is public and finds the row, the secret is checked against ``key_hash``. A token is
    never deleted: revoking stamps ``revoked_at`` so its history (and who held it) stays readable.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, default="default", help_text="what the token is for, e.g. ci-deploy")
    prefix = models.CharField(max_length=24, unique=True, help_text="public part of the key; finds the token")
    key_hash = models.CharField(max_length=64, help_text="sha256 hex of the secret part of the key")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}) of user {self.user_id}"

    def state_at(self, now: datetime) -> str:
        """``active``, ``expired`` or ``revoked`` at ``now``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"
