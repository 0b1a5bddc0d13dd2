"""The one choke point for outbound HTTP (notification webhooks, GitHub callbacks).

Callers use ``http.post_json`` through the module, so a test can replace this one function.
"""

from __future__ import annotations

import httpx


def post_json(url: str, payload: dict[str, object], *, timeout_s: float) -> int:
    """POST ``payload`` as JSON and return the response status; transport errors raise ``httpx.HTTPError``."""
    response = httpx.post(url, json=payload, timeout=timeout_s)
    return response.status_code
