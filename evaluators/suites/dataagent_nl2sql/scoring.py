"""Scoring for NL2SQL: execute candidate and gold, compare result sets.

A query that names a table or column the schema lacks is a hallucination, which the
gate tracks separately from a wrong filter (``wrong_result_set``) or malformed SQL
(``sql_parse_error``): quantization tends to produce the former first.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from evaluators.suites.base import SampleScore, clip, failed, passed, strip_code_fences
from evaluators.suites.dataagent_nl2sql.database import (
    QueryTimeout,
    TooManyRows,
    fresh_readonly_connection,
    run_select,
    schema_columns,
)

_FLOAT_DIGITS = 4
_SQL_LABEL_RE = re.compile(r"^\s*(?:sql|query|answer)\s*:\s*", re.IGNORECASE)


def _parse_single_select(sql: str) -> exp.Query | SampleScore:
    """Parse ``sql``; return the statement or the failing verdict."""
    try:
        statements = [s for s in sqlglot.parse(sql, read="sqlite") if s is not None]
    except SqlglotError as exc:
        return failed("sql_parse_error", f"The SQL does not parse: {clip(str(exc))}")
    if not statements:
        return failed("sql_parse_error", "The output contains no SQL statement.")
    if len(statements) > 1:
        return failed("not_select", f"Expected one SELECT statement, got {len(statements)} statements.")
    statement = statements[0]
    if not isinstance(statement, exp.Query):
        return failed("not_select", f"Only a SELECT is allowed; got a {statement.key.upper()} statement.")
    return statement


def _unknown_names(statement: exp.Query) -> SampleScore | None:
    """Name the first table or column the fixture schema does not have."""
    columns_by_table = schema_columns()
    ctes = {cte.alias_or_name.lower() for cte in statement.find_all(exp.CTE)}
    for table in statement.find_all(exp.Table):
        name = table.name.lower()
        if name and name not in columns_by_table and name not in ctes:
            return failed("unknown_table", f"The query reads table {table.name!r}, which the schema does not have.")
    known_columns = {col.lower() for cols in columns_by_table.values() for col in cols}
    # Output aliases and CTE column lists may be referenced like columns (ORDER BY total).
    known_columns |= {alias.alias.lower() for alias in statement.find_all(exp.Alias)}
    known_columns |= {ident.name.lower() for ta in statement.find_all(exp.TableAlias) for ident in ta.columns}
    for column in statement.find_all(exp.Column):
        name = column.name.lower()
        if name and name not in known_columns:
            return failed("unknown_column", f"The query uses column {column.name!r}, which the schema does not have.")
    return None


def _normalise_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    # COUNT gives 3, AVG may give 3.0 and float sums differ in the last bits; round numbers only.
    return tuple(
        round(float(v), _FLOAT_DIGITS) if isinstance(v, int | float) and not isinstance(v, bool) else v for v in row
    )


def _execution_failure(exc: Exception) -> SampleScore:
    message = str(exc)
    if isinstance(exc, QueryTimeout):
        return failed("timeout", f"The query was stopped: {message}.")
    if isinstance(exc, TooManyRows):
        return failed("wrong_result_set", f"The query returned {message}, far more than the answer.")
    if "no such table" in message:
        return failed("unknown_table", f"SQLite: {message}.")
    if "no such column" in message:
        return failed("unknown_column", f"SQLite: {message}.")
    if "not authorized" in message or "readonly" in message:
        return failed("not_select", f"The statement tried something other than reading: {message}.")
    if "syntax error" in message:
        return failed("sql_parse_error", f"SQLite: {message}.")
    return failed("sql_execution_error", f"SQLite: {clip(message)}.")


def score(sample: dict[str, Any], output: str) -> SampleScore:
    """Run the candidate SQL read-only and compare its result set with the gold query's."""
    sql = _SQL_LABEL_RE.sub("", strip_code_fences(output)).strip()
    parsed = _parse_single_select(sql)
    if isinstance(parsed, SampleScore):
        return parsed
    unknown = _unknown_names(parsed)
    if unknown is not None:
        return unknown

    gold_sql: str = sample["target"]
    conn = fresh_readonly_connection()
    try:
        try:
            got = run_select(conn, sql)
        except (sqlite3.Error, QueryTimeout, TooManyRows) as exc:
            return _execution_failure(exc)
        want = run_select(conn, gold_sql)
    finally:
        conn.close()

    ordered = sqlglot.parse_one(gold_sql, read="sqlite").args.get("order") is not None
    got_rows = [_normalise_row(r) for r in got]
    want_rows = [_normalise_row(r) for r in want]
    same = got_rows == want_rows if ordered else Counter(got_rows) == Counter(want_rows)
    if not same:
        how = "in order " if ordered else ""
        return failed(
            "wrong_result_set",
            f"The query returned {len(got_rows)} row(s) that differ {how}from the {len(want_rows)} gold row(s).",
        )
    return passed(f"The query returned the same {len(want_rows)} row(s) as the gold SQL.")
