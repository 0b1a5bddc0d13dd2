"""Build a throwaway tiny random-weights Llama model directory for real-engine tests.

The model emits junk (its weights are random), which is fine for launcher, metrics and load
generator tests: they check plumbing and timing, not answers. Nothing is downloaded: the
tokenizer is trained here on a little local text.

Needs the ``engine-cpu`` extra (torch, transformers, tokenizers); import it lazily from fixtures.
"""

from __future__ import annotations

import json
from pathlib import Path

# Local text for the tokenizer: varied enough that byte-level BPE learns a few hundred merges.
_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "SELECT name, total FROM orders WHERE total > 100 ORDER BY total DESC;",
    'Summarise the ticket: {"customer": "ACME", "amount": 42, "status": "refunded"}',
    "Please answer the question using the documents provided and cite the source.",
    "def add(a: int, b: int) -> int:\n    return a + b\n",
    "I cannot help with that request because it violates the compliance policy.",
    "The customer asked about a late delivery and was offered a discount of 10 percent.",
    "Inference optimizations: quantization, prefix caching, speculative decoding, batching.",
    "Question: what is the capital of France? Answer: Paris.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000",
]

# A Llama-3-like chat template, small enough to read; vLLM's chat endpoint needs one.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|start|>{{ message['role'] }}\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant\n{% endif %}"
)

SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|start|>", "<|end|>"]


def build_tiny_llama(
    target: Path,
    *,
    vocab_size: int = 512,
    seed: int = 0,
    max_position: int = 4096,
    hidden_size: int = 128,
    intermediate_size: int = 256,
    num_layers: int = 2,
) -> Path:
    """Write a tiny Llama (default hidden 128, 2 layers, head_dim 64) with its tokenizer into ``target``.

    head_dim is fixed at 64: vLLM's CPU attention refuses smaller heads ("Unsupported CPU
    attention configuration"). Larger sizes give a slower model, useful when a benchmark needs
    decode steps slower than the API server's streaming.
    """
    if hidden_size % 64:
        raise ValueError("hidden_size must be a multiple of 64 (head_dim 64)")
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    target.mkdir(parents=True, exist_ok=True)

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(_CORPUS * 20, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        model_max_length=max_position,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(target)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=hidden_size // 64,
        num_key_value_heads=1,
        max_position_embeddings=max_position,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(dtype=torch.bfloat16)  # type: ignore[call-arg]
    model.save_pretrained(target, safe_serialization=True)
    return target


def break_model_config(model_dir: Path) -> Path:
    """Corrupt ``config.json`` so that an engine started on it dies during start-up."""
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": "not-a-number"}))
    return model_dir


if __name__ == "__main__":  # pragma: no cover - handy for building a kit by hand
    import sys

    print(build_tiny_llama(Path(sys.argv[1])))
