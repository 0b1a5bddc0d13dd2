"""Write path of the backends app: registering a serving configuration, and checking its engine
arguments with vLLM's own parser off the request path."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from backends.engine_args import EngineArgsError, ensure_model_allowed, validate_engine_args
from backends.models import ArgsCheckStatus, Backend, EngineArgsCheck
from backends.vllm_check import check_with_vllm_subprocess
from core import queue
from core.canonical import canonical_json, json_problem
from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import ADMIN, ENGINEER, Actor, has_role, person
from ledger.services import ledger_append


def _model_path_checked(model_path: str) -> str:
    try:
        return str(ensure_model_allowed(model_path, list(settings.OPTGATE_MODEL_ROOTS)))
    except ValueError as exc:
        raise InvalidInput({"model_path": str(exc)}) from None


def _engine_args_checked(engine_args: dict[str, Any]) -> dict[str, Any]:
    """The cheap, synchronous check against the option catalogue; vLLM's own parser runs later."""
    try:
        normalised = validate_engine_args(engine_args)
    except EngineArgsError as exc:
        raise InvalidInput({f"engine_args.{key}": message for key, message in exc.errors.items()}) from None
    # JSON-valued options (speculative_config, ...) may arrive as strings and only now be parsed.
    _require_storable("engine_args", normalised)
    return normalised


def _require_storable(field: str, value: Any) -> None:
    """Refuse JSON the database cannot store (NUL characters, PostgreSQL) or absurd nesting."""
    problem = json_problem(value)
    if problem:
        path, message = problem
        raise InvalidInput({f"{field}.{path}" if path else field: message})


def backend_register(
    *,
    actor: Actor,
    name: str,
    model_id: str,
    model_path: str,
    model_revision: str,
    engine_version: str,
    hardware_class: str,
    engine: str = "vllm",
    engine_args: dict[str, Any] | None = None,
    sampling_params: dict[str, Any] | None = None,
    prefix_cache_key_recipe: dict[str, Any] | None = None,
    gpu_pool: str = "",
    model_card: dict[str, Any] | None = None,
) -> tuple[Backend, bool]:
    """Register an immutable serving configuration; returns ``(backend, created)``.

    Registering the same configuration under the same name again returns the existing backend
    (so CI can re-run a pipeline); the same configuration under another name, or a taken name
    with another configuration, is a conflict: a changed configuration needs a new backend.
    Engineers and admins register backends (``actor=None`` is an operator's command on the server).
    """
    if actor is not None and not has_role(actor, ENGINEER, ADMIN):
        raise NotAllowed("only engineers and admins register backends")
    for field, value in (
        ("sampling_params", sampling_params),
        ("prefix_cache_key_recipe", prefix_cache_key_recipe),
        ("model_card", model_card),
    ):
        _require_storable(field, value or {})
    backend = Backend(
        name=name,
        model_id=model_id,
        model_path=_model_path_checked(model_path),
        model_revision=model_revision,
        engine=engine,
        engine_version=engine_version,
        engine_args=_engine_args_checked(engine_args or {}),
        sampling_params=json.loads(canonical_json(sampling_params or {})),
        prefix_cache_key_recipe=json.loads(canonical_json(prefix_cache_key_recipe or {})),
        gpu_pool=gpu_pool,
        hardware_class=hardware_class,
        model_card=json.loads(canonical_json(model_card or {})),
        created_by=person(actor),
    )
    backend.fingerprint = backend.compute_fingerprint()

    existing = Backend.objects.filter(fingerprint=backend.fingerprint).first()
    if existing is not None:
        if existing.name == name:
            return existing, False
        raise DomainError(f"this serving configuration is already registered as backend {existing.name!r}")
    if Backend.objects.filter(name=name).exists():
        raise DomainError(
            f"backend {name!r} already exists with another configuration; a changed configuration needs a new name"
        )
    try:
        with transaction.atomic(durable=True):
            backend.save()
            if settings.OPTGATE_VALIDATE_WITH_VLLM:
                # vLLM's parser takes seconds to import: a worker runs it once this commits.
                EngineArgsCheck.objects.create(backend=backend)
                backend_id = backend.pk
                transaction.on_commit(lambda: queue.enqueue(queue.CHECK_BACKEND_ARGS, backend_id))
            ledger_append(
                kind="backend.registered",
                subject_type="backend",
                subject_id=backend.pk,
                subject_name=backend.name,
                actor=actor,
                payload={
                    "fingerprint": backend.fingerprint,
                    "config": backend.serving_config(),
                    "model_card": backend.model_card,
                },
            )
    except IntegrityError:
        # A concurrent registration won the race for this name or fingerprint.
        raise DomainError(f"backend {name!r} or its configuration was registered concurrently") from None
    return backend, True


def backend_args_check(*, backend_id: int) -> EngineArgsCheck | None:
    """Run vLLM's own parser on a registered backend's engine arguments and record its verdict.

    For the worker: returns quietly (the row as it is) when there is no pending check, so a
    redelivered message is harmless. The verdict is written once, by compare-and-swap from
    ``pending``, with its ledger entry in the same transaction.
    """
    check = EngineArgsCheck.objects.select_related("backend").filter(backend_id=backend_id).first()
    if check is None or check.status != ArgsCheckStatus.PENDING:
        return check
    try:
        (errors,) = check_with_vllm_subprocess([check.backend.engine_args])
        status = ArgsCheckStatus.FAILED if errors else ArgsCheckStatus.PASSED
    except EngineArgsError as exc:  # the check did not run to a verdict (timeout, crash)
        errors, status = dict(exc.errors), ArgsCheckStatus.ERROR
    with transaction.atomic(durable=True):
        moved = EngineArgsCheck.objects.filter(pk=check.pk, status=ArgsCheckStatus.PENDING).update(
            status=status, errors=errors, checked_at=timezone.now()
        )
        if moved:
            ledger_append(
                kind="backend.args_checked",
                subject_type="backend",
                subject_id=check.backend_id,
                subject_name=check.backend.name,
                actor=None,
                payload={"status": status, "errors": errors},
            )
    check.refresh_from_db()
    return check
