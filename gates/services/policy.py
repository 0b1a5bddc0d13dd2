"""The gate policy in force: the one ``settings.OPTGATE_GATE_POLICY`` names.

Its own module so that filing (``gates.services.tickets``) and judging (``gates.services.decisions``)
read the same policy without importing each other.
"""

from __future__ import annotations

from django.conf import settings

from core.errors import InvalidInput
from gates.policy.parse import load_policy
from gates.policy.rules import Policy, PolicyError


def gate_policy(name: str | None = None) -> Policy:
    """The named policy, or the one ``settings.OPTGATE_GATE_POLICY`` selects (default ``default``)."""
    try:
        return load_policy(name or settings.OPTGATE_GATE_POLICY)
    except PolicyError as exc:
        raise InvalidInput({"policy": str(exc)}) from None
