"""Deterministic generator for the knowledge-assistant suite (long shared prefix, citations).

Five fixed documents of ten passages each. The prompt puts the instruction and the
whole document FIRST and the question LAST, so all questions on one document share a
long identical prefix (what a prefix cache can reuse, in whole KV blocks).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from evaluators.suites.base import GeneratedFiles, contains_phrase, held_out_id, held_out_rng, sample_id, to_jsonl
from evaluators.suites.knowledge_qa.documents import DOCUMENTS, FILLER, SLOT_KINDS

SLUG = "knowledge_qa"
SEED = 7202

PROMPT_HEAD = (
    "Answer the question from the document. Reply with the answer and the id of the passage "
    "that supports it, for example: 30 days [P04]\n\n"
)


def passage_id(index: int) -> str:
    """Passage id for the 0-based ``index``: ``P01`` ... ``P10``."""
    return f"P{index + 1:02d}"


def _render_document(rng: random.Random, title: str, passages: list[Any]) -> tuple[str, list[dict[str, str]]]:
    """Fill a document's slots; return its text and its question records."""
    used: set[str] = set()
    blocks: list[str] = []
    questions: list[dict[str, str]] = []
    for index, (heading, text, slots) in enumerate(passages):
        values: dict[str, str] = {}
        for slot, kind, question in slots:
            value = SLOT_KINDS[kind](rng)
            # No value contains another within a document, so a fact copied from the wrong
            # passage can never match by luck.
            while any(contains_phrase(value, old) or contains_phrase(old, value) for old in used):
                value = SLOT_KINDS[kind](rng)
            used.add(value)
            values[slot] = value
            questions.append({"question": question, "answer": value, "passage": passage_id(index)})
        fillers = " ".join(FILLER[(index + k * 3) % len(FILLER)] for k in range(2))
        blocks.append(f"[{passage_id(index)}] {heading}. {text.format(**values)} {fillers}")
    return f"Document: {title}\n\n" + "\n\n".join(blocks) + "\n", questions


def _edition(rng: random.Random, make_id: Callable[[int], str], first: int) -> list[dict[str, Any]]:
    """Every document filled from ``rng`` once, and one row per question; ids from ``first`` on."""
    rows: list[dict[str, Any]] = []
    for doc_id, (title, passages) in DOCUMENTS.items():
        document, questions = _render_document(rng, title, passages)
        for record in questions:
            rows.append(
                {
                    "id": make_id(first + len(rows)),
                    "prompt": PROMPT_HEAD + document + "\nQuestion: " + record["question"] + "\n",
                    "target": f"{record['answer']} [{record['passage']}]",
                    "template": doc_id,
                    "doc_id": doc_id,
                    "gold_passage": record["passage"],
                    "answer": record["answer"],
                }
            )
    return rows


def build() -> GeneratedFiles:
    """Return the suite's ``samples.jsonl``, identical on every call."""
    rows = _edition(random.Random(SEED), lambda n: sample_id(SLUG, n), 0)
    return {"samples.jsonl": to_jsonl(rows)}


def held_out(count: int, taken: frozenset[str]) -> list[dict[str, Any]]:
    """The first ``count`` held-out samples: new editions of the same documents, each with fresh values.

    The questions are fixed (twenty per document), so an edition refills every slot of all five
    documents: edition ``e`` (seed ``"<SEED>/h<e>"``) holds positions ``100 e .. 100 e + 99``, the same
    shape as the shipped file, twenty questions sharing each document's prefix.
    """
    rows: list[dict[str, Any]] = []
    seen = set(taken)
    edition = 0
    while len(rows) < count:
        for row in _edition(held_out_rng(SEED, edition), lambda n: held_out_id(SLUG, n), len(rows)):
            if row["prompt"] in seen:
                raise RuntimeError(f"held-out edition {edition} repeats a prompt ({row['id']}); change its seed")
            seen.add(row["prompt"])
            rows.append(row)
        edition += 1
    return rows[:count]
