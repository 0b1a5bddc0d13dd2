"""Gate policies: the default loads, and invalid documents name the path and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gates import vocabulary
from gates.policy.metrics import METRIC_SPECS
from gates.policy.parse import list_policies, load_policy, policy_from_dict, validate_policy_text
from gates.policy.rules import POLICY_DIR, PolicyError

TASKS = ("cs_summary", "knowledge_qa", "dataagent_nl2sql", "code_assistant", "compliance_qa", "tool_calling")


def default_document() -> dict:
    return yaml.safe_load((POLICY_DIR / "default.yaml").read_text())


def test_it_loads_the_default_policy_by_name() -> None:
    policy = load_policy("default")
    assert policy.version_label == f"default@{policy.version}"
    assert set(TASKS) <= set(policy.tasks)
    assert policy.dry_run is False


def test_the_default_follows_the_source_chapter() -> None:
    policy = load_policy("default")
    summary = policy.tasks["cs_summary"]
    # Summaries may trade wording (the score) but never facts.
    assert summary.guardrails[0].label == "fact-pass rate" and summary.guardrails[0].critical
    assert "score" in {rule.metric for rule in summary.tradeable}
    # DataAgent may cost more (latency tradeable) but SQL must not regress (critical, tight margin).
    sql = policy.tasks["dataagent_nl2sql"]
    assert sql.guardrails[0].critical and (sql.guardrails[0].margin or 1) <= 0.02
    assert {"ttft_p50", "tpot_p50"} <= {rule.metric for rule in sql.tradeable}
    assert policy.tasks["compliance_qa"].guardrails[0].critical
    assert {"tool_calling", "dataagent_nl2sql", "compliance_qa"} <= set(
        policy.critical_tasks_for(["weight_quantization"])
    )
    assert set(policy.bottlenecks) == {"queueing", "prefill", "decode", "kv_memory", "structured_output"}


def test_it_loads_by_path_and_lists_policies() -> None:
    assert load_policy(POLICY_DIR / "default.yaml") == load_policy("default")
    assert "default" in {policy.name for policy in list_policies()}


def test_the_judge_knows_every_shared_metric_name() -> None:
    assert set(METRIC_SPECS) == set(vocabulary.METRICS)


def test_it_names_the_path_of_a_bad_margin() -> None:
    document = default_document()
    document["tasks"]["dataagent_nl2sql"]["guardrails"][0]["margin"] = 5
    with pytest.raises(PolicyError) as excinfo:
        policy_from_dict(document)
    assert str(excinfo.value) == "tasks.dataagent_nl2sql.guardrails[0].margin: must be a number between 0 and 1"
    assert excinfo.value.errors == [("tasks.dataagent_nl2sql.guardrails[0].margin", "must be a number between 0 and 1")]


DELETE = object()


def set_at(document: dict, keys: tuple, value: object) -> None:
    """Set (or with DELETE, remove) the value at ``keys`` inside a parsed policy document."""
    *parents, last = keys
    target = document
    for key in parents:
        target = target[key]
    if value is DELETE:
        del target[last]
    else:
        target[last] = value


CS_GUARD = ("tasks", "cs_summary", "guardrails", 0)


@pytest.mark.parametrize(
    ("keys", "value", "path", "problem"),
    [
        ((*CS_GUARD, "metric"), "facts", "tasks.cs_summary.guardrails[0].metric", "unknown metric"),
        ((*CS_GUARD, "margin"), DELETE, "tasks.cs_summary.guardrails[0].margin", "is required"),
        ((*CS_GUARD, "critical"), "yes", "tasks.cs_summary.guardrails[0].critical", "true or false"),
        (
            ("tasks", "code_assistant", "objectives", 0, "confidence"),
            1.0,
            "tasks.code_assistant.objectives[0].confidence",
            "between 0.5 and below 1",
        ),
        (
            ("tasks", "tool_calling", "min_samples"),
            {"quality": 0},
            "tasks.tool_calling.min_samples.quality",
            "at least 1",
        ),
        (
            ("tasks", "tool_calling", "guardrails"),
            [{"metric": "e2e_p95", "margin": 0.2}],
            "tasks.tool_calling.guardrails",
            "quality metric",
        ),
        (
            ("mechanisms", "weight_quantization", "critical_tasks"),
            ["sql"],
            "mechanisms.weight_quantization.critical_tasks[0]",
            "unknown task type",
        ),
        (("mechanisms", "paged_attention"), {}, "mechanisms.paged_attention", "unknown key"),
        (("bottlenecks", "memory"), {"metrics": ["preemptions"]}, "bottlenecks.memory", "unknown key"),
        (("dry_run",), "no", "dry_run", "true or false"),
        (("version",), DELETE, "version", "is required"),
        (("tasks",), {}, "tasks", "non-empty mapping"),
        (("canary", "signals", 0, "metric"), "latency", "canary.signals[0].metric", "unknown canary signal"),
        (("canary", "signals", 1, "margin"), DELETE, "canary.signals[1].margin", "is required"),
        (("canary", "signals"), [], "canary.signals", "non-empty list"),
        (("canary", "interval_minutes"), 0, "canary.interval_minutes", "between 0.05 and 1440"),
        (("canary", "auto_rollback"), "yes", "canary.auto_rollback", "true or false"),
        (("canary", "peak_hours"), [9, 17], "canary.peak_hours", "unknown key"),
    ],
)
def test_it_names_the_path_and_problem(keys: tuple, value: object, path: str, problem: str) -> None:
    document = default_document()
    set_at(document, keys, value)
    with pytest.raises(PolicyError) as excinfo:
        policy_from_dict(document)
    assert any(p == path and problem in msg for p, msg in excinfo.value.errors), excinfo.value.errors
    assert path in str(excinfo.value)


def test_it_reports_every_problem_at_once() -> None:
    document = default_document()
    document["tasks"]["cs_summary"]["guardrails"][0]["margin"] = -1
    document["tasks"]["knowledge_qa"]["guardrails"][0]["confidence"] = 2
    with pytest.raises(PolicyError) as excinfo:
        policy_from_dict(document)
    assert {path for path, _ in excinfo.value.errors} == {
        "tasks.cs_summary.guardrails[0].margin",
        "tasks.knowledge_qa.guardrails[0].confidence",
    }


def test_it_reports_broken_yaml_with_its_line() -> None:
    with pytest.raises(PolicyError, match="not valid YAML at line"):
        validate_policy_text("name: x\nversion: [1\n")


def test_it_reports_a_missing_policy() -> None:
    with pytest.raises(PolicyError, match="cannot read policy 'nope'"):
        load_policy("nope")


def test_a_minimal_dry_run_policy_validates_with_defaults(tmp_path: Path) -> None:
    text = """
name: shadow
version: 2
dry_run: true
tasks:
  cs_summary:
    guardrails:
      - {metric: pass_rate, margin: 0.05}
"""
    policy = validate_policy_text(text)
    assert policy.version_label == "shadow@2"
    assert policy.dry_run is True
    assert policy.tasks["cs_summary"].min_samples.quality == 30
    assert policy.prefix_cache.min_hit_rate == 0.3
