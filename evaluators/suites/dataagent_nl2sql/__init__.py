"""DataAgent: natural-language question -> SQLite SELECT, judged by its result set."""

from __future__ import annotations

from pathlib import Path

from evaluators.suites.base import Suite
from evaluators.suites.dataagent_nl2sql.generator import SLUG, build, held_out
from evaluators.suites.dataagent_nl2sql.scoring import score

SUITE = Suite(
    slug=SLUG,
    version="1",
    max_gen_tokens=128,
    prompt_shape="short_interactive",
    description="Question to one SQLite SELECT over a fixture database; correct means the same result set.",
    folder=Path(__file__).resolve().parent,
    scorer=score,
    builder=build,
    held_out_builder=held_out,
)
