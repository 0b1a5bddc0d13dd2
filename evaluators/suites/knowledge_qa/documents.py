"""The knowledge-assistant documents: passage templates (data, in ``documents.json``) and slot kinds.

Each passage states two facts (slots) and is cited by an id such as ``[P07]``. Slot values are
drawn per document with a fixed seed and are unique within a document, so an answer copied from
the wrong passage is detectably wrong.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

_DATA: dict[str, Any] = json.loads((Path(__file__).with_name("documents.json")).read_text(encoding="utf-8"))

# A passage: (title, text with two {slots}, [(slot, slot kind, question), ...]).
Passage = tuple[str, str, list[tuple[str, str, str]]]

TEAMS: list[str] = _DATA["teams"]
REGIONS: list[str] = _DATA["regions"]
WEEKDAYS: list[str] = _DATA["weekdays"]

SLOT_KINDS: dict[str, Callable[[random.Random], str]] = {
    "days": lambda r: f"{r.randint(7, 400)} days",
    "hours": lambda r: f"{r.randint(2, 96)} hours",
    "minutes": lambda r: f"{r.randint(5, 90)} minutes",
    "pct": lambda r: f"{r.randint(5, 95)} percent",
    "usd": lambda r: f"{r.randint(10, 990)} USD",
    "count": lambda r: str(r.randint(3, 60)),
    "team": lambda r: r.choice(TEAMS),
    "region": lambda r: r.choice(REGIONS),
    "weekday": lambda r: r.choice(WEEKDAYS),
    "clock": lambda r: f"{r.randint(0, 23):02d}:00 UTC",
}

# Filler sentences pad passages to a realistic length; they carry no answerable fact.
FILLER: list[str] = _DATA["filler"]

DOCUMENTS: dict[str, tuple[str, list[Passage]]] = {
    doc_id: (
        document["title"],
        [
            (p["heading"], p["text"], [(s["slot"], s["kind"], s["question"]) for s in p["slots"]])
            for p in document["passages"]
        ],
    )
    for doc_id, document in _DATA["documents"].items()
}
