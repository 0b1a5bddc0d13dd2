"""The ticket form and the lifecycle-action form."""

from __future__ import annotations

from typing import Any

from django import forms

from backends.models import Backend
from gates.display import human
from gates.models import (
    TRANSITIONS,
    Bottleneck,
    Mechanism,
    ReleaseTicket,
    TaskType,
)
from gates.models.tickets import MAX_WINDOW_HOURS, MIN_WINDOW_HOURS
from gates.vocabulary import PERFORMANCE_METRICS, QUALITY_METRICS, ROLLBACK_PLAN_FIELDS


def _backends() -> Any:
    return Backend.objects.order_by("name")


class BackendChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.name} ({obj.fingerprint[:12]})"


class TaskChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.slug} — {obj.name} ({obj.risk_tier} risk)"


METRIC_CHOICES = [
    ("Performance", [(m, m) for m in PERFORMANCE_METRICS]),
    ("Quality", [(m, m) for m in QUALITY_METRICS]),
]
ROLLBACK_FORM_FIELDS = {key: f"rollback_{key}" for key in ROLLBACK_PLAN_FIELDS}

# Where a service error key lands on the ticket form; keys not listed go to the form as a whole.
TICKET_ERROR_FIELDS: dict[str, str] = {
    **{f"rollback_plan.{key}": name for key, name in ROLLBACK_FORM_FIELDS.items()},
    "canary_scope.tenants": "canary_tenants",
    "canary_scope.business_domain": "canary_business_domain",
}


class TicketForm(forms.Form):
    """Every field of a release ticket. Fields are optional here so the service names what is missing."""

    title = forms.CharField(max_length=200, required=False)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    mechanisms = forms.MultipleChoiceField(
        choices=[(m, m) for m in Mechanism.values], widget=forms.CheckboxSelectMultiple, required=False
    )
    # "KV memory", not the model choices' generated "Kv Memory".
    bottleneck = forms.ChoiceField(
        choices=[("", "— choose —"), *((b, human(b)) for b in Bottleneck.values)], required=False
    )
    bottleneck_evidence = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="Measurements or traces showing this is the bottleneck.",
    )
    baseline = BackendChoiceField(queryset=Backend.objects.none(), required=False, empty_label="— choose —")
    candidate = BackendChoiceField(queryset=Backend.objects.none(), required=False, empty_label="— choose —")
    beneficiary_tasks = TaskChoiceField(
        queryset=TaskType.objects.none(), to_field_name="slug", widget=forms.CheckboxSelectMultiple, required=False
    )
    risk_tasks = TaskChoiceField(
        queryset=TaskType.objects.none(), to_field_name="slug", widget=forms.CheckboxSelectMultiple, required=False
    )
    benefit_metrics = forms.MultipleChoiceField(
        choices=METRIC_CHOICES, widget=forms.CheckboxSelectMultiple, required=False
    )
    guardrail_metrics = forms.MultipleChoiceField(
        choices=METRIC_CHOICES, widget=forms.CheckboxSelectMultiple, required=False
    )
    rollback_target = BackendChoiceField(queryset=Backend.objects.none(), required=False, empty_label="— choose —")
    rollback_sacrifices = forms.CharField(label="What rolling back gives up", required=False)
    rollback_warmup = forms.CharField(label="Warm-up the rollback target needs", required=False)
    rollback_inflight_streams = forms.CharField(label="What happens to streams in flight", required=False)
    rollback_route_update = forms.CharField(label="How the gateway route changes", required=False)
    observation_window_hours = forms.FloatField(
        min_value=MIN_WINDOW_HOURS,
        max_value=MAX_WINDOW_HOURS,
        initial=168,
        required=False,
        label="Observation window (hours)",
    )
    canary_tenants = forms.CharField(
        required=False, label="Canary tenants", help_text="Tenant ids, separated by commas."
    )
    canary_business_domain = forms.CharField(required=False, label="Canary business domain")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("baseline", "candidate", "rollback_target"):
            self.fields[name].queryset = _backends()  # type: ignore[attr-defined]
        for name in ("beneficiary_tasks", "risk_tasks"):
            self.fields[name].queryset = TaskType.objects.all()  # type: ignore[attr-defined]

    def service_fields(self) -> dict[str, Any]:
        """The cleaned form as keyword arguments of ``ticket_create`` / ``ticket_update``."""
        data = self.cleaned_data
        tenants = [t.strip() for t in (data.get("canary_tenants") or "").split(",") if t.strip()]
        window = data.get("observation_window_hours")
        return {
            "title": data.get("title", ""),
            "description": data.get("description", ""),
            "mechanisms": list(data.get("mechanisms") or []),
            "bottleneck": data.get("bottleneck", ""),
            "bottleneck_evidence": data.get("bottleneck_evidence", ""),
            "baseline": data.get("baseline"),
            "candidate": data.get("candidate"),
            "beneficiary_tasks": list(data.get("beneficiary_tasks") or []),
            "risk_tasks": list(data.get("risk_tasks") or []),
            "benefit_metrics": list(data.get("benefit_metrics") or []),
            "guardrail_metrics": list(data.get("guardrail_metrics") or []),
            "rollback_target": data.get("rollback_target"),
            "rollback_plan": {key: data.get(name, "") for key, name in ROLLBACK_FORM_FIELDS.items()},
            "observation_window_hours": 168 if window is None else window,
            "canary_scope": {"tenants": tenants, "business_domain": data.get("canary_business_domain", "")},
        }

    @staticmethod
    def initial_from_ticket(ticket: ReleaseTicket) -> dict[str, Any]:
        """Form values that reproduce a stored ticket (to edit a draft)."""
        plan = ticket.rollback_plan or {}
        scope = ticket.canary_scope or {}
        return {
            "title": ticket.title,
            "description": ticket.description,
            "mechanisms": ticket.mechanisms,
            "bottleneck": ticket.bottleneck,
            "bottleneck_evidence": ticket.bottleneck_evidence,
            "baseline": ticket.baseline_id,
            "candidate": ticket.candidate_id,
            "beneficiary_tasks": [t.slug for t in ticket.beneficiary_tasks.all()],
            "risk_tasks": [t.slug for t in ticket.risk_tasks.all()],
            "benefit_metrics": ticket.benefit_metrics,
            "guardrail_metrics": ticket.guardrail_metrics,
            "rollback_target": ticket.rollback_target_id,
            **{name: plan.get(key, "") for key, name in ROLLBACK_FORM_FIELDS.items()},
            "observation_window_hours": ticket.observation_window_hours,
            "canary_tenants": ", ".join(scope.get("tenants", [])),
            "canary_business_domain": scope.get("business_domain", ""),
        }


