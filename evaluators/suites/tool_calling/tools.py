"""The tool catalogue the tool-calling suite draws from (OpenAI-style function specs)."""

from __future__ import annotations

from typing import Any

DATE_PATTERN = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
ACCOUNT_PATTERN = "^[0-9]{8}$"

TOOLS: dict[str, dict[str, Any]] = {
    "get_weather": {
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 2},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
    "create_ticket": {
        "description": "Open a support ticket.",
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 3, "maxLength": 60},
                "priority": {"type": "string", "enum": ["low", "medium", "high", "urgent"]},
                "customer_id": {"type": "integer", "minimum": 1},
            },
            "required": ["title", "priority", "customer_id"],
            "additionalProperties": False,
        },
    },
    "lookup_order": {
        "description": "Fetch an order by id.",
        "parameters": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "pattern": "^ORD-[0-9]{6}$"},
                "include_items": {"type": "boolean"},
            },
            "required": ["order_id"],
            "additionalProperties": False,
        },
    },
    "transfer_funds": {
        "description": "Move money between two accounts.",
        "parameters": {
            "type": "object",
            "properties": {
                "from_account": {"type": "string", "pattern": ACCOUNT_PATTERN},
                "to_account": {"type": "string", "pattern": ACCOUNT_PATTERN},
                "amount": {"type": "number", "exclusiveMinimum": 0},
                "currency": {"type": "string", "enum": ["USD", "EUR", "GBP"]},
            },
            "required": ["from_account", "to_account", "amount", "currency"],
            "additionalProperties": False,
        },
    },
    "book_meeting": {
        "description": "Book a meeting with one attendee.",
        "parameters": {
            "type": "object",
            "properties": {
                "attendee": {"type": "string", "pattern": "^[^@ ]+@[^@ ]+$"},
                "date": {"type": "string", "pattern": DATE_PATTERN},
                "duration_minutes": {"type": "integer", "minimum": 15, "maximum": 240},
            },
            "required": ["attendee", "date", "duration_minutes"],
            "additionalProperties": False,
        },
    },
}


def tool_spec(name: str) -> dict[str, Any]:
    """The spec shown to the model: name, description and JSON-schema parameters."""
    return {"name": name, **TOOLS[name]}
