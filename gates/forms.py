"""Forms of the web UI, and the ticket-form presets per mechanism.

Forms only parse shapes (numbers, choices, JSON); every business rule lives in the services, whose
``InvalidInput`` field errors are put back onto the form's fields by ``apply_service_errors``.

Presets (§7.2–7.5 of the source chapter) fill the mechanism, the bottleneck it usually targets,
suggested benefit and guardrail metrics, a hint for the bottleneck evidence, and the engine-args
snippet the candidate backend typically differs by. They only pre-fill; the engineer edits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django import forms

from gates.kv_calculator import KV_DTYPE_BYTES, MODEL_SHAPES
from gates.models import (
    TRANSITIONS,
    Bottleneck,
    Mechanism,
    ReasonCode,
    ReleaseTicket,
    ReviewerCapacity,
    SignOffVerdict,
    TaskType,
)
from gates.vocabulary import PERFORMANCE_METRICS, QUALITY_METRICS, ROLLBACK_PLAN_FIELDS
from ledger.models import Backend
from workers.models import ReviewOutcome


@dataclass(frozen=True)
class Preset:
    slug: str
    label: str
    mechanisms: tuple[str, ...]
    bottleneck: str
    benefit_metrics: tuple[str, ...]
    guardrail_metrics: tuple[str, ...]
    evidence_hint: str
    engine_args: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def engine_args_json(self) -> str:
        return json.dumps(self.engine_args, indent=2, sort_keys=True)

    def initial(self) -> dict[str, Any]:
        """Initial values for the ticket form."""
        return {
            "mechanisms": list(self.mechanisms),
            "bottleneck": self.bottleneck,
            "benefit_metrics": list(self.benefit_metrics),
            "guardrail_metrics": list(self.guardrail_metrics),
            "bottleneck_evidence": self.evidence_hint,
        }


PRESETS: dict[str, Preset] = {
    p.slug: p
    for p in (
        Preset(
            "prefix_caching",
            "Prefix caching",
            ("prefix_cache",),
            "prefill",
            ("ttft_p95", "prefix_cache_hit_rate"),
            ("citation_accuracy", "refusal_accuracy", "pass_rate"),
            "Prefill share of E2E and TTFT P95 on requests sharing a long system prompt or document.",
            {"enable_prefix_caching": True},
            "Keep volatile fields (trace ids, timestamps) out of the prompt's head, or the cache never hits; "
            "the cache key must include tenant and policy version.",
        ),
        Preset(
            "spec_ngram",
            "Speculative decoding: n-gram",
            ("speculative_decoding",),
            "decode",
            ("tpot_p50", "e2e_p95", "spec_decode_acceptance_rate"),
            ("pass_rate", "fact_accuracy"),
            "TPOT dominates E2E on long, templated outputs; GPU compute is idle during decode.",
            {
                "speculative_config": {
                    "method": "ngram",
                    "num_speculative_tokens": 4,
                    "prompt_lookup_max": 4,
                    "prompt_lookup_min": 2,
                }
            },
            "Pays off when outputs copy the prompt (summaries, templates); check acceptance per task.",
        ),
        Preset(
            "spec_draft",
            "Speculative decoding: draft model",
            ("speculative_decoding",),
            "decode",
            ("tpot_p50", "e2e_p95", "spec_decode_acceptance_rate"),
            ("pass_rate", "fact_accuracy"),
            "TPOT dominates E2E; a small model of the same family is available as drafter.",
            {"speculative_config": {"model": "<path of the draft model>", "num_speculative_tokens": 4}},
        ),
        Preset(
            "spec_eagle",
            "Speculative decoding: EAGLE",
            ("speculative_decoding",),
            "decode",
            ("tpot_p50", "e2e_p95", "spec_decode_acceptance_rate"),
            ("pass_rate", "fact_accuracy"),
            "TPOT dominates E2E; an EAGLE head trained for this base model exists.",
            {
                "speculative_config": {
                    "method": "eagle",
                    "model": "<path of the EAGLE head>",
                    "num_speculative_tokens": 3,
                }
            },
        ),
        Preset(
            "awq_int4",
            "AWQ INT4 weights",
            ("weight_quantization",),
            "kv_memory",
            ("output_throughput", "max_concurrency", "tpot_p50"),
            ("sql_accuracy", "json_validity", "tool_argument_validity", "refusal_accuracy", "fact_accuracy"),
            "Weights take most of GPU memory; KV usage near 100% and preemptions at peak concurrency.",
            {"quantization": "awq"},
            "Register the quantized build as its own backend; record the calibration set in its model card.",
        ),
        Preset(
            "gptq_int4",
            "GPTQ INT4 weights",
            ("weight_quantization",),
            "kv_memory",
            ("output_throughput", "max_concurrency", "tpot_p50"),
            ("sql_accuracy", "json_validity", "tool_argument_validity", "refusal_accuracy", "fact_accuracy"),
            "Weights take most of GPU memory; KV usage near 100% and preemptions at peak concurrency.",
            {"quantization": "gptq"},
            "Register the quantized build as its own backend; record the calibration set in its model card.",
        ),
        Preset(
            "fp8_kv",
            "FP8 KV cache",
            ("kv_cache_quantization",),
            "kv_memory",
            ("max_concurrency", "preemptions", "output_throughput"),
            ("citation_accuracy", "fact_accuracy", "pass_rate"),
            "KV cache usage at the limit and preemptions on long-context requests.",
            {"kv_cache_dtype": "fp8"},
            "Long-context citation quality is the usual casualty: keep knowledge_qa as a risk task.",
        ),
        Preset(
            "batching",
            "Batching limits",
            ("batching",),
            "queueing",
            ("queue_time_p95", "request_throughput", "goodput"),
            ("ttft_p95", "tpot_p95", "pass_rate"),
            "Queue time is a large share of TTFT at peak while GPU utilisation has headroom.",
            {"max_num_seqs": 128, "max_num_batched_tokens": 8192},
            "Larger batches raise throughput and can hurt interactive TPOT: guard the latency SLOs.",
        ),
    )
}


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


def apply_service_errors(form: forms.Form, errors: dict[str, str], mapping: dict[str, str] | None = None) -> None:
    """Show an ``InvalidInput``'s field errors next to the matching form fields."""
    mapping = mapping or {}
    for key, message in errors.items():
        name = mapping.get(key, key)
        if name in form.fields:
            form.add_error(name, message)
        else:
            prefix = "" if key == "non_field_errors" else f"{key.replace('_', ' ')}: "
            form.add_error(None, f"{prefix}{message}")


