"""The stages of a ticket's staged evaluation (issue 18): the quality-only pairs after the first."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from gates.models.tickets import ReleaseTicket


class EvaluationStage(models.Model):
    """Stage ``number`` (2, 3, …) of a ticket's evidence: one interleaved pair of quality-only runs
    on the suite's held-out samples of that stage, for the tasks still unsettled when it was asked.

    Stage one is the ticket's own ``baseline_run``/``candidate_run`` pair (quality on the shipped
    samples and all the timing); the stages after it belong to that pair, named by ``first_run``
    (its candidate run), so evidence measured afresh starts a new series and leaves these as history.
    Rows are written once, by ``gates.services.stages.stage_request``.
    """

    ticket = models.ForeignKey(ReleaseTicket, on_delete=models.CASCADE, related_name="stages")
    first_run = models.ForeignKey("evaluators.EvaluationRun", on_delete=models.PROTECT, related_name="+")
    number = models.PositiveSmallIntegerField()
    tasks = models.JSONField(default=list, help_text="the tasks this stage evaluates (those still unsettled)")
    baseline_run = models.ForeignKey("evaluators.EvaluationRun", on_delete=models.PROTECT, related_name="+")
    candidate_run = models.ForeignKey("evaluators.EvaluationRun", on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["ticket", "first_run", "number"]
        constraints = [
            models.UniqueConstraint(fields=["ticket", "first_run", "number"], name="one_stage_per_number"),
            models.CheckConstraint(condition=models.Q(number__gte=2), name="stages_after_the_first"),
        ]

    def __str__(self) -> str:
        return f"stage {self.number} of ticket #{self.ticket_id}"
