"""Scoring for the knowledge assistant: the answer must cite exactly the supporting passage.

Long-context optimizations (FP8 KV cache, context limits) tend to break citations
before they break fluency, so citation is the primary verdict and the fact second.
"""

from __future__ import annotations

import re
from typing import Any

from evaluators.suites.base import SampleScore, contains_phrase, failed, passed

_CITATION_RE = re.compile(r"\[\s*(P\d{1,3})\s*\]", re.IGNORECASE)


def citations(output: str) -> list[str]:
    """Passage ids cited as ``[Pnn]`` in ``output``, normalised to two digits, in order, deduplicated."""
    seen: list[str] = []
    for raw in _CITATION_RE.findall(output):
        pid = f"P{int(raw[1:]):02d}"
        if pid not in seen:
            seen.append(pid)
    return seen


def score(sample: dict[str, Any], output: str) -> SampleScore:
    """Pass when the only cited passage is the gold one and the answer states the gold fact."""
    gold = sample["gold_passage"]
    cited = citations(output)
    has_fact = contains_phrase(output, sample["answer"])
    if not cited:
        return failed("no_citation", "The answer cites no passage id.", score=0.5 if has_fact else 0.0)
    if cited != [gold]:
        return failed(
            "wrong_citation",
            f"The answer cites {', '.join(cited)}; the supporting passage is {gold}.",
            score=0.5 if has_fact else 0.0,
        )
    if not has_fact:
        return failed("wrong_answer", f"The citation {gold} is right but the answer lacks {sample['answer']!r}.", 0.5)
    return passed(f"Cites {gold} and states {sample['answer']!r}.")
