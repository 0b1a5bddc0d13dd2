"""Find the tiny model kit (shipped, cached or built once per content hash) and hand back a :class:`Kit`.

The repository ships one trained kit under ``kit/`` (see :mod:`evaluators.kit.ship`); it is used
as it is whenever its content hash matches this tree and its files verify, so a fresh machine
trains nothing. Otherwise kits are built into a cache (``$OPTGATE_KIT_DIR``, default
``~/.cache/optgate/kit``)::

    <hash16>/manifest.json        written last: its presence marks a complete kit
    <hash16>/base/                trained model + tokenizer (a complete HF model dir vLLM serves)
    <hash16>/w4g32/ …             rounded-weight variants, each a complete model dir too

The hash covers the modules that shape the weights (``WEIGHT_SOURCES``), the training data
files, the hyperparameters and the torch/transformers major versions, so any change to what
shapes the weights builds a new kit and an unchanged tree reuses the old one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import platform
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from .data import Example, discover_data_files, load_examples
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


MIN_DROP = 0.05  # the degraded variant must lose at least this much on one ``must_break`` task…
HOLD_TOLERANCE = 0.02  # …while at least one other task stays within this of the base


def choose_degraded(
    variants: dict[str, dict[str, Any]], specs: Sequence[QuantSpec], must_break: Sequence[str]
) -> tuple[str, str]:
    """Pick the degraded variant from measured accuracies; returns (name, reason).

    Prefers the *mildest* rounding (most bits, then smallest groups) whose loss is uneven: a
    ``must_break`` task drops by ``MIN_DROP`` or more while some other task holds. Without
    measurements (or if no variant qualifies) it falls back to the harshest one and says so.
    """
    by_harshness = sorted(specs, key=lambda spec: (-spec.bits, spec.group_size))
    base = variants[BASE].get("accuracy")
    wanted = " or ".join(must_break)
    if base and any(task in base["per_task"] for task in must_break):
        base_tasks = base["per_task"]
        for spec in by_harshness:
            tasks = variants[spec.name]["accuracy"]["per_task"]
            drops = {t: base_tasks[t]["accuracy"] - tasks[t]["accuracy"] for t in must_break if t in tasks}
            broken = [task for task, drop in drops.items() if drop >= MIN_DROP]
            held = [
                task
                for task in tasks
                if task not in broken and tasks[task]["accuracy"] >= base_tasks[task]["accuracy"] - HOLD_TOLERANCE
            ]
            if broken and held:
                lost = ", ".join(f"{task} drops by {drops[task]:.2f}" for task in broken)
                return spec.name, f"{lost}; holds on {', '.join(held)}"
    harshest = by_harshness[-1].name
    return harshest, f"no variant lost {wanted} unevenly as measured; fell back to the harshest rounding"


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


def default_cache_root() -> Path:
    """``$OPTGATE_KIT_DIR`` or ``~/.cache/optgate/kit`` (read directly: the kit works without Django)."""
    configured = os.environ.get("OPTGATE_KIT_DIR", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "optgate" / "kit"


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


@contextlib.contextmanager
def _build_lock(cache_root: Path, short_hash: str) -> Iterator[None]:
    """One builder per hash across processes (parallel test workers, a demo and CI on one box)."""
    cache_root.mkdir(parents=True, exist_ok=True)
    with (cache_root / f".{short_hash}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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


def shipped_kit(shipped_dir: Path, digest: str, inputs: dict[str, Any]) -> Kit | None:
    """The kit committed under ``shipped_dir`` when it was built from exactly these inputs.

    ``None`` when nothing is shipped there or it was built from other inputs (the log says which).
    Raises :class:`KitIntegrityError` when the inputs match but a file does not: an altered model
    must never be served under the shipped kit's name.
    """
    manifest = read_manifest(shipped_dir)
    if manifest is None:
        return None
    if manifest.get("hash") != digest:
        log.info(
            "the shipped kit in %s was built from other inputs (%s); using or building a kit for this tree",
            shipped_dir,
            ", ".join(differing_inputs(manifest.get("hash_inputs", {}), inputs)) or "hash recipe",
        )
        return None
    problems = kit_file_problems(shipped_dir, manifest)
    if problems:
        raise KitIntegrityError(
            f"the shipped kit in {shipped_dir} does not match its manifest, so it is not used: "
            + "; ".join(problems)
            + ". Restore the committed files (git checkout -- kit/) or build a kit from scratch (make kit)."
        )
    return Kit(root=shipped_dir, manifest=manifest)


def ensure_kit(
    *,
    force: bool = False,
    cache_root: Path | None = None,
    params: KitParams | None = None,
    data_files: Sequence[Path] | None = None,
    shipped_dir: Path | None = SHIPPED_DIR,
) -> Kit:
    """Return the kit for the current sources, data and params: shipped, cached or built.

    The kit committed with the repository (``shipped_dir``) is used as it is when it was built
    from these inputs and its files verify; otherwise a valid kit in ``cache_root`` is reused, and
    only then is one trained (minutes). ``force`` always trains a new one into the cache. The
    build happens in a temporary sibling folder renamed into place at the end, so a crash or
    Ctrl-C never leaves a folder that looks like a finished kit.
    """
    cache_root = cache_root or default_cache_root()
    params = params or KitParams()
    files = list(data_files) if data_files is not None else discover_data_files()
    if not files:
        raise FileNotFoundError("no training data: expected evaluators/suites/*/samples.jsonl")
    inputs = hash_inputs(files, params)
    digest = digest_of(inputs)
    if not force and shipped_dir is not None and (kit := shipped_kit(shipped_dir, digest, inputs)) is not None:
        return kit
    final_dir = cache_root / digest[:16]
    if not force and (kit := load_kit(final_dir, digest)) is not None:
        return kit
    with _build_lock(cache_root, digest[:16]):
        # Another process may have finished the same build while this one waited for the lock.
        if not force and (kit := load_kit(final_dir, digest)) is not None:
            return kit
        tmp_dir = cache_root / f".tmp-{digest[:16]}-{os.getpid()}"
        shutil.rmtree(tmp_dir, ignore_errors=True)
        try:
            build_kit_into(tmp_dir, load_examples(files), params, inputs, digest)
            if final_dir.exists():
                # Only reached with force or a damaged kit; move it aside first because a
                # directory cannot be renamed over a non-empty one.
                stale = cache_root / f".stale-{digest[:16]}-{os.getpid()}"
                final_dir.rename(stale)
                shutil.rmtree(stale, ignore_errors=True)
            tmp_dir.rename(final_dir)
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
    kit = load_kit(final_dir, digest)
    if kit is None:  # pragma: no cover - would mean the rename itself lied
        raise RuntimeError(f"kit at {final_dir} is not valid right after building it")
    return kit


def _token_lengths(tokenizer: Any, examples: Sequence[Example]) -> dict[str, dict[str, int]]:
    """Prompt/answer token counts per task: what ``max_model_len`` and load shapes must allow."""
    from .tokenizer import encode_example

    stats: dict[str, dict[str, int]] = {}
    for example in examples:
        prompt_ids, answer_ids = encode_example(tokenizer, example.prompt, example.target)
        task = stats.setdefault(example.task, {"rows": 0, "max_prompt": 0, "sum_prompt": 0, "max_answer": 0})
        task["rows"] += 1
        task["max_prompt"] = max(task["max_prompt"], len(prompt_ids))
        task["sum_prompt"] += len(prompt_ids)
        task["max_answer"] = max(task["max_answer"], len(answer_ids))
    return {
        task: {
            "rows": s["rows"],
            "max_prompt": s["max_prompt"],
            "mean_prompt": s["sum_prompt"] // s["rows"],
            "max_answer": s["max_answer"],
        }
        for task, s in sorted(stats.items())
    }


def _first_rows_per_task(examples: Sequence[Example], limit: int | None) -> list[Example]:
    """The first ``limit`` rows of every task, in file order (all rows when ``limit`` is None)."""
    seen: dict[str, int] = {}
    picked = []
    for example in examples:
        seen[example.task] = seen.get(example.task, 0) + 1
        if limit is None or seen[example.task] <= limit:
            picked.append(example)
    return picked


def build_kit_into(
    out_dir: Path, examples: Sequence[Example], params: KitParams, inputs: dict[str, Any], digest: str
) -> dict[str, Any]:
    """Train, save, derive and measure every variant under ``out_dir``; write the manifest last."""
    import torch

    from .train import denormals_flushed

    started = time.monotonic()
    # Bounded threads: the build shares small CI boxes with other work; override per machine.
    torch.set_num_threads(int(os.environ.get("OPTGATE_KIT_THREADS", "0")) or min(4, os.cpu_count() or 1))
    # Before any tensor work, so that torch's worker threads inherit flush-to-zero (see train.py).
    with denormals_flushed() as every_thread_flushes:
        if not every_thread_flushes:
            log.warning("kit: torch's threads started before subnormals were flushed; training will slow down")
        return _build_kit_into(out_dir, examples, params, inputs, digest, started, every_thread_flushes)


def _build_kit_into(
    out_dir: Path,
    examples: Sequence[Example],
    params: KitParams,
    inputs: dict[str, Any],
    digest: str,
    started: float,
    every_thread_flushes: bool,
) -> dict[str, Any]:
    import tokenizers
    import torch
    import transformers
    from transformers import GenerationConfig

    from .evaluate import measure_variant, suite_scorer
    from .quantize import write_quantized_variant
    from .tokenizer import train_tokenizer, training_texts
    from .train import train_model

    out_dir.mkdir(parents=True)
    pairs = [(example.prompt, example.target) for example in examples]
    log.info("kit %s: training tokenizer on %d rows", digest[:16], len(pairs))
    tokenizer = train_tokenizer(
        training_texts(pairs), vocab_size=params.train.vocab_size, model_max_length=params.train.max_position_embeddings
    )
    model, report = train_model(pairs, tokenizer, params.train, groups=[example.task for example in examples])

    base_dir = out_dir / BASE
    model.to(torch.bfloat16).save_pretrained(str(base_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(base_dir))
    # vLLM reads eos from generation_config.json as well as from the tokenizer.
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    ).save_pretrained(str(base_dir))

    variants: dict[str, dict[str, Any]] = {BASE: {"path": BASE, "quantization": None}}
    for spec in params.variants:
        log.info("kit %s: writing variant %s", digest[:16], spec.name)
        write_quantized_variant(base_dir, out_dir / spec.name, spec)
        variants[spec.name] = {"path": spec.name, "quantization": spec.as_dict()}

    scorer_name = None
    if params.evaluate:
        scorer, scorer_name = suite_scorer()
        eval_rows = _first_rows_per_task(examples, params.eval_per_task)
        for name, info in variants.items():
            eval_started = time.monotonic()
            info["accuracy"] = measure_variant(out_dir / info["path"], eval_rows, scorer)
            log.info(
                "kit %s: %s accuracy %.3f (%.0fs) %s",
                digest[:16],
                name,
                info["accuracy"]["overall"],
                time.monotonic() - eval_started,
                {task: v["accuracy"] for task, v in info["accuracy"]["per_task"].items()},
            )
    degraded, degraded_reason = choose_degraded(variants, params.variants, params.must_break)
    log.info("kit %s: degraded variant %s (%s)", digest[:16], degraded, degraded_reason)
    for info in variants.values():
        folder = out_dir / info["path"]
        info["sha256"] = sha256_file(folder / WEIGHTS_FILE)
        info["weights_file"] = WEIGHTS_FILE
        info["files"] = {path.name: sha256_file(path) for path in sorted(folder.iterdir()) if path.is_file()}

    manifest = {
        "schema": 1,
        "hash": digest,
        "hash_inputs": inputs,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "build_seconds": round(time.monotonic() - started, 1),
        "params": params.as_dict(),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
        "threads": torch.get_num_threads(),
        "denormals_flushed_in_every_thread": every_thread_flushes,
        "model": {
            "architecture": "LlamaForCausalLM",
            "parameters": sum(p.numel() for p in model.parameters()),
            "dtype": "bfloat16",
            "max_position_embeddings": params.train.max_position_embeddings,
        },
        "tokenizer": {
            "vocab_size": len(tokenizer),
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        "token_lengths": _token_lengths(tokenizer, examples),
        "training": {
            "steps": report.steps,
            "seconds": report.seconds,
            "final_loss": report.final_loss,
            "loss_curve": report.loss_curve,
            "sequences": report.sequences,
            "answer_tokens": report.answer_tokens,
            "max_sequence_tokens": report.max_sequence_tokens,
        },
        "scorer": scorer_name,
        "degraded_variant": degraded,
        "degraded_reason": degraded_reason,
        "variants": variants,
    }
    # Written last and atomically: a manifest on disk means every file it names is complete.
    partial = out_dir / f"{MANIFEST}.partial"
    partial.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    partial.rename(out_dir / MANIFEST)
    return manifest
