"""Forms of the ticket page's evidence and review: failure-sample filters, sign-off, review outcomes."""

from __future__ import annotations

from typing import Any

from django import forms

from gates.models import (
    ReasonCode,
    ReviewerCapacity,
    ReviewOutcome,
    SignOffVerdict,
)


class SampleFilterForm(forms.Form):
    """Filters of the side-by-side failure samples."""

    SHOW_CHOICES = [
        ("regressions", "Regressions (baseline passed, candidate failed)"),
        ("candidate_failed", "Candidate failed"),
        ("any_failed", "Either failed"),
    ]
    task = forms.ChoiceField(required=False)
    reason = forms.ChoiceField(required=False, label="Failure reason")
    show = forms.ChoiceField(choices=SHOW_CHOICES, required=False, initial="regressions")

    def __init__(self, *args: Any, tasks: list[str], reasons: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["task"].choices = [("", "all tasks"), *[(t, t) for t in tasks]]  # type: ignore[attr-defined]
        self.fields["reason"].choices = [("", "any reason"), *[(r, r) for r in reasons]]  # type: ignore[attr-defined]


class SignOffForm(forms.Form):
    """A reviewer's verdict on the current gate decision (see ``gates.services.signoff.signoff_record``)."""

    verdict = forms.ChoiceField(choices=SignOffVerdict.choices, widget=forms.RadioSelect, label="Your verdict")
    tasks = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Tasks the candidate may serve (restrict only)",
        help_text="Unticked tasks stay on the baseline.",
    )
    reason_code = forms.ChoiceField(choices=[("", "— choose —"), *ReasonCode.choices], label="Reason code")
    capacity = forms.ChoiceField(required=False, label="Signing as")
    comment = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False, max_length=4000)
    override_reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        max_length=4000,
        label="Why you differ from the policy's outcome (required when you do)",
    )

    def __init__(self, *args: Any, tasks: list[str], allowed: list[str], capacities: list[str], **kwargs: Any) -> None:
        kwargs.setdefault("initial", {"tasks": allowed})
        super().__init__(*args, **kwargs)
        self.fields["tasks"].choices = [(t, t) for t in tasks]  # type: ignore[attr-defined]
        labels = dict(ReviewerCapacity.choices)
        self.fields["capacity"].choices = [(c, labels.get(c, c)) for c in capacities]  # type: ignore[attr-defined]

    def service_fields(self) -> dict[str, Any]:
        data = self.cleaned_data
        verdict = data["verdict"]
        return {
            "verdict": verdict,
            "reason_code": data["reason_code"],
            "comment": data.get("comment", ""),
            "override_reason": data.get("override_reason", ""),
            "capacity": data.get("capacity") or None,
            # Approve covers every task and reject none; only a restriction names its tasks.
            "tasks": list(data.get("tasks") or []) if verdict == SignOffVerdict.RESTRICT else None,
        }


class ReviewOutcomeForm(forms.Form):
    """The outcome of a review of an active optimization (see ``gates.services.reviews.review_complete``)."""

    outcome = forms.ChoiceField(choices=[("", "— choose —"), *ReviewOutcome.choices])
    restrict_tasks = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Tasks to move back to the baseline (restrict only)"
    )
    comment = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        max_length=4000,
        help_text="Required to restrict or roll back: say why routes move.",
    )

    def __init__(self, *args: Any, tasks: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["restrict_tasks"].choices = [(t, t) for t in tasks]  # type: ignore[attr-defined]

    def service_fields(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "outcome": data["outcome"],
            "comment": data.get("comment", ""),
            "restrict_tasks": list(data.get("restrict_tasks") or []) or None,
        }
