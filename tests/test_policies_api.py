"""The policies API: list, detail, validation with path and problem, and a dry run that stores nothing."""

from __future__ import annotations

from typing import Any

import pytest

from gates.models import GateDecision, TicketStatus
from ledger.models import LedgerEntry
from tests.factories import scenario

pytestmark = pytest.mark.django_db

BROKEN = """
name: strict
version: 2
tasks:
  cs_summary:
    guardrails:
      - metric: pass_rate
        margin: 1.5
"""

LENIENT = """
name: lenient
version: 1
tasks:
  cs_summary:
    min_samples: {quality: 50, latency: 50}
    guardrails: [{metric: pass_rate, margin: 0.05}]
  knowledge_qa:
    min_samples: {quality: 50, latency: 50}
    guardrails: [{metric: pass_rate, margin: 0.2}]
"""


def test_it_lists_the_policies_in_the_repository(api_for: Any, olga: Any) -> None:
    response = api_for(olga).get("/api/v1/policies/")
    assert response.status_code == 200
    default = next(p for p in response.data if p["name"] == "default")
    assert default["version_label"] == "default@7" and default["dry_run"] is False
    assert "dataagent_nl2sql" in default["tasks"]
    assert api_for(None).get("/api/v1/policies/").status_code == 401


def test_it_shows_one_policy_by_name_or_version_label(api_for: Any, olga: Any) -> None:
    for key in ("default", "default@7"):
        response = api_for(olga).get(f"/api/v1/policies/{key}/")
        assert response.status_code == 200
        assert response.data["version_label"] == "default@7"
        assert response.data["tasks"]["dataagent_nl2sql"]["guardrails"][0]["critical"] is True
    assert api_for(olga).get("/api/v1/policies/nope/").status_code == 404


def test_validate_accepts_a_good_policy(api_for: Any, erin: Any) -> None:
    response = api_for(erin).post("/api/v1/policies/validate/", {"text": LENIENT}, format="json")
    assert response.status_code == 200
    assert response.data == {
        "valid": True,
        "policy": {
            "name": "lenient",
            "version": 1,
            "version_label": "lenient@1",
            "dry_run": False,
            "description": "",
            "tasks": ["cs_summary", "knowledge_qa"],
        },
    }


def test_validate_names_the_path_and_the_problem(api_for: Any, erin: Any) -> None:
    response = api_for(erin).post("/api/v1/policies/validate/", {"text": BROKEN}, format="json")
    assert response.status_code == 400
    assert {"path": "tasks.cs_summary.guardrails[0].margin", "problem": "must be a number between 0 and 1"} in (
        response.data["errors"]
    )
    bad_yaml = api_for(erin).post("/api/v1/policies/validate/", {"text": "tasks: [unclosed"}, format="json")
    assert bad_yaml.status_code == 400 and "not valid YAML" in bad_yaml.data["text"][0]
    typo = api_for(erin).post("/api/v1/policies/validate/", {"txt": LENIENT}, format="json")
    assert typo.status_code == 400 and "txt" in typo.data


def test_a_dry_run_judges_stored_runs_without_storing_or_moving(
    api_for: Any, erin: Any, rita: Any, baseline: Any, candidate: Any
) -> None:
    ticket = scenario("restrict", erin, baseline, candidate)
    reviewer = api_for(rita)
    entries = LedgerEntry.objects.count()
    response = reviewer.post("/api/v1/policies/default/dry-run/", {"ticket": ticket.pk}, format="json")
    assert response.status_code == 200, response.data
    assert response.data["outcome"] == "restrict" and response.data["stored"] is False
    assert response.data["policy_version"] == "default@7"
    assert response.data["proposed_routes"] == {"cs_summary": "candidate", "knowledge_qa": "baseline"}
    assert (response.data["baseline_run"], response.data["candidate_run"]) == (
        ticket.baseline_run_id,
        ticket.candidate_run_id,
    )
    # A more lenient draft policy (20-point margin on knowledge_qa) would let both tasks through.
    lenient = reviewer.post("/api/v1/policies/default/dry-run/", {"ticket": ticket.pk, "text": LENIENT}, format="json")
    assert lenient.status_code == 200 and lenient.data["policy_version"] == "lenient@1"
    assert lenient.data["verdicts"]["knowledge_qa"]["status"] != "fail"
    assert not GateDecision.objects.exists()
    assert LedgerEntry.objects.count() == entries
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.EVALUATING


def test_a_dry_run_reports_bad_policy_text_and_missing_runs(api_for: Any, erin: Any, draft: Any) -> None:
    broken = api_for(erin).post(
        "/api/v1/policies/default/dry-run/", {"ticket": draft.pk, "text": BROKEN}, format="json"
    )
    assert broken.status_code == 400 and broken.data["errors"][0]["path"].startswith("tasks.cs_summary")
    no_runs = api_for(erin).post("/api/v1/policies/default/dry-run/", {"ticket": draft.pk}, format="json")
    assert no_runs.status_code == 409 and "no baseline run" in no_runs.data["detail"]
