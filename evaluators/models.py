"""Evaluation records: one run per backend × suites × engine × hardware, its attempts, per-task
results and per-sample records. The database is the record of work; a broker only carries ids.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.errors import DomainError


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    ERROR = "error"
    CANCELLED = "cancelled"


class RunErrorKind(models.TextChoices):
    """Why a run ended in error: the engine's own configuration, or anything else (a retry may help)."""

    NONE = "", "no error"
    START_FAILED = "start_failed", "the engine could not start with this configuration on this hardware"
    OTHER = "other", "the run broke (infrastructure, a dying engine, a timeout)"


class RunSource(models.TextChoices):
    """Who produced a run's evidence: an OptGate worker measured it, or a person imported files."""

    MEASURED = "measured"
    IMPORTED = "imported"


FINISHED_STATUSES = frozenset({RunStatus.SUCCEEDED, RunStatus.ERROR, RunStatus.CANCELLED})

RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.ERROR}),
    RunStatus.RUNNING: frozenset({RunStatus.SUCCEEDED, RunStatus.ERROR, RunStatus.CANCELLED, RunStatus.QUEUED}),
    RunStatus.ERROR: frozenset({RunStatus.QUEUED}),  # a retry
    RunStatus.CANCELLED: frozenset({RunStatus.QUEUED}),
    RunStatus.SUCCEEDED: frozenset(),
}


class EvaluationRun(models.Model):
    """Evidence for one backend on a set of task suites, measured on one engine and hardware class.

    ``reuse_key`` identifies runs whose evidence is interchangeable (same backend fingerprint,
    suite versions, engine version, hardware class and load profile), so a finished baseline
    can serve several tickets.
    """

    backend = models.ForeignKey("backends.Backend", on_delete=models.PROTECT, related_name="runs")
    tasks = models.JSONField(default=list, help_text="task type slugs, in evaluation order")
    suite_versions = models.JSONField(default=dict)
    engine_version = models.CharField(max_length=40)
    hardware_class = models.CharField(max_length=100)
    load_profile = models.JSONField(default=dict)
    reuse_key = models.CharField(max_length=64, db_index=True)
    attach_base_url = models.URLField(blank=True, help_text="evaluate this running endpoint instead of launching")
    attach_model = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=12, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    phase = models.CharField(max_length=60, blank=True)
    progress = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    error_kind = models.CharField(max_length=20, choices=RunErrorKind.choices, blank=True, default=RunErrorKind.NONE)
    engine_evidence = models.JSONField(default=dict, blank=True)
    reused_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Interleaved pairs: a baseline and a candidate run measured together on one worker, in
    # alternating blocks (``evaluators.interleave``); each names the other and its own side.
    paired_run = models.OneToOneField("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    pair_side = models.CharField(max_length=10, blank=True, help_text="baseline or candidate within its pair")
    source = models.CharField(max_length=10, choices=RunSource.choices, default=RunSource.MEASURED)
    imported_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="who imported the evidence files (imported runs only)",
    )
    deadline_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(default=timezone.now, help_text="when the run last became queued")
    sent_at = models.DateTimeField(
        null=True, blank=True, help_text="when the broker accepted the current queued message; empty until then"
    )
    cancel_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"run #{self.pk} of {self.backend_id} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    def move(self, target: str, **changes: Any) -> str:
        """Compare-and-swap the run's status; raise ``DomainError`` when the move is illegal or lost.

        Returns the previous status.
        """
        if target not in RUN_TRANSITIONS.get(self.status, frozenset()):
            raise DomainError(f"run #{self.pk} cannot move from {self.status} to {target}")
        now = timezone.now()
        changes = {"status": target, **changes}
        if target == RunStatus.QUEUED:
            changes.setdefault("queued_at", now)
            changes.setdefault("sent_at", None)
        if target == RunStatus.RUNNING:
            changes.setdefault("started_at", now)
        if target in FINISHED_STATUSES:
            changes.setdefault("finished_at", now)
        if EvaluationRun.objects.filter(pk=self.pk, status=self.status).update(**changes) != 1:
            raise DomainError(f"run #{self.pk} changed concurrently; it is no longer {self.status}")
        previous = self.status
        for field, value in changes.items():
            setattr(self, field, value)
        return previous


class EvaluationAttempt(models.Model):
    """One try at a run: which worker, which engine process group, how it ended."""

    run = models.ForeignKey(EvaluationRun, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=12, choices=RunStatus.choices, default=RunStatus.RUNNING)
    phase = models.CharField(max_length=60, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    engine_pid = models.IntegerField(null=True, blank=True)
    engine_pgid = models.IntegerField(null=True, blank=True)
    engine_log = models.CharField(max_length=500, blank=True)
    error = models.TextField(blank=True)
    timings = models.JSONField(default=dict, blank=True)
    artifacts = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="unique_attempt_number")]

    def __str__(self) -> str:
        return f"attempt {self.number} of run #{self.run_id}"


class TaskResult(models.Model):
    """One task type's evidence within a run: quality, performance and engine counters."""

    run = models.ForeignKey(EvaluationRun, on_delete=models.CASCADE, related_name="task_results")
    task = models.CharField(max_length=60)
    suite_version = models.CharField(max_length=40)
    quality = models.JSONField(default=dict, help_text="n, pass_rate, score_mean, failure reasons")
    performance = models.JSONField(default=dict, help_text="load-generator aggregates")
    requests = models.JSONField(default=list, help_text="raw per-request records, kept so a verdict can be re-judged")
    engine_evidence = models.JSONField(default=dict)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["run", "task"]
        constraints = [models.UniqueConstraint(fields=["run", "task"], name="unique_task_result")]

    def __str__(self) -> str:
        return f"{self.task} in run #{self.run_id}"


class SampleRecord(models.Model):
    """One suite sample's output and verdict: what reviewers read when a task regresses."""

    run = models.ForeignKey(EvaluationRun, on_delete=models.CASCADE, related_name="samples")
    task = models.CharField(max_length=60)
    sample_id = models.CharField(max_length=100)
    prompt = models.TextField()
    target = models.TextField(blank=True)
    output = models.TextField()
    passed = models.BooleanField()
    score = models.FloatField()
    failure_reason = models.CharField(max_length=120, blank=True)
    detail = models.TextField(blank=True)
    latency_ms = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["run", "task", "sample_id"]
        constraints = [models.UniqueConstraint(fields=["run", "task", "sample_id"], name="unique_sample_record")]
        indexes = [models.Index(fields=["run", "task", "passed"])]

    def __str__(self) -> str:
        return f"{self.sample_id} in run #{self.run_id}"


class ParkedEngine(models.Model):
    """An engine a worker process kept up after its run for the next one (evaluators.warm).

    The engine runs in its own session and outlives a worker process killed outright, so this
    record is what the worker's next start and the sweeper use to find and kill it.
    """

    worker = models.CharField(max_length=200, help_text="the worker that parked it, as its attempts name it")
    host = models.CharField(max_length=200)
    owner_pid = models.IntegerField(help_text="the worker process holding it")
    pid = models.IntegerField()
    pgid = models.IntegerField()
    port = models.IntegerField()
    backend = models.ForeignKey("backends.Backend", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    started_for_run = models.ForeignKey(
        EvaluationRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    parked_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        ordering = ["parked_at"]

    def __str__(self) -> str:
        return f"parked engine group {self.pgid} of {self.worker}"
