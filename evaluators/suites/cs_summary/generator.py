"""Deterministic generator for the customer-service summary suite.

Every fact the summary must contain appears literally in the transcript (ISO date,
dollar amount, full name), so the task tests faithful extraction, not world knowledge.
"""

from __future__ import annotations

import json
import random
from datetime import date, timedelta
from typing import Any

from evaluators.suites.base import GeneratedFiles, held_out_id, held_out_rows, sample_id, to_jsonl

SLUG = "cs_summary"
SEED = 7101
SAMPLE_COUNT = 100

ISSUES: dict[str, tuple[str, str]] = {
    # issue code -> (what the customer says, the templated one-line summary)
    "double_charge": ("I was charged twice for order #{order}.", "Charged twice for order {order}."),
    "late_delivery": ("Order #{order} has still not arrived.", "Order {order} not delivered."),
    "damaged_item": ("The item in order #{order} arrived broken.", "Item in order {order} arrived broken."),
    "wrong_item": ("I got the wrong item in order #{order}.", "Wrong item shipped in order {order}."),
    "refund_request": ("I returned order #{order} and want a refund.", "Refund wanted for order {order}."),
    "subscription_cancel": ("Please cancel my plan, order #{order}.", "Cancel plan from order {order}."),
}

FIRST_NAMES = [
    "Maria",
    "John",
    "Aisha",
    "Kenji",
    "Lena",
    "Omar",
    "Sofia",
    "Pavel",
    "Grace",
    "Diego",
    "Nora",
    "Tariq",
    "Ines",
    "Victor",
    "Mei",
    "Samuel",
]
LAST_NAMES = [
    "Lopez",
    "Smith",
    "Khan",
    "Tanaka",
    "Novak",
    "Haddad",
    "Rossi",
    "Ivanov",
    "Okafor",
    "Silva",
    "Berg",
    "Nasser",
    "Costa",
    "Meyer",
    "Chen",
    "Adams",
]
GREETINGS = ["Hello, thanks for calling support.", "Hi, you are chatting with support.", "Good day, support desk here."]
CLOSINGS = ["I have logged this for you.", "A specialist will follow up.", "Thanks, the case is open now."]

PROMPT_HEAD = (
    "Summarize the support conversation as one JSON object with keys customer, issue, amount, date, summary.\n"
    "issue is one of: " + ", ".join(ISSUES) + ".\n"
    "amount is a number; date is YYYY-MM-DD.\n\n"
    "Conversation:\n"
)


def _make_sample(rng: random.Random, row_id: str) -> dict[str, Any]:
    customer = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    issue = rng.choice(list(ISSUES))
    order = rng.randint(10000, 99999)
    # Cents never end in 0 so "$49.93" and the number 49.93 are the same string.
    amount = round(rng.randint(5, 480) + rng.choice([1, 3, 5, 7, 9]) / 100 + rng.randint(1, 9) / 10, 2)
    when = (date(2024, 1, 1) + timedelta(days=rng.randint(0, 360))).isoformat()
    said, summary = ISSUES[issue]
    lines = [
        f"Agent: {rng.choice(GREETINGS)} May I have your name?",
        f"Customer: This is {customer}.",
        "Agent: How can I help?",
        f"Customer: {said.format(order=order)} It was ${amount:.2f} on {when}.",
        f"Agent: {rng.choice(CLOSINGS)}",
    ]
    facts = {"customer": customer, "issue": issue, "amount": amount, "date": when}
    target = json.dumps({**facts, "summary": summary.format(order=order)}, ensure_ascii=True)
    return {
        "id": row_id,
        "prompt": PROMPT_HEAD + "\n".join(lines) + "\n",
        "target": target,
        "template": issue,
    }


def build() -> GeneratedFiles:
    """Return the suite's data files (``samples.jsonl``), identical on every call."""
    rng = random.Random(SEED)
    rows = [_make_sample(rng, sample_id(SLUG, i)) for i in range(SAMPLE_COUNT)]
    return {"samples.jsonl": to_jsonl(rows)}


def held_out(count: int, taken: frozenset[str]) -> list[dict[str, Any]]:
    """The first ``count`` held-out samples: the same transcripts drawn from per-sample seeds.

    Names (256), issues, order numbers, amounts and dates leave far more than enough fresh prompts.
    """
    return held_out_rows(count, taken, SEED, lambda rng, n: _make_sample(rng, held_out_id(SLUG, n)))
