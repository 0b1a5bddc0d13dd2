"""Signed checkpoints of the ledger's head: an anchor the database cannot rewrite.

The hash chain shows an edited entry, but whoever can write the database can also recompute every
hash after it and the head, and the chain checks out again. A checkpoint is the head's sequence
number and hash signed with an Ed25519 key kept outside the database (a key file or an
environment variable) and appended as a JSON line to a directory outside it. ``ledger_verify
--checkpoints FILE`` then checks that the stored chain still has, at each checkpoint's sequence
number, the hash that was signed, by a key the verifier trusts.

Key rotation: each checkpoint names its key (``key_id``, the public key itself), so checkpoints
signed by a retired key stay verifiable as long as its public key stays in the trusted set.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from core.canonical import canonical_json, sha256_hex
from ledger.models import LedgerEntry, LedgerHead

CHECKPOINT_FILE = "ledger-checkpoints.jsonl"


@dataclass(frozen=True)
class Checkpoint:
    """The head of the chain at one moment, and who vouches for it."""

    seq: int
    hash: str
    created_at: str
    key_id: str
    public_key: str  # base64 of the raw 32-byte Ed25519 public key
    signature: str = ""  # base64 of the signature over ``signed_bytes``

    def signed_bytes(self) -> bytes:
        fields = {"seq": self.seq, "hash": self.hash, "created_at": self.created_at, "key_id": self.key_id}
        return canonical_json({**fields, "public_key": self.public_key}).encode()

    def as_json_line(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def public_key_text(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def key_id_of(public_key: str) -> str:
    """A short, stable name of a public key: the first 16 hex digits of its SHA-256."""
    return sha256_hex(public_key)[:16]


def signing_key_generate(path: Path) -> str:
    """Write a new private key to ``path`` (PEM, owner-only) and return its public key text."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    return public_key_text(key.public_key())


