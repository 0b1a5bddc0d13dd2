"""The business-signal contract a gateway or application exports for canary analysis (docs/canary.md).

Two metric families, labelled by task type, backend, tenant:

* ``optgate_outcome_total{task, backend, tenant, outcome}`` — a counter: every answered request
  counts once under its outcome (``ok``, ``error``, ``parse_error``, ``refusal``,
  ``tool_arg_error``); ``human_return`` counts again when a person later sends an answer back.
* ``optgate_request_duration_seconds{task, backend, tenant, phase}`` — a histogram of each
  request's time to first token (``phase="ttft"``) and end to end (``phase="e2e"``).

``OutcomeExporter`` implements the contract with prometheus-client for a Python gateway or
application (and the tests). Systems without Prometheus post counts to
``POST /api/v1/canary/outcomes/`` instead; OptGate's own ``/metrics`` exports those under the
same name.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram

OUTCOME_METRIC = "optgate_outcome_total"
DURATION_METRIC = "optgate_request_duration_seconds"
# The outcomes of a request; each request counts once under one of these.
REQUEST_OUTCOMES = ("ok", "error", "parse_error", "refusal", "tool_arg_error")
# Counted in addition, when a person returns an answer after it was delivered.
HUMAN_RETURN = "human_return"
OUTCOMES = (*REQUEST_OUTCOMES, HUMAN_RETURN)
PHASES = ("ttft", "e2e")
LABELS = ("task", "backend", "tenant")
# Interactive LLM latencies, 5 ms to about two minutes, each bucket about 20 % wider than the one
# before (bounds rounded to three digits). A latency quantile read from the histogram is
# interpolated inside one bucket, so it is off by less than that bucket's width. Buckets a factor
# 2.5 apart (0.1 to 0.25 s) let a few requests crossing 100 ms move a slice's P95 by half: a demo
# canary round paused on TTFT P95 94 ms against 151 ms, the two read in neighbouring buckets.
BUCKET_GROWTH = 1.2
DURATION_BUCKETS = tuple(float(f"{0.005 * BUCKET_GROWTH**k:.3g}") for k in range(57))


class OutcomeExporter:
    """prometheus-client metrics of the contract on ``registry`` (a private one by default).

    Call ``prepare`` with the label sets you will use before the first request: a counter series
    that appears mid-window loses its first increment to Prometheus' ``increase()``.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        # prometheus-client appends ``_total`` to a counter's name itself.
        self.outcomes = Counter(
            OUTCOME_METRIC.removesuffix("_total"),
            "Answered requests by outcome (human_return counts again when a person sends an answer back).",
            [*LABELS, "outcome"],
            registry=self.registry,
        )
        self.durations = Histogram(
            DURATION_METRIC,
            "Request latency by phase: time to first token (ttft) and end to end (e2e).",
            [*LABELS, "phase"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )

    def prepare(self, *, tasks: Iterable[str], backends: Iterable[str], tenants: Iterable[str]) -> None:
        """Create every series at zero for these label combinations."""
        backends, tenants = list(backends), list(tenants)
        for task in tasks:
            for backend in backends:
                for tenant in tenants:
                    for outcome in OUTCOMES:
                        self.outcomes.labels(task, backend, tenant, outcome)
                    for phase in PHASES:
                        self.durations.labels(task, backend, tenant, phase)

    def record(
        self,
        *,
        task: str,
        backend: str,
        tenant: str,
        outcome: str,
        ttft_s: float | None = None,
        e2e_s: float | None = None,
        count: int = 1,
    ) -> None:
        """Count ``count`` requests with ``outcome`` and, when given, their latencies."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        self.outcomes.labels(task, backend, tenant, outcome).inc(count)
        for phase, seconds in (("ttft", ttft_s), ("e2e", e2e_s)):
            if seconds is not None:
                for _ in range(count):
                    self.durations.labels(task, backend, tenant, phase).observe(seconds)
