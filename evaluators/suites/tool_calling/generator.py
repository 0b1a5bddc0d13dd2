"""Deterministic generator for the tool-calling suite.

Each prompt lists three tools (the right one and two distractors, in shuffled order)
and one request whose argument values appear literally in it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

from evaluators.suites.base import GeneratedFiles, distinct_prompts, held_out_id, held_out_rows, sample_id, to_jsonl
from evaluators.suites.tool_calling.tools import TOOLS, tool_spec

Arguments = dict[str, Any]

SLUG = "tool_calling"
SEED = 7606
SAMPLE_COUNT = 100
TOOLS_PER_PROMPT = 3

CITIES = ["Lisbon", "Nairobi", "Osaka", "Quito", "Tromso", "Adelaide", "Lima", "Hanoi"]
TITLES = ["Printer jam", "Login fails", "Refund missing", "App crash", "Slow export", "Card blocked"]
PEOPLE = ["ana", "raj", "li", "mo", "eva", "sam"]
DOMAINS = ["example.com", "corp.test", "mail.test"]
# Held-out weather requests need more cities: eight cities and two units ask only 16 different questions.
HELD_OUT_CITIES = [
    *CITIES,
    *["Bergen", "Cusco", "Dakar", "Fukuoka", "Graz", "Hobart", "Izmir", "Jaipur", "Kyoto", "Leeds", "Malmo"],
    *["Nantes", "Oulu", "Perth", "Recife", "Salta", "Tartu", "Utrecht", "Varna", "Windhoek", "Zagreb"],
    *["Accra", "Bilbao", "Cork", "Durban", "Essen", "Fez", "Gdansk", "Havana", "Inverness", "Kaunas"],
]


def _weather(r: random.Random, cities: list[str]) -> Arguments:
    return {"city": r.choice(cities), "unit": r.choice(["celsius", "fahrenheit"])}


# tool name -> (request pattern, arguments picker); the pattern is formatted with the arguments.
REQUESTS: dict[str, tuple[str, Callable[[random.Random], Arguments]]] = {
    "get_weather": (
        "What is the weather in {city} right now, in {unit}?",
        lambda r: _weather(r, CITIES),
    ),
    "create_ticket": (
        "Open a {priority} priority ticket titled '{title}' for customer {customer_id}.",
        lambda r: {
            "title": r.choice(TITLES),
            "priority": r.choice(["low", "medium", "high", "urgent"]),
            "customer_id": r.randint(100, 9999),
        },
    ),
    "lookup_order": (
        "Look up order {order_id} for me.",
        lambda r: {"order_id": f"ORD-{r.randint(0, 999999):06d}"},
    ),
    "transfer_funds": (
        "Transfer {amount} {currency} from account {from_account} to account {to_account}.",
        lambda r: {
            "from_account": f"{r.randint(0, 99999999):08d}",
            "to_account": f"{r.randint(0, 99999999):08d}",
            "amount": r.randint(5, 5000),
            "currency": r.choice(["USD", "EUR", "GBP"]),
        },
    ),
    "book_meeting": (
        "Book a {duration_minutes} minute meeting with {attendee} on {date}.",
        lambda r: {
            "attendee": f"{r.choice(PEOPLE)}@{r.choice(DOMAINS)}",
            "date": (date(2025, 1, 6) + timedelta(days=r.randint(0, 300))).isoformat(),
            "duration_minutes": r.choice([15, 30, 45, 60, 90]),
        },
    ),
}

HELD_OUT_REQUESTS = {**REQUESTS, "get_weather": (REQUESTS["get_weather"][0], lambda r: _weather(r, HELD_OUT_CITIES))}

PROMPT_HEAD = 'Call one tool. Reply with only JSON: {"name": ..., "arguments": {...}}.\nTools:\n'


def _make_sample(
    rng: random.Random, index: int, row_id: str, requests: dict[str, tuple[str, Callable[[random.Random], Arguments]]]
) -> dict[str, Any]:
    names = list(TOOLS)
    name = names[index % len(names)]
    pattern, pick = requests[name]
    arguments = pick(rng)
    shown = [name, *rng.sample([n for n in names if n != name], TOOLS_PER_PROMPT - 1)]
    rng.shuffle(shown)
    tools = [tool_spec(n) for n in shown]
    tool_lines = "\n".join(json.dumps(t, separators=(",", ":")) for t in tools)
    return {
        "id": row_id,
        "prompt": PROMPT_HEAD + tool_lines + "\n\nRequest: " + pattern.format(**arguments) + "\n",
        "target": json.dumps({"name": name, "arguments": arguments}),
        "template": name,
        # A JSON string, not nested objects: HF datasets would merge differing schemas into nullable structs.
        "tools_json": json.dumps(tools, separators=(",", ":")),
    }


def build() -> GeneratedFiles:
    """Return the suite's ``samples.jsonl``, identical on every call."""
    rng = random.Random(SEED)
    rows = distinct_prompts(SAMPLE_COUNT, lambda i: _make_sample(rng, i, sample_id(SLUG, i), REQUESTS))
    return {"samples.jsonl": to_jsonl(rows)}


def held_out(count: int, taken: frozenset[str]) -> list[dict[str, Any]]:
    """The first ``count`` held-out samples: the tools in turn, as in the shipped file, from per-sample seeds."""
    return held_out_rows(
        count, taken, SEED, lambda rng, n: _make_sample(rng, n, held_out_id(SLUG, n), HELD_OUT_REQUESTS)
    )
