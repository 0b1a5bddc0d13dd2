"""``optgate``: the CI client. Talks to an OptGate server over its REST API only (no Django here).

    optgate gate ticket.yaml            # register backends, file, evaluate, wait, print, exit by verdict
    optgate file ticket.yaml            # file only; prints the ticket id
    optgate wait TICKET_ID              # wait for a filed ticket's verdict
    optgate decision TICKET_ID          # print the current decision and exit by it (no waiting)
    optgate routes export --format litellm
    optgate evidence open BACKEND --task T [--task T2]
    optgate evidence import RUN_ID --task T (--vllm-bench FILE | --lm-eval-results FILE [--lm-eval-samples FILE])
    optgate evidence close RUN_ID

The exit code is the verdict, so a CI step can branch on it (see ``EXIT_CODES``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

import httpx
import yaml

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
}

EPILOG = """\
exit codes:
   0  approve         every task passed; the candidate may serve all of them
  10  restrict        the candidate may serve only some tasks (see the table)
  20  reject          a guardrail broke; the plan is not adopted
  30  inconclusive    needs evidence (too few samples, a failed run), or no decision yet
  40  error           server unreachable, authentication failed, bad ticket file, timeout
   2  usage           bad command line, or no server URL / token

environment:
  OPTGATE_URL     server base URL, e.g. https://optgate.example.com (or --url)
  OPTGATE_TOKEN   API token (or --token); `manage.py create_user NAME --role engineer --token`
"""

# Ticket statuses after which a binding decision (or a withdrawal) exists.
JUDGED = {"evaluated", "needs_evidence", "approved", "restricted", "rejected", "canary", "default", "rolled_back",
          "retired"}  # fmt: skip
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


def _problem(response: httpx.Response) -> str:
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

    def __init__(self, base_url: str, token: str, *, timeout_s: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:  # fmt: skip
        self.base_url = base_url.rstrip("/")
        self.client = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Token {token}", "Accept": "application/json",
                     "User-Agent": "optgate-cli/1"},
            timeout=timeout_s,
            transport=transport,
        )  # fmt: skip

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
            raise CliError(f"{method} {path}: {response.status_code} {_problem(response)} (check OPTGATE_TOKEN)")
        raise CliError(f"{method} {path}: HTTP {response.status_code}: {_problem(response)}")

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    def post(self, path: str, body: Any = None, *, headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
        return self.request("POST", path, json=body, headers=headers, **kwargs).json()


# --- ticket files ------------------------------------------------------------------------------


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
    sides = {(ticket.get("baseline") or {}).get("name"): "baseline", (ticket.get("candidate") or {}).get("name"):
             "candidate"}  # fmt: skip
    parts = [f"ticket #{ticket['id']} {ticket['status']}"]
    parts += [_run_line(run, sides.get(run.get("backend"), "run")) for run in sorted(runs, key=lambda r: r["id"])]
    return " | ".join(parts)


def wait_for_verdict(api: Api, ticket_id: int, *, timeout_s: float, poll_s: float, require_sign_off: bool,
                     out: TextIO, sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:  # fmt: skip
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
        detail = _problem(response)
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


def decision_table(decision: dict[str, Any]) -> str:
    """Task × role × verdict × reason, then the outcome and the decision's reasons."""
    rows = [("TASK", "ROLE", "VERDICT", "REASON")]
    for task, verdict in sorted((decision.get("verdicts") or {}).items()):
        rows.append((task, verdict.get("role", ""), verdict.get("status", ""), verdict.get("reason", "")))
    widths = [max(len(_cell(r[i], 200)) for r in rows) for i in range(3)]
    lines = ["  ".join(_cell(r[i], 200).ljust(widths[i]) for i in range(3)) + "  " + _cell(r[3], 160) for r in rows]
    verdict, signed = verdict_of(decision)
    lines.append("")
    lines.append(f"outcome: {decision.get('outcome')}  (policy {decision.get('policy_version')}, decision "
                 f"#{decision.get('id')})")  # fmt: skip
    if signed:
        tasks = ", ".join(decision.get("signed_tasks") or []) or "none"
        lines.append(f"signed verdict: {verdict}  (candidate may serve: {tasks})")
    else:
        lines.append("signed verdict: not yet signed by reviewers; acting on the gate's proposal")
    for reason in decision.get("reasons") or []:
        lines.append(f"  - {reason}")
    needed = decision.get("samples_needed") or {}
    if needed:
        lines.append("samples needed: " + ", ".join(f"{task} +{n}" for task, n in sorted(needed.items())))
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


