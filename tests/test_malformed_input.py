"""Malformed input gets a 400 that names the field and the problem, and nothing is stored.

Two tables of bad input (policy YAML, engine arguments), then one regression test per server
error that fuzzing the API turned up (``tests/test_api_fuzz.py`` and the probes written after it),
each with the exact input that used to answer 500.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rest_framework.exceptions import ParseError

from backends.models import Backend
from core.models import IdempotencyRecord
from core.parsers import JSONParser
from evaluators.imports.services import run_open_for_import
from evaluators.models import EvaluationRun
from gates.models import GateDecision, ReleaseTicket
from ledger.models import LedgerEntry
from tests.factories import backend_fields

pytestmark = pytest.mark.django_db

GOOD_TASK = "tasks:\n  cs_summary:\n    guardrails: [{metric: pass_rate, margin: 0.05}]\n"
HEAD = "name: trial\nversion: 1\n"


def _policy_text(body: str) -> str:
    return HEAD + body


# Each case: policy text, and the path the 400 must name ("" is the document itself).
BAD_POLICIES = [
    pytest.param("name: [unclosed\n", "", id="yaml-syntax-error"),
    pytest.param("- name: trial\n- version: 1\n", "", id="a-list"),
    pytest.param("just a sentence", "", id="a-scalar"),
    pytest.param("[" * 5000 + "]" * 5000, "", id="nested-past-the-recursion-limit"),
    pytest.param(_policy_text(GOOD_TASK + "owner: erin\n"), "owner", id="unknown-top-level-key"),
    pytest.param(
        _policy_text(GOOD_TASK.replace("margin: 0.05", "margin: 0.05, slack: 1")),
        "tasks.cs_summary.guardrails[0].slack",
        id="unknown-rule-key",
    ),
    pytest.param("name: trial\nversion: one\n" + GOOD_TASK, "version", id="version-not-an-integer"),
    pytest.param(_policy_text("tasks: [cs_summary]\n"), "tasks", id="tasks-not-a-mapping"),
    pytest.param(
        _policy_text(GOOD_TASK.replace("0.05", "'0.05'")), "tasks.cs_summary.guardrails[0].margin", id="margin-a-string"
    ),
    pytest.param(
        _policy_text(GOOD_TASK.replace("0.05", "-0.05")), "tasks.cs_summary.guardrails[0].margin", id="negative-margin"
    ),
    pytest.param(
        _policy_text(GOOD_TASK.replace("0.05", ".nan")), "tasks.cs_summary.guardrails[0].margin", id="nan-margin"
    ),
    pytest.param(
        _policy_text(GOOD_TASK.replace("}]", "}, {metric: pass_rate, margin: 0.1}]")),
        "tasks.cs_summary.guardrails[1].metric",
        id="metric-twice",
    ),
    pytest.param(
        _policy_text(GOOD_TASK + "mechanisms: {weight_quantization: {critical_tasks: [[cs_summary]]}}\n"),
        "mechanisms.weight_quantization.critical_tasks[0]",
        id="critical-task-a-list",
    ),
    pytest.param(_policy_text(GOOD_TASK + "stats: {n_boot: 1000000000}\n"), "stats.n_boot", id="n-boot-too-big"),
    pytest.param(
        _policy_text('tasks:\n  "cs_summary\\n":\n    guardrails: [{metric: pass_rate, margin: 0.1}]\n'),
        "tasks.cs_summary\n",
        id="task-name-with-a-newline",
    ),
]


@pytest.mark.parametrize(("text", "path"), BAD_POLICIES)
def test_a_malformed_policy_is_a_400_naming_the_path(api_for: Any, erin: Any, text: str, path: str) -> None:
    client = api_for(erin)
    entries = LedgerEntry.objects.count()
    response = client.post("/api/v1/policies/validate/", {"text": text}, format="json")
    assert response.status_code == 400, response.data
    assert response.data["text"], response.data
    assert path in [error["path"] for error in response.data["errors"]], response.data["errors"]
    assert LedgerEntry.objects.count() == entries


def test_a_policy_too_large_is_refused_before_parsing(api_for: Any, erin: Any) -> None:
    text = _policy_text(GOOD_TASK) + "description: " + "x" * 200_000 + "\n"
    response = api_for(erin).post("/api/v1/policies/validate/", {"text": text}, format="json")
    assert response.status_code == 400
    assert "200000" in str(response.data["text"][0])


def test_an_alias_multiplied_policy_reports_a_bounded_list_of_problems(api_for: Any, erin: Any) -> None:
    # One anchor of 60 unknown keys, referenced 2000 times: 120,000 problems if all were listed.
    anchor = "{" + ", ".join(f"k{i}: 1" for i in range(60)) + "}"
    text = f"x: &bad {anchor}\n" + _policy_text("tasks:\n  cs_summary:\n    guardrails: [" + ", ".join(["*bad"] * 2000))
    response = api_for(erin).post("/api/v1/policies/validate/", {"text": text + "]\n"}, format="json")
    assert response.status_code == 400
    assert len(response.data["errors"]) <= 101
    assert "more problems not shown" in response.data["errors"][-1]["problem"]


def test_a_dry_run_with_a_malformed_policy_stores_no_decision(api_for: Any, rita: Any, draft: ReleaseTicket) -> None:
    text = _policy_text(GOOD_TASK.replace("0.05", ".nan"))
    response = api_for(rita).post(
        "/api/v1/policies/default/dry-run/", {"ticket": draft.pk, "text": text}, format="json"
    )
    assert response.status_code == 400
    assert response.data["errors"][0]["path"] == "tasks.cs_summary.guardrails[0].margin"
    assert not GateDecision.objects.exists()


# Each case: engine_args as posted, and the field the 400 must name.
BAD_ENGINE_ARGS = [
    pytest.param("--max-num-seqs 64 --enable-prefix-caching", "engine_args", id="a-shell-command-line"),
    pytest.param(["--max-num-seqs", "64"], "engine_args", id="an-argv-list"),
    pytest.param({"--frobnicate": 1}, "engine_args.--frobnicate", id="unknown-flag"),
    pytest.param({"max_num_seqs": ""}, "engine_args.max_num_seqs", id="flag-missing-its-value"),
    pytest.param({"--kv-cache-dtype": ""}, "engine_args.kv_cache_dtype", id="choice-missing-its-value"),
    pytest.param({"revision": 5}, "engine_args.revision", id="non-string-value"),
    pytest.param({"quantization": ["awq"]}, "engine_args.quantization", id="list-value"),
    pytest.param({"max_num_seqs": True}, "engine_args.max_num_seqs", id="boolean-as-a-count"),
    pytest.param({"max_num_seqs": -4}, "engine_args.max_num_seqs", id="negative-count"),
    pytest.param({"seed": 10**30}, "engine_args.seed", id="integer-past-64-bits"),
    pytest.param({"max_num_seqs": "9" * 5000}, "engine_args.max_num_seqs", id="five-thousand-digits"),
    pytest.param({"gpu_memory_utilization": "nan"}, "engine_args.gpu_memory_utilization", id="nan"),
    pytest.param({"--model; rm -rf /": "x"}, "engine_args.--model; rm -rf /", id="injection-in-the-name"),
    pytest.param({"model": "/etc"}, "engine_args.model", id="the-model-smuggled-in"),
    pytest.param({"max_num_seqs": "8; rm -rf /"}, "engine_args.max_num_seqs", id="injection-in-a-number"),
    pytest.param({"tokenizer_mode": "--trust-remote-code"}, "engine_args.tokenizer_mode", id="a-flag-as-a-value"),
    pytest.param({"revision": "main\n--trust-remote-code"}, "engine_args.revision", id="a-newline-in-a-value"),
    pytest.param(
        {"speculative_config": '{"method": "ngram"}; rm -rf /'},
        "engine_args.speculative_config",
        id="injection-after-json",
    ),
    pytest.param(
        {"speculative_config": "[" * 5000 + "]" * 5000},
        "engine_args.speculative_config",
        id="json-nested-past-the-recursion-limit",
    ),
    pytest.param(
        {"speculative_config": '{"method": "ngram", "x": "\\u0000"}'},
        "engine_args.speculative_config.x",
        id="nul-inside-json-text",
    ),
    pytest.param({"compilation_config": {"level": "\x00"}}, "engine_args", id="nul-inside-a-json-object"),
]


@pytest.mark.parametrize(("engine_args", "field"), BAD_ENGINE_ARGS)
def test_malformed_engine_args_are_a_400_naming_the_option(
    api_for: Any, erin: Any, model_root: Path, engine_args: Any, field: str
) -> None:
    body, client = backend_fields(model_root, "bad-args", engine_args=engine_args), api_for(erin)
    entries = LedgerEntry.objects.count()
    response = client.post("/api/v1/backends/", body, format="json")
    assert response.status_code == 400, response.data
    assert field in response.data, response.data
    assert not Backend.objects.exists()
    assert LedgerEntry.objects.count() == entries


def test_a_command_line_for_engine_args_is_told_what_is_wanted(api_for: Any, erin: Any, model_root: Path) -> None:
    body = backend_fields(model_root, "cli", engine_args="--max-num-seqs 64")
    response = api_for(erin).post("/api/v1/backends/", body, format="json")
    assert response.status_code == 400
    assert "not a command line" in response.data["engine_args"][0]


# --- regressions: inputs that answered 500 -----------------------------------------------------


def test_a_json_body_nested_past_the_recursion_limit_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="nested too deeply"):
        JSONParser().parse(io.BytesIO(b"[" * 100_000 + b"]" * 100_000))


@pytest.mark.parametrize("path", ["/api/v1/runs/", "/api/v1/backends/", "/api/v1/tickets/", "/api/v1/tokens/"])
def test_every_api_refuses_a_body_nested_past_the_recursion_limit(api_for: Any, erin: Any, path: str) -> None:
    body = "[" * 100_000 + "]" * 100_000
    response = api_for(erin).post(path, body, content_type="application/json")
    assert response.status_code == 400
    assert "nested too deeply" in response.data["detail"]


@pytest.mark.parametrize("model_card", [{"notes": ["ok", "\x00"]}, {"\x00": 1}], ids=["in-a-value", "in-a-key"])
def test_a_nul_character_anywhere_in_json_input_is_refused(
    api_for: Any, erin: Any, model_root: Path, model_card: dict[str, Any]
) -> None:
    # PostgreSQL cannot store "\u0000" in jsonb: this used to be a 500 there (and stored on SQLite).
    fields = backend_fields(model_root, "nul", model_card=model_card)
    response = api_for(erin).post("/api/v1/backends/", fields, format="json")
    assert response.status_code == 400
    assert "NUL" in response.data["model_card"][0]
    assert not Backend.objects.exists()


def test_a_nul_character_in_a_tickets_canary_scope_is_refused(api_for: Any, erin: Any, draft: ReleaseTicket) -> None:
    before = draft.canary_scope
    response = api_for(erin).patch(
        f"/api/v1/tickets/{draft.pk}/", {"canary_scope": {"tenants": ["\x00"]}}, format="json"
    )
    assert response.status_code == 400
    assert response.data["canary_scope"] == ["tenants[0]: must not contain the NUL character (\\u0000)"]
    draft.refresh_from_db()
    assert draft.canary_scope == before


def test_json_input_nested_absurdly_deep_is_refused(api_for: Any, erin: Any, candidate: Backend) -> None:
    profile: Any = 1
    for _ in range(200):
        profile = {"x": profile}
    response = api_for(erin).post(
        "/api/v1/runs/", {"backend": candidate.name, "tasks": ["cs_summary"], "load_profile": profile}, format="json"
    )
    assert response.status_code == 400
    assert "nested more than 32 levels deep" in response.data["load_profile"][0]
    assert not EvaluationRun.objects.exists()


@pytest.mark.parametrize("body", [["kind", "task"], "kind task", 7])
def test_evidence_that_is_not_a_json_object_is_a_400(api_for: Any, erin: Any, candidate: Backend, body: Any) -> None:
    run = run_open_for_import(backend=candidate, tasks=["cs_summary"], actor=erin)
    response = api_for(erin).post(f"/api/v1/runs/{run.pk}/evidence/", json.dumps(body), content_type="application/json")
    assert response.status_code == 400
    assert "Expected a dictionary" in response.data["non_field_errors"][0]


@pytest.mark.parametrize(
    ("document", "problem"),
    [("[" * 5000 + "]" * 5000, "nested too deeply"), ('{"results": {"a\\u0000": 1}}', "NUL")],
    ids=["nested-past-the-recursion-limit", "escaped-nul"],
)
def test_an_evidence_file_the_database_cannot_hold_is_a_400(
    api_for: Any, erin: Any, candidate: Backend, document: str, problem: str
) -> None:
    run = run_open_for_import(backend=candidate, tasks=["cs_summary"], actor=erin)
    upload = io.BytesIO(document.encode())
    upload.name = "results.json"
    body = {"kind": "lm_eval", "task": "cs_summary", "file": upload}
    response = api_for(erin).post(f"/api/v1/runs/{run.pk}/evidence/", body, format="multipart")
    assert response.status_code == 400
    assert problem in response.data["file"][0]
    assert not run.task_results.exists()


@pytest.mark.parametrize("body", ["[1, 2]", '"x"'])
def test_an_idempotent_create_with_a_body_that_is_not_an_object_is_a_400(api_for: Any, erin: Any, body: str) -> None:
    response = api_for(erin).post(
        "/api/v1/tickets/", body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="retry-1"
    )
    assert response.status_code == 400
    assert "Expected a dictionary" in response.data["non_field_errors"][0]
    assert not IdempotencyRecord.objects.exists()


def test_an_idempotent_create_with_an_uploaded_file_is_a_400(api_for: Any, erin: Any, model_root: Path) -> None:
    upload = io.BytesIO(b"weights")
    upload.name = "model.bin"
    fields = {**backend_fields(model_root, "upload"), "file": upload}
    fields = {key: value for key, value in fields.items() if not isinstance(value, dict)}
    response = api_for(erin).post("/api/v1/backends/", fields, format="multipart", HTTP_IDEMPOTENCY_KEY="retry-2")
    assert response.status_code == 400
    assert response.data["file"] == ["unknown field"]
    assert not Backend.objects.exists()
    assert not IdempotencyRecord.objects.exists()


def test_a_route_version_in_unicode_digits_is_a_400(api_for: Any, olga: Any) -> None:
    response = api_for(olga).get("/api/v1/routes/", {"version": "²"})  # isdigit() says yes, int() says no
    assert response.status_code == 400
    assert response.data == {"version": ["must be a version number"]}


def test_a_cache_salt_query_with_a_nul_character_is_a_400(api_for: Any, olga: Any) -> None:
    response = api_for(olga).get("/api/v1/routes/cache-salt/", {"task": "cs_summary\x00"})
    assert response.status_code == 400
    assert "task" in response.data


def test_a_task_type_slug_with_a_nul_character_is_not_found(api_for: Any, olga: Any) -> None:
    assert api_for(olga).get("/api/v1/task-types/cs%00summary/").status_code == 404


def test_an_argo_verdict_on_a_name_with_a_nul_character_is_unknown(api_for: Any, olga: Any) -> None:
    response = api_for(olga).get("/api/v1/integrations/argo/verdict/", {"backend": "kit\x00bf16"})
    assert response.status_code == 200
    assert response.data["verdict"] == "unknown" and response.data["allowed"] is False


def test_a_flagger_webhook_nested_past_the_recursion_limit_is_a_400(client: Any, db: None) -> None:
    body = "[" * 100_000 + "]" * 100_000
    response = client.post("/api/v1/integrations/flagger/confirm-promotion/", body, content_type="application/json")
    assert response.status_code == 400


@pytest.mark.parametrize("moment", ["5087-09-22T19:09:43+21:47", "0001-01-01T00:30:00+05:00"])
def test_a_ledger_search_with_an_extreme_time_zone_offset_does_not_crash(api_for: Any, olga: Any, moment: str) -> None:
    # PostgreSQL refuses offsets past ±15:59 ("time zone displacement out of range"), found by fuzzing.
    response = api_for(olga).get("/api/v1/ledger/", {"since": moment})
    if moment.startswith("0001"):
        assert response.status_code == 400 and "out of range" in response.data["since"][0]
    else:
        assert response.status_code == 200 and response.data["count"] == 0
