"""Code assistant: a request for a small Python function, judged by unit tests in a sandbox."""

from __future__ import annotations

from pathlib import Path

from evaluators.suites.base import Suite
from evaluators.suites.code_assistant.generator import SLUG, build, held_out
from evaluators.suites.code_assistant.scoring import score

SUITE = Suite(
    slug=SLUG,
    version="1",
    max_gen_tokens=128,
    prompt_shape="short_interactive",
    description="Small Python function from a request; must pass the sample's unit tests in a sandbox.",
    folder=Path(__file__).resolve().parent,
    scorer=score,
    builder=build,
    held_out_builder=held_out,
)
