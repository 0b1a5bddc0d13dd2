"""Answers for deployment tools: is this backend (on this route) cleared to serve?

* Argo Rollouts ``web`` metric provider: ``GET /api/v1/integrations/argo/verdict/?backend=NAME
  [&route=TASK[@TENANT]]`` → ``{"backend", "verdict", "allowed", ...}``; use
  ``successCondition: result.allowed == true``. Always 200 with a JSON verdict (``unknown`` for a
  backend OptGate has never seen), so the analysis fails on the condition, not on a transport error.
* Flagger ``confirm-promotion`` webhook: ``POST /api/v1/integrations/flagger/confirm-promotion/``
  with Flagger's body (``metadata.backend`` and optionally ``metadata.route``): 200 only when the
  verdict allows the route, 403 otherwise.
* GitHub deployment protection rule: ``POST /api/v1/integrations/github/deployment-protection/``
  receives the ``deployment_protection_rule`` event, checks ``X-Hub-Signature-256`` against
  ``settings.OPTGATE_GITHUB_WEBHOOK_SECRET``, decides from the ticket or backend named in the
  deployment payload, and builds the review GitHub's ``deployment_callback_url`` expects
  (``{environment_name, state: approved|rejected, comment}``). When
  ``settings.OPTGATE_GITHUB_CALLBACK`` is on, the review is recorded and a worker posts it
  (``gates.services.github``, retries on transient failures); the request does no outbound call.

The verdict is the reviewers' signed (binding) one. A proposal nobody has signed yet, a ticket
still evaluating, or one that needs evidence never allows anything.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions, status
from rest_framework.decorators import api_view, permission_classes
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.authentication import key_from_header
from accounts.services import TokenRejected, api_token_authenticate, key_prefix
from gates.selectors.tickets import ticket_get
from gates.selectors.verdicts import backend_verdict
from gates.services.github import github_callback_record

logger = logging.getLogger(__name__)

# --- Argo Rollouts -----------------------------------------------------------------------------


@extend_schema(
    parameters=[OpenApiParameter("backend", str, required=True), OpenApiParameter("route", str, required=False)],
    responses=OpenApiTypes.OBJECT,
)
@api_view(["GET"])
@permission_classes([permissions.IsAuthenticated])
def argo_verdict(request: Request) -> Response:
    """Argo Rollouts ``web`` metric: the verdict on a backend (and route) as JSON; always 200 when asked properly."""
    name = request.query_params.get("backend", "").strip()
    if not name:
        return Response({"backend": ["name the backend: ?backend=NAME"]}, status=status.HTTP_400_BAD_REQUEST)
    route = request.query_params.get("route") or None
    return Response(backend_verdict(backend_name=name, route=route).to_dict())


# --- Flagger -----------------------------------------------------------------------------------


def _flagger_user(request: HttpRequest, body: dict[str, Any]) -> str | None:
    """None when the caller holds a live API token, else why not.

    Flagger cannot send headers on webhooks, so its token may travel in ``metadata.token``.
    """
    key = ""
    try:
        key = key_from_header(request.headers.get("Authorization", "")) or str(
            _mapping(body.get("metadata")).get("token") or ""
        )
        if not key:
            return "authentication required (Authorization: Token … or metadata.token)"
        api_token_authenticate(key)
    except TokenRejected as exc:
        logger.info("flagger webhook: api token rejected (%s): prefix %s", exc, key_prefix(key) or "(none)")
        return str(exc)
    return None


@csrf_exempt
@require_POST
def flagger_confirm_promotion(request: HttpRequest) -> JsonResponse:
    """Flagger ``confirm-promotion`` gate: 200 when the backend is cleared for the route, else 403.

    Body (Flagger's): ``{"name", "namespace", "phase", "metadata": {"backend": NAME, "route": TASK,
    "token": KEY}}``; ``backend`` defaults to the canary's ``name``.
    """
    try:
        body = json.loads(request.body or b"{}")
    except (json.JSONDecodeError, RecursionError):  # RecursionError: nested past the recursion limit
        return JsonResponse({"detail": "the body must be JSON"}, status=400)
    if not isinstance(body, dict):
        return JsonResponse({"detail": "the body must be a JSON object"}, status=400)
    refusal = _flagger_user(request, body)
    if refusal:
        return JsonResponse({"detail": refusal}, status=401)
    metadata = _mapping(body.get("metadata"))
    name = str(metadata.get("backend") or body.get("name") or "").strip()
    if not name:
        return JsonResponse({"detail": "name the backend in metadata.backend"}, status=400)
    verdict = backend_verdict(backend_name=name, route=str(metadata.get("route") or "") or None)
    return JsonResponse(verdict.to_dict(), status=200 if verdict.allowed else 403)


# --- GitHub deployment protection rules --------------------------------------------------------


class SignatureError(Exception):
    """The webhook's HMAC signature is missing or wrong."""