def signing_key_load() -> Ed25519PrivateKey:
    """The configured signing key: ``OPTGATE_LEDGER_SIGNING_KEY`` (base64 of the 32-byte seed) or
    ``OPTGATE_LEDGER_SIGNING_KEY_FILE`` (a PEM file). Raises ``ImproperlyConfigured`` without one."""
    if settings.OPTGATE_LEDGER_SIGNING_KEY:
        try:
            return Ed25519PrivateKey.from_private_bytes(
                base64.b64decode(settings.OPTGATE_LEDGER_SIGNING_KEY, validate=True)
            )
        except (binascii.Error, ValueError):
            raise ImproperlyConfigured("OPTGATE_LEDGER_SIGNING_KEY must be base64 of a 32-byte Ed25519 seed") from None
    if settings.OPTGATE_LEDGER_SIGNING_KEY_FILE:
        path = Path(settings.OPTGATE_LEDGER_SIGNING_KEY_FILE)
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (OSError, ValueError) as exc:
            raise ImproperlyConfigured(f"OPTGATE_LEDGER_SIGNING_KEY_FILE: cannot load {path}: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ImproperlyConfigured(f"OPTGATE_LEDGER_SIGNING_KEY_FILE: {path} is not an Ed25519 key")
        return key
    raise ImproperlyConfigured(
        "set OPTGATE_LEDGER_SIGNING_KEY_FILE (or OPTGATE_LEDGER_SIGNING_KEY) to sign checkpoints"
    )


def signing_configured() -> bool:
    return bool(settings.OPTGATE_LEDGER_SIGNING_KEY or settings.OPTGATE_LEDGER_SIGNING_KEY_FILE)


def checkpoint_sign(*, key: Ed25519PrivateKey) -> Checkpoint:
    """Sign the chain's current head (sequence number and hash, as the head row records them)."""
    head = LedgerHead.objects.filter(id=1).values("seq", "hash").first() or {"seq": 0, "hash": ""}
    public_key = public_key_text(key.public_key())
    unsigned = Checkpoint(
        seq=head["seq"],
        hash=head["hash"] or LedgerEntry.GENESIS_HASH,
        created_at=timezone.now().isoformat(timespec="seconds"),
        key_id=key_id_of(public_key),
        public_key=public_key,
    )
    signature = base64.b64encode(key.sign(unsigned.signed_bytes())).decode()
    return Checkpoint(**{**asdict(unsigned), "signature": signature})


def checkpoint_write(*, directory: Path | None = None, key: Ed25519PrivateKey | None = None) -> tuple[Checkpoint, Path]:
    """Sign the head and append it to ``<directory>/ledger-checkpoints.jsonl`` (default: the
    ``OPTGATE_LEDGER_CHECKPOINT_DIR`` setting), flushed to disk before returning."""
    key = key or signing_key_load()
    if directory is None and not settings.OPTGATE_LEDGER_CHECKPOINT_DIR:
        raise ImproperlyConfigured("set OPTGATE_LEDGER_CHECKPOINT_DIR (a directory outside the database)")
    directory = directory or Path(settings.OPTGATE_LEDGER_CHECKPOINT_DIR)
    checkpoint = checkpoint_sign(key=key)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CHECKPOINT_FILE
    with path.open("a", encoding="utf-8") as out:
        out.write(checkpoint.as_json_line() + "\n")
        out.flush()
        os.fsync(out.fileno())
    return checkpoint, path


def checkpoints_read(path: Path) -> list[Checkpoint]:
    """Parse a JSON-lines file of checkpoints; ``ValueError`` names the first malformed line."""
    checkpoints = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            checkpoints.append(
                Checkpoint(
                    seq=int(data["seq"]),
                    hash=str(data["hash"]),
                    created_at=str(data["created_at"]),
                    key_id=str(data["key_id"]),
                    public_key=str(data["public_key"]),
                    signature=str(data["signature"]),
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path.name} line {number}: not a checkpoint ({exc})") from None
    return checkpoints


def trusted_keys_default() -> set[str]:
    """``OPTGATE_LEDGER_TRUSTED_KEYS`` plus the public half of the configured signing key, if any."""
    keys = set(settings.OPTGATE_LEDGER_TRUSTED_KEYS)
    if signing_configured():
        keys.add(public_key_text(signing_key_load().public_key()))
    return keys


def checkpoint_problem(checkpoint: Checkpoint, trusted_keys: set[str]) -> str:
    """Why ``checkpoint`` does not vouch for the stored chain; "" when it does."""
    label = f"checkpoint #{checkpoint.seq} of {checkpoint.created_at} (key {checkpoint.key_id})"
    if checkpoint.public_key not in trusted_keys:
        return f"{label} is signed by a key that is not trusted"
    if key_id_of(checkpoint.public_key) != checkpoint.key_id:
        return f"{label} names a key id that does not match its public key"
    try:
        public_key = Ed25519PublicKey.from_public_bytes(base64.b64decode(checkpoint.public_key, validate=True))
        public_key.verify(base64.b64decode(checkpoint.signature, validate=True), checkpoint.signed_bytes())
    except (InvalidSignature, binascii.Error, ValueError):
        return f"{label} has an invalid signature"
    if checkpoint.seq == 0:
        return ""
    stored = LedgerEntry.objects.filter(seq=checkpoint.seq).values_list("hash", flat=True).first()
    if stored is None:
        return f"{label}: the ledger has no entry #{checkpoint.seq} any more"
    if stored != checkpoint.hash:
        return f"{label}: entry #{checkpoint.seq} hashes differently than when it was signed: the chain was rewritten"
    return ""


def checkpoints_verify(checkpoints: Iterable[Checkpoint], trusted_keys: set[str]) -> tuple[int, str]:
    """(checkpoints checked, the first problem or "")."""
    checked = 0
    for checkpoint in checkpoints:
        problem = checkpoint_problem(checkpoint, trusted_keys)
        if problem:
            return checked, problem
        checked += 1
    return checked, ""
