"""Scoring for customer-service summaries: facts must match, wording may differ.

The business rule (chapter 7.9) is that an optimization may change a summary's wording
but never its facts, so only ``customer``, ``issue``, ``amount`` and ``date`` are
compared, after normalising case, whitespace, number and date formats.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from evaluators.suites.base import SampleScore, extract_json_object, failed, normalize_text, passed

REQUIRED_FIELDS: tuple[str, ...] = ("customer", "issue", "amount", "date")
_DATE_FORMATS = ("%Y-%m-%d", "%Y/%m/%d", "%B %d, %Y", "%b %d, %Y", "%d %B %Y", "%m/%d/%Y")
_AMOUNT_TOLERANCE = 0.005


def _norm_amount(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        # "$1,234.50" and "USD 1234.5" are the same amount.
        cleaned = re.sub(r"[^0-9.\-]", "", value)
        try:
            return float(cleaned)
        except ValueError:
            return None
    return None


def _norm_date(value: Any) -> str | None:
    text = " ".join(str(value).split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).date().isoformat()
        except ValueError:
            continue
    return None


def _norm_issue(value: Any) -> str:
    return re.sub(r"[\s\-]+", "_", normalize_text(value))


def _field_matches(name: str, got: Any, want: Any) -> bool:
    if name == "amount":
        amount = _norm_amount(got)
        return amount is not None and abs(amount - float(want)) < _AMOUNT_TOLERANCE
    if name == "date":
        return _norm_date(got) == want
    if name == "issue":
        return _norm_issue(got) == _norm_issue(want)
    return normalize_text(got) == normalize_text(want)


def score(sample: dict[str, Any], output: str) -> SampleScore:
    """Score a JSON summary: graded by the share of required facts that are right."""
    try:
        summary = extract_json_object(output)
    except ValueError as exc:
        return failed("invalid_json", f"The output is not a JSON object ({exc}).")
    if not isinstance(summary, dict):
        return failed("invalid_json", "The output's JSON is not an object.")

    # Gold facts come from the target string: dataset loaders (pyarrow) turn ISO dates in
    # nested columns into timestamps, while a string column always round-trips unchanged.
    facts: dict[str, Any] = json.loads(sample["target"])
    missing: list[str] = []
    wrong: list[str] = []
    for name in REQUIRED_FIELDS:
        got = summary.get(name)
        if got is None or (isinstance(got, str) and not got.strip()):
            missing.append(name)
        elif not _field_matches(name, got, facts[name]):
            wrong.append(name)

    right = len(REQUIRED_FIELDS) - len(missing) - len(wrong)
    fraction = right / len(REQUIRED_FIELDS)
    if missing:
        return failed(
            f"missing_field:{missing[0]}",
            f"The summary lacks required field(s) {', '.join(missing)}.",
            score=fraction,
        )
    if wrong:
        first = wrong[0]
        return failed(
            f"wrong_fact:{first}",
            f"Fact(s) {', '.join(wrong)} differ from the transcript ({first}: got {summary.get(first)!r}, "
            f"expected {facts[first]!r}).",
            score=fraction,
        )
    return passed("All four facts (customer, issue, amount, date) match the transcript.")