class TicketForm(forms.Form):
    """Every field of a release ticket. Fields are optional here so the service names what is missing."""

    title = forms.CharField(max_length=200, required=False)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    mechanisms = forms.MultipleChoiceField(
        choices=[(m, m) for m in Mechanism.values], widget=forms.CheckboxSelectMultiple, required=False
    )
    bottleneck = forms.ChoiceField(choices=[("", "— choose —"), *Bottleneck.choices], required=False)
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
    observation_window_hours = forms.IntegerField(
        min_value=1, max_value=24 * 366, initial=168, required=False, label="Observation window (hours)"
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


class BackendForm(forms.Form):
    """Register a serving configuration. JSON fields accept an object; the service validates the args."""

    name = forms.SlugField(max_length=100, help_text="e.g. qwen3-32b-awq-int4; a changed config needs a new name")
    model_id = forms.CharField(max_length=200, label="Model id")
    model_path = forms.CharField(max_length=500, help_text="Weights directory under an allowed model root.")
    model_revision = forms.CharField(max_length=128, help_text="Revision or checksum of the weights.")
    engine_version = forms.CharField(max_length=40)
    hardware_class = forms.CharField(max_length=100)
    gpu_pool = forms.CharField(max_length=100, required=False, label="GPU pool")
    engine_args = forms.JSONField(
        required=False,
        initial=dict,
        widget=forms.Textarea(attrs={"rows": 6}),
        help_text="vLLM serve options as a JSON object.",
    )
    sampling_params = forms.JSONField(required=False, initial=dict, widget=forms.Textarea(attrs={"rows": 3}))
    prefix_cache_key_recipe = forms.JSONField(
        required=False,
        initial=dict,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Fields the cache key combines (model, prompt hash, tenant, policy version).",
    )
    quantization_method = forms.CharField(max_length=100, required=False, label="Model card: quantization method")
    calibration_set = forms.CharField(max_length=200, required=False, label="Model card: calibration set")
    allowed_tasks = TaskChoiceField(
        queryset=TaskType.objects.none(),
        to_field_name="slug",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Model card: tasks this build may serve",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["allowed_tasks"].queryset = TaskType.objects.all()  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for name in ("engine_args", "sampling_params", "prefix_cache_key_recipe"):
            value = cleaned.get(name)
            if value is None:
                cleaned[name] = {}
            elif not isinstance(value, dict):
                self.add_error(name, "must be a JSON object")
        return cleaned

    def service_fields(self) -> dict[str, Any]:
        data = self.cleaned_data
        card: dict[str, Any] = {"allowed_tasks": [t.slug for t in data.get("allowed_tasks") or []]}
        if data.get("quantization_method"):
            card["quantization_method"] = data["quantization_method"]
        if data.get("calibration_set"):
            card["calibration_set"] = data["calibration_set"]
        return {
            **{
                name: data[name]
                for name in (
                    "name",
                    "model_id",
                    "model_path",
                    "model_revision",
                    "engine_version",
                    "hardware_class",
                    "gpu_pool",
                    "engine_args",
                    "sampling_params",
                    "prefix_cache_key_recipe",
                )
            },
            "model_card": card,
        }


def backend_error_fields(errors: dict[str, str]) -> dict[str, str]:
    """Map ``engine_args.<option>`` errors onto the engine-args field, naming the option."""
    return {key: ("engine_args" if key.startswith("engine_args.") else key) for key in errors}


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

    action = forms.ChoiceField(choices=[(a, a) for a in (*TRANSITIONS, "evaluate")], widget=forms.HiddenInput)
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


DTYPE_CHOICES = [(name, f"{name} ({width:g} B)") for name, width in KV_DTYPE_BYTES.items()]


class KvCalculatorForm(forms.Form):
    """The KV-cache capacity calculator's inputs (a GET form: it works without JavaScript)."""

    model = forms.ChoiceField(
        choices=[("", "custom shape"), *[(m, m) for m in MODEL_SHAPES]],
        required=False,
        help_text="Fills layers, KV heads and head dim left empty.",
    )
    layers = forms.IntegerField(min_value=1, max_value=1024, required=False)
    kv_heads = forms.IntegerField(min_value=1, max_value=1024, required=False, label="KV heads")
    head_dim = forms.IntegerField(min_value=1, max_value=4096, required=False, label="Head dim")
    seq_len = forms.IntegerField(min_value=1, max_value=10_000_000, initial=8192, label="Sequence length (tokens)")
    batch = forms.IntegerField(min_value=1, max_value=1_000_000, initial=32, label="Batch (concurrent sequences)")
    budget_gib = forms.FloatField(min_value=0.001, max_value=100_000, initial=40, label="KV memory budget (GiB)")
    baseline_dtype = forms.ChoiceField(choices=DTYPE_CHOICES, initial="bfloat16", label="Baseline KV precision")
    candidate_dtype = forms.ChoiceField(choices=DTYPE_CHOICES, initial="fp8", label="Candidate KV precision")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        shape = MODEL_SHAPES.get(cleaned.get("model") or "")
        for index, name in enumerate(("layers", "kv_heads", "head_dim")):
            if cleaned.get(name) is None and name not in self.errors:
                if shape is None:
                    self.add_error(name, "required unless a model is chosen")
                else:
                    cleaned[name] = shape[index]
        return cleaned


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
    """A reviewer's verdict on the current gate decision (see ``gates.signoff.signoff_record``)."""

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
    """The outcome of a review of an active optimization (see ``workers.reviews.review_complete``)."""

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
