"""Argument parsing and the ``optgate`` console script's entry point."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn, TextIO

import httpx

from optgate_cli.client import EPILOG, EXIT_ERROR, EXIT_USAGE, Api, CliError
from optgate_cli.commands import (
    cmd_decision,
    cmd_evidence_close,
    cmd_evidence_import,
    cmd_evidence_open,
    cmd_file,
    cmd_gate,
    cmd_routes_export,
    cmd_wait,
)


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

    gate = commands.add_parser(
        "gate",
        help="register backends, file, evaluate, wait and exit by the verdict",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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

    wait = commands.add_parser(
        "wait",
        help="wait for a ticket's verdict and exit by it",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    wait.add_argument("ticket", type=int)
    _wait_options(wait)
    wait.set_defaults(handler=cmd_wait)

    decision = commands.add_parser(
        "decision",
        help="print a ticket's decision and exit by its verdict",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, transport: httpx.BaseTransport | None = None
) -> int:
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
