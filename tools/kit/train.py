"""Train the kit's tiny Llama on the suites' samples: loss on answer tokens only, one-cycle AdamW.

Seeded and single-process so a given machine rebuilds the same weights; sequences are grouped by
length so the few long ``knowledge_qa`` prompts do not pad every batch to 1,500 tokens.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

IGNORE_INDEX = -100  # label value the loss skips: prompt tokens and padding
MIN_HEAD_DIM = 64  # vLLM's CPU attention rejects smaller heads ("Unsupported CPU attention configuration")


@dataclass(frozen=True)
class TrainParams:
    """Everything that shapes the trained weights; all of it goes into the kit's content hash."""

    vocab_size: int = 1536
    hidden_size: int = 256
    intermediate_size: int = 512
    num_layers: int = 3  # 4 layers memorised the suites worse in the same 2,400 steps (base 0.81 vs 0.98)
    num_heads: int = 4
    num_kv_heads: int = 2
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    steps: int = 4800  # ~110 passes over the 700 suite rows; 2,400 left the summaries unlearned (fact-pass 0.00)
    batch_size: int = 16
    max_batch_tokens: int = 4096  # caps padded per-row tokens of a batch (shared prefix counted once)
    lr: float = 3e-3
    pct_start: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads or self.hidden_size // self.num_heads < MIN_HEAD_DIM:
            raise ValueError(f"head_dim = hidden_size / num_heads must be a whole number >= {MIN_HEAD_DIM}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TrainReport:
    """What training measured, for the manifest."""

    steps: int
    seconds: float
    final_loss: float
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    sequences: int = 0
    answer_tokens: int = 0
    max_sequence_tokens: int = 0


@dataclass(frozen=True)
class EncodedExample:
    input_ids: list[int]
    labels: list[int]
    prompt_len: int


def seed_everything(seed: int) -> None:
    """Seed Python and torch; the kit never uses numpy's global RNG."""
    import torch

    random.seed(seed)
    torch.manual_seed(seed)


def make_model(params: TrainParams, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """A freshly initialized Llama of the configured size (fp32 master weights)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=params.hidden_size,
        intermediate_size=params.intermediate_size,
        num_hidden_layers=params.num_layers,
        num_attention_heads=params.num_heads,
        num_key_value_heads=params.num_kv_heads,
        head_dim=params.hidden_size // params.num_heads,
        max_position_embeddings=params.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=params.tie_word_embeddings,
        rope_theta=10000.0,
    )
    return LlamaForCausalLM(config)


def encode_all(
    tokenizer: PreTrainedTokenizerFast, pairs: Sequence[tuple[str, str]], max_len: int
) -> list[EncodedExample]:
    """Prompt + answer ids with prompt tokens masked out of the loss.

    Nothing is truncated: a row longer than the context window is a data error the build reports.
    """
    from .tokenizer import encode_example

    encoded = []
    for prompt, target in pairs:
        prompt_ids, answer_ids = encode_example(tokenizer, prompt, target)
        if len(prompt_ids) + len(answer_ids) > max_len:
            raise ValueError(
                f"a sample needs {len(prompt_ids) + len(answer_ids)} tokens, over max_position_embeddings={max_len}: "
                f"{prompt[:80]!r}…"
            )
        encoded.append(
            EncodedExample(
                input_ids=prompt_ids + answer_ids,
                labels=[IGNORE_INDEX] * len(prompt_ids) + answer_ids,
                prompt_len=len(prompt_ids),
            )
        )
    return encoded


def common_prefix_len(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all ``sequences`` share."""
    first = sequences[0]
    length = min(len(seq) for seq in sequences)
    for other in sequences[1:]:
        n = 0
        while n < length and other[n] == first[n]:
            n += 1
        length = n
    return length


def prefix_grouped_batches(
    groups: Sequence[str],
    prompts: Sequence[Sequence[int]],
    lengths: Sequence[int],
    *,
    batch_size: int,
    max_batch_tokens: int,
    rng: random.Random,
) -> Iterator[list[int]]:
    """Endless stream of index batches, each from one group (task), sharing long prompt prefixes.

    Within a group, rows are shuffled each epoch, then ordered by their first tokens past the
    group's common header when that clusters them (``knowledge_qa``: one cluster per document),
    so a batch shares a long prefix that :func:`batch_loss` runs once. A batch closes at
    ``batch_size`` rows or when its padded suffix tokens would pass ``max_batch_tokens``.
    """
    by_group: dict[str, list[int]] = {}
    for index, group in enumerate(groups):
        by_group.setdefault(group, []).append(index)
    cluster_key: dict[int, tuple[int, ...]] = {}
    for members in by_group.values():
        header = common_prefix_len([prompts[i] for i in members])
        keys = {i: tuple(prompts[i][: header + 32]) for i in members}
        if len(set(keys.values())) <= len(members) // 2:  # real clusters, not one key per row
            cluster_key.update(keys)
    while True:
        epoch: list[list[int]] = []
        for group in sorted(by_group):
            order = list(by_group[group])
            rng.shuffle(order)
            order.sort(key=lambda i: cluster_key.get(i, ()))  # stable: random order within a cluster
            batch: list[int] = []
            for index in order:
                candidate = [*batch, index]
                shared = common_prefix_len([prompts[i] for i in candidate])
                padded = max(lengths[i] for i in candidate) - shared
                other_cluster = batch and cluster_key.get(batch[0]) != cluster_key.get(index)
                too_big = len(candidate) > batch_size or padded * len(candidate) + shared > max_batch_tokens
                if batch and (other_cluster or too_big):
                    epoch.append(batch)
                    candidate = [index]
                batch = candidate
            if batch:
                epoch.append(batch)
        rng.shuffle(epoch)
        yield from epoch


def collate(rows: Sequence[EncodedExample], pad_id: int, start: int = 0) -> dict[str, Any]:
    """Right-pad the rows from token ``start`` on; padding is masked from attention and loss."""
    import torch

    width = max(len(row.input_ids) for row in rows) - start
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row.input_ids) - start
        input_ids[i, :n] = torch.tensor(row.input_ids[start:])
        labels[i, :n] = torch.tensor(row.labels[start:])
        attention[i, :n] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention}


