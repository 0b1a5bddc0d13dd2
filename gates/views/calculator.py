"""The KV-cache calculator page: how many sequences fit a KV budget, baseline vs candidate precision."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from gates.forms.calculator import KvCalculatorForm
from gates.kv_calculator import GIB, Capacity, KvShape, compare


def _capacity_row(capacity: Capacity) -> dict[str, Any]:
    return {
        "dtype": capacity.dtype,
        "bytes_per_element": f"{capacity.bytes_per_element:g}",
        "mib_per_sequence": f"{capacity.bytes_per_sequence / 2**20:,.1f}",
        "batch_gib": f"{capacity.batch_bytes / GIB:,.2f}",
        "batch_fits": capacity.batch_fits,
        "max_sequences": f"{capacity.max_sequences:,}",
    }


@login_required
def kv_calculator(request: HttpRequest) -> HttpResponse:
    """How many sequences of a given length fit in a KV budget, baseline vs candidate precision."""
    form = KvCalculatorForm(request.GET or None)
    context: dict[str, Any] = {"form": form, "result": None}
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        try:
            shape = KvShape(data["layers"], data["kv_heads"], data["head_dim"])
            result = compare(
                baseline_dtype=data["baseline_dtype"],
                candidate_dtype=data["candidate_dtype"],
                batch=data["batch"],
                seq_len=data["seq_len"],
                shape=shape,
                budget_bytes=data["budget_gib"] * GIB,
            )
        except ValueError as exc:
            form.add_error(None, str(exc))
        else:
            context["result"] = result
            context["result_rows"] = [
                ("Baseline", _capacity_row(result.baseline)),
                ("Candidate", _capacity_row(result.candidate)),
            ]
            context["ratio_text"] = f"{result.ratio:.2f}" if result.ratio is not None else ""
    return render(request, "kv_calculator.html", context, status=400 if form.is_bound and form.errors else 200)
