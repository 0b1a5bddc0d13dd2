"""A policy that differs from another in a few sections says ``extends: NAME@VERSION``.

Its own sections replace the base's (mappings key by key), the base's version is checked so a new
base version cannot change the extending policy's content behind its back, and a broken reference
is refused naming ``extends``.
"""

from __future__ import annotations

import pytest

from gates.policy.parse import load_policy, policy_from_dict
from gates.policy.rules import PolicyError

BASE = load_policy("default")
EXTENDS = f"default@{BASE.version}"


def _extending(**sections: object) -> dict[str, object]:
    return {"name": "staging", "version": 1, "extends": EXTENDS, **sections}


def test_an_extending_policy_takes_the_base_and_replaces_only_what_it_gives() -> None:
    policy = policy_from_dict(_extending(canary={"interval_minutes": 1, "min_requests": 120}))
    assert policy.version_label == "staging@1"
    assert policy.canary.interval_minutes == 1 and policy.canary.min_requests == 120
    # The canary keys it did not give, and every other section, are the base's.
    assert policy.canary.min_requests_per_round == BASE.canary.min_requests_per_round
    assert policy.canary.signals == BASE.canary.signals
    assert policy.tasks == BASE.tasks
    assert policy.sequential == BASE.sequential
    assert policy.prefix_cache == BASE.prefix_cache


def test_a_task_given_by_the_extending_policy_replaces_that_task_whole() -> None:
    rules = {"guardrails": [{"metric": "pass_rate", "margin": 0.01, "confidence": 0.95, "critical": True}]}
    policy = policy_from_dict(_extending(tasks={"tool_calling": rules}))
    tool_calling = policy.task("tool_calling")
    assert tool_calling is not None
    assert [(g.metric, g.margin) for g in tool_calling.guardrails] == [("pass_rate", 0.01)]
    assert policy.task("cs_summary") == BASE.task("cs_summary")


def test_an_extending_policy_pins_its_base_version() -> None:
    stale = {"name": "staging", "version": 1, "extends": f"default@{BASE.version + 1}"}
    with pytest.raises(PolicyError) as raised:
        policy_from_dict(stale)
    path, problem = raised.value.errors[0]
    assert path == "extends"
    assert f"default is version {BASE.version}" in problem and "bump this policy's version" in problem


@pytest.mark.parametrize(
    "reference, problem",
    [
        ("default", "must name a policy and its version"),
        (6, "must name a policy and its version"),
        ("no-such-policy@1", "cannot read the base policy no-such-policy@1"),
    ],
)
def test_a_broken_extends_is_refused_naming_the_field(reference: object, problem: str) -> None:
    with pytest.raises(PolicyError) as raised:
        policy_from_dict({"name": "staging", "version": 1, "extends": reference})
    assert raised.value.errors[0][0] == "extends"
    assert problem in raised.value.errors[0][1]


def test_the_extending_policy_is_still_validated_as_a_whole() -> None:
    with pytest.raises(PolicyError) as raised:
        policy_from_dict(_extending(canary={"interval_minutes": 0}))
    assert any(path == "canary.interval_minutes" for path, _ in raised.value.errors)
