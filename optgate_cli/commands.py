"""The CLI's commands: each takes the API client and parsed arguments and returns the exit code."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TextIO

import yaml

from optgate_cli.client import EXIT_APPROVE, Api, CliError, UsageError
from optgate_cli.tickets import (
    file_ticket,
    load_ticket_file,
    register_backends,
    report_decision,
    request_evaluation,
    wait_for_verdict,
)


def cmd_gate(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    ticket_fields, backends = load_ticket_file(args.file)
    if not args.no_register:
        register_backends(api, backends, out)
    ticket = file_ticket(api, ticket_fields, idempotency_key=args.idempotency_key)
    # A replayed create (same file, same key) answers with the ticket as first filed: reload it.
    ticket = api.get(f"/api/v1/tickets/{ticket['id']}/")
    print(f"ticket #{ticket['id']} filed: {ticket['title']} ({ticket['status']})", file=out)
    ticket = request_evaluation(api, ticket, out)
    ticket = wait_for_verdict(
        api, ticket["id"], timeout_s=args.timeout, poll_s=args.poll, require_sign_off=args.require_sign_off, out=out
    )
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
    wait_for_verdict(
        api, args.ticket, timeout_s=args.timeout, poll_s=args.poll, require_sign_off=args.require_sign_off, out=out
    )
    return report_decision(api, args.ticket, out, as_json=args.json)


def cmd_decision(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    return report_decision(api, args.ticket, out, as_json=args.json)


def cmd_routes_export(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    data = api.get("/api/v1/routes/export/", params={"format": args.format})
    text = (
        yaml.safe_dump(data, sort_keys=False)
        if args.format == "litellm" and not args.json
        else json.dumps(data, indent=2)
    )
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
    data = api.request(
        "POST", f"/api/v1/runs/{args.run}/evidence/", data={"kind": kind, "task": args.task}, files=files
    ).json()
    result = data["result"]
    summary = result["quality"] if kind == "lm_eval" else result["performance"]
    brief = {k: summary.get(k) for k in ("n", "pass_rate", "completed", "request_throughput") if k in summary}
    print(f"run #{args.run} {args.task}: {kind} evidence attached {json.dumps(brief)}", file=out)
    return EXIT_APPROVE


def cmd_evidence_close(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    run = api.post(f"/api/v1/runs/{args.run}/close/")
    print(f"import run #{run['id']} {run['status']}", file=out)
    return EXIT_APPROVE
