"""Shared types and helpers for the business regression suites.

A suite is data (a committed ``samples.jsonl``) plus a pure scoring function. The
same scoring function is used by lm-eval (through a generated ``utils.py``) and by
OptGate's own code, so a per-sample verdict means the same thing everywhere.
"""

from __future__ import annotations

import copy
import functools
import json
import random
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
# (count, prompts already taken by the shipped samples) -> the first ``count`` held-out rows.
HeldOutBuilder = Callable[[int, frozenset[str]], list[dict[str, Any]]]

# How many held-out samples each suite guarantees beyond its shipped ones (the tests check all of them).
HELD_OUT_SIZE = 1000


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
    held_out_builder: HeldOutBuilder = field(repr=False)
    # Bump when the held-out generator changes what it yields, so evidence names the pool it used.
    held_out_revision: int = 1

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

    # --- stages: the shipped samples are stage one, held-out samples the stages after it -----------

    @property
    def held_out_version(self) -> str:
        """Version of the held-out pool, e.g. ``1+h1``: the shipped suite's version plus the pool's revision."""
        return f"{self.version}+h{self.held_out_revision}"

    def held_out_samples(self, start: int = 0, count: int = HELD_OUT_SIZE) -> list[dict[str, Any]]:
        """Held-out samples ``start .. start + count - 1`` (0-based positions in the pool).

        The pool is generated on first use and is the same on every call and in every process:
        sample ``n`` is always ``<slug>-h<n+1>``, whatever was asked for before.
        """
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"start must be an integer >= 0, got {start!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be an integer >= 1, got {count!r}")
        if start + count > HELD_OUT_SIZE:
            raise ValueError(
                f"count {count} from start {start} runs past the {HELD_OUT_SIZE} held-out samples of {self.slug}"
            )
        # Copies, so a caller that edits a row cannot change what the next caller gets.
        return copy.deepcopy(list(_held_out_pool(self)[start : start + count]))

    def stage_samples(self, stage: int, size: int | None = None) -> list[dict[str, Any]]:
        """The samples of ``stage``: stage 1 is the shipped file, stage ``n >= 2`` the ``(n-1)``-th block of
        ``size`` held-out samples (``size`` defaults to the shipped count, so every stage is as large as the first).
        """
        if isinstance(stage, bool) or not isinstance(stage, int) or stage < 1:
            raise ValueError(f"stage must be an integer >= 1, got {stage!r}")
        size = self._stage_size(size)
        if stage == 1:
            return self.load_samples()
        last = HELD_OUT_SIZE // size + 1
        if stage > last:
            raise ValueError(f"stage {stage} does not exist: {self.slug} has stages 1..{last} of {size} samples")
        return self.held_out_samples((stage - 2) * size, size)

    def stage_of(self, sample_id: str, size: int | None = None) -> int:
        """The stage a sample id belongs to under stages of ``size`` held-out samples (1 for a shipped id)."""
        size = self._stage_size(size)
        position = held_out_position(self.slug, sample_id)
        if position is not None:
            return 2 + position // size
        if re.fullmatch(rf"{re.escape(self.slug)}-\d{{4}}", sample_id):
            return 1
        raise ValueError(f"sample_id {sample_id!r} is not a sample id of {self.slug}")

    def samples_version(self, samples: list[dict[str, Any]]) -> str:
        """The version that names a list of samples: the held-out pool's when any of them is held out."""
        if any(held_out_position(self.slug, str(sample.get("id", ""))) is not None for sample in samples):
            return self.held_out_version
        return self.version

    def _stage_size(self, size: int | None) -> int:
        if size is None:
            return len(self.load_samples())
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= HELD_OUT_SIZE:
            raise ValueError(f"size must be an integer from 1 to {HELD_OUT_SIZE}, got {size!r}")
        return size


@functools.cache
def _held_out_pool(suite: Suite) -> tuple[dict[str, Any], ...]:
    """Generate a suite's whole held-out pool once per process, away from its shipped prompts."""
    taken = frozenset(sample["prompt"] for sample in suite.load_samples())
    rows = suite.held_out_builder(HELD_OUT_SIZE, taken)
    if len(rows) != HELD_OUT_SIZE:
        raise RuntimeError(f"{suite.slug}: the held-out generator gave {len(rows)} rows, not {HELD_OUT_SIZE}")
    return tuple(rows)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Parse a JSONL file into a list of dicts (blank lines ignored)."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def to_jsonl(rows: list[dict[str, Any]]) -> str:
    """Serialise rows as JSONL with a stable key order and ASCII-only text."""
    return "".join(json.dumps(row, ensure_ascii=True, sort_keys=False) + "\n" for row in rows)


MAX_DRAWS = 200  # draws per sample before a generator is declared out of fresh prompts


def distinct_prompts(
    count: int,
    make: Callable[[int], dict[str, Any]],
    taken: frozenset[str] = frozenset(),
    what: str = "sample",
) -> list[dict[str, Any]]:
    """``count`` rows from ``make(index)``, redrawing a row whose prompt ``taken`` or an earlier row
    already has.

    A repeated prompt is the same question asked twice: it adds a paired sample to the statistics
    without adding evidence, so the gate would claim more certainty than the suite holds.
    """
    rows: list[dict[str, Any]] = []
    seen = set(taken)
    for index in range(count):
        for _ in range(MAX_DRAWS):
            row = make(index)
            if row["prompt"] not in seen:
                break
        else:
            raise RuntimeError(f"{what} {index}: no new prompt in {MAX_DRAWS} draws; widen the slot values")
        seen.add(row["prompt"])
        rows.append(row)
    return rows


def sample_id(slug: str, index: int) -> str:
    """The canonical sample id, e.g. ``cs_summary-0001`` for index 0."""
    return f"{slug}-{index + 1:04d}"


def held_out_id(slug: str, position: int) -> str:
    """The id of the held-out sample at 0-based ``position``, e.g. ``cs_summary-h0001`` for 0."""
    return f"{slug}-h{position + 1:04d}"


def held_out_position(slug: str, sample_id: str) -> int | None:
    """The 0-based pool position a held-out id names, or ``None`` for any other id."""
    match = re.fullmatch(rf"{re.escape(slug)}-h(\d{{4,}})", sample_id)
    return int(match.group(1)) - 1 if match and int(match.group(1)) >= 1 else None


def held_out_rng(seed: int, position: int) -> random.Random:
    """The random source of held-out sample ``position``: its own seed, ``"<suite seed>/h<position>"``.

    One seed per sample (not one stream for the pool) keeps a sample's draws readable from its id; a
    string seed hashes the same way in every process.
    """
    return random.Random(f"{seed}/h{position}")


def held_out_rows(
    count: int, taken: frozenset[str], seed: int, make: Callable[[random.Random, int], dict[str, Any]]
) -> list[dict[str, Any]]:
    """``count`` held-out rows from ``make(rng, position)``, each with a prompt no shipped or earlier row has.

    A sample whose draw repeats a prompt draws again from its own random source, so it stays the same
    sample in every process.
    """
    sources: dict[int, random.Random] = {}

    def draw(position: int) -> dict[str, Any]:
        return make(sources.setdefault(position, held_out_rng(seed, position)), position)

    return distinct_prompts(count, draw, taken, what="held-out sample")


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
