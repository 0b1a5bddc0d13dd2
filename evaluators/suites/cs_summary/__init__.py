"""Customer-service conversation -> JSON summary with exact facts (throughput-bound, long output)."""

from __future__ import annotations

from pathlib import Path

from evaluators.suites.base import Suite
from evaluators.suites.cs_summary.generator import SLUG, build, held_out
from evaluators.suites.cs_summary.scoring import score

SUITE = Suite(
    slug=SLUG,
    version="1",
    max_gen_tokens=192,
    prompt_shape="long_output",
    description="Support transcript to a JSON summary; customer, issue, amount and date must be exact.",
    folder=Path(__file__).resolve().parent,
    scorer=score,
    builder=build,
    held_out_builder=held_out,
)
