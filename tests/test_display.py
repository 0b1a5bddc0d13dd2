"""Numbers as people read them: units and precision per metric (``gates.display``)."""

from __future__ import annotations

import pytest

from gates import display


@pytest.mark.parametrize(
    ("metric", "value", "shown"),
    [
        ("ttft_p50", 297.65882825947136, "298 ms"),
        ("tpot_p50", 38.66462476013918, "38.7 ms"),
        ("e2e_p95", 6750.296775173755, "6,750 ms"),
        ("pass_rate", 0.91, "91.0%"),
        ("goodput", 0.5, "50.0%"),
        ("score", 0.91, "0.910"),
        ("output_throughput", 1428.5714285714287, "1,429 tok/s"),
        ("output_throughput", 42.25, "42.2 tok/s"),
        ("request_throughput", 3.14159, "3.14 req/s"),
        ("preemptions", 3.0, "3"),
        ("peak_kv_cache_usage", 0.016734919945520232, "1.7%"),
        ("prefix_cache_hit_rate", 0.8125, "81.2%"),
        # Engine counters that are not judged metrics.
        ("prompt_tokens", 512.6095390319824, "513"),
        ("prefix_cache_queries", 123456.0, "123,456"),
        ("engine_ttft_mean_ms", 12.345678, "12.3 ms"),
        ("kv_cache_usage_peak", 0.016734919945520232, "1.7%"),
        ("spec_decode_mean_accepted_length", 1.8333333, "1.83 tokens"),
    ],
)
def test_it_shows_each_value_in_its_metrics_unit(metric: str, value: float, shown: str) -> None:
    assert display.metric_value(metric, value) == shown


def test_it_shows_missing_and_undefined_values_as_a_dash() -> None:
    assert display.metric_value("ttft_p50", None) == "—"
    assert display.metric_value("pass_rate", float("nan")) == "—"
    assert display.change("ttft_p50", None) == "—"
    assert display.interval("pass_rate", None) == "—"
    assert display.interval("pass_rate", [None, 0.1]) == "—"


@pytest.mark.parametrize(
    ("metric", "effect", "bounds", "change", "interval"),
    [
        # Rates: a difference of fractions, in points.
        ("pass_rate", -0.1, [-0.4372, -0.2546], "−10.0 pts", "−43.7 to −25.5 pts"),
        ("fact_accuracy", 0.0, [-0.018845326377270728, 0.01884532637727072], "+0.0 pts", "−1.9 to +1.9 pts"),
        # Latency and throughput: a ratio candidate / baseline, as a relative change.
        ("e2e_p50", 0.7, [0.6543233765286036, 0.7491421898144485], "−30.0%", "−34.6% to −25.1%"),
        ("output_throughput", 1.4285714285714286, None, "+42.9%", "—"),
        # Graded scores: a difference of means.
        ("score", -0.1, [-0.145, -0.06], "−0.100", "−0.145 to −0.060"),
    ],
)
def test_it_shows_changes_and_intervals_in_the_metrics_unit(
    metric: str, effect: float, bounds: list[float] | None, change: str, interval: str
) -> None:
    assert display.change(metric, effect) == change
    assert display.interval(metric, bounds) == interval


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ("kv_memory", "KV memory"),
        ("structured_output", "Structured output"),
        ("kv_cache_quantization", "KV cache quantization"),
        ("engine_ttft_mean_ms", "Engine TTFT mean"),
        ("prefix_cache_hit_rate", "Prefix cache hit rate"),
        ("dataagent_nl2sql", "Dataagent NL2SQL"),
    ],
)
def test_it_turns_keys_into_labels_people_write(key: str, label: str) -> None:
    assert display.human(key) == label


def test_judged_metrics_take_the_policys_label() -> None:
    assert display.metric_label("ttft_p50") == "TTFT P50"
    assert display.metric_label("pass_rate") == "Pass rate"
    assert display.metric_label("peak_kv_cache_usage") == "Peak KV-cache usage"
    assert display.metric_label("measurement_validity") == "Measurement validity"


def test_a_stored_metric_verdict_reads_as_one_display_block() -> None:
    stored = {
        "metric": "pass_rate",
        "n": 1200,
        "baseline": 0.91,
        "candidate": 0.81,
        "effect": -0.1,
        "interval": [-0.14940581243271825, -0.0656704486603145],
    }
    assert display.metric_display(stored) == {
        "label": "Pass rate",
        "baseline": "91.0%",
        "candidate": "81.0%",
        "change": "−10.0 pts",
        "interval": "−14.9 to −6.6 pts",
        "samples": "1,200",
        "noise_floor": "—",
    }
