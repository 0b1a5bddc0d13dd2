"""Prefix-cache findings on a ticket: a candidate whose cache key would let tenants share cached prefixes."""

from __future__ import annotations

from typing import Any

from backends.prefix_cache import cache_key_recipe
from gates.models import ReleaseTicket

# The blocking finding: a sign-off on a decision carrying it also needs a ``security`` reviewer.
CROSS_TENANT = "prefix_cache_cross_tenant"


def prefix_cache_findings(*, ticket: ReleaseTicket) -> list[dict[str, Any]]:
    """Governance findings for a prefix-cache ticket, worded for the decision's reasons.

    The blocking one (``prefix_cache_cross_tenant``) is a candidate whose key has no tenant
    component while the canary scope lists several tenants: they would read each other's
    cached prefixes. A sign-off on such a decision also needs a ``security`` reviewer.
    """
    candidate = ticket.candidate
    if "prefix_cache" not in ticket.mechanisms and candidate.engine_args.get("enable_prefix_caching") is not True:
        return []
    recipe = cache_key_recipe(candidate)
    tenants = sorted(set((ticket.canary_scope or {}).get("tenants") or []))
    findings: list[dict[str, Any]] = []
    if not recipe["tenant"] and len(tenants) > 1:
        findings.append(
            {
                "code": CROSS_TENANT,
                "tenants": tenants,
                "message": (
                    f"candidate {candidate.name}'s prefix-cache key has no tenant component, so the canary tenants "
                    f"{', '.join(tenants)} would share one cache; set tenant: true in its prefix_cache_key_recipe "
                    "(a new backend) so the gateway sends a per-tenant cache_salt."
                ),
            }
        )
    elif not recipe["tenant"]:
        findings.append(
            {
                "code": "prefix_cache_shared_on_promotion",
                "tenants": tenants,
                "message": (
                    f"candidate {candidate.name}'s prefix-cache key has no tenant component: once promoted to default, "
                    "every tenant would share one cache."
                ),
            }
        )
    incomplete = [name for name in recipe["missing"] if name != "tenant"]
    if incomplete:
        findings.append(
            {
                "code": "prefix_cache_key_incomplete",
                "missing": incomplete,
                "message": (
                    f"candidate {candidate.name}'s prefix-cache key does not pin {', '.join(incomplete)}; a change to "
                    "them would keep serving stale cached prefixes."
                ),
            }
        )
    return findings
