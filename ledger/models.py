"""The append-only, hash-chained ledger, and the immutable base its rows (and backends) share."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import models

from core.canonical import canonical_json, sha256_hex
from core.errors import DomainError


class ImmutableQuerySet(models.QuerySet):
    """Bulk updates and deletes are refused: registered rows are never edited or removed."""

    def update(self, **kwargs: Any) -> int:
        raise DomainError(f"{self.model.__name__} rows are immutable")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise DomainError(f"{self.model.__name__} rows are immutable")


class ImmutableModel(models.Model):
    objects = ImmutableQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        # A second save of a stored row is an edit; the only write allowed is the first insert.
        if not self._state.adding:
            raise DomainError(f"{type(self).__name__} rows are immutable")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise DomainError(f"{type(self).__name__} rows are immutable")


class LedgerHead(models.Model):
    """The single row that names the chain's last entry.

    Appends lock it (select_for_update), which serialises writers so the chain never forks, and
    it lets verification notice entries deleted from the end of the chain.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    seq = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=64, default="")

    def __str__(self) -> str:
        return f"ledger head #{self.seq}"


class LedgerEntry(ImmutableModel):
    """An append-only record of one change, chained to its predecessor by hash."""

    GENESIS_HASH = "0" * 64

    seq = models.PositiveBigIntegerField(unique=True)
    kind = models.CharField(max_length=60, db_index=True)
    subject_type = models.CharField(max_length=40, db_index=True)
    subject_id = models.CharField(max_length=64, db_index=True)
    subject_name = models.CharField(max_length=300)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    actor_name = models.CharField(max_length=150)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["-seq"]
        verbose_name_plural = "ledger entries"
        indexes = [models.Index(fields=["subject_type", "subject_id", "seq"])]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} {self.subject_type}:{self.subject_name}"

    def compute_hash(self) -> str:
        return entry_hash(**self.hashed_fields())

    def hashed_fields(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "subject_type": self.subject_type,
            "subject_id": self.subject_id,
            "subject_name": self.subject_name,
            "actor_name": self.actor_name,
            "payload": self.payload,
            "created_at": self.created_at,
            "prev_hash": self.prev_hash,
        }


def entry_hash(**content: Any) -> str:
    """The chain's hash of one entry: appends, verification and bulk seeding all use this."""
    return sha256_hex(canonical_json(entry_content(**content)))


def entry_content(
    *,
    seq: int,
    kind: str,
    subject_type: str,
    subject_id: str,
    subject_name: str,
    actor_name: str,
    payload: Any,
    created_at: datetime | str,
    prev_hash: str,
) -> dict[str, Any]:
    """What an entry's hash covers. A plain function so verification can hash a million rows
    fetched as tuples without building a model instance for each.

    ``created_at`` may also be given already formatted as the hash takes it (UTC, ISO 8601 with
    microseconds), as verification on PostgreSQL fetches it.
    """
    if isinstance(created_at, datetime):
        created_at = created_at.astimezone(UTC).isoformat(timespec="microseconds")
    return {
        "seq": seq,
        "kind": kind,
        "subject": {"type": subject_type, "id": subject_id, "name": subject_name},
        "actor": actor_name,
        "payload": payload,
        "created_at": created_at,
        "prev_hash": prev_hash,
    }
