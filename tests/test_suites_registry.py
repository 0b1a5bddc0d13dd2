"""Registry, data integrity and determinism of the business regression suites."""

from __future__ import annotations

import re

import pytest

from evaluators.pipeline import DEFAULT_LOAD_PROFILE
from evaluators.suites import SUITES, get_suite
from evaluators.suites.base import PROMPT_SHAPES, SampleScore, distinct_prompts, extract_json_object, strip_code_fences
from evaluators.suites.generate import main as generate_main
from evaluators.suites.generate import stale_files
from gates.policy.parse import load_policy

EXPECTED_SLUGS = {"cs_summary", "knowledge_qa", "dataagent_nl2sql", "code_assistant", "compliance_qa", "tool_calling"}
ALL_SUITES = sorted(SUITES)
# knowledge_qa carries a whole document in every prompt; the others are short requests.
PROMPT_LIMITS = {"knowledge_qa": 6000}
DEFAULT_PROMPT_LIMIT = 1500


def test_it_registers_the_six_task_types() -> None:
    assert set(SUITES) == EXPECTED_SLUGS
    for slug, suite in SUITES.items():
        assert suite.slug == slug
        assert suite.prompt_shape in PROMPT_SHAPES
        assert suite.version.isdigit()
        assert suite.max_gen_tokens > 0


def test_it_rejects_an_unknown_slug_with_a_value_error_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown task type 'cs_sumary'.*cs_summary"):
        get_suite("cs_sumary")


def test_it_assigns_the_documented_prompt_shapes() -> None:
    assert get_suite("cs_summary").prompt_shape == "long_output"
    assert get_suite("knowledge_qa").prompt_shape == "long_shared_prefix"
    for slug in ("dataagent_nl2sql", "code_assistant", "compliance_qa", "tool_calling"):
        assert get_suite(slug).prompt_shape == "short_interactive"


@pytest.mark.parametrize("slug", ALL_SUITES)
def test_it_ships_as_many_well_formed_samples_as_the_default_policy_requires(slug: str) -> None:
    samples = get_suite(slug).load_samples()
    assert len(samples) >= load_policy("default").tasks[slug].min_samples.quality
    ids = [s["id"] for s in samples]
    assert len(set(ids)) == len(ids)
    limit = PROMPT_LIMITS.get(slug, DEFAULT_PROMPT_LIMIT)
    for sample in samples:
        assert re.fullmatch(rf"{slug}-\d{{4}}", sample["id"])
        assert sample["prompt"].isascii() and sample["target"].isascii()
        assert 0 < len(sample["prompt"]) < limit, sample["id"]
        # Targets stay short so a tiny model can learn them (see the model kit).
        assert 0 < len(sample["target"]) <= 200, sample["id"]


def test_the_default_load_profile_sends_as_many_requests_as_the_default_policy_requires() -> None:
    required = {slug: task.min_samples.latency for slug, task in load_policy("default").tasks.items()}
    assert DEFAULT_LOAD_PROFILE["requests_per_task"] >= max(required.values()), required


@pytest.mark.parametrize("slug", ALL_SUITES)
def test_no_two_samples_ask_the_same_prompt(slug: str) -> None:
    # A repeated prompt would count as a second paired sample without being new evidence.
    prompts = [s["prompt"] for s in get_suite(slug).load_samples()]
    assert len(set(prompts)) == len(prompts)


def test_a_generator_out_of_fresh_prompts_stops_with_an_error_instead_of_repeating_one() -> None:
    rows = distinct_prompts(3, lambda i: {"prompt": f"q{i % 3}"})
    assert [r["prompt"] for r in rows] == ["q0", "q1", "q2"]
    with pytest.raises(RuntimeError, match="sample 2: no new prompt"):
        distinct_prompts(3, lambda i: {"prompt": f"q{min(i, 1)}"})


@pytest.mark.parametrize("slug", ALL_SUITES)
def test_every_gold_target_scores_as_passed(slug: str) -> None:
    suite = get_suite(slug)
    failures = {}
    for sample in suite.load_samples():
        verdict = suite.score(sample, sample["target"])
        if not (verdict.passed and verdict.score == 1.0):
            failures[sample["id"]] = verdict
    assert failures == {}


@pytest.mark.parametrize("slug", ALL_SUITES)
def test_an_empty_output_fails_every_sample_with_a_reason(slug: str) -> None:
    suite = get_suite(slug)
    sample = suite.load_samples()[0]
    verdict = suite.score(sample, "")
    assert not verdict.passed
    assert verdict.failure_reason
    assert verdict.detail


@pytest.mark.parametrize("slug", ALL_SUITES)
def test_regenerating_gives_the_committed_files_byte_for_byte(slug: str) -> None:
    suite = get_suite(slug)
    first = suite.build_files()
    assert first == suite.build_files()
    assert "samples.jsonl" in first
    assert stale_files(slug) == []


def test_the_generate_check_command_reports_no_stale_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert generate_main(["--check"]) == 0
    assert "stale" not in capsys.readouterr().out


def test_sample_score_refuses_inconsistent_verdicts() -> None:
    with pytest.raises(ValueError):
        SampleScore(passed=True, score=1.0, failure_reason="wrong_fact:amount", detail="x")
    with pytest.raises(ValueError):
        SampleScore(passed=False, score=0.0, failure_reason=None, detail="x")
    with pytest.raises(ValueError):
        SampleScore(passed=True, score=1.5, failure_reason=None, detail="x")


def test_code_fences_and_leading_prose_are_stripped() -> None:
    assert strip_code_fences("```sql\nSELECT 1;\n```") == "SELECT 1;"
    assert strip_code_fences("Here:\n```python\ndef f():\n    return 1\n```\nDone.") == "def f():\n    return 1"
    assert strip_code_fences("  SELECT 2;  ") == "SELECT 2;"
    assert extract_json_object('Sure! ```json\n{"a": 1}\n```') == {"a": 1}
    with pytest.raises(ValueError):
        extract_json_object('{"a": ')
