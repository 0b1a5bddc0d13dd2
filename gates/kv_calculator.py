"""KV-cache capacity arithmetic from the chapter's §7.2 formula.

    KV bytes = batch × sequence length × layers × 2 (K and V) × KV heads × head dim × bytes per element

The ticket form uses it to show how many concurrent sequences of a given length fit in a memory
budget at the baseline's and the candidate's KV precision (for example bf16 → fp8 doubles it).
Pure functions: no Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3

# Bytes per KV element for the precisions an engine offers (vLLM's kv_cache_dtype names).
KV_DTYPE_BYTES: dict[str, float] = {
    "float32": 4.0,
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "int4": 0.5,
}

# Shapes of well-known models (layers, KV heads, head dim), so nobody has to look them up.
MODEL_SHAPES: dict[str, tuple[int, int, int]] = {
    "qwen3-32b": (64, 8, 128),
    "qwen3-8b": (36, 8, 128),
    "llama-3.1-8b": (32, 8, 128),
    "llama-3.1-70b": (80, 8, 128),
}


@dataclass(frozen=True)
class KvShape:
    """The attention geometry that decides KV size: layers, KV heads (after GQA) and head dim."""

    layers: int
    kv_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        for name in ("layers", "kv_heads", "head_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


def kv_cache_bytes(*, batch: int, seq_len: int, shape: KvShape, bytes_per_element: float) -> float:
    """Bytes of KV cache that ``batch`` sequences of ``seq_len`` tokens occupy."""
    if batch < 0 or seq_len < 0:
        raise ValueError("batch and seq_len cannot be negative")
    if bytes_per_element <= 0:
        raise ValueError("bytes_per_element must be positive")
    return batch * seq_len * shape.layers * 2 * shape.kv_heads * shape.head_dim * bytes_per_element


def max_concurrent_sequences(*, budget_bytes: float, seq_len: int, shape: KvShape, bytes_per_element: float) -> int:
    """How many sequences of ``seq_len`` tokens fit entirely in ``budget_bytes`` of KV cache."""
    if seq_len < 1:
        raise ValueError("seq_len must be at least 1")
    per_sequence = kv_cache_bytes(batch=1, seq_len=seq_len, shape=shape, bytes_per_element=bytes_per_element)
    return max(0, int(budget_bytes // per_sequence))


@dataclass(frozen=True)
class Capacity:
    """One precision's result: bytes per sequence, the requested batch's footprint, and what fits."""

    dtype: str
    bytes_per_element: float
    bytes_per_sequence: float
    batch_bytes: float
    max_sequences: int
    batch_fits: bool


@dataclass(frozen=True)
class Comparison:
    baseline: Capacity
    candidate: Capacity

    @property
    def ratio(self) -> float | None:
        """Candidate capacity over baseline capacity (2.0 means twice the concurrent sequences)."""
        if self.baseline.max_sequences == 0:
            return None
        return self.candidate.max_sequences / self.baseline.max_sequences


def capacity(*, dtype: str, batch: int, seq_len: int, shape: KvShape, budget_bytes: float) -> Capacity:
    """Capacity of one KV precision named by its engine dtype (see ``KV_DTYPE_BYTES``)."""
    if dtype not in KV_DTYPE_BYTES:
        raise ValueError(f"unknown KV dtype {dtype!r}; known: {', '.join(KV_DTYPE_BYTES)}")
    width = KV_DTYPE_BYTES[dtype]
    per_sequence = kv_cache_bytes(batch=1, seq_len=seq_len, shape=shape, bytes_per_element=width)
    batch_bytes = kv_cache_bytes(batch=batch, seq_len=seq_len, shape=shape, bytes_per_element=width)
    fits = max_concurrent_sequences(budget_bytes=budget_bytes, seq_len=seq_len, shape=shape, bytes_per_element=width)
    return Capacity(dtype, width, per_sequence, batch_bytes, fits, batch_bytes <= budget_bytes)


def compare(
    *, baseline_dtype: str, candidate_dtype: str, batch: int, seq_len: int, shape: KvShape, budget_bytes: float
) -> Comparison:
    """Baseline versus candidate KV precision for the same model, batch, length and budget."""

    def one(dtype: str) -> Capacity:
        return capacity(dtype=dtype, batch=batch, seq_len=seq_len, shape=shape, budget_bytes=budget_bytes)

    return Comparison(one(baseline_dtype), one(candidate_dtype))
