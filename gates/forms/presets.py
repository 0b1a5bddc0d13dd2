"""Ticket-form presets per mechanism (§7.2–7.5 of the source chapter).

A preset fills the mechanism, the bottleneck it usually targets, suggested benefit and guardrail
metrics, a hint for the bottleneck evidence, and the engine-args snippet the candidate backend
typically differs by. It only pre-fills; the engineer edits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


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
