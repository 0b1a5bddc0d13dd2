"""Customer-service summaries: facts must match, wording may differ."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evaluators.suites import get_suite

SUITE = get_suite("cs_summary")


@pytest.fixture
def sample() -> dict[str, Any]:
    return SUITE.load_samples()[0]


def _gold(sample: dict[str, Any]) -> dict[str, Any]:
    return json.loads(sample["target"])


def test_it_accepts_different_wording_and_formatting_of_the_same_facts(sample: dict[str, Any]) -> None:
    gold = _gold(sample)
    rewritten = {
        "customer": "  " + gold["customer"].upper() + " ",
        "issue": gold["issue"].replace("_", " "),
        "amount": f"${gold['amount']:.2f}",
        "date": gold["date"].replace("-", "/"),
        "summary": "Completely different wording of the complaint.",
    }
    verdict = SUITE.score(sample, "```json\n" + json.dumps(rewritten) + "\n```")
    assert verdict.passed, verdict.detail


def test_it_accepts_a_summary_without_the_optional_free_text(sample: dict[str, Any]) -> None:
    gold = _gold(sample)
    del gold["summary"]
    assert SUITE.score(sample, json.dumps(gold)).passed


def test_a_missing_amount_is_its_own_failure(sample: dict[str, Any]) -> None:
    gold = _gold(sample)
    del gold["amount"]
    verdict = SUITE.score(sample, json.dumps(gold))
    assert not verdict.passed
    assert verdict.failure_reason == "missing_field:amount"
    assert verdict.score == pytest.approx(0.75)


def test_a_wrong_amount_is_a_wrong_fact(sample: dict[str, Any]) -> None:
    gold = _gold(sample)
    gold["amount"] = round(gold["amount"] + 1, 2)
    verdict = SUITE.score(sample, json.dumps(gold))
    assert verdict.failure_reason == "wrong_fact:amount"
    assert not verdict.passed


def test_a_wrong_date_and_customer_are_reported_with_the_first_field(sample: dict[str, Any]) -> None:
    gold = _gold(sample)
    gold["customer"] = "Somebody Else"
    gold["date"] = "1999-01-01"
    verdict = SUITE.score(sample, json.dumps(gold))
    assert verdict.failure_reason == "wrong_fact:customer"
    assert "date" in verdict.detail
    assert verdict.score == pytest.approx(0.5)


def test_invalid_or_truncated_json_is_invalid_json(sample: dict[str, Any]) -> None:
    truncated = sample["target"][:40]
    assert SUITE.score(sample, truncated).failure_reason == "invalid_json"
    assert SUITE.score(sample, "The customer wants a refund.").failure_reason == "invalid_json"


def test_every_fact_appears_literally_in_the_prompt() -> None:
    # Learnability contract with the model kit: the summary copies, it never infers.
    for sample in SUITE.load_samples():
        gold = _gold(sample)
        for field in ("customer", "issue", "date"):
            assert gold[field] in sample["prompt"], (sample["id"], field)
        assert f"${gold['amount']:.2f}" in sample["prompt"]