# Reason codes for the lifecycle actions outside sign-off; the code is ledgered with the comment.
# Approve, restrict and reject are sign-offs (``SignOffForm``) with the gate's own reason codes.
REASON_CODES: dict[str, list[tuple[str, str]]] = {
    "request_evidence": [
        ("inconclusive", "Inconclusive: more samples are needed"),
        ("missing_workload", "A workload shape is missing (peak, long context, batch)"),
        ("run_error", "An evaluation run failed"),
    ],
    "roll_back": [
        ("canary_regression", "The canary regressed"),
        ("incident", "Production incident"),
        ("cost", "The saving did not materialise"),
    ],
}


class TransitionForm(forms.Form):
    """One ticket action: its reason code (where the action has codes) and a free-text comment."""

    action = forms.ChoiceField(
        choices=[(a, a) for a in (*TRANSITIONS, "evaluate", "resume_canary")], widget=forms.HiddenInput
    )
    reason_code = forms.CharField(required=False)
    comment = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False, max_length=4000)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        codes = dict(REASON_CODES.get(cleaned.get("action", ""), []))
        code = cleaned.get("reason_code") or ""
        if code and code not in codes:
            self.add_error("reason_code", "choose one of the listed reasons")
        return cleaned

    def reason(self) -> str:
        """The reason text given to the service: the code's words, then the comment."""
        codes = dict(REASON_CODES.get(self.cleaned_data["action"], []))
        code = self.cleaned_data.get("reason_code") or ""
        comment = (self.cleaned_data.get("comment") or "").strip()
        parts = [f"{code}: {codes[code]}" if code else "", comment]
        return " — ".join(p for p in parts if p)
