"""Names the ticket form and the policies share: metrics and rollback-plan fields."""

from __future__ import annotations

# Metrics a ticket may name as its benefit or guardrail.
PERFORMANCE_METRICS = (
    "ttft_p50",
    "ttft_p95",
    "ttft_p99",
    "tpot_p50",
    "tpot_p95",
    "itl_p50",
    "itl_p95",
    "e2e_p50",
    "e2e_p95",
    "e2e_p99",
    "queue_time_p95",
    "request_throughput",
    "output_throughput",
    "goodput",
    "peak_kv_cache_usage",
    "preemptions",
    "kv_capacity_waits",
    "max_concurrency",
    "prefix_cache_hit_rate",
    "spec_decode_acceptance_rate",
    "gpu_hours",
)
QUALITY_METRICS = (
    "pass_rate",
    "score",
    "fact_accuracy",
    "json_validity",
    "sql_accuracy",
    "refusal_accuracy",
    "citation_accuracy",
    "tool_argument_validity",
    "code_test_pass_rate",
    "truncation_rate",
)
METRICS = frozenset(PERFORMANCE_METRICS + QUALITY_METRICS)
# The choices of API fields naming metrics (one named enum in the OpenAPI schema: MetricEnum).
METRIC_CHOICES = tuple(sorted(METRICS))

ROLLBACK_PLAN_FIELDS = {
    "sacrifices": "what is given up when rolling back",
    "warmup": "warm-up the rollback target needs (weights load, cache fill)",
    "inflight_streams": "what happens to streams in flight",
    "route_update": "how the gateway route changes",
}
