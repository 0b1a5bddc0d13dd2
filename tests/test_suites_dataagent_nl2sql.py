"""DataAgent NL2SQL: result-set comparison and the distinct failure reasons."""

from __future__ import annotations

from typing import Any

import pytest

from evaluators.suites import get_suite
from evaluators.suites.dataagent_nl2sql.database import fresh_readonly_connection, run_select

SUITE = get_suite("dataagent_nl2sql")


def _sample(template: str) -> dict[str, Any]:
    return next(s for s in SUITE.load_samples() if s["template"] == template)


@pytest.fixture
def in_city() -> dict[str, Any]:
    return _sample("names_in_city")


def test_an_equivalent_query_with_other_formatting_passes(in_city: dict[str, Any]) -> None:
    city = in_city["target"].split("'")[1]
    candidate = f"```sql\nselect c.name\nfrom customers as c\nwhere c.city = '{city}'\n```"
    verdict = SUITE.score(in_city, candidate)
    assert verdict.passed, verdict.detail


def test_row_order_does_not_matter_without_order_by(in_city: dict[str, Any]) -> None:
    candidate = in_city["target"].rstrip(";") + " ORDER BY name DESC;"
    assert SUITE.score(in_city, candidate).passed


def test_row_order_matters_when_the_gold_sorts() -> None:
    conn = fresh_readonly_connection()
    sample = next(
        s
        for s in SUITE.load_samples()
        if s["template"] == "products_by_price" and len(set(run_select(conn, s["target"]))) > 1
    )
    reversed_order = sample["target"].replace("DESC", "ASC")
    assert SUITE.score(sample, reversed_order).failure_reason == "wrong_result_set"


def test_a_wrong_filter_is_a_wrong_result_set(in_city: dict[str, Any]) -> None:
    verdict = SUITE.score(in_city, "SELECT name FROM customers WHERE city = 'Atlantis';")
    assert not verdict.passed
    assert verdict.failure_reason == "wrong_result_set"


def test_an_extra_column_is_a_wrong_result_set(in_city: dict[str, Any]) -> None:
    candidate = in_city["target"].replace("SELECT name", "SELECT name, id")
    assert SUITE.score(in_city, candidate).failure_reason == "wrong_result_set"


def test_a_table_that_does_not_exist_is_unknown_table(in_city: dict[str, Any]) -> None:
    verdict = SUITE.score(in_city, "SELECT name FROM clients WHERE city = 'Berlin';")
    assert verdict.failure_reason == "unknown_table"
    assert "clients" in verdict.detail


def test_a_column_that_does_not_exist_is_unknown_column(in_city: dict[str, Any]) -> None:
    verdict = SUITE.score(in_city, "SELECT full_name FROM customers WHERE town = 'Berlin';")
    assert verdict.failure_reason == "unknown_column"


def test_unparseable_sql_is_a_parse_error(in_city: dict[str, Any]) -> None:
    assert SUITE.score(in_city, "SELECT name FROM customers WHERE (city = 'Berlin'").failure_reason == (
        "sql_parse_error"
    )
    assert SUITE.score(in_city, "").failure_reason == "sql_parse_error"


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM customers;",
        "UPDATE customers SET city = 'Berlin';",
        "DROP TABLE orders;",
        "SELECT 1; DELETE FROM customers;",
    ],
)
def test_anything_but_a_single_select_is_refused_and_changes_nothing(in_city: dict[str, Any], statement: str) -> None:
    verdict = SUITE.score(in_city, statement)
    assert verdict.failure_reason == "not_select"
    # The gold still answers from intact data afterwards.
    assert SUITE.score(in_city, in_city["target"]).passed


def test_the_connection_itself_refuses_writes() -> None:
    conn = fresh_readonly_connection()
    with pytest.raises(Exception, match=r"not authorized|readonly"):
        run_select(conn, "DELETE FROM customers")


def test_a_runaway_query_is_stopped_as_timeout(in_city: dict[str, Any]) -> None:
    endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i FROM n WHERE i < 0;"
    verdict = SUITE.score(in_city, endless)
    assert verdict.failure_reason == "timeout"


def test_a_float_aggregate_matches_within_rounding() -> None:
    sample = _sample("avg_price")
    candidate = sample["target"].replace("AVG(amount)", "SUM(amount) * 1.0 / COUNT(*)")
    assert SUITE.score(sample, candidate).passed
