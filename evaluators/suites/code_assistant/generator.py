"""Deterministic generator for the code-assistant suite.

Each sample asks for one small function from a template; every constant the body
needs is stated in the request. The unit tests are computed by running the gold body
here, so tests and target can never disagree.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from evaluators.suites.base import GeneratedFiles, distinct_prompts, held_out_id, held_out_rows, sample_id, to_jsonl

SLUG = "code_assistant"
SEED = 7404
SAMPLE_COUNT = 100
TESTS_PER_SAMPLE = 4

PROMPT_HEAD = "Write a Python function. Output only the code.\n"

Slots = dict[str, Any]


class Template:
    """A request pattern, its gold body, a slot picker and an input picker for the tests.

    Held-out samples also draw from ``more_names`` (space-separated) and from ``held_out_pick`` when
    given: four names and a few constants ask only a few dozen different questions, too few for a
    thousand held-out ones.
    """

    def __init__(
        self,
        request: str,
        body: str,
        names: list[str],
        pick: Callable[[random.Random], Slots],
        inputs: Callable[[random.Random, Slots], list[Any]],
        *,
        more_names: str,
        held_out_pick: Callable[[random.Random], Slots] | None = None,
    ) -> None:
        self.request = request
        self.body = body
        self.names = names
        self.pick = pick
        self.inputs = inputs
        self.held_out_names = names + more_names.split()
        self.held_out_pick = held_out_pick or pick


def _ints(r: random.Random, lo: int = -20, hi: int = 40, n: int = 5) -> list[int]:
    return [r.randint(lo, hi) for _ in range(n)]


def _word(r: random.Random, letters: str = "abcdeorst", lo: int = 3, hi: int = 8) -> str:
    return "".join(r.choice(letters) for _ in range(r.randint(lo, hi)))


TEMPLATES: dict[str, Template] = {
    "add_const": Template(
        "{fn}(x) returns x plus {k}.",
        "def {fn}(x):\n    return x + {k}",
        ["add_offset", "shift_up", "bump", "plus_k"],
        lambda r: {"k": r.randint(2, 99)},
        lambda r, s: [r.randint(-50, 50) for _ in range(TESTS_PER_SAMPLE)],
        more_names="add_k offset raise_by increment_by plus_const push_up lift add_fixed",
    ),
    "clamp": Template(
        "{fn}(x) returns x limited to the range {lo} to {hi}.",
        "def {fn}(x):\n    return max({lo}, min({hi}, x))",
        ["clamp", "limit", "bound", "clip_value"],
        lambda r: {"lo": (lo := r.randint(-10, 10)), "hi": lo + r.randint(5, 30)},
        lambda r, s: [s["lo"] - 3, s["hi"] + 4, s["lo"] + 1, s["hi"] - 1],
        more_names="clamp_to restrict cap_range fit_range bounded squeeze keep_in_range saturate",
    ),
    "count_char": Template(
        "{fn}(s) returns how many times the character '{c}' occurs in s.",
        "def {fn}(s):\n    return s.count('{c}')",
        ["count_char", "char_count", "tally", "occurrences"],
        lambda r: {"c": r.choice("aeiorst")},
        lambda r, s: [_word(r, s["c"] * 3 + "xyz", 4, 9) for _ in range(TESTS_PER_SAMPLE)],
        more_names="count_letter letter_count how_many char_freq count_of num_chars letter_tally freq",
        held_out_pick=lambda r: {"c": r.choice("abcdefghiklmnoprstuvw")},
    ),
    "scale_list": Template(
        "{fn}(xs) returns a new list with every element of xs multiplied by {k}.",
        "def {fn}(xs):\n    return [x * {k} for x in xs]",
        ["scale", "multiply_all", "times_each", "scaled"],
        lambda r: {"k": r.randint(2, 12)},
        lambda r, s: [_ints(r, -9, 9, r.randint(0, 4)) for _ in range(TESTS_PER_SAMPLE)],
        more_names="scale_all multiply_each stretch times_all scale_items mul_list grow_all amplify",
        held_out_pick=lambda r: {"k": r.randint(2, 15)},
    ),
    "starts_with": Template(
        "{fn}(s) returns True if s starts with '{p}', else False.",
        "def {fn}(s):\n    return s.startswith('{p}')",
        ["has_prefix", "starts_ok", "begins_with", "is_tagged"],
        lambda r: {"p": _word(r, "abcdeorst", 2, 3)},
        lambda r, s: [s["p"] + "x", "x" + s["p"], s["p"], s["p"][:-1]],
        more_names="opens_with leads_with check_prefix prefixed has_start is_prefixed head_is starts",
    ),
    "sum_above": Template(
        "{fn}(xs) returns the sum of the elements of xs that are greater than {k}.",
        "def {fn}(xs):\n    return sum(x for x in xs if x > {k})",
        ["sum_above", "total_over", "big_sum", "sum_if_greater"],
        lambda r: {"k": r.randint(0, 20)},
        lambda r, s: [_ints(r, -5, 40, r.randint(1, 6)) for _ in range(TESTS_PER_SAMPLE)],
        more_names="sum_over add_big total_above sum_greater big_total sum_high over_sum sum_if_above",
    ),
    "join_repeat": Template(
        "{fn}(w) returns w repeated {n} times, joined by '{sep}'.",
        "def {fn}(w):\n    return '{sep}'.join([w] * {n})",
        ["repeat_word", "echo", "chain", "triple"],
        lambda r: {"n": r.randint(2, 5), "sep": r.choice(["-", "+", ",", ":", "/"])},
        lambda r, s: [_word(r) for _ in range(TESTS_PER_SAMPLE)],
        more_names="repeat_join echo_word link_copies repeat_with dup_join multi_echo copies stutter",
    ),
    "divisible": Template(
        "{fn}(n) returns True if n is divisible by {k}, else False.",
        "def {fn}(n):\n    return n % {k} == 0",
        ["is_multiple", "divides", "fits_batch", "is_aligned"],
        lambda r: {"k": r.randint(3, 13)},
        lambda r, s: [s["k"] * r.randint(1, 9), s["k"] * r.randint(1, 9) + 1, 0, s["k"] + 2],
        more_names="is_divisible multiple_of divisible_by even_split no_remainder fits_evenly splits",
        held_out_pick=lambda r: {"k": r.randint(3, 16)},
    ),
    "keep_longer": Template(
        "{fn}(words) returns the words longer than {k} characters, in their original order.",
        "def {fn}(words):\n    return [w for w in words if len(w) > {k}]",
        ["long_words", "keep_longer", "filter_long", "wordy"],
        lambda r: {"k": r.randint(2, 6)},
        lambda r, s: [[_word(r, "abcdeorst", 1, 9) for _ in range(r.randint(1, 5))] for _ in range(TESTS_PER_SAMPLE)],
        more_names="longer_than keep_long drop_short big_words only_long lengthy pick_long long_only min_length"
        " long_enough skip_short trim_short",
        held_out_pick=lambda r: {"k": r.randint(1, 10)},
    ),
}


def _make_sample(rng: random.Random, row_id: str, template_name: str, *, held_out: bool = False) -> dict[str, Any]:
    template = TEMPLATES[template_name]
    if held_out:
        slots = {"fn": rng.choice(template.held_out_names), **template.held_out_pick(rng)}
    else:
        slots = {"fn": rng.choice(template.names), **template.pick(rng)}
    target = template.body.format(**slots)
    # Run the gold body to compute the expected values the tests assert.
    namespace: dict[str, Any] = {}
    exec(compile(target, "<gold>", "exec"), namespace)
    gold = namespace[slots["fn"]]
    tests = [f"assert {slots['fn']}({arg!r}) == {gold(arg)!r}" for arg in template.inputs(rng, slots)]
    return {
        "id": row_id,
        "prompt": PROMPT_HEAD + template.request.format(**slots) + "\n",
        "target": target,
        "template": template_name,
        "entry_point": slots["fn"],
        "tests": tests,
    }


def build() -> GeneratedFiles:
    """Return the suite's ``samples.jsonl``, identical on every call."""
    rng = random.Random(SEED)
    names = list(TEMPLATES)
    rows = distinct_prompts(SAMPLE_COUNT, lambda i: _make_sample(rng, sample_id(SLUG, i), names[i % len(names)]))
    return {"samples.jsonl": to_jsonl(rows)}


def held_out(count: int, taken: frozenset[str]) -> list[dict[str, Any]]:
    """The first ``count`` held-out samples: the templates in turn, as in the shipped file, from per-sample seeds."""
    names = list(TEMPLATES)
    return held_out_rows(
        count,
        taken,
        SEED,
        lambda rng, n: _make_sample(rng, held_out_id(SLUG, n), names[n % len(names)], held_out=True),
    )
