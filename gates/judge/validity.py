"""Whether two runs' client-side timings can be compared at all.

The load client's TTFT is the engine's own TTFT (vLLM's histogram over the same load phase) plus
delivery: HTTP, streaming, and any time the client or the API server sat starved of CPU. Delivery
is part of what users feel, but when it changes between the two runs by more than the policy
allows, a latency difference may belong to the machine that measured it rather than to the
candidate. The client-timed checks are then inconclusive and ask for a re-measurement, which
more samples would not give.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gates.judge.pairing import sample_values
from gates.judge.records import MetricVerdict, RunTaskEvidence, TaskEvidence
from gates.policy.metrics import METRIC_SPECS

# Families the load client times: they carry delivery; engine counters and quality do not.
CLIENT_TIMED = ("latency", "throughput", "goodput")


def ttft_means_ms(run: RunTaskEvidence) -> tuple[float, float] | None:
    """(client, engine) mean TTFT over the same requests; None when either is unknown."""
    engine, client = run.engine.get("engine_ttft_mean_ms"), sample_values(run.ttft_ms)
    if engine is None or not client:
        return None
    return sum(float(v) for v in client) / len(client), engine


def delivery_ms(run: RunTaskEvidence) -> float | None:
    """Mean client TTFT minus the engine's mean TTFT over the same requests; None if unknown."""
    means = ttft_means_ms(run)
    return None if means is None else means[0] - means[1]


def judge_comparability(
    verdicts: Sequence[MetricVerdict], ev: TaskEvidence, max_shift_ms: float
) -> list[MetricVerdict]:
    """The verdicts, with client-timed ones made inconclusive when delivery shifted between runs.

    Interleaved evidence is exempt: its two sides ran in alternating blocks under the same client
    and machine, so a delivery difference there is the candidate's own (an API server holding
    responses back), which its latency verdicts must judge rather than set aside.
    """
    if ev.base.blocks and ev.cand.blocks:
        return list(verdicts)
    base_means, cand_means = ttft_means_ms(ev.base), ttft_means_ms(ev.cand)
    if base_means is None or cand_means is None:
        return list(verdicts)
    (base_client, base_engine), (cand_client, cand_engine) = base_means, cand_means
    base, cand = base_client - base_engine, cand_client - cand_engine
    if abs(cand - base) <= max_shift_ms:
        return list(verdicts)
    why = (
        f"the load client saw mean TTFT {base_client:.1f} → {cand_client:.1f} ms while the engine measured "
        f"{base_engine:.1f} → {cand_engine:.1f} ms, so delivery to the client took {base:.1f} ms in the baseline "
        f"run and {cand:.1f} ms in the candidate's, a {abs(cand - base):.1f} ms shift beyond the policy's "
        f"{max_shift_ms:g} ms: the runs' client-side timings are not comparable. Re-measure on a quiet "
        "worker (more samples will not help); if the shift repeats, the API server or the client is the "
        "bottleneck, not the engine."
    )
    details = {"delivery_ms_baseline": base, "delivery_ms_candidate": cand, "max_delivery_shift_ms": max_shift_ms}
    return [_not_comparable(v, why, details) if _client_timed(v) else v for v in verdicts]


def _client_timed(verdict: MetricVerdict) -> bool:
    spec = METRIC_SPECS.get(verdict.metric)
    return spec is not None and spec.family in CLIENT_TIMED and verdict.status != "error"


def _not_comparable(verdict: MetricVerdict, why: str, details: dict[str, float]) -> MetricVerdict:
    label = METRIC_SPECS[verdict.metric].label
    return replace(
        verdict,
        status="inconclusive",
        test=f"{verdict.test}; set aside: delivery to the client shifted between the runs",
        samples_needed=None,
        reason=f"{label[0].upper()}{label[1:]} is not judged: {why}",
        details={**verdict.details, **details, "measured": verdict.reason},
    )
