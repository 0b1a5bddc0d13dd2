"""Read queries that a web process builds and compiles once, then runs with each request's key."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet
from django.db.models.sql.compiler import SQLCompiler

# Stands for the key while the query is compiled: each parameter equal to it takes the call's key.
_KEY_SLOT = 7_331_733_173
# Keys the databases' 64-bit integer columns can hold; the ORM answers "no rows" past them.
_KEY_RANGE = range(-(2**63), 2**63)


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple[Any, ...]  # the query's own parameters, with _KEY_SLOT where the key goes
    names: tuple[str, ...]
    compiler: SQLCompiler
    converters: dict[int, Any]


class CompiledQuery:
    """``build(key)``, a ``values()`` query of an integer key, compiled once per database connection;
    each call runs that SQL with its own key and converts the values as the ORM would (JSON, times).
    The query's other parameters are constants of ``build``.

    For the reads a web process answers most: building and compiling the ticket detail's query (a
    dozen joins) cost the web process ten times what SQLite spent answering it (docs/benchmarks.md,
    issue 21), and its shape is the same on every request.
    """

    def __init__(self, build: Callable[[int], QuerySet[Any, Any]]) -> None:
        self._build = build
        # Per connection (one per thread): a compiler converts values with its connection's backend.
        self._compiled: WeakKeyDictionary[BaseDatabaseWrapper, _Compiled] = WeakKeyDictionary()
        self._alias: str | None = None

    @property
    def db(self) -> str:
        """The database alias the query reads from."""
        if self._alias is None:
            self._alias = self._build(_KEY_SLOT).db
        return self._alias

    def rows(self, key: int) -> list[dict[str, Any]]:
        """The query's rows for ``key``, as ``build(key)`` would give them."""
        if key not in _KEY_RANGE:
            return []
        connection = connections[self.db]
        compiled = self._compiled.get(connection)
        if compiled is None:
            compiled = self._compiled[connection] = self._compile(connection)
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, [key if _is_slot(p) else p for p in compiled.params])
            fetched = cursor.fetchall()
        values = compiled.compiler.apply_converters(fetched, compiled.converters) if compiled.converters else fetched
        return [dict(zip(compiled.names, row, strict=True)) for row in values]

    def _compile(self, connection: BaseDatabaseWrapper) -> _Compiled:
        query = self._build(_KEY_SLOT).query
        compiler = query.get_compiler(connection=connection)
        sql, params = compiler.as_sql()
        if not any(_is_slot(p) for p in params):
            raise ValueError(f"a compiled query takes its key as a parameter: {params!r} has none")
        names = (*query.extra_select, *query.values_select, *query.annotation_select)
        selected = [column for column, _, _ in compiler.select[: compiler.col_count]]
        if len(selected) != len(names):
            raise ValueError(f"a compiled query selects only its values: {names} but {len(selected)} columns")
        return _Compiled(sql, tuple(params), names, compiler, compiler.get_converters(selected))


def _is_slot(param: Any) -> bool:
    return type(param) is int and param == _KEY_SLOT
