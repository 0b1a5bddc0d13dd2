"""Measure a kit variant's accuracy in-process: HF greedy decoding scored by the suites' scorers.

This is the build's own quality check (fast, no engine start). The release gate measures the
same variants again through vLLM; both decode greedily from the same weights, so they agree up to
bf16 kernel differences on near-ties.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .data import Example

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

SampleScorer = Callable[[Example, str], bool]
EXTRA_NEW_TOKENS = 16  # decoding budget beyond the gold answer's length: room for a wrong, longer answer
MAX_BATCH_TOKENS = 8192


def exact_match(example: Example, output: str) -> bool:
    """Fallback scorer for rows that belong to no registered suite (e.g. test data)."""
    return output.strip() == example.target.strip()


def suite_scorer() -> tuple[SampleScorer, str]:
    """The suites' own ``score`` for known slugs, exact match for anything else.

    Returns the scorer and a label for the manifest saying which one was used.
    """
    try:
        from evaluators.suites import SUITES
    except ImportError as error:  # suites are optional for the kit (its tests use synthetic data)
        log.warning("evaluators.suites not importable (%s); scoring by exact match", error)
        return exact_match, "exact_match"

    def score(example: Example, output: str) -> bool:
        suite = SUITES.get(example.task)
        if suite is None:
            return exact_match(example, output)
        return bool(suite.score(example.row, output).passed)

    return score, "suites"


def greedy_outputs(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, examples: Sequence[Example], *, batch_size: int = 32
) -> list[str]:
    """Greedy completions for each example's prompt, decoded without special tokens.

    Prompts are sorted by length and left-padded in batches (RoPE only sees relative positions,
    so the padding offset does not change what a row attends to).
    """
    import torch

    from .tokenizer import encode_example

    encoded = [encode_example(tokenizer, ex.prompt, ex.target) for ex in examples]
    order = sorted(range(len(examples)), key=lambda i: len(encoded[i][0]))
    outputs: list[str] = [""] * len(examples)
    model.eval()
    start = 0
    while start < len(order):
        batch = [order[start]]
        while (
            start + len(batch) < len(order)
            and len(batch) < batch_size
            and len(encoded[order[start + len(batch)]][0]) * (len(batch) + 1) <= MAX_BATCH_TOKENS
        ):
            batch.append(order[start + len(batch)])
        start += len(batch)
        width = max(len(encoded[i][0]) for i in batch)
        input_ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, index in enumerate(batch):
            ids = encoded[index][0]
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            attention[row, width - len(ids) :] = 1
        budget = max(len(encoded[i][1]) for i in batch) + EXTRA_NEW_TOKENS
        with torch.no_grad():
            generated = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=budget,
                do_sample=False,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        for row, index in enumerate(batch):
            outputs[index] = tokenizer.decode(generated[row, width:], skip_special_tokens=True)
    return outputs


def accuracy_report(examples: Sequence[Example], outputs: Sequence[str], scorer: SampleScorer) -> dict[str, Any]:
    """Per-task and overall pass rates, plus the ids that failed (handy when a variant regresses)."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    failures: dict[str, list[str]] = defaultdict(list)
    for example, output in zip(examples, outputs, strict=True):
        ok = scorer(example, output)
        totals[example.task][0] += int(ok)
        totals[example.task][1] += 1
        if not ok:
            failures[example.task].append(example.id)
    per_task = {
        task: {"passed": got, "total": n, "accuracy": round(got / n, 4), "failed_ids": failures[task]}
        for task, (got, n) in sorted(totals.items())
    }
    passed = sum(t["passed"] for t in per_task.values())
    total = sum(t["total"] for t in per_task.values())
    return {
        "overall": round(passed / total, 4) if total else 0.0,
        "passed": passed,
        "total": total,
        "per_task": per_task,
    }


def measure_variant(model_dir: Path, examples: Sequence[Example], scorer: SampleScorer) -> dict[str, Any]:
    """Load a saved variant exactly as served (bf16 weights, fp32 compute) and score it."""
    import torch
    from transformers import AutoModelForCausalLM

    from .tokenizer import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    tokenizer = load_tokenizer(model_dir)
    return accuracy_report(examples, greedy_outputs(model, tokenizer, examples), scorer)
