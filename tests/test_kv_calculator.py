"""The KV-cache capacity arithmetic (§7.2) and its GET form."""

from __future__ import annotations

from typing import Any

import pytest

from gates.kv_calculator import GIB, KvShape, capacity, compare, kv_cache_bytes, max_concurrent_sequences
from tests.ui_helpers import client_for

QWEN3_32B = KvShape(layers=64, kv_heads=8, head_dim=128)


def test_it_applies_the_chapter_formula() -> None:
    # 1 × 4096 × 64 layers × 2 × 8 heads × 128 dim × 2 bytes = 1 GiB exactly.
    assert kv_cache_bytes(batch=1, seq_len=4096, shape=QWEN3_32B, bytes_per_element=2) == GIB
    assert kv_cache_bytes(batch=3, seq_len=4096, shape=QWEN3_32B, bytes_per_element=1) == 1.5 * GIB


def test_it_counts_whole_sequences_that_fit() -> None:
    assert max_concurrent_sequences(budget_bytes=40 * GIB, seq_len=4096, shape=QWEN3_32B, bytes_per_element=2) == 40
    assert max_concurrent_sequences(budget_bytes=40 * GIB - 1, seq_len=4096, shape=QWEN3_32B, bytes_per_element=2) == 39
    assert max_concurrent_sequences(budget_bytes=0.5 * GIB, seq_len=4096, shape=QWEN3_32B, bytes_per_element=2) == 0


def test_fp8_kv_doubles_the_concurrent_sequences_of_bf16() -> None:
    result = compare(
        baseline_dtype="bfloat16", candidate_dtype="fp8", batch=64, seq_len=8192, shape=QWEN3_32B, budget_bytes=40 * GIB
    )
    assert (result.baseline.max_sequences, result.candidate.max_sequences) == (20, 40)
    assert result.ratio == 2.0
    assert result.baseline.batch_bytes == 128 * GIB and not result.baseline.batch_fits
    assert result.candidate.bytes_per_sequence == GIB


@pytest.mark.parametrize(
    "call",
    [
        lambda: KvShape(0, 8, 128),
        lambda: kv_cache_bytes(batch=-1, seq_len=1, shape=QWEN3_32B, bytes_per_element=2),
        lambda: kv_cache_bytes(batch=1, seq_len=1, shape=QWEN3_32B, bytes_per_element=0),
        lambda: max_concurrent_sequences(budget_bytes=GIB, seq_len=0, shape=QWEN3_32B, bytes_per_element=2),
        lambda: capacity(dtype="fp3", batch=1, seq_len=1, shape=QWEN3_32B, budget_bytes=GIB),
    ],
)
def test_it_refuses_impossible_inputs(call: Any) -> None:
    with pytest.raises(ValueError):
        call()


def test_the_calculator_page_works_as_a_plain_get_form(erin: Any) -> None:
    client = client_for(erin)
    empty = client.get("/kv-calculator/")
    assert empty.status_code == 200 and empty.context["result"] is None
    assert b'<form method="get"' in empty.content and b'<label for="id_seq_len">' in empty.content
    query = "model=qwen3-32b&seq_len=8192&batch=64&budget_gib=40&baseline_dtype=bfloat16&candidate_dtype=fp8"
    response = client.get(f"/kv-calculator/?{query}")
    assert response.status_code == 200
    result = response.context["result"]
    assert (result.baseline.max_sequences, result.candidate.max_sequences) == (20, 40)
    html = response.content.decode()
    assert "<strong>2.00×</strong>" in html and "<caption>Capacity at 8192 tokens per sequence in 40.0 GiB" in html


def test_the_calculator_names_missing_shape_fields(erin: Any) -> None:
    response = client_for(erin).get(
        "/kv-calculator/?seq_len=8192&batch=1&budget_gib=40&baseline_dtype=bfloat16&candidate_dtype=fp8&layers=32"
    )
    assert response.status_code == 400
    assert set(response.context["form"].errors) == {"kv_heads", "head_dim"}
