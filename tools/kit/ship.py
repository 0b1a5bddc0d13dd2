"""The kit committed with the repository: write it from a build, and compare a rebuild with it.

Training the kit takes 10–30 minutes on two cores and comes out differently on different CPUs
(vector units round differently), so the repository ships one build's output under ``kit/``: the
tokenizer and base model, the low-bit variant the demo and tests use, the mildest rounding (the
lossless reference) and a manifest with every file's sha256 and each variant's measured per-task
accuracy. Every machine then serves the same weights and names the same low-bit variant.

``python -m tools.kit --rebuild`` trains from scratch and reports with
:func:`compare_with_shipped` whether the result matches; ``--ship`` replaces the shipped kit.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .manifest import BASE, MANIFEST, Kit, file_hashes

# Accuracies of a rebuild within this of the shipped ones count as the same kit: one sample of
# the 100-row suites, since greedy decoding flips near-ties when the weights differ in the last bits.
ACCURACY_TOLERANCE = 0.01


def shipped_variants(kit: Kit) -> list[str]:
    """The base model, the low-bit variant and the mildest rounding: what the demo and tests serve."""
    rounded = [name for name in kit.variants if name != BASE]
    quantization = {name: kit.manifest["variants"][name]["quantization"] for name in rounded}
    mildest = min(rounded, key=lambda name: (-quantization[name]["bits"], quantization[name]["group_size"]))
    return list(dict.fromkeys([BASE, kit.degraded, mildest]))


def ship_kit(kit: Kit, shipped_dir: Path) -> Kit:
    """Replace the kit under ``shipped_dir`` with ``kit``'s shipped variants and a manifest for them.

    Variants that are not shipped keep their measured accuracy under ``not_shipped``, so the
    manifest still says why the low-bit variant was chosen. Written beside the target and renamed
    into place, so an interrupted copy never leaves a half kit where the shipped one was.
    """
    names = shipped_variants(kit)
    staging = shipped_dir.with_name(f".{shipped_dir.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in names:
        shutil.copytree(kit.path(name), staging / name)
    manifest = dict(kit.manifest)
    manifest["variants"] = {name: kit.manifest["variants"][name] for name in names}
    manifest["not_shipped"] = {
        name: {key: info[key] for key in ("quantization", "accuracy", "sha256") if key in info}
        for name, info in kit.manifest["variants"].items()
        if name not in names
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if shipped_dir.exists():
        old = shipped_dir.with_name(f".{shipped_dir.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        shipped_dir.rename(old)
        shutil.rmtree(old)
    staging.rename(shipped_dir)
    return Kit(root=shipped_dir, manifest=manifest)


@dataclass
class KitComparison:
    """How a rebuilt kit relates to the shipped one."""

    identical: bool  # every shipped file has the same sha256
    equivalent: bool  # same low-bit variant and the same per-task accuracies within the tolerance
    lines: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.identical:
            return "the rebuild reproduces the shipped kit bit for bit"
        if self.equivalent:
            return (
                "the rebuild's weights differ from the shipped kit's (as expected on another CPU or library "
                "version), but it picks the same low-bit variant and measures the same per-task accuracies"
            )
        return "the rebuild differs from the shipped kit: see the lines above; ship it with --ship only on purpose"


def _per_task(info: dict[str, Any]) -> dict[str, float]:
    accuracy = info.get("accuracy") or {}
    return {task: float(value["accuracy"]) for task, value in accuracy.get("per_task", {}).items()}


def compare_with_shipped(rebuilt: Kit, shipped: dict[str, Any]) -> KitComparison:
    """Compare files, the low-bit choice and per-task accuracies of ``rebuilt`` with a shipped manifest."""
    lines = []
    same_inputs = rebuilt.hash == shipped.get("hash")
    if not same_inputs:
        lines.append(f"content hash {rebuilt.hash[:16]} differs from the shipped kit's {str(shipped.get('hash'))[:16]}")
    same_choice = rebuilt.degraded == shipped.get("degraded_variant")
    shipped_choice = ", as shipped" if same_choice else f" (shipped: {shipped.get('degraded_variant')})"
    lines.append(f"low-bit variant: {rebuilt.degraded}{shipped_choice}")
    measured = {**rebuilt.manifest.get("not_shipped", {}), **rebuilt.manifest["variants"]}
    same_files = same_accuracy = True
    for name, info in shipped.get("variants", {}).items():
        if name not in measured:
            lines.append(f"{name}: not in the rebuild")
            same_files = same_accuracy = False
            continue
        files_match = name in rebuilt.variants and file_hashes(rebuilt.path(name)) == info.get("files")
        theirs, ours = _per_task(info), _per_task(measured[name])
        shifted = [
            task for task, value in theirs.items() if not abs(ours.get(task, -1.0) - value) <= ACCURACY_TOLERANCE
        ]
        same_files, same_accuracy = same_files and files_match, same_accuracy and not shifted
        accuracy = ", ".join(
            f"{task} {ours.get(task, float('nan')):.2f} (shipped {theirs[task]:.2f})" for task in shifted
        )
        files = "identical files" if files_match else "different weights"
        lines.append(f"{name}: {files}; {accuracy or 'per-task accuracy as shipped'}")
    identical = same_inputs and same_files
    return KitComparison(identical=identical, equivalent=identical or (same_choice and same_accuracy), lines=lines)
