"""Scoring for tool calls: right tool, schema-valid arguments, gold values for required fields."""

from __future__ import annotations

import json
import re
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from evaluators.suites.base import SampleScore, extract_json_object, failed, normalize_text, passed

_QUOTED_NAME_RE = re.compile(r"'([^']+)'")


def _violation_field(error: ValidationError) -> str:
    """The argument a schema error is about (the missing or unexpected one for object-level errors)."""
    if error.absolute_path:
        return "/".join(str(part) for part in error.absolute_path)
    if error.validator in ("required", "additionalProperties"):
        # jsonschema names the property only in the message: "'unit' is a required property".
        match = _QUOTED_NAME_RE.search(error.message)
        if match:
            return match.group(1)
    return "arguments"


def _same_value(got: Any, want: Any) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, int | float) and isinstance(got, int | float):
        return abs(float(got) - float(want)) < 1e-9
    if isinstance(want, str) and isinstance(got, str):
        return normalize_text(got) == normalize_text(want)
    return bool(got == want)


def score(sample: dict[str, Any], output: str) -> SampleScore:
    """Check name, then the JSON schema, then each required argument against the gold call."""
    gold = json.loads(sample["target"])
    try:
        call = extract_json_object(output)
    except ValueError as exc:
        return failed("invalid_json", f"The output is not a JSON object ({exc}).")
    if not isinstance(call, dict) or "name" not in call:
        return failed("invalid_json", 'The JSON has no "name" key for the tool.')
    if call["name"] != gold["name"]:
        return failed("wrong_tool", f"Called {call['name']!r}; the request needs {gold['name']!r}.")
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        # Some servers return OpenAI-style arguments as a JSON-encoded string; accept that encoding.
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return failed("schema_violation:arguments", "The arguments string is not JSON.")
    if not isinstance(arguments, dict):
        return failed("schema_violation:arguments", "The call has no arguments object.")

    tools = {tool["name"]: tool for tool in json.loads(sample["tools_json"])}
    schema = tools[gold["name"]]["parameters"]
    errors = sorted(Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if errors:
        field = _violation_field(errors[0])
        return failed(f"schema_violation:{field}", f"Arguments break the tool schema: {errors[0].message}.")

    required: list[str] = schema.get("required", [])
    wrong = [name for name in required if not _same_value(arguments.get(name), gold["arguments"][name])]
    if wrong:
        first = wrong[0]
        return failed(
            f"wrong_argument:{first}",
            f"Argument {first}={arguments.get(first)!r} but the request says {gold['arguments'][first]!r}.",
            score=(len(required) - len(wrong)) / len(required),
        )
    return passed(f"Called {gold['name']} with schema-valid arguments matching the request.")
