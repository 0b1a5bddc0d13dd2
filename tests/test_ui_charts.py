"""Server-rendered latency charts: the numbers behind them, accessibility and escaping."""

from __future__ import annotations

import re

from evaluators.charts import box_svg, cdf_svg, nice_ticks, percentile, summarise


def test_percentiles_interpolate_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    summary = summarise([5.0, 1.0, float("nan"), 3.0])
    assert (summary.n, summary.p50, summary.maximum) == (3, 3.0, 5.0)
    assert summarise([]).n == 0 and summarise([]).p50 is None


def test_ticks_are_round_and_cover_the_range() -> None:
    assert nice_ticks(0, 97) == [0, 20, 40, 60, 80, 100]
    assert nice_ticks(0, 0.42) == [0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert nice_ticks(3, 3) == [3, 3.2, 3.4, 3.6, 3.8, 4.0]


def test_a_cdf_draws_one_step_line_per_series_with_a_text_alternative() -> None:
    svg = str(cdf_svg({"baseline": [10, 20, 30], "candidate": [5, 10, 15]}, title="TTFT", chart_id="t"))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("<path ") == 2
    assert 'role="img"' in svg and 'aria-labelledby="t-title t-desc"' in svg
    assert "baseline: n=3, P50 20 ms" in svg and "candidate: n=3, P50 10 ms" in svg
    # The candidate's line is dashed, so the series differ by more than colour.
    assert 'stroke-dasharray="6 3"' in svg


def test_a_box_plot_marks_the_median_of_each_series() -> None:
    svg = str(box_svg({"baseline": list(range(101)), "candidate": list(range(0, 202, 2))}, title="TPOT"))
    assert svg.count("<rect ") == 2
    assert "baseline: median 50, IQR 25–75 ms" in svg and "candidate: median 100, IQR 50–150 ms" in svg


def test_labels_are_escaped_and_empty_series_say_so() -> None:
    svg = str(cdf_svg({"<script>x</script>": [1.0]}, title="<b>t</b>", unit="<i>"))
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "<b>" not in svg
    empty = str(cdf_svg({"baseline": [], "candidate": []}, title="TTFT"))
    assert "no measurements" in empty and "<path" not in empty
    assert not re.search(r"nan|inf", str(box_svg({"a": [float("inf"), 1.0, 2.0]}, title="x")))
