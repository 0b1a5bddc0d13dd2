"""Backends: fingerprints, immutability, registration rules."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from backends import services
from backends.models import Backend
from core.errors import DomainError, InvalidInput, NotAllowed
from ledger.models import LedgerEntry
from tests.factories import backend_fields

pytestmark = pytest.mark.django_db


def _register(erin: Any, fields: dict[str, Any]) -> Backend:
    backend, _ = services.backend_register(actor=erin, **fields)
    return backend


def test_it_fingerprints_the_same_config_identically_in_any_key_order(erin: Any, model_root: Path) -> None:
    fields = backend_fields(
        model_root,
        "a",
        engine_args={"seed": 0, "max_model_len": 2048, "max_num_seqs": 8},
        sampling_params={"top_p": 1.0, "temperature": 0.0},
    )
    reordered = dict(reversed(list(fields.items())))
    reordered["engine_args"] = dict(reversed(list(fields["engine_args"].items())))
    reordered["sampling_params"] = dict(reversed(list(fields["sampling_params"].items())))

    one = Backend(**{k: v for k, v in fields.items()})
    two = Backend(**{k: v for k, v in reordered.items()})

    assert one.compute_fingerprint() == two.compute_fingerprint()
    assert len(one.compute_fingerprint()) == 64


def test_it_gives_any_changed_field_a_new_fingerprint(erin: Any, model_root: Path) -> None:
    base = Backend(**backend_fields(model_root, "a"))
    variants = {
        "engine_args": {"max_model_len": 2048, "seed": 1},
        "model_revision": "sha256:" + "cd" * 32,
        "engine_version": "0.33.0",
        "hardware_class": "h200",
        "sampling_params": {"temperature": 0.7, "max_tokens": 128},
        "prefix_cache_key_recipe": {"tenant": True},
        "gpu_pool": "pool-b",
    }
    fingerprints = {base.compute_fingerprint()}
    for field, value in variants.items():
        changed = Backend(**backend_fields(model_root, "a", **{field: value}))
        fingerprints.add(changed.compute_fingerprint())
    assert len(fingerprints) == len(variants) + 1


def test_it_registers_a_backend_with_its_ledger_entry(erin: Any, model_root: Path) -> None:
    backend, created = services.backend_register(actor=erin, **backend_fields(model_root, "kit-bf16"))

    assert created
    assert backend.fingerprint == backend.compute_fingerprint()
    entry = LedgerEntry.objects.get(kind="backend.registered", subject_id=str(backend.pk))
    assert entry.actor_name == "erin"
    assert entry.payload["fingerprint"] == backend.fingerprint
    assert entry.payload["config"]["engine_args"] == {"max_model_len": 2048, "seed": 0}


def test_it_returns_the_existing_backend_when_the_same_config_is_registered_again(erin: Any, model_root: Path) -> None:
    first = _register(erin, backend_fields(model_root, "kit-bf16"))
    again, created = services.backend_register(actor=erin, **backend_fields(model_root, "kit-bf16"))

    assert not created
    assert again.pk == first.pk
    assert LedgerEntry.objects.filter(kind="backend.registered").count() == 1


def test_it_refuses_the_same_config_under_another_name(erin: Any, model_root: Path) -> None:
    _register(erin, backend_fields(model_root, "kit-bf16"))
    with pytest.raises(DomainError, match="already registered as backend 'kit-bf16'"):
        _register(erin, backend_fields(model_root, "kit-copy"))


def test_it_refuses_a_taken_name_with_a_changed_config(erin: Any, model_root: Path) -> None:
    _register(erin, backend_fields(model_root, "kit-bf16"))
    with pytest.raises(DomainError, match="needs a new name"):
        _register(erin, backend_fields(model_root, "kit-bf16", engine_args={"max_model_len": 1024}))
    assert Backend.objects.count() == 1


def test_it_never_edits_a_registered_backend(erin: Any, model_root: Path) -> None:
    backend = _register(erin, backend_fields(model_root, "kit-bf16"))
    backend.engine_args = {"max_model_len": 4096}
    with pytest.raises(DomainError, match="immutable"):
        backend.save()
    with pytest.raises(DomainError, match="immutable"):
        Backend.objects.filter(pk=backend.pk).update(engine_version="9")
    with pytest.raises(DomainError, match="immutable"):
        backend.delete()
    backend.refresh_from_db()
    assert backend.engine_args == {"max_model_len": 2048, "seed": 0}


def test_it_refuses_a_model_path_outside_the_allowed_roots(erin: Any, model_root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for path in (str(outside), str(model_root / ".." / "elsewhere"), "/etc"):
        with pytest.raises(InvalidInput) as caught:
            _register(erin, backend_fields(model_root, "escape", model_path=path))
        assert "model_path" in caught.value.errors
    assert not Backend.objects.exists()


def test_it_refuses_a_symlink_that_escapes_the_allowed_roots(erin: Any, model_root: Path, tmp_path: Path) -> None:
    target = tmp_path / "secret-weights"
    target.mkdir()
    link = model_root / "innocent"
    if not link.exists():
        os.symlink(target, link)
    with pytest.raises(InvalidInput) as caught:
        _register(erin, backend_fields(model_root, "linked", model_path=str(link)))
    assert "model_path" in caught.value.errors


@pytest.mark.parametrize(
    ("engine_args", "field"),
    [
        ({"no_such_flag": 1}, "engine_args.no_such_flag"),
        ({"max_model_len": "long"}, "engine_args.max_model_len"),
        ({"gpu_memory_utilization": 1.7}, "engine_args.gpu_memory_utilization"),
        ({"kv_cache_dtype": "fp3"}, "engine_args.kv_cache_dtype"),
        ({"disable_log_stats": True}, "engine_args.disable_log_stats"),
    ],
)
def test_it_refuses_malformed_engine_arguments_naming_the_option(
    erin: Any, model_root: Path, engine_args: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        _register(erin, backend_fields(model_root, "bad-args", engine_args=engine_args))
    assert field in caught.value.errors, caught.value.errors
    assert not Backend.objects.exists()
    assert not LedgerEntry.objects.exists()


def test_only_engineers_and_admins_register_backends(
    rita: Any, olga: Any, ada: Any, erin: Any, model_root: Path
) -> None:
    for person in (rita, olga):
        with pytest.raises(NotAllowed, match="only engineers and admins register backends"):
            services.backend_register(actor=person, **backend_fields(model_root, f"by-{person.username}"))
    assert not Backend.objects.exists() and not LedgerEntry.objects.exists()
    by_admin, created = services.backend_register(actor=ada, **backend_fields(model_root, "by-ada"))
    assert created and by_admin.created_by == ada
    by_operator, created = services.backend_register(
        actor=None, **backend_fields(model_root, "by-operator", model_revision="r2")
    )
    assert created and by_operator.created_by is None
