"""A/A calibrations: a backend measured against itself, for the noise floor of every judged metric."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.errors import DomainError


class CalibrationStatus(models.TextChoices):
    MEASURING = "measuring"
    FINISHED = "finished"
    FAILED = "failed"


CALIBRATION_TRANSITIONS: dict[str, frozenset[str]] = {
    CalibrationStatus.MEASURING: frozenset({CalibrationStatus.FINISHED, CalibrationStatus.FAILED}),
    CalibrationStatus.FINISHED: frozenset(),
    CalibrationStatus.FAILED: frozenset(),
}


class Calibration(models.Model):
    """Two engines of one backend measured together (an interleaved pair of runs), and per task the
    noise floors that pair showed (``gates.judge.noise``).

    It speaks for the configuration it measured: the backend's fingerprint, engine version and
    hardware class are kept, and a calibration is current only while all three are the backend's
    (``gates.selectors.calibrations``).
    """

    backend = models.ForeignKey("backends.Backend", on_delete=models.PROTECT, related_name="calibrations")
    fingerprint = models.CharField(max_length=64)
    engine_version = models.CharField(max_length=40)
    hardware_class = models.CharField(max_length=100)
    tasks = models.JSONField(default=list)
    baseline_run = models.ForeignKey("evaluators.EvaluationRun", on_delete=models.PROTECT, related_name="+")
    candidate_run = models.ForeignKey("evaluators.EvaluationRun", on_delete=models.PROTECT, related_name="+")
    status = models.CharField(
        max_length=12, choices=CalibrationStatus.choices, default=CalibrationStatus.MEASURING, db_index=True
    )
    floors = models.JSONField(default=dict, help_text="task → metric → noise floor (a fraction on the judged scale)")
    discordance = models.JSONField(default=dict, help_text="task → {rate, discordant, paired} of pass/fail verdicts")
    task_errors = models.JSONField(default=dict, help_text="task → why it has no floors")
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["backend", "status", "-created_at"], name="calibration_newest")]

    def __str__(self) -> str:
        return f"calibration #{self.pk} of {self.backend_id} ({self.status})"

    def move(self, target: str, **changes: Any) -> None:
        """Compare-and-swap the status; raise ``DomainError`` when the move is illegal or was lost."""
        if target not in CALIBRATION_TRANSITIONS.get(self.status, frozenset()):
            raise DomainError(f"calibration #{self.pk} cannot move from {self.status} to {target}")
        changes = {"status": target, "finished_at": timezone.now(), **changes}
        if Calibration.objects.filter(pk=self.pk, status=self.status).update(**changes) != 1:
            raise DomainError(f"calibration #{self.pk} changed concurrently; it is no longer {self.status}")
        for field, value in changes.items():
            setattr(self, field, value)
