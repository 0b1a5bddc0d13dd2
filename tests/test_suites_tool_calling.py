"""Tool calling: tool name, JSON schema validity and gold argument values."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evaluators.suites import get_suite

SUITE = get_suite("tool_calling")


def _sample(tool: str) -> dict[str, Any]:
    return next(s for s in SUITE.load_samples() if s["template"] == tool)


def _call(sample: dict[str, Any], **changes: Any) -> str:
    call = json.loads(sample["target"])
    for key, value in changes.items():
        if value is None:
            call["arguments"].pop(key)
        else:
            call["arguments"][key] = value
    return json.dumps(call)


@pytest.fixture
def transfer() -> dict[str, Any]:
    return _sample("transfer_funds")


def test_the_gold_call_passes_in_a_fence_and_with_string_encoded_arguments(transfer: dict[str, Any]) -> None:
    assert SUITE.score(transfer, "```json\n" + transfer["target"] + "\n```").passed
    call = json.loads(transfer["target"])
    call["arguments"] = json.dumps(call["arguments"])
    assert SUITE.score(transfer, json.dumps(call)).passed


def test_optional_arguments_may_be_added() -> None:
    sample = _sample("lookup_order")
    assert SUITE.score(sample, _call(sample, include_items=True)).passed


def test_not_json_is_invalid_json(transfer: dict[str, Any]) -> None:
    assert SUITE.score(transfer, "transfer_funds(amount=5)").failure_reason == "invalid_json"
    assert SUITE.score(transfer, transfer["target"][:-5]).failure_reason == "invalid_json"


def test_calling_another_listed_tool_is_wrong_tool(transfer: dict[str, Any]) -> None:
    call = json.loads(transfer["target"])
    call["name"] = "get_weather"
    assert SUITE.score(transfer, json.dumps(call)).failure_reason == "wrong_tool"


def test_a_missing_required_argument_is_a_schema_violation_on_that_field(transfer: dict[str, Any]) -> None:
    verdict = SUITE.score(transfer, _call(transfer, currency=None))
    assert verdict.failure_reason == "schema_violation:currency"


def test_a_wrongly_typed_argument_is_a_schema_violation_on_that_field(transfer: dict[str, Any]) -> None:
    assert SUITE.score(transfer, _call(transfer, amount="lots")).failure_reason == "schema_violation:amount"
    assert SUITE.score(transfer, _call(transfer, currency="YEN")).failure_reason == "schema_violation:currency"


def test_an_unexpected_argument_is_a_schema_violation(transfer: dict[str, Any]) -> None:
    assert SUITE.score(transfer, _call(transfer, memo="hi")).failure_reason == "schema_violation:memo"


def test_a_valid_but_wrong_value_is_a_wrong_argument(transfer: dict[str, Any]) -> None:
    gold = json.loads(transfer["target"])["arguments"]
    verdict = SUITE.score(transfer, _call(transfer, amount=gold["amount"] + 1))
    assert verdict.failure_reason == "wrong_argument:amount"
    assert verdict.score == pytest.approx(0.75)


def test_argument_values_appear_literally_in_the_request() -> None:
    for sample in SUITE.load_samples():
        request = sample["prompt"].rsplit("Request:", 1)[1]
        for value in json.loads(sample["target"])["arguments"].values():
            assert str(value) in request, (sample["id"], value)
