"""The backend registration form: it parses shapes (JSON objects, lengths); the service checks the rest."""

from __future__ import annotations

from typing import Any

from django import forms


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
    allowed_tasks = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Model card: tasks this build may serve"
    )

    def __init__(self, *args: Any, task_choices: list[tuple[str, str]], **kwargs: Any) -> None:
        """``task_choices``: (slug, label) of the task types a model card may allow, from the caller."""
        super().__init__(*args, **kwargs)
        self.fields["allowed_tasks"].choices = task_choices  # type: ignore[attr-defined]

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
        card: dict[str, Any] = {"allowed_tasks": list(data.get("allowed_tasks") or [])}
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
