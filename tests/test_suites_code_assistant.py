"""Code assistant: generated functions run against unit tests in a limited subprocess."""

from __future__ import annotations

from typing import Any

import pytest

from evaluators.suites import get_suite
from evaluators.suites.code_assistant.sandbox import run_tests

SUITE = get_suite("code_assistant")


@pytest.fixture
def sample() -> dict[str, Any]:
    return next(s for s in SUITE.load_samples() if s["template"] == "add_const")


def test_fenced_gold_code_passes(sample: dict[str, Any]) -> None:
    verdict = SUITE.score(sample, "Here you go:\n```python\n" + sample["target"] + "\n```\n")
    assert verdict.passed, verdict.detail


def test_code_that_fails_some_tests_is_test_failed_with_a_graded_score(sample: dict[str, Any]) -> None:
    fn = sample["entry_point"]
    first_arg = sample["tests"][0].split("(")[1].split(")")[0]
    # Right only for the first test's input, wrong for the rest.
    wrong = f"def {fn}(x):\n    return {sample['tests'][0].split('== ')[1]} if x == {first_arg} else 0"
    verdict = SUITE.score(sample, wrong)
    assert verdict.failure_reason == "test_failed"
    assert 0.0 < verdict.score < 1.0
    assert "assert" in verdict.detail


def test_a_wrong_function_name_fails_the_tests(sample: dict[str, Any]) -> None:
    verdict = SUITE.score(sample, sample["target"].replace(sample["entry_point"], "something_else"))
    assert verdict.failure_reason == "test_failed"
    assert verdict.score == 0.0


def test_unparseable_code_is_a_syntax_error(sample: dict[str, Any]) -> None:
    verdict = SUITE.score(sample, f"def {sample['entry_point']}(x)\n    return x +")
    assert verdict.failure_reason == "syntax_error"


def test_an_endless_loop_is_killed_as_timeout(sample: dict[str, Any]) -> None:
    verdict = SUITE.score(sample, f"def {sample['entry_point']}(x):\n    while True:\n        pass")
    assert verdict.failure_reason == "timeout"


def test_an_endless_loop_at_import_time_is_killed_too() -> None:
    outcome = run_tests("while True:\n    pass", ["assert True"], timeout_s=1.0)
    assert outcome.status == "timeout"


def test_allocating_past_the_memory_limit_crashes_instead_of_exhausting_the_host(sample: dict[str, Any]) -> None:
    # 1 GiB is allowed on the host but twice the sandbox's address-space limit.
    hog = f"def {sample['entry_point']}(x):\n    block = bytearray(1024 * 1024 * 1024)\n    return len(block)"
    verdict = SUITE.score(sample, hog)
    assert verdict.failure_reason == "crashed"
    assert "memory" in verdict.detail


def test_an_error_while_defining_the_code_is_a_crash(sample: dict[str, Any]) -> None:
    verdict = SUITE.score(sample, "raise RuntimeError('boom')")
    assert verdict.failure_reason == "crashed"
    assert "boom" in verdict.detail


def test_the_child_does_not_see_the_parents_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPTGATE_SECRET_FOR_TEST", "visible")
    outcome = run_tests("import os", ["assert 'OPTGATE_SECRET_FOR_TEST' not in os.environ"])
    assert outcome.status == "done"
    assert outcome.passed == 1


def test_sys_exit_in_candidate_code_does_not_fake_a_pass(sample: dict[str, Any]) -> None:
    verdict = SUITE.score(sample, f"def {sample['entry_point']}(x):\n    raise SystemExit(0)")
    assert not verdict.passed
    assert verdict.failure_reason == "test_failed"
