"""Prefix-cache key governance: recipes, per-tenant cache salts, and cross-tenant canary findings."""

from __future__ import annotations

import re
from typing import Any

import pytest

from backends.prefix_cache import cache_key_recipe, cache_salt
from core.errors import InvalidInput
from gates.models import TaskType
from gates.prefix_cache import prefix_cache_findings
from gates.services import decisions, routing, signoff
from tests.factories import scenario, ticket_fields

pytestmark = pytest.mark.django_db

FULL_RECIPE = {
    "tenant": True,
    "system_prompt_hash": "sha256:5f1c",
    "tool_version": "tools-3",
    "policy_version": "safety-7",
    "security_domain": "support",
}


def prefix_backend(make_backend: Any, name: str, recipe: dict[str, Any], revision: str = "ab") -> Any:
    return make_backend(
        name,
        model_revision="sha256:" + revision * 32,
        prefix_cache_key_recipe=recipe,
        engine_args={"max_model_len": 2048, "seed": 0, "enable_prefix_caching": True},
    )


def test_the_recipe_names_every_component_and_what_is_missing(make_backend: Any) -> None:
    full = cache_key_recipe(prefix_backend(make_backend, "kit-pc-full", FULL_RECIPE))
    assert full["model_version"] == "optgate/kit-base@sha256:" + "ab" * 32
    assert full["tenant"] is True and full["missing"] == []
    bare = cache_key_recipe(prefix_backend(make_backend, "kit-pc-bare", {}))
    assert bare["missing"] == ["system_prompt_hash", "tool_version", "policy_version", "tenant"]


def test_salts_are_valid_for_vllm_and_differ_per_tenant(make_backend: Any) -> None:
    backend = prefix_backend(make_backend, "kit-pc-full", FULL_RECIPE)
    a, b = cache_salt(backend, "tenant-a"), cache_salt(backend, "tenant-b")
    for salt in (a, b):
        assert len(salt) <= 128 and re.fullmatch(r"[0-9a-f]{64}", salt)
    assert a != b and cache_salt(backend, "tenant-a") == a
    with pytest.raises(InvalidInput, match="name the tenant"):
        cache_salt(backend, "")


def test_a_changed_model_or_policy_version_changes_the_salt(make_backend: Any) -> None:
    first = prefix_backend(make_backend, "kit-pc-1", FULL_RECIPE)
    new_weights = prefix_backend(make_backend, "kit-pc-2", FULL_RECIPE, revision="cd")
    new_policy = prefix_backend(make_backend, "kit-pc-3", {**FULL_RECIPE, "policy_version": "safety-8"})
    salts = {cache_salt(b, "tenant-a") for b in (first, new_weights, new_policy)}
    assert len(salts) == 3


def test_a_recipe_without_tenant_gives_every_tenant_the_same_salt(make_backend: Any) -> None:
    shared = prefix_backend(make_backend, "kit-pc-shared", {"system_prompt_hash": "x"})
    assert cache_salt(shared, "tenant-a") == cache_salt(shared, "tenant-b") == cache_salt(shared)


def test_a_canary_over_several_tenants_without_a_tenant_key_is_flagged(
    erin: Any, baseline: Any, make_backend: Any
) -> None:
    shared = prefix_backend(
        make_backend, "kit-pc-shared", {"system_prompt_hash": "x", "tool_version": "t", "policy_version": "p"}
    )
    ticket = scenario(
        "approve",
        erin,
        baseline,
        shared,
        mechanisms=["prefix_cache"],
        bottleneck="decode",
        canary_scope={"tenants": ["tenant-a", "tenant-b"], "business_domain": "support"},
    )
    findings = prefix_cache_findings(ticket=ticket)
    assert [f["code"] for f in findings] == ["prefix_cache_cross_tenant"]
    assert "tenant-a, tenant-b would share one cache" in findings[0]["message"]
    decision = decisions.decision_make(ticket=ticket)
    assert decision.warnings == findings
    assert any(r.startswith("Warning: ") and "share one cache" in r for r in decision.reasons)
    # Approving a decision carrying the finding also needs a security reviewer.
    assert "security" in signoff.required_capacities(decision, "approve", ["cs_summary"])


def test_a_tenant_partitioned_candidate_is_not_flagged(erin: Any, baseline: Any, make_backend: Any) -> None:
    isolated = prefix_backend(make_backend, "kit-pc-full", FULL_RECIPE)
    fields = ticket_fields(
        baseline,
        isolated,
        canary_scope={"tenants": ["tenant-a", "tenant-b"]},
        beneficiary_tasks=list(TaskType.objects.filter(slug="knowledge_qa")),
    )
    from gates.services import tickets as services

    ticket = services.ticket_create(owner=erin, **fields)
    assert prefix_cache_findings(ticket=ticket) == []


def test_a_single_tenant_canary_still_warns_about_promotion(erin: Any, draft: Any) -> None:
    # The conftest candidate enables prefix caching with no recipe at all.
    codes = [f["code"] for f in prefix_cache_findings(ticket=draft)]
    assert codes == ["prefix_cache_shared_on_promotion", "prefix_cache_key_incomplete"]


def test_the_gateway_reads_a_tenants_salt_from_the_api(api_for: Any, ada: Any, olga: Any, make_backend: Any) -> None:
    backend = prefix_backend(make_backend, "kit-pc-full", FULL_RECIPE)
    routing.routes_set(task="knowledge_qa", backend=backend, actor=ada, reason="isolated cache")
    response = api_for(olga).get("/api/v1/routes/cache-salt/?task=knowledge_qa&tenant=tenant-a")
    assert response.status_code == 200
    assert response.data["cache_salt"] == cache_salt(backend, "tenant-a")
    assert response.data["backend"] == "kit-pc-full" and response.data["recipe"]["tenant"] is True
    assert api_for(olga).get("/api/v1/routes/cache-salt/?task=knowledge_qa").status_code == 400
    assert api_for(olga).get("/api/v1/routes/cache-salt/?task=tool_calling&tenant=a").status_code == 400
