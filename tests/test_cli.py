"""The ``optgate`` CI client against a live test server: every exit code, the decision table, the
full file → evaluate → wait flow, route export, and the progress display.

Decisions are produced by the real judge from stored runs (``tests.test_gate_decisions``); the
evaluation workers are replaced by a stand-in that stores such runs and judges them at once.
"""

from __future__ import annotations

import io
import json
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from django.contrib.auth.models import User

import optgate_cli.main as cli
from accounts.services import api_token_issue
from backends.models import Backend
from evaluators.models import RunErrorKind, RunStatus
from gates.models import GateDecision, ReleaseTicket
from gates.services import decisions, routing
from tests.factories import backend_fields, evaluating_ticket, outcomes, scenario, store_run, task_spec, tasks

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def token_of(user: User) -> str:
    return api_token_issue(actor=None, user=user, name="cli-tests").key


@pytest.fixture
def run_cli(live_server: Any, erin: User) -> Callable[..., tuple[int, str]]:
    """Run ``optgate`` in-process against the live server as erin; returns (exit code, output)."""

    def run(*argv: str, token: str | None = None, url: str | None = None) -> tuple[int, str]:
        out = io.StringIO()
        base = ["--url", url or live_server.url, "--token", token if token is not None else token_of(erin)]
        code = cli.main([*base, *argv], out=out)
        return code, out.getvalue()

    return run


FP8_CAUSE = "NotImplementedError: FP8 KV cache on CPU needs AVX-512"


def judged(outcome: str, owner: User, baseline: Backend, candidate: Backend) -> ReleaseTicket:
    """A ticket the real judge has decided (unsigned proposal)."""
    if outcome in ("needs_evidence", "error"):
        good = outcomes(200, 0.9, 3)
        base = store_run(baseline, {"cs_summary": task_spec(good), "knowledge_qa": task_spec(good)})
        crashed = (
            store_run(candidate, {}, status=RunStatus.ERROR, error="engine did not become healthy")
            if outcome == "needs_evidence"
            else store_run(
                candidate,
                {},
                status=RunStatus.ERROR,
                error=f"engine exited with code 1 during start-up: {FP8_CAUSE}\n--- last 30 log lines ---",
                error_kind=RunErrorKind.START_FAILED,
            )
        )
        ticket = evaluating_ticket(
            owner,
            baseline,
            candidate,
            base,
            crashed,
            beneficiary_tasks=tasks("cs_summary"),
            risk_tasks=tasks("knowledge_qa"),
        )
    else:
        ticket = scenario(outcome, owner, baseline, candidate)
    decision = decisions.decision_make(ticket=ticket)
    assert decision.outcome == outcome, decision.reasons
    ticket.refresh_from_db()
    return ticket


# --- every exit code -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "code"),
    [("approve", 0), ("restrict", 10), ("reject", 20), ("needs_evidence", 30), ("error", 40)],
)
def test_decision_exits_by_the_gates_outcome(
    run_cli: Any, erin: User, baseline: Backend, candidate: Backend, outcome: str, code: int
) -> None:
    ticket = judged(outcome, erin, baseline, candidate)
    exit_code, output = run_cli("decision", str(ticket.pk))
    assert exit_code == code
    assert f"outcome: {outcome}" in output
    assert f"verdict: {outcome} → exit {code}" in output
    assert "not yet signed by reviewers" in output
    if outcome == "error":
        assert FP8_CAUSE in output  # the root cause, where the CI log shows it


