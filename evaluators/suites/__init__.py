"""Business regression suites, one per task type.

``SUITES`` maps a task-type slug to its :class:`~evaluators.suites.base.Suite`. A new
task type is a new sub-package exposing ``SUITE`` plus one line here.
"""

from __future__ import annotations

from evaluators.suites.base import SampleScore, Suite
from evaluators.suites.code_assistant import SUITE as CODE_ASSISTANT
from evaluators.suites.compliance_qa import SUITE as COMPLIANCE_QA
from evaluators.suites.cs_summary import SUITE as CS_SUMMARY
from evaluators.suites.dataagent_nl2sql import SUITE as DATAAGENT_NL2SQL
from evaluators.suites.knowledge_qa import SUITE as KNOWLEDGE_QA
from evaluators.suites.tool_calling import SUITE as TOOL_CALLING

SUITES: dict[str, Suite] = {
    suite.slug: suite
    for suite in (CS_SUMMARY, KNOWLEDGE_QA, DATAAGENT_NL2SQL, CODE_ASSISTANT, COMPLIANCE_QA, TOOL_CALLING)
}


def get_suite(slug: str) -> Suite:
    """Return the suite for ``slug``; raise ``ValueError`` naming the known slugs otherwise."""
    try:
        return SUITES[slug]
    except KeyError:
        known = ", ".join(sorted(SUITES))
        raise ValueError(f"unknown task type {slug!r}; known suites: {known}") from None


__all__ = ["SUITES", "SampleScore", "Suite", "get_suite"]
