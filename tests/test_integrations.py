"""Deployment-tool integrations: the Argo Rollouts web metric, Flagger's confirm-promotion webhook,
GitHub deployment protection rules, and the gateway route exports' documented shapes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
import yaml
from django.contrib.auth.models import User
from django.test import Client

from accounts.services import api_token_issue
from backends.models import Backend
from core import queue
from gates.api import integrations
from gates.models import GateDecision, GithubCallback, ReleaseTicket
from gates.selectors.verdicts import backend_verdict
from gates.services import routing
from gates.services import tickets as gate_services
from ledger.models import LedgerEntry
from tests.factories import captured_tasks, store_run, ticket_fields

pytestmark = pytest.mark.django_db

ARGO = "/api/v1/integrations/argo/verdict/"
FLAGGER = "/api/v1/integrations/flagger/confirm-promotion/"
GITHUB = "/api/v1/integrations/github/deployment-protection/"
SECRET = "It's a Secret to Everybody"


def decided(
    owner: User,
    baseline: Backend,
    candidate: Backend,
    *,
    outcome: str,
    status: str,
    signed: str = "",
    tasks: tuple[str, ...] = (),
) -> ReleaseTicket:
    """A ticket with a stored decision in the state the judge and the reviewers left it (test set-up)."""
    ticket = gate_services.ticket_create(owner=owner, **ticket_fields(baseline, candidate))
    base, cand = store_run(baseline, {}), store_run(candidate, {})
    ReleaseTicket.objects.filter(pk=ticket.pk).update(status=status, baseline_run=base, candidate_run=cand)
    GateDecision.objects.create(
        ticket=ticket,
        policy_version="default@1",
        baseline_run=base,
        candidate_run=cand,
        outcome=outcome,
        reasons=[f"the gate says {outcome}"],
        signed_verdict=signed,
        signed_tasks=list(tasks),
    )
    ticket.refresh_from_db()
    return ticket


@pytest.fixture
def approved(erin: User, baseline: Backend, make_backend: Callable[..., Backend]) -> Backend:
    backend = make_backend("cand-approved", engine_args={"max_model_len": 2048, "seed": 1})
    decided(
        erin,
        baseline,
        backend,
        outcome="approve",
        status="approved",
        signed="approve",
        tasks=("knowledge_qa", "compliance_qa"),
    )
    return backend


@pytest.fixture
def restricted(erin: User, baseline: Backend, make_backend: Callable[..., Backend]) -> Backend:
    backend = make_backend("cand-restricted", engine_args={"max_model_len": 2048, "seed": 2})
    decided(
        erin, baseline, backend, outcome="restrict", status="restricted", signed="restrict", tasks=("knowledge_qa",)
    )
    return backend


@pytest.fixture
def rejected(erin: User, baseline: Backend, make_backend: Callable[..., Backend]) -> Backend:
    backend = make_backend("cand-rejected", engine_args={"max_model_len": 2048, "seed": 3})
    decided(erin, baseline, backend, outcome="reject", status="rejected", signed="reject")
    return backend


# --- the verdict itself ------------------------------------------------------------------------


def test_an_approved_backend_is_allowed_on_every_route_it_was_signed_for(approved: Backend) -> None:
    verdict = backend_verdict(backend_name=approved.name)
    assert (verdict.verdict, verdict.allowed) == ("approve", True)
    assert backend_verdict(backend_name=approved.name, route="compliance_qa@tenant-a").allowed
    assert not backend_verdict(backend_name=approved.name, route="cs_summary").allowed


def test_a_restricted_backend_is_allowed_only_on_its_tasks(restricted: Backend) -> None:
    assert not backend_verdict(backend_name=restricted.name).allowed
    assert backend_verdict(backend_name=restricted.name, route="knowledge_qa").allowed
    verdict = backend_verdict(backend_name=restricted.name, route="compliance_qa")
    assert (verdict.verdict, verdict.allowed) == ("restrict", False)
    assert "restricted to knowledge_qa; compliance_qa is not in it" in verdict.reason


def test_an_unsigned_proposal_or_a_pending_ticket_allows_nothing(
    erin: User, baseline: Backend, candidate: Backend, make_backend: Callable[..., Backend]
) -> None:
    decided(erin, baseline, candidate, outcome="approve", status="evaluated")
    verdict = backend_verdict(backend_name=candidate.name)
    assert (verdict.verdict, verdict.allowed, verdict.proposed_outcome) == ("pending", False, "approve")
    other = make_backend("cand-inconclusive", engine_args={"max_model_len": 2048, "seed": 4})
    decided(erin, baseline, other, outcome="needs_evidence", status="needs_evidence")
    assert backend_verdict(backend_name=other.name).verdict == "needs_evidence"
    assert backend_verdict(backend_name=baseline.name).verdict == "ungated"


def test_a_rolled_back_ticket_withdraws_its_approval(approved: Backend) -> None:
    ReleaseTicket.objects.filter(candidate=approved).update(status="rolled_back")
    verdict = backend_verdict(backend_name=approved.name, route="knowledge_qa")
    assert (verdict.verdict, verdict.allowed) == ("rolled_back", False)


# --- Argo Rollouts -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "route", "verdict", "allowed"),
    [
        ("cand-approved", None, "approve", True),
        ("cand-restricted", None, "restrict", False),
        ("cand-restricted", "knowledge_qa", "restrict", True),
        ("cand-restricted", "compliance_qa", "restrict", False),
        ("cand-rejected", None, "reject", False),
        ("no-such-backend", None, "unknown", False),
    ],
)
def test_argo_web_metric_reports_the_verdict(
    api_for: Any,
    olga: User,
    approved: Backend,
    restricted: Backend,
    rejected: Backend,
    backend: str,
    route: str | None,
    verdict: str,
    allowed: bool,
) -> None:
    params = {"backend": backend, **({"route": route} if route else {})}
    response = api_for(olga).get(ARGO, params)
    assert response.status_code == 200
    body = response.json()
    assert (body["backend"], body["verdict"], body["allowed"]) == (backend, verdict, allowed)
    assert body["reason"]


def test_argo_needs_a_token_and_a_backend(api_for: Any, olga: User) -> None:
    assert api_for(None).get(ARGO, {"backend": "x"}).status_code in (401, 403)
    missing = api_for(olga).get(ARGO)
    assert missing.status_code == 400 and "backend" in missing.json()


# --- Flagger ---------------------------------------------------------------------------------


def flagger_post(client: Client, metadata: dict[str, Any], **headers: str) -> Any:
    body = {"name": "llm-gateway", "namespace": "serving", "phase": "Promoting", "metadata": metadata}
    return client.post(FLAGGER, data=json.dumps(body), content_type="application/json", headers=headers)


@pytest.mark.parametrize(
    ("backend", "route", "status"),
    [
        ("cand-approved", "knowledge_qa", 200),
        ("cand-approved", "", 200),
        ("cand-restricted", "knowledge_qa", 200),
        ("cand-restricted", "compliance_qa", 403),
        ("cand-restricted", "", 403),
        ("cand-rejected", "knowledge_qa", 403),
        ("no-such-backend", "knowledge_qa", 403),
    ],
)
def test_flagger_confirms_promotion_only_when_the_route_is_approved(
    olga: User, approved: Backend, restricted: Backend, rejected: Backend, backend: str, route: str, status: int
) -> None:
    token = api_token_issue(actor=None, user=olga).key
    response = flagger_post(Client(), {"backend": backend, "route": route}, Authorization=f"Token {token}")
    assert response.status_code == status
    assert response.json()["backend"] == backend


def test_flagger_takes_the_token_from_metadata_and_refuses_without_one(olga: User, approved: Backend) -> None:
    token = api_token_issue(actor=None, user=olga).key
    assert flagger_post(Client(), {"backend": approved.name, "token": token}).status_code == 200
    assert flagger_post(Client(), {"backend": approved.name}).status_code == 401
    assert flagger_post(Client(), {"backend": approved.name, "token": "wrong"}).status_code == 401
    bad = Client().post(FLAGGER, data="{not json", content_type="application/json")
    assert bad.status_code == 400


# --- GitHub deployment protection rules -------------------------------------------------------


def github_event(payload: dict[str, Any] | str, *, action: str = "requested") -> dict[str, Any]:
    return {
        "action": action,
        "environment": "production",
        "event": "pull_request",
        "deployment_callback_url": "https://api.github.com/repos/acme/llm/actions/runs/42/deployment_protection_rule",
        "deployment": {"id": 1, "ref": "main", "payload": payload},
        "repository": {"full_name": "acme/llm"},
    }


def deliver(
    event: dict[str, Any] | str,
    *,
    secret: str = SECRET,
    kind: str = "deployment_protection_rule",
    signature: str | None = None,
) -> Any:
    body = (event if isinstance(event, str) else json.dumps(event)).encode()
    digest = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return Client().post(
        GITHUB,
        data=body,
        content_type="application/json",
        headers={"X-GitHub-Event": kind, "X-Hub-Signature-256": signature or digest},
    )


@pytest.fixture
def github_secret(settings: Any) -> str:
    settings.OPTGATE_GITHUB_WEBHOOK_SECRET = SECRET
    settings.OPTGATE_GITHUB_CALLBACK = False
    return SECRET


def test_github_approves_a_deployment_of_an_approved_ticket(github_secret: str, approved: Backend) -> None:
    ticket = ReleaseTicket.objects.get(candidate=approved)
    response = deliver(github_event({"optgate_ticket": ticket.pk}))
    assert response.status_code == 200
    body = response.json()
    assert body["review"]["state"] == "approved" and body["review"]["environment_name"] == "production"
    assert body["review"]["comment"].startswith("OptGate approve for cand-approved")
    assert body["callback_queued"] is False


@pytest.mark.parametrize(
    ("payload", "comment"),
    [
        ({"optgate_backend": "cand-rejected"}, "OptGate reject for cand-rejected"),
        (json.dumps({"optgate_backend": "cand-restricted", "optgate_route": "compliance_qa"}), "OptGate restrict"),
        ({"optgate_backend": "no-such-backend"}, "OptGate unknown"),
        ({"optgate_ticket": 999999}, "OptGate: no ticket #999999"),
        ({}, "names no optgate_ticket or optgate_backend"),
    ],
)
def test_github_rejects_anything_short_of_an_allowing_verdict(
    github_secret: str, restricted: Backend, rejected: Backend, payload: Any, comment: str
) -> None:
    review = deliver(github_event(payload)).json()["review"]
    assert review["state"] == "rejected"
    assert comment in review["comment"]


def test_github_refuses_a_bad_signature_and_an_unconfigured_secret(settings: Any, approved: Backend) -> None:
    event = github_event({"optgate_backend": approved.name})
    settings.OPTGATE_GITHUB_WEBHOOK_SECRET = ""
    assert deliver(event).status_code == 503
    settings.OPTGATE_GITHUB_WEBHOOK_SECRET = SECRET
    assert deliver(event, secret="another secret").status_code == 401
    assert deliver(event, signature="sha1=abc").status_code == 401
    assert deliver(event).status_code == 200


def test_github_answers_pings_and_ignores_other_events(github_secret: str) -> None:
    assert deliver("{}", kind="ping").json() == {"detail": "pong"}
    assert deliver("{}", kind="push").status_code == 202
    assert deliver(github_event({}, action="completed")).status_code == 202


def test_the_signature_check_is_the_documented_hmac() -> None:
    # GitHub's documented example: secret "It's a Secret to Everybody", body "Hello, World!".
    documented = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    integrations.github_signature_check(body=b"Hello, World!", header=documented, secret=SECRET)
    with pytest.raises(integrations.SignatureError):
        integrations.github_signature_check(body=b"Hello, World?", header=documented, secret=SECRET)


def test_github_queues_the_review_for_a_worker_and_calls_nothing_in_the_request(
    github_secret: str,
    settings: Any,
    approved: Backend,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    def no_outbound_call(url: str, payload: dict[str, Any], *, timeout_s: float) -> int:
        raise AssertionError("the webhook request must not call GitHub")

    monkeypatch.setattr("core.http.post_json", no_outbound_call)
    settings.OPTGATE_GITHUB_CALLBACK = True
    with captured_tasks() as sent, django_capture_on_commit_callbacks(execute=True):
        body = deliver(github_event({"optgate_backend": approved.name})).json()
    assert body["callback_queued"] is True
    callback = GithubCallback.objects.get()
    assert (callback.url, callback.review) == (github_event({})["deployment_callback_url"], body["review"])
    assert not callback.attempts.exists()
    sent[queue.DELIVER_GITHUB_CALLBACK].assert_called_once_with(callback.pk)
    entry = LedgerEntry.objects.get(kind="integration.github_review")
    assert entry.payload["review"]["state"] == "approved"


def test_github_callbacks_go_only_to_https(github_secret: str, settings: Any, approved: Backend) -> None:
    settings.OPTGATE_GITHUB_CALLBACK = True
    event = {**github_event({"optgate_backend": approved.name}), "deployment_callback_url": "http://example.com/cb"}
    assert deliver(event).json()["callback_queued"] is False
    assert not GithubCallback.objects.exists()


# --- route exports for gateways -----------------------------------------------------------------

# LiteLLM's proxy config.yaml, as documented (docs.litellm.ai "Proxy Config.yaml"): a model_list of
# {model_name, litellm_params{model "<provider>/<name>", api_base, api_key}, model_info}, and
# router_settings with one of the documented routing strategies. litellm itself is not a
# dependency (it is a large package); this is the documented shape.
LITELLM_CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["model_list"],
    "properties": {
        "model_list": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["model_name", "litellm_params"],
                "properties": {
                    "model_name": {"type": "string", "minLength": 1},
                    "litellm_params": {
                        "type": "object",
                        "required": ["model"],
                        "properties": {
                            "model": {"type": "string", "pattern": "^[a-z_]+/.+"},
                            "api_base": {"type": "string", "pattern": "^https?://"},
                            "api_key": {"type": "string"},
                        },
                    },
                    "model_info": {"type": "object", "properties": {"id": {"type": "string"}}},
                },
            },
        },
        "router_settings": {
            "type": "object",
            "properties": {
                "routing_strategy": {
                    "enum": [
                        "simple-shuffle",
                        "least-busy",
                        "usage-based-routing",
                        "latency-based-routing",
                        "cost-based-routing",
                        "usage-based-routing-v2",
                    ],
                },
            },
        },
    },
}


def test_the_litellm_export_has_litellms_documented_config_shape(
    api_for: Any, ada: User, baseline: Backend, approved: Backend
) -> None:
    routing.routes_set(task="cs_summary", backend=baseline, actor=ada, reason="initial fleet")
    routing.routes_set(task="knowledge_qa", backend=approved, actor=ada, reason="approved", tenant="tenant-a")
    response = api_for(ada).get("/api/v1/routes/export/", {"format": "litellm"})
    assert response.status_code == 200
    config = yaml.safe_load(yaml.safe_dump(response.json()))  # what the gateway reads back from YAML
    jsonschema.validate(config, LITELLM_CONFIG_SCHEMA)
    names = {entry["model_name"]: entry for entry in config["model_list"]}
    assert set(names) == {"cs_summary", "knowledge_qa@tenant-a"}
    assert names["knowledge_qa@tenant-a"]["litellm_params"]["model"] == "openai/cand-approved"
    assert names["cs_summary"]["litellm_params"]["api_key"].startswith("os.environ/")
    ids = [entry["model_info"]["id"] for entry in config["model_list"]]
    assert len(set(ids)) == len(ids)


def test_the_json_export_names_each_route_with_its_backend(api_for: Any, ada: User, baseline: Backend) -> None:
    routing.routes_set(task="cs_summary", backend=baseline, actor=ada, reason="initial fleet")
    exported = api_for(ada).get("/api/v1/routes/export/", {"format": "json"}).json()
    assert exported["format"] == "optgate.routes/v1" and exported["version"] == 1
    (route,) = exported["routes"]
    assert (route["name"], route["backend"]["name"], route["backend"]["fingerprint"]) == (
        "cs_summary",
        baseline.name,
        baseline.fingerprint,
    )
