"""Tool calling: request plus tool specs -> one JSON tool call with schema-valid, correct arguments."""

from __future__ import annotations

from pathlib import Path

from evaluators.suites.base import Suite
from evaluators.suites.tool_calling.generator import SLUG, build, held_out
from evaluators.suites.tool_calling.scoring import score

SUITE = Suite(
    slug=SLUG,
    version="1",
    max_gen_tokens=128,
    prompt_shape="short_interactive",
    description="Request plus three tool specs to one JSON call; name, schema and argument values must be right.",
    folder=Path(__file__).resolve().parent,
    scorer=score,
    builder=build,
    held_out_builder=held_out,
)
