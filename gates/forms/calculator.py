"""The KV-cache capacity calculator's form."""

from __future__ import annotations

from typing import Any

from django import forms

from gates.kv_calculator import KV_DTYPE_BYTES, MODEL_SHAPES

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
