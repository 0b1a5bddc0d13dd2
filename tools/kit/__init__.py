"""OptGate's tiny model kit: a locally trained Llama and its rounded-weight variants.

Tests and the demo serve these with vLLM on the CPU; nothing is downloaded. ``ensure_kit()``
returns the cached kit for the current sources and suite data, building it (a few minutes on two
cores) when none exists yet. Heavy dependencies (torch, transformers, tokenizers) are imported
only when a build or an evaluation runs.
"""

from __future__ import annotations

from .build import default_cache_root, ensure_kit
from .manifest import BASE, Kit, KitParams, kit_hash, load_kit
from .quantize import QuantSpec
from .train import TrainParams

__all__ = [
    "BASE",
    "Kit",
    "KitParams",
    "QuantSpec",
    "TrainParams",
    "default_cache_root",
    "ensure_kit",
    "kit_hash",
    "load_kit",
]
