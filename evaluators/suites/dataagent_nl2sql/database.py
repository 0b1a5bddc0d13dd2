"""The NL2SQL fixture database and a read-only, time-bounded query runner.

The fixture is rebuilt in memory from the committed ``schema.sql`` + ``fixture.sql``,
so scoring never touches a file on disk and a candidate statement cannot change the
data another sample is scored against.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent
SCHEMA_PATH = FOLDER / "schema.sql"
FIXTURE_PATH = FOLDER / "fixture.sql"

QUERY_TIMEOUT_S = 2.0
MAX_ROWS = 5000
# Actions a plain SELECT needs; everything else (writes, ATTACH, PRAGMA, ...) is denied.
# SQLITE_RECURSIVE (33) covers recursive CTEs; older Python builds do not export the name.
_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, getattr(sqlite3, "SQLITE_RECURSIVE", 33)}
)

_backup_lock = threading.Lock()


class QueryTimeout(Exception):
    """The statement ran past the time bound."""


class TooManyRows(Exception):
    """The statement returned more rows than any gold answer plausibly needs."""


def load_fixture(schema_sql: str, fixture_sql: str) -> sqlite3.Connection:
    """Build an in-memory database from schema and data scripts."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.executescript(schema_sql)
    conn.executescript(fixture_sql)
    conn.commit()
    return conn


@functools.lru_cache(maxsize=1)
def _master() -> sqlite3.Connection:
    return load_fixture(SCHEMA_PATH.read_text(encoding="utf-8"), FIXTURE_PATH.read_text(encoding="utf-8"))


def schema_columns(conn: sqlite3.Connection | None = None) -> dict[str, list[str]]:
    """Map each table name to its column names, in declaration order."""
    db = conn if conn is not None else _master()
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
    return {table: [col[1] for col in db.execute(f"PRAGMA table_info({table})")] for table in tables}


def _authorizer(action: int, _arg1: Any, _arg2: Any, _db: Any, _trigger: Any) -> int:
    return sqlite3.SQLITE_OK if action in _ALLOWED_ACTIONS else sqlite3.SQLITE_DENY


def fresh_readonly_connection(source: sqlite3.Connection | None = None) -> sqlite3.Connection:
    """Copy the fixture into a new in-memory connection that can only read."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    with _backup_lock:
        (source if source is not None else _master()).backup(conn)
    conn.execute("PRAGMA query_only = ON")
    conn.set_authorizer(_authorizer)
    return conn


def run_select(conn: sqlite3.Connection, sql: str, timeout_s: float = QUERY_TIMEOUT_S) -> list[tuple[Any, ...]]:
    """Execute ``sql`` with a wall-time bound and a row cap; return all rows.

    Raises :class:`QueryTimeout`, :class:`TooManyRows` or ``sqlite3.Error``.
    """
    deadline = time.monotonic() + timeout_s
    timed_out = False

    def _progress() -> int:
        nonlocal timed_out
        if time.monotonic() > deadline:
            timed_out = True
            return 1  # non-zero aborts the statement
        return 0

    conn.set_progress_handler(_progress, 1000)
    try:
        cursor = conn.execute(sql)
        rows = cursor.fetchmany(MAX_ROWS + 1)
    except sqlite3.OperationalError:
        if timed_out:
            raise QueryTimeout(f"query ran longer than {timeout_s:g}s") from None
        raise
    finally:
        conn.set_progress_handler(None, 0)
    if len(rows) > MAX_ROWS:
        raise TooManyRows(f"more than {MAX_ROWS} rows")
    return rows
