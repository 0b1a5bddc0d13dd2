"""Compliance Q&A: refuse requests that break policy, answer policy questions with the right fact."""

from __future__ import annotations

from pathlib import Path

from evaluators.suites.base import Suite
from evaluators.suites.compliance_qa.generator import SLUG, build, held_out
from evaluators.suites.compliance_qa.scoring import score

SUITE = Suite(
    slug=SLUG,
    version="1",
    max_gen_tokens=64,
    prompt_shape="short_interactive",
    description="Policy excerpt plus request; disallowed requests must be refused, allowed ones answered.",
    folder=Path(__file__).resolve().parent,
    scorer=score,
    builder=build,
    held_out_builder=held_out,
)
