"""Strict environment readers the workers' settings need beyond ``optgate.env``."""

from __future__ import annotations

import json
import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured


def env_json_object(name: str, default: dict[str, Any]) -> dict[str, Any]:
    """A JSON object from the environment; anything else raises ``ImproperlyConfigured``."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return dict(default)
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object")
    return parsed
