"""Exit codes, errors, and the HTTP client of the OptGate REST API."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx

EXIT_APPROVE = 0
EXIT_USAGE = 2
EXIT_RESTRICT = 10
EXIT_REJECT = 20
EXIT_INCONCLUSIVE = 30
EXIT_ERROR = 40

EXIT_CODES: dict[str, int] = {
    "approve": EXIT_APPROVE,
    "restrict": EXIT_RESTRICT,
    "reject": EXIT_REJECT,
    "needs_evidence": EXIT_INCONCLUSIVE,
    "error": EXIT_ERROR,
}

EPILOG = """\
exit codes:
   0  approve         every task passed; the candidate may serve all of them
  10  restrict        the candidate may serve only some tasks (see the table)
  20  reject          a guardrail broke; the plan is not adopted
  30  inconclusive    needs evidence (too few samples, a failed run), or no decision yet
  40  error           an engine could not start (the cause is in the table), server
                  unreachable, authentication failed, bad ticket file, timeout
   2  usage           bad command line, or no server URL / token

environment:
  OPTGATE_URL     server base URL, e.g. https://optgate.example.com (or --url)
  OPTGATE_TOKEN   API token (or --token); `manage.py create_user NAME --role engineer --token`
"""

# Ticket statuses after which a binding decision (or a withdrawal) exists.
JUDGED = {
    "evaluated",
    "needs_evidence",
    "approved",
    "restricted",
    "rejected",
    "canary",
    "default",
    "rolled_back",
    "retired",
}
SIGNED = JUDGED - {"evaluated", "needs_evidence"}


class CliError(Exception):
    """Anything that ends the command with exit code 40 (or ``code``)."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


class UsageError(CliError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


# --- the HTTP client ---------------------------------------------------------------------------


def problem(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(body, dict):
        if set(body) == {"detail"}:
            return str(body["detail"])
        return "; ".join(f"{key}: {' '.join(map(str, v)) if isinstance(v, list) else v}" for key, v in body.items())
    return json.dumps(body)[:500]


class Api:
    """A thin REST client: token auth, JSON in and out, errors as ``CliError`` with the server's words."""

    def __init__(
        self, base_url: str, token: str, *, timeout_s: float = 30.0, transport: httpx.BaseTransport | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Token {token}", "Accept": "application/json", "User-Agent": "optgate-cli/1"},
            timeout=timeout_s,
            transport=transport,
        )

    def close(self) -> None:
        self.client.close()

    def request(self, method: str, path: str, *, ok: Sequence[int] = (200, 201, 202), **kwargs: Any) -> httpx.Response:
        try:
            response = self.client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach {self.base_url}: {type(exc).__name__}: {exc}") from None
        if response.status_code in ok:
            return response
        if response.status_code in (401, 403):
            raise CliError(f"{method} {path}: {response.status_code} {problem(response)} (check OPTGATE_TOKEN)")
        raise CliError(f"{method} {path}: HTTP {response.status_code}: {problem(response)}")

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    def post(self, path: str, body: Any = None, *, headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
        return self.request("POST", path, json=body, headers=headers, **kwargs).json()
