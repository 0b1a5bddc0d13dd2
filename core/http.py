"""The one choke point for outbound HTTP (notification webhooks, GitHub callbacks, Prometheus queries).

Callers use ``http.post_json`` and ``http.get_json`` through the module, so a test can replace this one function.
"""

from __future__ import annotations

import httpx


def post_json(url: str, payload: dict[str, object], *, timeout_s: float) -> int:
    """POST ``payload`` as JSON and return the response status; transport errors raise ``httpx.HTTPError``."""
    response = httpx.post(url, json=payload, timeout=timeout_s)
    return response.status_code


def get_json(url: str, *, params: dict[str, str], timeout_s: float) -> object:
    """GET ``url`` with query ``params`` and return the decoded JSON body, whatever the status.

    Transport errors raise ``httpx.HTTPError``; a body that is not JSON raises ``ValueError``.
    """
    response = httpx.get(url, params=params, timeout=timeout_s)
    return response.json()
