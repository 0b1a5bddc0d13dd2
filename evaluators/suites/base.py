"""Shared types and helpers for the business regression suites.

A suite is data (a committed ``samples.jsonl``) plus a pure scoring function. The
same scoring function is used by lm-eval (through a generated ``utils.py``) and by
OptGate's own code, so a per-sample verdict means the same thing everywhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

PromptShape = Literal["short_interactive", "long_shared_prefix", "long_context", "long_output"]
PROMPT_SHAPES: tuple[str, ...] = ("short_interactive", "long_shared_prefix", "long_context", "long_output")

# Files a suite generator produces: file name (relative to the suite folder) -> text.
GeneratedFiles = dict[str, str]


@dataclass(frozen=True)
class SampleScore:
    """The verdict on one model output for one sample."""

    passed: bool
    score: float
    failure_reason: str | None
    detail: str

    def __post_init__(self) -> None:
        # A score outside 0..1 or a failure without a reason would corrupt the judge's
        # aggregates silently, so refuse to build one.
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"score must be within 0..1, got {self.score}")
        if self.passed and self.failure_reason is not None:
            raise ValueError("a passed sample cannot carry a failure_reason")
        if not self.passed and not self.failure_reason:
            raise ValueError("a failed sample needs a failure_reason")


def passed(detail: str, score: float = 1.0) -> SampleScore:
    """Build a passing verdict."""
    return SampleScore(passed=True, score=score, failure_reason=None, detail=detail)


def failed(reason: str, detail: str, score: float = 0.0) -> SampleScore:
    """Build a failing verdict with a machine-readable ``reason``."""
    return SampleScore(passed=False, score=score, failure_reason=reason, detail=detail)


Scorer = Callable[[dict[str, Any], str], SampleScore]
Builder = Callable[[], GeneratedFiles]


@dataclass(frozen=True)
class Suite:
    """One task type's regression suite: its data, its scorer and its serving profile."""

    slug: str
    version: str
    max_gen_tokens: int
    prompt_shape: PromptShape
    description: str
    folder: Path
    scorer: Scorer = field(repr=False)
    builder: Builder = field(repr=False)

    def __post_init__(self) -> None:
        if self.prompt_shape not in PROMPT_SHAPES:
            raise ValueError(f"unknown prompt_shape {self.prompt_shape!r} for suite {self.slug}")

    @property
    def samples_path(self) -> Path:
        """Absolute path of the committed JSONL samples."""
        return (self.folder / "samples.jsonl").resolve()

    @property
    def lm_eval_task_name(self) -> str:
        """The task name the generated lm-eval YAML registers."""
        return f"optgate_{self.slug}"

    def load_samples(self) -> list[dict[str, Any]]:
        """Read the committed samples, in file order."""
        return read_jsonl(self.samples_path)

    def score(self, sample: dict[str, Any], output: str) -> SampleScore:
        """Score one model ``output`` against ``sample``."""
        return self.scorer(sample, output if output is not None else "")

    def build_files(self) -> GeneratedFiles:
        """Regenerate the suite's data files in memory (deterministic)."""
        return self.builder()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Parse a JSONL file into a list of dicts (blank lines ignored)."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def to_jsonl(rows: list[dict[str, Any]]) -> str:
    """Serialise rows as JSONL with a stable key order and ASCII-only text."""
    return "".join(json.dumps(row, ensure_ascii=True, sort_keys=False) + "\n" for row in rows)


MAX_DRAWS = 200  # draws per sample before a generator is declared out of fresh prompts


def distinct_prompts(count: int, make: Callable[[int], dict[str, Any]]) -> list[dict[str, Any]]:
    """``count`` rows from ``make(index)``, redrawing a row whose prompt an earlier row already has.

    A repeated prompt is the same question asked twice: it adds a paired sample to the statistics
    without adding evidence, so the gate would claim more certainty than the suite holds.
    """
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index in range(count):
        for _ in range(MAX_DRAWS):
            row = make(index)
            if row["prompt"] not in seen:
                break
        else:
            raise RuntimeError(f"sample {index}: no new prompt in {MAX_DRAWS} draws; widen the slot values")
        seen.add(row["prompt"])
        rows.append(row)
    return rows


def sample_id(slug: str, index: int) -> str:
    """The canonical sample id, e.g. ``cs_summary-0001`` for index 0."""
    return f"{slug}-{index + 1:04d}"


_FENCE_RE = re.compile(r"```[ \t]*[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)


def strip_code_fences(text: str) -> str:
    """Return the body of the first fenced block, or the stripped text if there is none.

    Chat models often wrap code, SQL or JSON in Markdown fences even when asked not to;
    the fence is packaging, not content, so it must not decide the verdict.
    """
    match = _FENCE_RE.search(text)
    if match:
        return match.group(1).strip()
    return text.strip()


def extract_json_object(text: str) -> Any:
    """Parse the first JSON object found in ``text``.

    Raises ``ValueError`` when no parseable object is present. Leading prose or fences
    are tolerated; a truncated object is not.
    """
    body = strip_code_fences(text)
    start = body.find("{")
    if start < 0:
        raise ValueError("no JSON object found")
    decoder = json.JSONDecoder()
    try:
        value, _end = decoder.raw_decode(body[start:])
    except json.JSONDecodeError as exc:
        raise ValueError(f"JSON does not parse: {exc.msg} at char {exc.pos}") from exc
    return value


def normalize_text(value: Any) -> str:
    """Casefold and collapse whitespace so formatting differences do not count as errors."""
    return " ".join(str(value).split()).casefold()


def contains_phrase(text: str, phrase: str) -> bool:
    """True when ``phrase`` occurs in ``text`` as whole words, ignoring case and whitespace.

    Plain substring tests would let "15 percent" count as containing "5 percent".
    """
    needle = normalize_text(phrase)
    if not needle:
        return False
    pattern = r"(?<![\w.])" + re.escape(needle) + r"(?![\w])"
    return re.search(pattern, normalize_text(text)) is not None


def clip(text: str, limit: int = 80) -> str:
    """Shorten text for a one-line reviewer-facing detail."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