def github_signature_check(*, body: bytes, header: str, secret: str) -> None:
    """Check ``X-Hub-Signature-256`` (``sha256=<hex hmac of the raw body>``) in constant time."""
    if not secret:
        raise SignatureError("OPTGATE_GITHUB_WEBHOOK_SECRET is not configured; refusing every delivery")
    if not header.startswith("sha256="):
        raise SignatureError("missing X-Hub-Signature-256 header")
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, header.strip()):
        raise SignatureError("X-Hub-Signature-256 does not match the body")


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _deployment_payload(event: dict[str, Any]) -> dict[str, Any]:
    deployment = _mapping(event.get("deployment"))
    payload = deployment.get("payload")
    if isinstance(payload, str):
        try:
            payload = json.loads(payload) if payload.strip() else {}
        except json.JSONDecodeError:
            payload = {}
    return payload if isinstance(payload, dict) else {}


def github_review(event: dict[str, Any]) -> dict[str, Any]:
    """The review for a ``deployment_protection_rule`` event: what the callback would POST.

    The deployment's ``payload`` names the OptGate ticket (``optgate_ticket``) or the candidate
    backend (``optgate_backend``), optionally with ``optgate_route``. Anything short of an
    allowing verdict is a rejection, with the reason as the comment.
    """
    environment = str(event.get("environment") or "")
    payload = _deployment_payload(event)
    route = payload.get("optgate_route") or None
    backend_name = payload.get("optgate_backend")
    ticket_id = payload.get("optgate_ticket")
    if ticket_id is not None and not backend_name:
        ticket = ticket_get(pk=int(ticket_id)) if str(ticket_id).isdigit() else None
        if ticket is None:
            return {"environment_name": environment, "state": "rejected", "comment": f"OptGate: no ticket #{ticket_id}"}
        backend_name = ticket.candidate.name
    if not backend_name:
        return {
            "environment_name": environment,
            "state": "rejected",
            "comment": "OptGate: the deployment payload names no optgate_ticket or optgate_backend",
        }
    verdict = backend_verdict(backend_name=str(backend_name), route=str(route) if route else None)
    state = "approved" if verdict.allowed else "rejected"
    return {
        "environment_name": environment,
        "state": state,
        "comment": f"OptGate {verdict.verdict} for {verdict.backend}: {verdict.reason}"[:1000],
    }


def github_callback_queue(url: str, review: dict[str, Any], delivery_id: str) -> int | None:
    """Record the review for a worker to post to GitHub, when callbacks are enabled; its id, or None.

    Off by default (no network from OptGate unless an operator lets it reach GitHub); only https
    callback URLs are accepted. The request never waits on GitHub: ``gates.services.github``.
    """
    if not settings.OPTGATE_GITHUB_CALLBACK:
        return None
    if not url.startswith("https://"):
        logger.warning("not sending a deployment review to a non-https callback %r", url)
        return None
    return github_callback_record(url=url, review=review, delivery_id=delivery_id).pk


@csrf_exempt
@require_POST
def github_deployment_protection(request: HttpRequest) -> JsonResponse:
    """GitHub ``deployment_protection_rule`` webhook: verify, decide, answer with the review."""
    secret = settings.OPTGATE_GITHUB_WEBHOOK_SECRET
    try:
        github_signature_check(body=request.body, header=request.headers.get("X-Hub-Signature-256", ""), secret=secret)
    except SignatureError as exc:
        return JsonResponse({"detail": str(exc)}, status=401 if secret else 503)
    event_name = request.headers.get("X-GitHub-Event", "")
    if event_name == "ping":
        return JsonResponse({"detail": "pong"})
    if event_name != "deployment_protection_rule":
        return JsonResponse({"detail": f"ignored event {event_name or '(none)'}"}, status=202)
    try:
        event = json.loads(request.body)
    except (json.JSONDecodeError, RecursionError):  # RecursionError: nested past the recursion limit
        return JsonResponse({"detail": "the body must be JSON"}, status=400)
    if not isinstance(event, dict) or event.get("action") != "requested":
        return JsonResponse({"detail": "only action=requested is answered"}, status=202)
    review = github_review(event)
    callback = str(event.get("deployment_callback_url") or "")
    delivery = request.headers.get("X-GitHub-Delivery", "")
    queued = github_callback_queue(callback, review, delivery) if callback else None
    return JsonResponse({"review": review, "callback_url": callback, "callback_queued": queued is not None})


# Route table exports for gateways live on the routes API (``/api/v1/routes/export/?format=json|litellm``).
