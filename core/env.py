"""Strict, typed readers for environment variables.

Every reader raises ``ImproperlyConfigured`` naming the variable when its value cannot be
parsed, so a typo in production configuration stops the process at start-up instead of
silently falling back to a default.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use one of 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        parsed = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and parsed < minimum:
        raise ImproperlyConfigured(f"{name}={parsed} must be at least {minimum}")
    return parsed


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_paths(name: str, default: list[Path]) -> list[Path]:
    """A colon- or comma-separated list of absolute directories."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return [p.resolve() for p in default]
    paths = []
    for item in value.replace(",", ":").split(":"):
        if not item.strip():
            continue
        path = Path(item.strip()).expanduser()
        if not path.is_absolute():
            raise ImproperlyConfigured(f"{name}: {item!r} is not an absolute path")
        paths.append(path.resolve())
    return paths


RATE_FORMAT = re.compile(r"^(?P<count>\d+)/(?P<period>s|sec|second|m|min|minute|h|hour|d|day)$")


def env_rate(name: str, default: str | None) -> str | None:
    """A request rate like ``60/min`` (periods s, min, hour, day); ``off`` or None means no limit."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        value = default
    if value is None or value.strip().lower() in {"off", "none"}:
        return None
    rate = value.strip().lower()
    match = RATE_FORMAT.match(rate)
    if not match or int(match["count"]) < 1:
        raise ImproperlyConfigured(f"{name}={value!r} is not a rate like 60/min (periods: s, min, hour, day) or off")
    return rate


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
