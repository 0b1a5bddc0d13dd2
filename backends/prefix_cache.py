"""Prefix-cache key governance of a backend (§7.3): what must match before requests share a cached prefix.

A backend's ``prefix_cache_key_recipe`` declares the components; the gateway sends the resulting
``cache_salt`` with every request, so a changed model, prompt, tool or policy version starts cold
and tenants of a partitioned cache never read each other's prefixes.
"""

from __future__ import annotations

from typing import Any

from backends.models import Backend
from core.canonical import canonical_json, sha256_hex
from core.errors import InvalidInput

# Declared components a backend's ``prefix_cache_key_recipe`` may carry; the model version is
# always derived from the backend itself.
RECIPE_FIELDS = ("system_prompt_hash", "tool_version", "policy_version", "security_domain", "tenant")
CACHE_SALT_MAX = 128  # vLLM rejects longer salts


def prefix_caching_enabled(backend: Backend) -> bool:
    """Whether the backend may reuse cached prefixes.

    vLLM's V1 engine enables prefix caching unless told otherwise, so only an explicit
    ``enable_prefix_caching: false`` counts as off.
    """
    return backend.engine_args.get("enable_prefix_caching") is not False


def cache_key_recipe(backend: Backend) -> dict[str, Any]:
    """The components that must all match before two requests may share a cached prefix.

    ``tenant: true`` partitions the cache per tenant (the gateway sends a per-tenant salt);
    without it every tenant of the security domain shares one cache. ``missing`` names the
    components the recipe does not pin down.
    """
    declared = backend.prefix_cache_key_recipe or {}
    recipe: dict[str, Any] = {
        "model_version": f"{backend.model_id}@{backend.model_revision}",
        "system_prompt_hash": str(declared.get("system_prompt_hash") or ""),
        "tool_version": str(declared.get("tool_version") or ""),
        "policy_version": str(declared.get("policy_version") or ""),
        "security_domain": str(declared.get("security_domain") or ""),
        "tenant": declared.get("tenant") is True,
    }
    missing = [name for name in ("system_prompt_hash", "tool_version", "policy_version") if not recipe[name]]
    if not recipe["tenant"]:
        missing.append("tenant")
    recipe["missing"] = missing
    return recipe


def cache_salt(backend: Backend, tenant: str = "") -> str:
    """The ``cache_salt`` the gateway must send with a tenant's requests to this backend.

    A hex sha256 over the recipe (and the tenant, when the recipe partitions by tenant): 64
    characters, none of the ones vLLM refuses (``@ / \\`` or NUL). Requests with different salts
    never share cached blocks, so a changed model, prompt, tool or policy version starts cold.
    """
    recipe = cache_key_recipe(backend)
    if recipe["tenant"] and not tenant:
        raise InvalidInput({"tenant": f"backend {backend.name}'s cache is partitioned per tenant; name the tenant"})
    material = {key: recipe[key] for key in ("model_version", *RECIPE_FIELDS[:-1])}
    material["tenant"] = tenant if recipe["tenant"] else "*"
    salt = sha256_hex(canonical_json(material))
    assert len(salt) <= CACHE_SALT_MAX and not set(salt) & {"@", "/", "\\", "\x00"}
    return salt
