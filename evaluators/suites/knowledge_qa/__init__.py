"""Knowledge assistant: long shared document prefix, answers must cite the supporting passage."""

from __future__ import annotations

from pathlib import Path

from evaluators.suites.base import Suite
from evaluators.suites.knowledge_qa.generator import SLUG, build, held_out
from evaluators.suites.knowledge_qa.scoring import score

SUITE = Suite(
    slug=SLUG,
    version="1",
    max_gen_tokens=32,
    prompt_shape="long_shared_prefix",
    description="Question after a long shared document; the answer must state the fact and cite its passage.",
    folder=Path(__file__).resolve().parent,
    scorer=score,
    builder=build,
    held_out_builder=held_out,
)