# --- commands ----------------------------------------------------------------------------------


def cmd_gate(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    ticket_fields, backends = load_ticket_file(args.file)
    if not args.no_register:
        register_backends(api, backends, out)
    ticket = file_ticket(api, ticket_fields, idempotency_key=args.idempotency_key)
    # A replayed create (same file, same key) answers with the ticket as first filed: reload it.
    ticket = api.get(f"/api/v1/tickets/{ticket['id']}/")
    print(f"ticket #{ticket['id']} filed: {ticket['title']} ({ticket['status']})", file=out)
    ticket = request_evaluation(api, ticket, out)
    ticket = wait_for_verdict(api, ticket["id"], timeout_s=args.timeout, poll_s=args.poll,
                              require_sign_off=args.require_sign_off, out=out)  # fmt: skip
    return report_decision(api, ticket["id"], out, as_json=args.json)


def cmd_file(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    ticket_fields, backends = load_ticket_file(args.file)
    if not args.no_register:
        register_backends(api, backends, out)
    ticket = file_ticket(api, ticket_fields, idempotency_key=args.idempotency_key)
    ticket = api.get(f"/api/v1/tickets/{ticket['id']}/")
    if args.submit:
        ticket = request_evaluation(api, ticket, out)
    print(ticket["id"])
    print(f"ticket #{ticket['id']} {ticket['status']}: {ticket['title']}", file=out)
    return EXIT_APPROVE


def cmd_wait(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    wait_for_verdict(api, args.ticket, timeout_s=args.timeout, poll_s=args.poll,
                     require_sign_off=args.require_sign_off, out=out)  # fmt: skip
    return report_decision(api, args.ticket, out, as_json=args.json)


def cmd_decision(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    return report_decision(api, args.ticket, out, as_json=args.json)


def cmd_routes_export(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    data = api.get("/api/v1/routes/export/", params={"format": args.format})
    text = yaml.safe_dump(data, sort_keys=False) if args.format == "litellm" and not args.json else json.dumps(
        data, indent=2
    )  # fmt: skip
    if args.output:
        Path(args.output).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        print(f"wrote {args.output}", file=out)
    else:
        print(text.rstrip("\n"))
    return EXIT_APPROVE


def cmd_evidence_open(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    run = api.post("/api/v1/runs/", {"backend": args.backend, "tasks": args.task})
    print(run["id"])
    print(f"import run #{run['id']} open for {run['backend']} on {', '.join(run['tasks'])}", file=out)
    return EXIT_APPROVE


def _read_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None


def cmd_evidence_import(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    if bool(args.vllm_bench) == bool(args.lm_eval_results):
        raise UsageError("give exactly one of --vllm-bench or --lm-eval-results")
    kind = "vllm_bench" if args.vllm_bench else "lm_eval"
    main_file = args.vllm_bench or args.lm_eval_results
    files = {"file": (Path(main_file).name, _read_bytes(main_file), "application/json")}
    if args.lm_eval_samples:
        files["samples"] = (Path(args.lm_eval_samples).name, _read_bytes(args.lm_eval_samples), "application/x-ndjson")
    data = api.request("POST", f"/api/v1/runs/{args.run}/evidence/", data={"kind": kind, "task": args.task},
                       files=files).json()  # fmt: skip
    result = data["result"]
    summary = result["quality"] if kind == "lm_eval" else result["performance"]
    brief = {k: summary.get(k) for k in ("n", "pass_rate", "completed", "request_throughput") if k in summary}
    print(f"run #{args.run} {args.task}: {kind} evidence attached {json.dumps(brief)}", file=out)
    return EXIT_APPROVE


def cmd_evidence_close(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    run = api.post(f"/api/v1/runs/{args.run}/close/")
    print(f"import run #{run['id']} {run['status']}", file=out)
    return EXIT_APPROVE


# --- argument parsing --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with the usage on errors (its default), kept explicit for the docs."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _wait_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=float(os.environ.get("OPTGATE_WAIT_TIMEOUT", 7200)),
        help="seconds to wait for the verdict before exit 40 (default 7200)",
    )
    parser.add_argument("--poll", type=float, default=10.0, help="seconds between progress polls (default 10)")
    parser.add_argument(
        "--require-sign-off",
        action="store_true",
        help="wait until reviewers have signed; otherwise exit on the gate's proposal",
    )
    parser.add_argument("--json", action="store_true", help="print the decision as JSON instead of a table")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="optgate",
        description="OptGate CI client: file a release ticket, wait for the gate, exit by its verdict.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", default=os.environ.get("OPTGATE_URL"), help="server URL (env OPTGATE_URL)")
    parser.add_argument("--token", default=os.environ.get("OPTGATE_TOKEN"), help="API token (env OPTGATE_TOKEN)")
    parser.add_argument("--http-timeout", type=float, default=30.0, help="seconds per HTTP request")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    gate = commands.add_parser("gate", help="register backends, file, evaluate, wait and exit by the verdict",
                               epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    gate.add_argument("file", help="ticket file (YAML or JSON)")
    gate.add_argument("--no-register", action="store_true", help="do not register the file's backends")
    gate.add_argument("--idempotency-key", help="default: derived from the ticket's content ('' to disable)")
    _wait_options(gate)
    gate.set_defaults(handler=cmd_gate)

    file = commands.add_parser("file", help="file a ticket (and optionally submit it); prints its id")
    file.add_argument("file")
    file.add_argument("--submit", action="store_true", help="also submit it for evaluation")
    file.add_argument("--no-register", action="store_true")
    file.add_argument("--idempotency-key")
    file.set_defaults(handler=cmd_file)

    wait = commands.add_parser("wait", help="wait for a ticket's verdict and exit by it", epilog=EPILOG,
                               formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    wait.add_argument("ticket", type=int)
    _wait_options(wait)
    wait.set_defaults(handler=cmd_wait)

    decision = commands.add_parser("decision", help="print a ticket's decision and exit by its verdict",
                                   epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    decision.add_argument("ticket", type=int)
    decision.add_argument("--json", action="store_true")
    decision.set_defaults(handler=cmd_decision)

    routes = commands.add_parser("routes", help="the route table")
    route_commands = routes.add_subparsers(dest="routes_command", required=True, parser_class=_Parser)
    export = route_commands.add_parser("export", help="export the current route table for a gateway")
    export.add_argument("--format", choices=["json", "litellm"], default="json")
    export.add_argument("--json", action="store_true", help="LiteLLM config as JSON instead of YAML")
    export.add_argument("--output", "-o", help="write to this file instead of stdout")
    export.set_defaults(handler=cmd_routes_export)

    evidence = commands.add_parser("evidence", help="import evidence measured outside OptGate")
    evidence_commands = evidence.add_subparsers(dest="evidence_command", required=True, parser_class=_Parser)
    opened = evidence_commands.add_parser("open", help="open an import run for a backend; prints its id")
    opened.add_argument("backend")
    opened.add_argument("--task", action="append", required=True, help="task type slug (repeat for several)")
    opened.set_defaults(handler=cmd_evidence_open)
    imported = evidence_commands.add_parser("import", help="attach a vllm bench serve or lm-eval result")
    imported.add_argument("run", type=int)
    imported.add_argument("--task", required=True)
    imported.add_argument("--vllm-bench", metavar="FILE", help="`vllm bench serve --save-result` JSON")
    imported.add_argument("--lm-eval-results", metavar="FILE", help="lm-eval results_*.json")
    imported.add_argument("--lm-eval-samples", metavar="FILE", help="lm-eval samples_<task>_*.jsonl")
    imported.set_defaults(handler=cmd_evidence_import)
    closed = evidence_commands.add_parser("close", help="finish an import run")
    closed.add_argument("run", type=int)
    closed.set_defaults(handler=cmd_evidence_close)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         transport: httpx.BaseTransport | None = None) -> int:  # fmt: skip
    """Run one command; return the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) and usage errors (2)
        return int(exc.code or 0)
    out = out or sys.stderr
    if not args.url:
        print("optgate: error: no server URL: pass --url or set OPTGATE_URL", file=sys.stderr)
        return EXIT_USAGE
    if not args.token:
        print("optgate: error: no API token: pass --token or set OPTGATE_TOKEN", file=sys.stderr)
        return EXIT_USAGE
    api = Api(args.url, args.token, timeout_s=args.http_timeout, transport=transport)
    try:
        return int(args.handler(api, args, out))
    except CliError as exc:
        print(f"optgate: {'usage' if exc.code == EXIT_USAGE else 'error'}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("optgate: interrupted", file=sys.stderr)
        return EXIT_ERROR
    finally:
        api.close()


if __name__ == "__main__":
    sys.exit(main())
