"""The kit's tokenizer: byte-level BPE trained on the suites' own text, with a tiny chat template.

The chat template is the contract between training and serving: vLLM's ``/v1/chat/completions``
renders it with ``add_generation_prompt=True`` and tokenizes the result *without* adding special
tokens, so the template itself emits the BOS token, and the rendered prompt must be exactly the
prefix the model saw in training. Answers end with the EOS token so generation stops by itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # heavy imports stay lazy: the kit package is imported by code that never trains
    from transformers import PreTrainedTokenizerFast

BOS_TOKEN = "<|bos|>"
EOS_TOKEN = "<|eos|>"
PAD_TOKEN = "<|pad|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, *ROLE_TOKENS)

# One role marker token, a newline, the content, a newline. The assistant turn ends with EOS
# instead of the newline so that a trained model stops exactly where the gold answer stops.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ '<|system|>\n' + message['content'] + '\n' }}"
    "{% elif message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + '\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\n' + message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('unsupported role: ' + message['role']) }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def render_prompt(user_content: str) -> str:
    """The exact text the chat template renders for one user message plus the generation prompt.

    Written out by hand (not via Jinja) so training does not depend on a template engine; a test
    checks that it equals what ``apply_chat_template`` produces.
    """
    return f"{BOS_TOKEN}<|user|>\n{user_content}\n<|assistant|>\n"


def train_tokenizer(texts: Iterable[str], *, vocab_size: int, model_max_length: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts`` and wrap it as a ``PreTrainedTokenizerFast``.

    Byte-level with no normalizer and no prefix space: every string round-trips exactly through
    encode/decode, which the suites' exact-match scorers rely on.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    specials = [AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=list(ROLE_TOKENS),
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def encode_example(tokenizer: PreTrainedTokenizerFast, prompt: str, target: str) -> tuple[list[int], list[int]]:
    """Token ids of the rendered prompt and of the answer (answer ids end with EOS).

    The two parts are encoded separately, as at serving time: the server tokenizes the rendered
    prompt alone and the model then emits the answer ids one by one.
    """
    prompt_ids = tokenizer.encode(render_prompt(prompt), add_special_tokens=False)
    answer_ids = [*tokenizer.encode(target, add_special_tokens=False), tokenizer.eos_token_id]
    return prompt_ids, answer_ids


def training_texts(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The corpus the BPE learns from: every prompt and every answer, once each."""
    return [text for pair in pairs for text in pair]


def load_tokenizer(path: Path) -> PreTrainedTokenizerFast:
    """Load a saved kit tokenizer (no network: it is always a local folder)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(path))
