"""Registering a backend answers fast: the option catalogue is checked in the request, vLLM's own
parser later on a worker, whose verdict the backend then shows."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from backends import services
from backends.engine_args import EngineArgsError
from backends.models import ArgsCheckStatus, EngineArgsCheck
from core import queue
from ledger.models import LedgerEntry
from tests.factories import backend_fields
from tests.ui_helpers import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def vllm_check_on(settings: Any) -> None:
    settings.OPTGATE_VALIDATE_WITH_VLLM = True


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    published: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr("core.queue.enqueue", lambda name, *args, task_id=None: published.append((name, args)))
    return published


@pytest.fixture
def parser(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Stands in for vLLM's parser in its child process: records what it was asked, refuses max_num_seqs=3."""
    asked: list[dict[str, Any]] = []

    def check(arg_sets: list[dict[str, Any]]) -> list[dict[str, str]]:
        asked.extend(arg_sets)
        return [{"max_num_seqs": "must be positive"} if a.get("max_num_seqs") == 3 else {} for a in arg_sets]

    monkeypatch.setattr("backends.services.check_with_vllm_subprocess", check)
    return asked


def test_registering_does_not_run_vllms_parser_in_the_request(
    vllm_check_on: None,
    sent: list[Any],
    parser: list[Any],
    erin: Any,
    api_for: Any,
    model_root: Path,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = api_for(erin).post("/api/v1/backends/", backend_fields(model_root, "fast"), format="json")
    assert response.status_code == 201, response.content
    assert parser == []  # vLLM's parser was not asked during the request
    assert response.json()["engine_args_check"] == {"status": "pending", "errors": {}, "checked_at": None}
    assert sent == [(queue.CHECK_BACKEND_ARGS, (response.json()["id"],))]


def test_the_catalogue_check_still_answers_in_the_request(
    vllm_check_on: None, sent: list[Any], parser: list[Any], erin: Any, api_for: Any, model_root: Path
) -> None:
    fields = backend_fields(model_root, "typo", engine_args={"max_num_seq": 8})
    response = api_for(erin).post("/api/v1/backends/", fields, format="json")
    assert response.status_code == 400
    assert "engine_args.max_num_seq" in response.content.decode()
    assert sent == [] and not EngineArgsCheck.objects.exists()


def test_the_worker_records_vllms_verdict_once(
    vllm_check_on: None, sent: list[Any], parser: list[Any], erin: Any, model_root: Path
) -> None:
    bad, _ = services.backend_register(
        actor=erin, **backend_fields(model_root, "three-seqs", engine_args={"max_num_seqs": 3})
    )
    good, _ = services.backend_register(actor=erin, **backend_fields(model_root, "fine"))
    assert services.backend_args_check(backend_id=bad.pk).status == ArgsCheckStatus.FAILED  # type: ignore[union-attr]
    assert services.backend_args_check(backend_id=good.pk).status == ArgsCheckStatus.PASSED  # type: ignore[union-attr]
    check = EngineArgsCheck.objects.get(backend=bad)
    assert check.errors == {"max_num_seqs": "must be positive"} and check.checked_at is not None
    # A redelivered message is harmless: no second parse, no second ledger entry.
    services.backend_args_check(backend_id=bad.pk)
    assert len(parser) == 2
    entries = LedgerEntry.objects.filter(kind="backend.args_checked", subject_id=str(bad.pk))
    assert [e.payload["status"] for e in entries] == ["failed"]


def test_a_check_that_cannot_run_is_an_error_not_a_verdict(
    vllm_check_on: None, sent: list[Any], erin: Any, model_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def timeout(arg_sets: list[dict[str, Any]]) -> list[dict[str, str]]:
        raise EngineArgsError({"engine_args": "vLLM's argument check did not finish in 180 s"})

    monkeypatch.setattr("backends.services.check_with_vllm_subprocess", timeout)
    backend, _ = services.backend_register(actor=erin, **backend_fields(model_root, "slow"))
    check = services.backend_args_check(backend_id=backend.pk)
    assert check is not None and check.status == ArgsCheckStatus.ERROR
    assert "did not finish" in check.errors["engine_args"]


def test_the_backend_page_and_api_show_the_verdict(
    vllm_check_on: None, sent: list[Any], parser: list[Any], erin: Any, api_for: Any, model_root: Path
) -> None:
    bad, _ = services.backend_register(
        actor=erin, **backend_fields(model_root, "three-seqs", engine_args={"max_num_seqs": 3})
    )
    services.backend_args_check(backend_id=bad.pk)
    html = client_for(erin).get(f"/backends/{bad.name}/").content.decode()
    assert "vLLM&#x27;s own parser" in html or "vLLM's own parser" in html
    assert ">failed</span>" in html and "must be positive" in html
    shown = api_for(erin).get(f"/api/v1/backends/{bad.pk}/").json()["engine_args_check"]
    assert shown["status"] == "failed" and shown["errors"] == {"max_num_seqs": "must be positive"}


def test_without_vllm_there_is_no_check(sent: list[Any], erin: Any, api_for: Any, model_root: Path) -> None:
    response = api_for(erin).post("/api/v1/backends/", backend_fields(model_root, "plain"), format="json")
    assert response.status_code == 201 and response.json()["engine_args_check"] is None
    assert sent == []


def test_the_worker_task_runs_the_check(
    vllm_check_on: None, sent: list[Any], parser: list[Any], erin: Any, model_root: Path
) -> None:
    from workers.tasks import check_backend_args

    backend, _ = services.backend_register(actor=erin, **backend_fields(model_root, "queued"))
    assert check_backend_args.name == queue.CHECK_BACKEND_ARGS
    check_backend_args(backend.pk)
    assert EngineArgsCheck.objects.get(backend=backend).status == ArgsCheckStatus.PASSED


def test_the_sweeper_sends_a_lost_check_again(
    vllm_check_on: None, sent: list[Any], parser: list[Any], erin: Any, model_root: Path
) -> None:
    from workers import sweeper

    lost, _ = services.backend_register(actor=erin, **backend_fields(model_root, "lost"))
    done, _ = services.backend_register(
        actor=erin, **backend_fields(model_root, "done", engine_args={"max_model_len": 1024})
    )
    services.backend_args_check(backend_id=done.pk)
    assert sweeper.sweep(now=timezone.now()).args_checks == []  # still within its grace
    later = timezone.now() + sweeper.ARGS_CHECK_GRACE + timedelta(seconds=1)
    assert sweeper.sweep(now=later).args_checks == [lost.pk]
    assert (queue.CHECK_BACKEND_ARGS, (lost.pk,)) in sent
