"""Weight-rounding variants: fake-quantize the linear layers, dequantize, save as a normal model.

This simulates what INT4/INT3/INT2 weight-only quantization (GPTQ/AWQ-style per-group min-max)
does to accuracy, while the result stays a plain bf16 checkpoint that vLLM on the CPU can serve:
real low-bit kernels are GPU features. Embeddings (and the tied LM head), norms and biases are
left untouched, as real weight-only schemes do.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

# The Llama projection matrices; ``embed_tokens``, ``lm_head`` and ``*norm*`` never match.
LINEAR_WEIGHT = re.compile(r"\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$")


@dataclass(frozen=True)
class QuantSpec:
    """One rounded variant: ``bits`` per weight, one scale (and zero point) per ``group_size`` inputs."""

    bits: int
    group_size: int
    symmetric: bool = False

    def __post_init__(self) -> None:
        if not 2 <= self.bits <= 8:
            raise ValueError("bits must be between 2 and 8")
        if self.group_size < 2:
            raise ValueError("group_size must be at least 2")

    @property
    def name(self) -> str:
        """Variant name such as ``w4g32`` (``s`` suffix for symmetric rounding)."""
        return f"w{self.bits}g{self.group_size}{'s' if self.symmetric else ''}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "method": "rtn-minmax-per-group", "targets": "linear projections"}


def fake_quantize(weight: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """Round ``weight`` (out, in) to ``2**bits`` levels per group of ``group_size`` inputs.

    Asymmetric: scale = (max - min) / (2^b - 1) and an integer zero point, as in GPTQ/AWQ.
    Symmetric: scale = absmax / (2^(b-1) - 1), levels -2^(b-1) … 2^(b-1) - 1.
    Computed in fp32 and returned in the input's dtype.
    """
    import torch

    out_features, in_features = weight.shape
    if in_features % spec.group_size:
        raise ValueError(f"in_features {in_features} is not a multiple of group_size {spec.group_size}")
    groups = weight.detach().to(torch.float32).reshape(-1, spec.group_size)
    if spec.symmetric:
        qmax = 2 ** (spec.bits - 1) - 1
        scale = groups.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / qmax
        quantized = torch.clamp(torch.round(groups / scale), -qmax - 1, qmax)
        restored = quantized * scale
    else:
        qmax = 2**spec.bits - 1
        low = groups.amin(dim=1, keepdim=True)
        high = groups.amax(dim=1, keepdim=True)
        scale = ((high - low) / qmax).clamp(min=1e-12)
        zero = torch.round(-low / scale)
        quantized = torch.clamp(torch.round(groups / scale) + zero, 0, qmax)
        restored = (quantized - zero) * scale
    return restored.reshape(out_features, in_features).to(weight.dtype)


def quantize_model_(model: PreTrainedModel, spec: QuantSpec) -> list[str]:
    """Round the model's linear projection weights in place; returns the names it changed."""
    import torch

    changed = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            if LINEAR_WEIGHT.search(name):
                param.copy_(fake_quantize(param, spec))
                changed.append(name)
    if not changed:
        raise ValueError("no linear projection weights found to quantize")
    return changed


def write_quantized_variant(source_dir: Path, target_dir: Path, spec: QuantSpec) -> list[str]:
    """Load ``source_dir``, round it per ``spec`` and save a complete model dir (with tokenizer).

    Rounding starts from the saved bf16 weights, exactly what the base variant serves.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(source_dir), dtype=torch.float32)
    changed = quantize_model_(model, spec)
    target_dir.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(str(target_dir), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(source_dir)).save_pretrained(str(target_dir))
    return changed
