"""What a kit is and how it is identified: its parameters, its content hash over everything that
shapes the weights, its manifest and the files the manifest vouches for.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from .quantize import QuantSpec
from .train import TrainParams

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
WEIGHTS_FILE = "model.safetensors"
BASE = "base"
HASH_RECIPE_VERSION = 2  # bump when the hash inputs themselves change shape
KIT_SOURCES_DIR = Path(__file__).resolve().parent
# The kit committed with the repository (``make kit`` rebuilds and compares it); absent when
# OptGate is installed from a wheel, which then builds its own.
SHIPPED_DIR = KIT_SOURCES_DIR.parents[1] / "kit"
# The modules whose code shapes the weights. The rest of the package (this builder's bookkeeping,
# the accuracy check, the CLI) can change without invalidating the shipped kit.
WEIGHT_SOURCES = ("data.py", "tokenizer.py", "train.py", "quantize.py")


@dataclass(frozen=True)
class KitParams:
    """Hyperparameters of a kit build; all of them are hashed.

    The degraded variant (the demo's "low-bit weights" candidate) is not fixed here: the build
    measures every variant and picks it by :func:`choose_degraded`, because which bit width
    breaks which task is an empirical fact of the trained weights.
    """

    train: TrainParams = field(default_factory=TrainParams)
    variants: tuple[QuantSpec, ...] = (
        QuantSpec(bits=4, group_size=32),
        QuantSpec(bits=3, group_size=32),
        QuantSpec(bits=2, group_size=32),
        QuantSpec(bits=2, group_size=64),
        QuantSpec(bits=2, group_size=128),
    )
    # The demo's low-bit ticket puts SQL and tool calling at risk: the degraded variant must
    # measurably lose one of them. A kit that memorises its suites well keeps SQL even at 2 bits,
    # so either counts.
    must_break: tuple[str, ...] = ("dataagent_nl2sql", "tool_calling")
    evaluate: bool = True
    eval_per_task: int | None = None  # first N rows of each task are scored (None: all)

    def __post_init__(self) -> None:
        names = [spec.name for spec in self.variants]
        if len(set(names)) != len(names) or BASE in names:
            raise ValueError(f"variant names must be unique and not {BASE!r}: {names}")
        if not names:
            raise ValueError("a kit needs at least one rounded variant")

    def as_dict(self) -> dict[str, Any]:
        return {
            "train": self.train.as_dict(),
            "variants": [spec.as_dict() for spec in self.variants],
            "must_break": list(self.must_break),
            "evaluate": self.evaluate,
            "eval_per_task": self.eval_per_task,
        }


@dataclass(frozen=True)
class Kit:
    """A finished kit on disk: variant name → model dir, plus its manifest."""

    root: Path
    manifest: dict[str, Any]

    @property
    def hash(self) -> str:
        return str(self.manifest["hash"])

    @property
    def variants(self) -> dict[str, Path]:
        """Absolute model dirs by variant name (``base`` first)."""
        return {name: self.root / info["path"] for name, info in self.manifest["variants"].items()}

    @property
    def degraded(self) -> str:
        """Name of the low-bit variant that measurably loses accuracy on some tasks."""
        return str(self.manifest["degraded_variant"])

    def path(self, variant: str = BASE) -> Path:
        try:
            return self.variants[variant]
        except KeyError:
            raise KeyError(f"kit {self.hash[:16]} has no variant {variant!r}; it has {sorted(self.variants)}") from None

    def revision(self, variant: str = BASE) -> str:
        """sha256 of the variant's weights file: the Backend's model revision."""
        self.path(variant)  # uniform error for unknown names
        return str(self.manifest["variants"][variant]["sha256"])

    def accuracy(self, variant: str = BASE, task: str | None = None) -> float | None:
        """Measured pass rate (overall, or for one task); ``None`` when the build did not measure."""
        self.path(variant)
        measured = self.manifest["variants"][variant].get("accuracy")
        if not measured:
            return None
        if task is None:
            return float(measured["overall"])
        return float(measured["per_task"][task]["accuracy"])


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _major(version: str) -> str:
    return version.split(".", 1)[0]


def hash_inputs(data_files: Sequence[Path], params: KitParams) -> dict[str, Any]:
    """The canonical description of everything that shapes the kit's weights.

    Data files are keyed by ``<task>/<file>`` (not absolute paths) so a checkout's location does
    not matter; only major versions of torch/transformers count, so a patch upgrade reuses the kit.
    """
    sources = {name: sha256_file(KIT_SOURCES_DIR / name) for name in WEIGHT_SOURCES}
    data = {f"{path.parent.name}/{path.name}": sha256_file(path) for path in sorted(data_files)}
    return {
        "recipe": HASH_RECIPE_VERSION,
        "sources": sources,
        "data": data,
        "params": params.as_dict(),
        # Read from the installed metadata: importing torch only to hash its version costs seconds.
        "versions": {
            "torch": _major(metadata.version("torch")),
            "transformers": _major(metadata.version("transformers")),
        },
    }


def digest_of(inputs: dict[str, Any]) -> str:
    """sha256 over the canonical JSON of a :func:`hash_inputs` result."""
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def kit_hash(data_files: Sequence[Path], params: KitParams) -> str:
    """The kit's content hash: what names its cache folder and what a shipped kit must match."""
    return digest_of(hash_inputs(data_files, params))


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file directly in ``folder``, by name."""
    return {path.name: sha256_file(path) for path in sorted(folder.iterdir()) if path.is_file()}


def kit_file_problems(kit_dir: Path, manifest: dict[str, Any]) -> list[str]:
    """What differs between the files under ``kit_dir`` and the hashes its manifest records.

    Every variant folder must hold exactly the files the manifest lists, each with its recorded
    sha256: an added file (a stray ``quantize_config.json``, say) changes what vLLM serves as
    surely as an edited one. Checksumming a few MB is cheap next to an engine start.
    """
    problems = []
    for name, info in manifest.get("variants", {}).items():
        folder = kit_dir / info["path"]
        expected: dict[str, str] = info.get("files") or {}
        if not expected:
            problems.append(f"{name}: the manifest lists no file hashes")
            continue
        actual = file_hashes(folder) if folder.is_dir() else {}
        for file_name in sorted(expected.keys() | actual.keys()):
            path = folder / file_name
            if file_name not in actual:
                problems.append(f"{path} is missing (sha256 {expected[file_name]} expected)")
            elif file_name not in expected:
                problems.append(f"{path} is not part of the kit (sha256 {actual[file_name]})")
            elif actual[file_name] != expected[file_name]:
                problems.append(f"{path} has sha256 {actual[file_name]}, the manifest expects {expected[file_name]}")
    return problems


def read_manifest(kit_dir: Path) -> dict[str, Any] | None:
    """The kit's manifest, or ``None`` when it is missing or unreadable."""
    try:
        manifest = json.loads((kit_dir / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return manifest if isinstance(manifest, dict) else None


def load_kit(kit_dir: Path, expected_hash: str | None = None) -> Kit | None:
    """A complete, intact kit at ``kit_dir``, or ``None`` (missing manifest, wrong hash, altered files)."""
    manifest = read_manifest(kit_dir)
    if manifest is None:
        return None
    if expected_hash is not None and manifest.get("hash") != expected_hash:
        return None
    problems = kit_file_problems(kit_dir, manifest)
    if problems:
        log.warning("kit %s is damaged, rebuilding: %s", kit_dir, "; ".join(problems))
        return None
    return Kit(root=kit_dir, manifest=manifest)


class KitIntegrityError(RuntimeError):
    """The shipped kit's files do not match its manifest: it is refused, never served."""


def differing_inputs(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Which hash inputs (``sources/train.py``, ``data/cs_summary/samples.jsonl``, ``params``…) differ."""
    changed = []
    for key in sorted(recorded.keys() | current.keys()):
        old, new = recorded.get(key), current.get(key)
        if isinstance(old, dict) and isinstance(new, dict) and key != "params":
            changed += [f"{key}/{name}" for name in sorted(old.keys() | new.keys()) if old.get(name) != new.get(name)]
        elif old != new:
            changed.append(key)
    return changed
