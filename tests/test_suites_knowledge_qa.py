"""Knowledge assistant: long shared document prefix and passage citations."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from evaluators.suites import get_suite
from evaluators.suites.base import contains_phrase
from evaluators.suites.knowledge_qa.scoring import citations

SUITE = get_suite("knowledge_qa")


@pytest.fixture
def sample() -> dict[str, Any]:
    return SUITE.load_samples()[3]


def test_a_rephrased_answer_with_the_right_citation_passes(sample: dict[str, Any]) -> None:
    output = f"According to the document it is {sample['answer']} (see [ {sample['gold_passage']} ])."
    assert SUITE.score(sample, output).passed


def test_an_answer_without_citation_is_no_citation(sample: dict[str, Any]) -> None:
    verdict = SUITE.score(sample, sample["answer"])
    assert verdict.failure_reason == "no_citation"
    assert verdict.score == pytest.approx(0.5)


def test_citing_another_passage_is_wrong_citation(sample: dict[str, Any]) -> None:
    other = "P09" if sample["gold_passage"] != "P09" else "P01"
    verdict = SUITE.score(sample, f"{sample['answer']} [{other}]")
    assert verdict.failure_reason == "wrong_citation"
    assert other in verdict.detail


def test_citing_extra_passages_is_wrong_citation(sample: dict[str, Any]) -> None:
    verdict = SUITE.score(sample, f"{sample['answer']} [{sample['gold_passage']}][P10]")
    assert verdict.failure_reason == "wrong_citation"


def test_the_right_citation_with_the_wrong_fact_is_wrong_answer(sample: dict[str, Any]) -> None:
    verdict = SUITE.score(sample, f"nobody knows [{sample['gold_passage']}]")
    assert verdict.failure_reason == "wrong_answer"


def test_a_number_inside_a_longer_number_is_not_the_fact(sample: dict[str, Any]) -> None:
    verdict = SUITE.score(sample, f"9{sample['answer']} [{sample['gold_passage']}]")
    assert verdict.failure_reason == "wrong_answer"


def test_citations_are_normalised_and_deduplicated() -> None:
    assert citations("x [P7] and [p07] then [P10]") == ["P07", "P10"]


def test_questions_on_one_document_share_a_long_identical_prefix() -> None:
    by_doc: dict[str, list[str]] = defaultdict(list)
    for sample in SUITE.load_samples():
        by_doc[sample["doc_id"]].append(sample["prompt"])
    assert 2 <= len(by_doc) <= 5
    for prompts in by_doc.values():
        assert len(prompts) >= 10
        document = prompts[0].split("\nQuestion:")[0]
        assert all(prompt.startswith(document + "\nQuestion:") for prompt in prompts)
        # ~4 chars per token for real tokenizers: well over 600 tokens, i.e. several 128-token KV blocks.
        assert len(document) > 2800
        # Ten cited passages per document.
        assert [f"[P{i:02d}]" in document for i in range(1, 11)] == [True] * 10


def test_each_answer_appears_only_in_its_own_passage() -> None:
    for sample in SUITE.load_samples():
        document = sample["prompt"].split("\nQuestion:")[0]
        passages = {block[1:4]: block for block in document.split("\n\n") if block.startswith("[P")}
        holders = [pid for pid, text in passages.items() if contains_phrase(text, sample["answer"])]
        assert holders == [sample["gold_passage"]], sample["id"]
