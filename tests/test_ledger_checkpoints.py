"""Signed checkpoints anchor the ledger outside the database: a consistently rewritten chain fails."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction

from ledger import checkpoints
from ledger.models import LedgerEntry, LedgerHead
from ledger.selectors import ledger_verify
from ledger.services import ledger_append
from workers import tasks
from workers.schedules import SCHEDULES

pytestmark = pytest.mark.django_db


def append(count: int, start: int = 0) -> None:
    for index in range(start, start + count):
        with transaction.atomic():
            ledger_append(
                kind="test.event",
                subject_type="test",
                subject_id=index,
                subject_name=f"event {index}",
                actor=None,
                payload={"amount": index},
            )


@pytest.fixture
def key_file(tmp_path: Path, settings: Any) -> Path:
    path = tmp_path / "keys" / "ledger-2026.pem"
    path.parent.mkdir()
    call_command("ledger_checkpoint", "--new-key", str(path))
    settings.OPTGATE_LEDGER_SIGNING_KEY_FILE = str(path)
    settings.OPTGATE_LEDGER_CHECKPOINT_DIR = str(tmp_path / "anchor")
    return path


def checkpoint_file(settings: Any) -> Path:
    return Path(settings.OPTGATE_LEDGER_CHECKPOINT_DIR) / checkpoints.CHECKPOINT_FILE


def rewrite_consistently(seq: int, payload: dict[str, Any]) -> None:
    """What someone with write access to the database can do: edit an entry and recompute every
    hash after it, and the head, so that the chain verifies again. The base manager bypasses the
    model's refusal to update, as raw SQL would."""
    rows = LedgerEntry._base_manager.order_by("seq")
    previous = rows.filter(seq=seq - 1).values_list("hash", flat=True).first() or LedgerEntry.GENESIS_HASH
    for entry in rows.filter(seq__gte=seq):
        if entry.seq == seq:
            entry.payload = payload
        entry.prev_hash = previous
        new_hash = entry.compute_hash()
        LedgerEntry._base_manager.filter(pk=entry.pk).update(payload=entry.payload, prev_hash=previous, hash=new_hash)
        previous = new_hash
    LedgerHead.objects.filter(id=1).update(hash=previous)


def test_a_consistently_rewritten_chain_passes_alone_and_fails_against_its_checkpoint(
    key_file: Path, settings: Any, capsys: Any
) -> None:
    append(5)
    call_command("ledger_checkpoint")
    append(2, start=5)
    path = checkpoint_file(settings)
    call_command("ledger_verify", "--workers", "1", "--checkpoints", str(path))
    assert "ledger checkpoints OK: 1 signed checkpoints" in capsys.readouterr().out

    rewrite_consistently(3, {"amount": 1_000_000})

    assert ledger_verify().ok  # the chain alone cannot tell
    call_command("ledger_verify", "--workers", "1")
    with pytest.raises(CommandError, match="entry #5 hashes differently than when it was signed"):
        call_command("ledger_verify", "--workers", "1", "--checkpoints", str(path))


def test_a_rewrite_after_the_last_checkpoint_is_not_covered_until_the_next(key_file: Path, settings: Any) -> None:
    append(3)
    call_command("ledger_checkpoint")
    append(2, start=3)
    rewrite_consistently(5, {"amount": -1})
    call_command("ledger_verify", "--workers", "1", "--checkpoints", str(checkpoint_file(settings)))  # passes
    append(1, start=5)
    tasks.ledger_checkpoint()  # the schedule's task signs the (already rewritten) head: anchored from now on
    lines = checkpoint_file(settings).read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [3, 6]


def test_a_chain_cut_below_a_checkpoint_fails(key_file: Path, settings: Any) -> None:
    append(4)
    call_command("ledger_checkpoint")
    LedgerEntry._base_manager.filter(seq=4).delete()
    LedgerHead.objects.filter(id=1).update(seq=3, hash=LedgerEntry.objects.get(seq=3).hash)
    assert ledger_verify().ok
    with pytest.raises(CommandError, match="no entry #4 any more"):
        call_command("ledger_verify", "--workers", "1", "--checkpoints", str(checkpoint_file(settings)))


def test_a_forged_checkpoint_fails_its_signature(key_file: Path, settings: Any, tmp_path: Path) -> None:
    append(3)
    checkpoint, _ = checkpoints.checkpoint_write()
    rewrite_consistently(2, {"amount": 7})
    forged = {**json.loads(checkpoint.as_json_line()), "hash": LedgerEntry.objects.get(seq=3).hash}
    path = tmp_path / "forged.jsonl"
    path.write_text(json.dumps(forged) + "\n")
    with pytest.raises(CommandError, match="invalid signature"):
        call_command("ledger_verify", "--workers", "1", "--checkpoints", str(path))


def test_key_rotation_keeps_old_checkpoints_verifiable_while_their_key_is_trusted(
    key_file: Path, settings: Any, tmp_path: Path
) -> None:
    append(2)
    old = checkpoints.checkpoint_write()[0]
    old_public = old.public_key
    # Rotate: a new key signs from now on; the old one's public key stays in the trusted set.
    new_file = tmp_path / "keys" / "ledger-2027.pem"
    call_command("ledger_checkpoint", "--new-key", str(new_file))
    settings.OPTGATE_LEDGER_SIGNING_KEY_FILE = str(new_file)
    append(2, start=2)
    new = checkpoints.checkpoint_write()[0]
    assert new.key_id != old.key_id and (old.seq, new.seq) == (2, 4)
    path = checkpoint_file(settings)

    with pytest.raises(CommandError, match=f"key {old.key_id}\\) is signed by a key that is not trusted"):
        call_command("ledger_verify", "--workers", "1", "--checkpoints", str(path))
    call_command("ledger_verify", "--workers", "1", "--checkpoints", str(path), "--trusted-key", old_public)
    settings.OPTGATE_LEDGER_TRUSTED_KEYS = [old_public]
    call_command("ledger_verify", "--workers", "1", "--checkpoints", str(path))


def test_a_key_from_the_environment_signs_like_a_key_file(settings: Any, tmp_path: Path) -> None:
    seed = Ed25519PrivateKey.generate().private_bytes_raw()
    settings.OPTGATE_LEDGER_SIGNING_KEY = base64.b64encode(seed).decode()
    append(1)
    checkpoint, path = checkpoints.checkpoint_write(directory=tmp_path)
    assert checkpoints.checkpoints_verify(checkpoints.checkpoints_read(path), checkpoints.trusted_keys_default()) == (
        1,
        "",
    )
    assert (
        checkpoint.public_key
        == base64.b64encode(Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()).decode()
    )


def test_without_a_key_the_command_refuses_and_the_task_skips(settings: Any, caplog: Any) -> None:
    with pytest.raises(CommandError, match="OPTGATE_LEDGER_SIGNING_KEY_FILE"):
        call_command("ledger_checkpoint")
    tasks.ledger_checkpoint()
    assert "the ledger is not anchored" in caplog.text


def test_a_key_file_is_never_overwritten(key_file: Path) -> None:
    before = key_file.read_bytes()
    with pytest.raises(CommandError, match="never overwritten"):
        call_command("ledger_checkpoint", "--new-key", str(key_file))
    assert key_file.read_bytes() == before and oct(key_file.stat().st_mode)[-3:] == "600"


def test_checkpoints_are_on_the_beat_schedule() -> None:
    assert "optgate.ledger_checkpoint" in {schedule.task for schedule in SCHEDULES}