def test_the_decision_table_is_the_summary_with_numbers_as_people_read_them(
    run_cli: Any, erin: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged("reject", erin, baseline, candidate)
    stored = GateDecision.objects.get(ticket=ticket)
    _, output = run_cli("decision", str(ticket.pk))
    header, *rows = output.splitlines()
    assert header.split()[:6] == ["TASK", "ROLE", "VERDICT", "SAMPLES", "DECIDED", "BY"]
    by_task = {line.split()[0]: line for line in rows if line.split() and line.split()[0] in stored.verdicts}
    assert set(by_task) == {"cs_summary", "dataagent_nl2sql"}
    assert by_task["dataagent_nl2sql"].split()[1:4] == ["risk", "fail", "200"]
    # The failed check's numbers, in percent and points with their interval, not raw fractions.
    assert "91.0% → 81.0% (−10.0 pts, CI −17.2 to −5.6 pts)" in by_task["dataagent_nl2sql"]
    assert "ms" in by_task["cs_summary"] and not re.search(r"\d\.\d{4,}", output)
    # The blocking finding is printed once; the next action closes the summary.
    finding = next(m for m in stored.verdicts["dataagent_nl2sql"]["metrics"] if m["status"] == "fail")
    assert output.count(finding["reason"]) == 1
    assert f"  - dataagent_nl2sql: {finding['reason']}" in output
    assert "next: You own this ticket: a reviewer signs off the policy's reject next." in output  # erin filed it


def test_the_reviewers_signed_verdict_overrides_the_proposal(
    run_cli: Any, erin: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged("approve", erin, baseline, candidate)
    # Set-up: reviewers restricted the approval to one task (the sign-off service is tested elsewhere).
    GateDecision.objects.filter(ticket=ticket).update(signed_verdict="restrict", signed_tasks=["cs_summary"])
    code, output = run_cli("decision", str(ticket.pk))
    assert code == 10
    assert "signed verdict: restrict  (candidate may serve: cs_summary)" in output


def test_a_ticket_without_a_decision_is_inconclusive(run_cli: Any, draft: ReleaseTicket) -> None:
    code, output = run_cli("decision", str(draft.pk))
    assert code == 30
    assert f"ticket #{draft.pk} is draft: no gate decision yet" in output


def test_a_wrong_token_is_an_error(run_cli: Any, draft: ReleaseTicket, capsys: Any) -> None:
    code, _ = run_cli("decision", str(draft.pk), token="not-a-token")
    assert code == 40
    assert "401" in capsys.readouterr().err


def test_an_unknown_ticket_is_an_error(run_cli: Any, erin: User, capsys: Any) -> None:
    code, _ = run_cli("decision", "999999")
    assert code == 40
    assert "404" in capsys.readouterr().err


def test_an_unreachable_server_is_an_error(run_cli: Any, capsys: Any) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, _ = run_cli("decision", "1", url=f"http://127.0.0.1:{port}")
    assert code == 40
    assert "cannot reach" in capsys.readouterr().err


def test_a_bad_ticket_file_is_an_error(run_cli: Any, tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "ticket.yaml"
    bad.write_text("title: [unclosed\n")
    code, _ = run_cli("gate", str(bad))
    assert code == 40
    assert "not valid YAML" in capsys.readouterr().err


def test_usage_errors_exit_2(live_server: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPTGATE_URL", raising=False)
    monkeypatch.delenv("OPTGATE_TOKEN", raising=False)
    assert cli.main(["decision", "1"]) == 2
    assert "no server URL" in capsys.readouterr().err
    assert cli.main(["--url", live_server.url, "decision", "1"]) == 2
    assert "no API token" in capsys.readouterr().err
    assert cli.main(["--url", live_server.url, "--token", "t", "decision", "not-a-number"]) == 2
    assert cli.main(["--url", live_server.url, "--token", "t", "frobnicate"]) == 2


def test_server_and_token_come_from_the_environment(
    live_server: Any, erin: User, draft: ReleaseTicket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPTGATE_URL", live_server.url)
    monkeypatch.setenv("OPTGATE_TOKEN", token_of(erin))
    assert cli.main(["decision", str(draft.pk)], out=io.StringIO()) == 30


def test_help_lists_the_exit_codes(capsys: Any) -> None:
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    for code, word in (
        (0, "approve"),
        (10, "restrict"),
        (20, "reject"),
        (30, "inconclusive"),
        (40, "error"),
        (2, "usage"),
    ):
        assert any(line.split()[:2] == [str(code), word] for line in text.splitlines()), (code, text)
    assert "OPTGATE_URL" in text and "OPTGATE_TOKEN" in text


# --- file → evaluate → wait, end to end --------------------------------------------------------


@pytest.fixture
def fake_workers(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Stand in for the evaluation workers: store runs for the wanted outcome and judge at once.

    Maps a ticket title to the outcome its stored evidence should lead to.
    """
    wanted: dict[str, str] = {}

    def evaluation_request(*, ticket: ReleaseTicket, actor: Any) -> ReleaseTicket:
        outcome = wanted[ticket.title]
        stand_in = judged(outcome, ticket.owner, ticket.baseline, ticket.candidate)
        # Point the filed ticket at the stand-in's runs and decision, in the state judging left it.
        ReleaseTicket.objects.filter(pk=ticket.pk).update(
            status=stand_in.status, baseline_run=stand_in.baseline_run, candidate_run=stand_in.candidate_run
        )
        GateDecision.objects.filter(ticket=stand_in).update(ticket=ticket)
        return ReleaseTicket.objects.get(pk=ticket.pk)

    monkeypatch.setattr("gates.services.actions.evaluation_request", evaluation_request)
    return wanted


def ticket_document(model_root: Path, title: str) -> dict[str, Any]:
    base = backend_fields(model_root, "ci-baseline")
    cand = backend_fields(
        model_root, "ci-candidate", engine_args={"max_model_len": 2048, "seed": 0, "max_num_batched_tokens": 4096}
    )
    return {
        "backends": [base, cand],
        "ticket": {
            "title": title,
            "mechanisms": ["batching"],
            "bottleneck": "decode",
            "bottleneck_evidence": "decode-bound at concurrency 8",
            "baseline": "ci-baseline",
            "candidate": "ci-candidate",
            "beneficiary_tasks": ["cs_summary"],
            "risk_tasks": ["code_assistant"],
            "benefit_metrics": ["ttft_p95"],
            "guardrail_metrics": ["refusal_accuracy"],
            "rollback_target": "ci-baseline",
            "rollback_plan": {
                "sacrifices": "throughput",
                "warmup": "none",
                "inflight_streams": "drain",
                "route_update": "back to ci-baseline",
            },
            "observation_window_hours": 24,
        },
    }


@pytest.mark.parametrize(
    ("outcome", "code", "suffix"),
    [("approve", 0, ".yaml"), ("restrict", 10, ".json"), ("reject", 20, ".yaml"), ("needs_evidence", 30, ".yaml")],
)
def test_gate_files_registers_evaluates_waits_and_exits_by_the_verdict(
    run_cli: Any,
    fake_workers: dict[str, str],
    model_root: Path,
    outcome: str,
    code: int,
    suffix: str,
    tmp_path: Path,
) -> None:
    title = f"Bigger batches ({outcome})"
    fake_workers[title] = outcome
    document = ticket_document(model_root, title)
    path = tmp_path / f"ticket{suffix}"
    path.write_text(json.dumps(document) if suffix == ".json" else yaml.safe_dump(document))
    exit_code, output = run_cli("gate", str(path), "--poll", "0.05", "--timeout", "30")
    assert exit_code == code, output
    ticket = ReleaseTicket.objects.get(title=title)
    assert ticket.owner.username == "erin" and ticket.baseline.name == "ci-baseline"
    assert "backend ci-baseline registered" in output and "backend ci-candidate registered" in output
    assert f"ticket #{ticket.pk} filed" in output
    assert f"ticket #{ticket.pk} {ticket.status}" in output  # the progress line
    assert f"verdict: {outcome} → exit {code}" in output


def test_running_the_same_file_again_reuses_the_ticket(
    run_cli: Any, fake_workers: dict[str, str], model_root: Path, tmp_path: Path
) -> None:
    fake_workers["Bigger batches"] = "approve"
    path = tmp_path / "ticket.yaml"
    path.write_text(yaml.safe_dump(ticket_document(model_root, "Bigger batches")))
    assert run_cli("gate", str(path), "--poll", "0.05")[0] == 0
    assert run_cli("gate", str(path), "--poll", "0.05")[0] == 0
    assert ReleaseTicket.objects.filter(title="Bigger batches").count() == 1


def test_wait_times_out_with_an_error(run_cli: Any, draft: ReleaseTicket, capsys: Any) -> None:
    code, output = run_cli("wait", str(draft.pk), "--poll", "0.05", "--timeout", "0.2")
    assert code == 40
    assert f"ticket #{draft.pk} draft" in output
    assert "timed out" in capsys.readouterr().err


def test_wait_for_sign_off_keeps_waiting_on_an_unsigned_proposal(
    run_cli: Any, erin: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = judged("approve", erin, baseline, candidate)
    assert run_cli("wait", str(ticket.pk), "--poll", "0.05", "--timeout", "0.3", "--require-sign-off")[0] == 40
    assert run_cli("wait", str(ticket.pk), "--poll", "0.05", "--timeout", "5")[0] == 0


# --- routes export ---------------------------------------------------------------------------


def test_routes_export_writes_a_litellm_config(run_cli: Any, ada: User, baseline: Backend, tmp_path: Path) -> None:
    routing.routes_set(task="cs_summary", backend=baseline, actor=ada, reason="initial fleet")
    target = tmp_path / "litellm.yaml"
    code, _ = run_cli("routes", "export", "--format", "litellm", "--output", str(target))
    assert code == 0
    config = yaml.safe_load(target.read_text())
    entry = config["model_list"][0]
    assert entry["model_name"] == "cs_summary"
    assert entry["litellm_params"]["model"] == "openai/kit-bf16"


# --- the progress display, against a scripted server ------------------------------------------


def scripted_server(states: list[tuple[str, list[dict[str, Any]]]]) -> httpx.MockTransport:
    """Each ticket poll advances one state; runs answer with that state's runs."""
    position = {"i": -1}
    decision = {
        "id": 7,
        "outcome": "approve",
        "signed_verdict": "",
        "policy_version": "default@1",
        "verdicts": {"cs_summary": {"role": "beneficiary", "status": "pass", "reason": "faster"}},
        "reasons": ["all tasks pass"],
        "samples_needed": {},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/tickets/5/":
            position["i"] = min(position["i"] + 1, len(states) - 1)
            status = states[position["i"]][0]
            return httpx.Response(
                200, json={"id": 5, "status": status, "baseline": {"name": "b"}, "candidate": {"name": "c"}}
            )
        if path == "/api/v1/runs/":
            return httpx.Response(200, json={"results": states[position["i"]][1]})
        if path == "/api/v1/tickets/5/decision/":
            return httpx.Response(200, json=decision)
        return httpx.Response(404, json={"detail": "not found"})

    return httpx.MockTransport(handler)


def test_wait_shows_each_change_of_the_ticket_and_its_runs_once() -> None:
    running = [
        {"id": 1, "backend": "b", "status": "running", "progress": 40, "phase": "quality cs_summary"},
        {"id": 2, "backend": "c", "status": "queued", "progress": 0, "phase": ""},
    ]
    later = [{**running[0], "progress": 70, "phase": "load cs_summary"}, {**running[1], "status": "running"}]
    transport = scripted_server(
        [
            ("submitted", []),
            ("evaluating", running),
            ("evaluating", running),
            ("evaluating", later),
            ("evaluated", later),
        ]
    )
    out = io.StringIO()
    code = cli.main(
        ["--url", "http://optgate.test", "--token", "t", "wait", "5", "--poll", "0"], out=out, transport=transport
    )
    lines = out.getvalue().splitlines()
    assert code == 0
    progress = [line for line in lines if line.startswith("ticket #5")]
    assert progress == [
        "ticket #5 submitted",
        "ticket #5 evaluating | baseline run #1 running 40% quality cs_summary | candidate run #2 queued 0%",
        "ticket #5 evaluating | baseline run #1 running 70% load cs_summary | candidate run #2 running 0%",
        "ticket #5 evaluated | baseline run #1 running 70% load cs_summary | candidate run #2 running 0%",
    ]


@pytest.fixture(autouse=True)
def _no_stray_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A developer's own OPTGATE_* settings must not leak into the tests.
    for name in ("OPTGATE_URL", "OPTGATE_TOKEN", "OPTGATE_WAIT_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    yield


def test_the_client_runs_as_a_plain_module_without_django_settings() -> None:
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run(
        [sys.executable, "-m", "optgate_cli", "--help"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "40  error" in done.stdout
    usage = subprocess.run(
        [sys.executable, "-m", "optgate_cli", "decision", "1"], env=env, capture_output=True, text=True, timeout=120
    )
    assert usage.returncode == 2 and "no server URL" in usage.stderr
