"""Inserting benchmark rows in bulk: PostgreSQL's COPY through psycopg 3, ``bulk_create`` elsewhere."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.core.management.color import no_style
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models import Max
from psycopg.copy import QueuedLibpqWriter

from core.canonical import canonical_json
from ledger.models import LedgerEntry


def reset_sequences(models_: Sequence[type[models.Model]]) -> None:
    """Move the id sequences past the explicit ids the seeder inserted."""
    statements = connection.ops.sequence_reset_sql(no_style(), list(models_))
    with connection.cursor() as cursor:
        for sql in statements:
            cursor.execute(sql)


def insert(model: type[models.Model], objects: list[Any]) -> None:
    """Insert model instances carrying explicit ids: COPY on PostgreSQL, ``bulk_create`` elsewhere."""
    if not objects:
        return
    db = connections[DEFAULT_DB_ALIAS]  # the wrapper itself: the ``connection`` proxy costs a lookup per value
    if db.vendor != "postgresql":
        model._default_manager.bulk_create(objects, batch_size=2000)
        return
    # Rows without an id (the many-to-many through rows) take theirs from the sequence.
    fields = [f for f in model._meta.concrete_fields if not (f.primary_key and objects[0].pk is None)]

    def prepare(field: Any) -> Any:
        if isinstance(field, models.JSONField):
            return lambda value: None if value is None else json.dumps(value)  # COPY's text becomes jsonb
        return lambda value: field.get_db_prep_save(value, db)

    preparers = [(f.attname, prepare(f)) for f in fields]
    rows = ([prep(getattr(obj, name)) for name, prep in preparers] for obj in objects)
    copy_rows(model, [f.column for f in fields], rows)


def copy_rows(model: type[models.Model], columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """COPY rows of database-ready values into ``model``'s table (PostgreSQL only)."""
    db = connections[DEFAULT_DB_ALIAS]
    table = db.ops.quote_name(model._meta.db_table)
    names = ", ".join(db.ops.quote_name(column) for column in columns)
    with db.cursor() as cursor:
        raw = cursor.cursor  # psycopg's own cursor
        # A writer thread sends the data while this one prepares the next rows.
        with raw.copy(f"COPY {table} ({names}) FROM STDIN", writer=QueuedLibpqWriter(raw)) as copy:
            for row in rows:
                copy.write_row(row)


def next_id(model: type[models.Model]) -> int:
    return int(model._default_manager.aggregate(top=Max("pk"))["top"] or 0) + 1


LEDGER_COLUMNS = (
    "id",
    "seq",
    "kind",
    "subject_type",
    "subject_id",
    "subject_name",
    "actor_id",
    "actor_name",
    "payload",
    "created_at",
    "prev_hash",
    "hash",
)
PAYLOAD = LEDGER_COLUMNS.index("payload")


def insert_entries(rows: list[tuple[Any, ...]]) -> None:
    """Insert ledger rows (``LEDGER_COLUMNS``); the hot path of seeding, so no model instances on PostgreSQL."""
    if connection.vendor != "postgresql":
        LedgerEntry.objects.bulk_create([LedgerEntry(**dict(zip(LEDGER_COLUMNS, row, strict=True))) for row in rows])
        return
    as_text = ((*row[:PAYLOAD], canonical_json(row[PAYLOAD]), *row[PAYLOAD + 1 :]) for row in rows)
    copy_rows(LedgerEntry, LEDGER_COLUMNS, as_text)


def take(items: Iterator[Any], n: int) -> Iterable[Any]:
    for _ in range(n):
        try:
            yield next(items)
        except StopIteration:
            return
