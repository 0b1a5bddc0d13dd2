"""Canonical JSON and hashing: the basis of backend fingerprints and the ledger chain."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Serialise ``value`` so that equal data always yields identical text (sorted keys, no spaces)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# Deeper than any document OptGate reads (lm-eval results nest about six levels); far shallower
# than the recursion limit that json.dumps, Django's JSONField and recursive walkers run into.
MAX_JSON_DEPTH = 32


def json_problem(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> tuple[str, str] | None:
    """A ``(path, problem)`` that stops ``value`` from being stored as JSON, or None when there is none.

    PostgreSQL refuses the NUL character in text and in ``jsonb`` (SQLite stores it), so input
    carrying one must be refused up front, not crash the insert. The walk uses its own stack, so
    a deeply nested document cannot exhaust Python's.
    """
    nul = "must not contain the NUL character (\\u0000)"
    if isinstance(value, str):
        return ("", nul) if "\x00" in value else None
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        path, item, depth = stack.pop()
        if isinstance(item, dict):
            children = [(f"{path}.{key}" if path else str(key), child) for key, child in item.items()]
            if any(isinstance(key, str) and "\x00" in key for key in item):
                return path, "has a key containing the NUL character (\\u0000)"
        elif isinstance(item, list | tuple):
            children = [
                (f"{path}[{index}]", child)
                for index, child in enumerate(item)
                if isinstance(child, str | dict | list | tuple)
            ]
        else:
            continue
        if depth >= max_depth:
            return path, f"is nested more than {max_depth} levels deep"
        for child_path, child in children:
            if isinstance(child, str):
                if "\x00" in child:
                    return child_path, nul
            else:
                stack.append((child_path, child, depth + 1))
    return None