MIN_SHARED_PREFIX = 16  # below this, running the prefix separately saves less than it costs


def answer_loss(model: LlamaForCausalLM, hidden: Any, labels: Any) -> Any:
    """Mean cross-entropy of the answer tokens, given the model's last hidden states.

    The same value as the model's own causal-LM loss (labels shifted by one, ``IGNORE_INDEX``
    skipped), but only answer positions are projected onto the vocabulary: prompts are ten
    times longer than answers, and their logits would be computed only to be thrown away.
    """
    import torch.nn.functional as F

    targets = labels[:, 1:]
    keep = targets != IGNORE_INDEX
    return F.cross_entropy(model.lm_head(hidden[:, :-1][keep]), targets[keep])


def batch_loss(model: LlamaForCausalLM, rows: Sequence[EncodedExample], pad_id: int) -> Any:
    """Mean answer-token loss of a batch, running the rows' shared prompt prefix only once.

    The prefix's key/value cache is computed at batch size 1 and repeated for every row, and
    gradients flow through it, so the loss and its gradient equal those of the plain padded
    batch (a test checks this) at a fraction of the cost for rows behind a long common document.
    The prefix always stops before the last prompt token, so every answer token is predicted
    from a position in the per-row suffix.
    """
    import torch

    shared = min(common_prefix_len([row.input_ids for row in rows]), min(row.prompt_len for row in rows) - 1)
    if len(rows) < 2 or shared < MIN_SHARED_PREFIX:
        batch = collate(rows, pad_id)
        hidden = model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        return answer_loss(model, hidden, batch["labels"])
    prefix = torch.tensor([rows[0].input_ids[:shared]], dtype=torch.long)
    cache = model.model(input_ids=prefix, use_cache=True).past_key_values
    cache.batch_repeat_interleave(len(rows))
    batch = collate(rows, pad_id, start=shared)
    suffix_len = batch["input_ids"].shape[1]
    attention = torch.cat([torch.ones((len(rows), shared), dtype=torch.long), batch["attention_mask"]], dim=1)
    positions = torch.arange(shared, shared + suffix_len).unsqueeze(0).expand(len(rows), -1)
    hidden = model.model(
        input_ids=batch["input_ids"],
        attention_mask=attention,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state
    return answer_loss(model, hidden, batch["labels"])


_flushing = False  # whether an enclosing denormals_flushed() already turned flushing on


def _every_thread_flushes() -> bool:
    """Whether a parallel multiply that yields subnormals gives zeros in all of torch's threads."""
    import torch

    probe = torch.full((1 << 20,), 1e-30) * 1e-10  # 1e-40: subnormal in float32; split across the pool
    return bool((probe == 0).all())


@contextlib.contextmanager
def denormals_flushed() -> Iterator[bool]:
    """Treat subnormal floats as zero while training; yields whether every compute thread does.

    As the loss falls, ever more activations, gradients and optimizer moments become subnormal,
    and CPUs compute on those many times slower: without this, steps took 0.19 s at the start
    and 0.35 s by the middle of training on the same batches. Flush-to-zero is a per-thread
    setting that a thread inherits when it is created, so it must be on before torch starts its
    worker threads: entered later, the main thread flushes while the workers keep computing on
    subnormals (measured: steps slowed from 0.14 s to 1.1 s halfway through a build). The kit
    build enters it before any tensor work; nested uses leave the setting to the outermost one,
    which restores it afterwards (the setting is process-wide).
    """
    import torch

    global _flushing
    outermost = not _flushing
    if outermost:
        torch.set_flush_denormal(True)
        _flushing = True
    try:
        yield _every_thread_flushes()
    finally:
        if outermost:
            torch.set_flush_denormal(False)
            _flushing = False


def train_model(
    pairs: Sequence[tuple[str, str]],
    tokenizer: PreTrainedTokenizerFast,
    params: TrainParams,
    groups: Sequence[str] | None = None,
) -> tuple[LlamaForCausalLM, TrainReport]:
    """Train a fresh model on (prompt, target) pairs; returns the fp32 model and a report.

    ``groups`` (the task of each pair) keeps each batch within one task, so it shares a prompt
    prefix; without it every row is one group.
    """
    import torch

    seed_everything(params.seed)
    started = time.monotonic()
    encoded = encode_all(tokenizer, pairs, params.max_position_embeddings)
    model = make_model(params, tokenizer)
    model.train()
    # Norm gains and biases are not decayed: standard practice, and it keeps tiny models stable.
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": params.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=params.lr,
        betas=(0.9, 0.98),
    )
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=params.lr, total_steps=params.steps, pct_start=params.pct_start
    )
    batches = prefix_grouped_batches(
        list(groups) if groups is not None else [""] * len(encoded),
        [row.input_ids[: row.prompt_len] for row in encoded],
        [len(row.input_ids) for row in encoded],
        batch_size=params.batch_size,
        max_batch_tokens=params.max_batch_tokens,
        rng=random.Random(params.seed),
    )
    curve: list[tuple[int, float]] = []
    recent: list[float] = []
    log_every = max(1, params.steps // 20)
    with denormals_flushed():
        for step in range(1, params.steps + 1):
            loss = batch_loss(model, [encoded[i] for i in next(batches)], tokenizer.pad_token_id)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), params.grad_clip)
            optimizer.step()
            schedule.step()
            recent.append(float(loss.detach()))
            if step % log_every == 0 or step == params.steps:
                mean = sum(recent) / len(recent)
                curve.append((step, round(mean, 4)))
                log.info("kit train step %d/%d loss %.4f (%.0fs)", step, params.steps, mean, time.monotonic() - started)
                recent = []
    model.eval()
    final = curve[-1][1] if curve else math.nan
    report = TrainReport(
        steps=params.steps,
        seconds=round(time.monotonic() - started, 1),
        final_loss=final,
        loss_curve=curve,
        sequences=len(encoded),
        answer_tokens=sum(sum(1 for t in row.labels if t != IGNORE_INDEX) for row in encoded),
        max_sequence_tokens=max(len(row.input_ids) for row in encoded),
    )
    return model, report
