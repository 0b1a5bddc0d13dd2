"""Ticket files, waiting for a verdict, and printing a decision."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import yaml

from optgate_cli.client import EXIT_CODES, EXIT_INCONCLUSIVE, JUDGED, SIGNED, Api, CliError, problem


def load_ticket_file(path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read a ticket file (YAML or JSON): ``(ticket fields, backends to register)``.

    Either the ticket's fields at the top level, or ``ticket:`` plus an optional ``backends:``
    list of serving configurations to register first (registration is idempotent per name).
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise CliError(f"{path} is not valid {'JSON' if file.suffix == '.json' else 'YAML'}: {exc}") from None
    if not isinstance(data, dict):
        raise CliError(f"{path} must hold a mapping (the ticket's fields)")
    backends = data.get("backends") or []
    ticket = data.get("ticket") if "ticket" in data else {k: v for k, v in data.items() if k != "backends"}
    if not isinstance(ticket, dict) or not ticket:
        raise CliError(f"{path}: 'ticket' must be a mapping of the ticket's fields")
    if not isinstance(backends, list) or not all(isinstance(b, dict) and b.get("name") for b in backends):
        raise CliError(f"{path}: 'backends' must be a list of backend mappings, each with a name")
    return ticket, backends


def register_backends(api: Api, backends: list[dict[str, Any]], out: TextIO) -> None:
    for backend in backends:
        data = api.post("/api/v1/backends/", backend)
        print(f"backend {data['name']} registered (fingerprint {data['fingerprint'][:12]})", file=out)


def file_ticket(api: Api, ticket: dict[str, Any], *, idempotency_key: str | None) -> dict[str, Any]:
    """Create the ticket; the same file filed twice returns the first ticket (Idempotency-Key)."""
    if idempotency_key is None:
        digest = hashlib.sha256(json.dumps(ticket, sort_keys=True, default=str).encode()).hexdigest()
        idempotency_key = f"optgate-cli-{digest[:40]}"
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    return dict(api.post("/api/v1/tickets/", ticket, headers=headers))


def request_evaluation(api: Api, ticket: dict[str, Any], out: TextIO) -> dict[str, Any]:
    """Submit a draft and request its evaluation (``/evaluate/``; ``/submit/`` on servers without it)."""
    status = ticket["status"]
    if status in JUDGED or status == "evaluating":
        return ticket
    if status in ("draft", "submitted"):
        response = api.request("POST", f"/api/v1/tickets/{ticket['id']}/evaluate/", ok=(200, 202, 404, 405))
        if response.status_code in (200, 202):
            return dict(response.json())
        if status == "draft":
            return dict(api.post(f"/api/v1/tickets/{ticket['id']}/submit/", {}))
    return ticket


# --- waiting -----------------------------------------------------------------------------------


def _run_line(run: dict[str, Any], side: str) -> str:
    phase = f" {run['phase']}" if run.get("phase") else ""
    return f"{side} run #{run['id']} {run['status']} {run.get('progress', 0)}%{phase}"


def progress_line(ticket: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """One line saying where the ticket and its runs are."""
    sides = {
        (ticket.get("baseline") or {}).get("name"): "baseline",
        (ticket.get("candidate") or {}).get("name"): "candidate",
    }
    parts = [f"ticket #{ticket['id']} {ticket['status']}"]
    parts += [_run_line(run, sides.get(run.get("backend"), "run")) for run in sorted(runs, key=lambda r: r["id"])]
    return " | ".join(parts)


def wait_for_verdict(
    api: Api,
    ticket_id: int,
    *,
    timeout_s: float,
    poll_s: float,
    require_sign_off: bool,
    out: TextIO,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Poll the ticket and its runs until a decision exists (and, if asked, is signed); return the ticket."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        ticket = api.get(f"/api/v1/tickets/{ticket_id}/")
        runs = api.get("/api/v1/runs/", params={"ticket": ticket_id, "limit": 10}).get("results", [])
        line = progress_line(ticket, runs)
        if line != last:
            print(line, file=out, flush=True)
            last = line
        status = ticket["status"]
        if status in SIGNED or (status in JUDGED and not require_sign_off):
            return dict(ticket)
        if status == "evaluating" and len(runs) == 2 and all(r["status"] == "cancelled" for r in runs):
            raise CliError(f"the evaluation of ticket #{ticket_id} was cancelled")
        if time.monotonic() >= deadline:
            raise CliError(f"timed out after {timeout_s:.0f}s waiting for ticket #{ticket_id} ({line})")
        sleep(poll_s)


# --- decisions ---------------------------------------------------------------------------------


def fetch_decision(api: Api, ticket_id: int) -> dict[str, Any] | None:
    response = api.request("GET", f"/api/v1/tickets/{ticket_id}/decision/", ok=(200, 404))
    if response.status_code == 404:
        detail = problem(response)
        if "no gate decision" not in detail:
            raise CliError(f"ticket #{ticket_id}: HTTP 404: {detail}")
        return None
    return dict(response.json())


def verdict_of(decision: dict[str, Any]) -> tuple[str, bool]:
    """The verdict a CI step acts on: the reviewers' signed one, else the gate's proposal."""
    signed = decision.get("signed_verdict") or ""
    return (signed, True) if signed else (str(decision.get("outcome")), False)


def _cell(text: Any, width: int) -> str:
    value = " ".join(str(text if text is not None else "").split())
    return value if len(value) <= width else value[: width - 1] + "…"


def _numbers(task: dict[str, Any]) -> str:
    """The numbers that decided a task, as the server formatted them (its ``display`` strings), and
    why its timing was not measured where its load was skipped."""
    parts = []
    for n in task.get("numbers") or []:
        text = f"{n.get('label')} {n.get('baseline')} → {n.get('candidate')}"
        if n.get("change") not in (None, "—"):
            interval = n.get("interval")
            text += f" ({n['change']}" + (f", CI {interval}" if interval not in (None, "—") else "") + ")"
        parts.append(text)
    if task.get("not_measured"):
        parts.append(f"timing not measured: {task['not_measured']}")
    return "; ".join(parts) or "—"


def _samples(task: dict[str, Any]) -> str:
    used, needed = task.get("samples_used"), task.get("samples_needed")
    text = f"{used:,}" if isinstance(used, int) else "—"
    return text + (f" (+{needed:,} needed)" if isinstance(needed, int) and needed else "")


def decision_table(decision: dict[str, Any]) -> str:
    """The decision summary: task × role × verdict × the numbers that decided it × samples, then the
    outcome, the blocking findings (each once), warnings and the next action."""
    summary = decision.get("summary") or {}
    rows = [("TASK", "ROLE", "VERDICT", "SAMPLES", "DECIDED BY")]
    for task in sorted(summary.get("tasks") or [], key=lambda t: str(t.get("task"))):
        rows.append((task.get("task"), task.get("role", ""), task.get("status", ""), _samples(task), _numbers(task)))
    widths = [max(len(_cell(r[i], 200)) for r in rows) for i in range(4)]
    lines = ["  ".join(_cell(r[i], 200).ljust(widths[i]) for i in range(4)) + "  " + _cell(r[4], 200) for r in rows]
    verdict, signed = verdict_of(decision)
    lines.append("")
    lines.append(
        f"outcome: {decision.get('outcome')}  (policy {decision.get('policy_version')}, decision #{decision.get('id')})"
    )
    if signed:
        tasks = ", ".join(decision.get("signed_tasks") or []) or "none"
        lines.append(f"signed verdict: {verdict}  (candidate may serve: {tasks})")
    else:
        lines.append("signed verdict: not yet signed by reviewers; acting on the gate's proposal")
    findings = summary.get("findings") or []
    if findings:
        lines.append("blocking findings:")
        lines.extend(f"  - {f.get('task')}: {f.get('text')}" for f in findings)
    warnings = summary.get("warnings") or []
    if warnings:
        lines.append("warnings:")
        lines.extend(f"  - {w}" for w in warnings)
    needed = decision.get("samples_needed") or {}
    if needed:
        lines.append("samples needed: " + ", ".join(f"{task} +{n}" for task, n in sorted(needed.items())))
    action = summary.get("next_action") or {}
    if action.get("text"):
        lines.append(f"next: {action['text']}")
    return "\n".join(lines)


def report_decision(api: Api, ticket_id: int, out: TextIO, *, as_json: bool = False) -> int:
    """Print the ticket's decision and return the exit code its verdict maps to."""
    decision = fetch_decision(api, ticket_id)
    if decision is None:
        ticket = api.get(f"/api/v1/tickets/{ticket_id}/")
        print(f"ticket #{ticket_id} is {ticket['status']}: no gate decision yet (inconclusive)", file=out)
        return EXIT_INCONCLUSIVE
    verdict, _ = verdict_of(decision)
    if as_json:
        print(json.dumps(decision, indent=2, sort_keys=True), file=out)
    else:
        print(decision_table(decision), file=out)
    code = EXIT_CODES.get(verdict)
    if code is None:
        raise CliError(f"unknown verdict {verdict!r} from the server")
    print(f"verdict: {verdict} → exit {code}", file=out)
    return code
