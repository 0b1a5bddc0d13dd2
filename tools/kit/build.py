"""Find the tiny model kit (shipped, cached or built once per content hash) and hand back a :class:`Kit`.

The repository ships one trained kit under ``kit/`` (see :mod:`tools.kit.ship`); it is used
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
import json
import logging
import os
import platform
import shutil
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .data import Example, discover_data_files, load_examples
from .manifest import (
    BASE,
    MANIFEST,
    SHIPPED_DIR,
    WEIGHTS_FILE,
    Kit,
    KitIntegrityError,
    KitParams,
    differing_inputs,
    digest_of,
    hash_inputs,
    kit_file_problems,
    load_kit,
    read_manifest,
    sha256_file,
)
from .quantize import QuantSpec

log = logging.getLogger(__name__)

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


def default_cache_root() -> Path:
    """``$OPTGATE_KIT_DIR`` or ``~/.cache/optgate/kit`` (read directly: the kit works without Django)."""
    configured = os.environ.get("OPTGATE_KIT_DIR", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "optgate" / "kit"


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
