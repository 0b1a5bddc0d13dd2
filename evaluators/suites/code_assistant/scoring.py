"""Scoring for the code assistant: the generated function must pass the sample's unit tests."""

from __future__ import annotations

from typing import Any

from evaluators.suites.base import SampleScore, clip, failed, passed, strip_code_fences
from evaluators.suites.code_assistant.sandbox import run_tests


def score(sample: dict[str, Any], output: str) -> SampleScore:
    """Run the fenced-or-bare code against ``sample["tests"]``; graded by the share of tests passed."""
    code = strip_code_fences(output)
    tests: list[str] = list(sample["tests"])
    try:
        # Compiling in the parent executes nothing and spares a subprocess for unparseable output.
        compile(code, "<candidate>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return failed("syntax_error", f"The code does not compile: {clip(str(exc))}.")

    outcome = run_tests(code, tests)
    if outcome.status == "timeout":
        return failed("timeout", f"The code was killed: {outcome.message}.")
    if outcome.status == "memory":
        return failed("crashed", "The code ran out of memory under the sandbox limit.")
    if outcome.status == "crashed":
        return failed("crashed", f"The interpreter died: {clip(outcome.message)}.")
    if outcome.status == "load_error":
        return failed("crashed", f"Defining the code raised {clip(outcome.message)}.")
    if outcome.passed < outcome.total:
        return failed(
            "test_failed",
            f"{outcome.passed}/{outcome.total} tests passed; first failures: {clip(outcome.message, 160)}.",
            score=outcome.passed / outcome.total,
        )
    return passed(f"All {outcome.total} unit tests passed.")
