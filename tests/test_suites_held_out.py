"""Suites that grow: the held-out pool beyond the shipped samples, and stages drawn from it.

Stage one is the shipped ``samples.jsonl``; every later stage is a block of generated held-out
samples of the same shape, scored by the same scorer, never seen by the model kit's training.
"""

from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path
from typing import Any

import pytest

from evaluators.suites import SUITES, get_suite
from evaluators.suites.base import HELD_OUT_SIZE, _held_out_pool, to_jsonl
from evaluators.suites.generate import main as generate_main
from evaluators.suites.lm_eval_task import write_task_folder
from tools.kit.data import discover_data_files, load_examples

ALL_SUITES = sorted(SUITES)
# sha256 of the shipped samples.jsonl (stage one: the kit is trained on it and tests read it) and of
# the whole held-out pool as JSONL. A new pool digest needs a new Suite.held_out_revision, so that
# evidence recorded under the old pool version never silently means other samples.
DIGESTS = {
    "code_assistant": (
        "54fa5f00ff2e50dd16b2346df3f959d15b24f44380ac87cb8ad6ff6325bf5525",
        "5d2130019daaeccccb6a52affdb0dcd45bdc5bb861649c7ab4d4d91570cec09e",
    ),
    "compliance_qa": (
        "a43876cbe35e91b22abf7211120b75deb43e337f68dc2727e4e9e89433a48db0",
        "a41f74ea87d1779dd810d75bf3d8dc89aef8309beea4aae7c9dc58faa6f63fad",
    ),
    "cs_summary": (
        "baf3f768def821192f818f8ce463f6bddd3f07ac719deb13fa43746a68cfe08c",
        "e8eb8b5f3e30d2cf6f3a1ae7ce93fd5ed047c6cd824f986b1ed2ed4ff2e82800",
    ),
    "dataagent_nl2sql": (
        "0f7361426980e1a94ac3c7f9d94fe8d1a107f096a4eff760ba96f84a931a6b08",
        "46d620558ea9038e192d05be16d1d2872233eedbec6ede05031a984bdb90edab",
    ),
    "knowledge_qa": (
        "abbd6957b659e5b5092d140a43e591fe6af402200eb459d8d7a7c4ce1a55f87a",
        "a0c8049fdd0d1a70a88cbac2b5d7d5f293af05ba1e2e426a171422598e07379b",
    ),
    "tool_calling": (
        "3c84d4ae1fc7bf288e3181a2e8dc792a75be1dc6ed6246cc0ed59bde3912e0b4",
        "aea3b3a6562e7c5c19bbfd33995c2b4cc4c5cf2ea0a2cf071cd136becba354c0",
    ),
}
# Each code_assistant verdict runs a sandboxed interpreter (~0.1 s); all 1,000 are checked by
# ``python -m evaluators.suites.generate --check-held-out``.
CODE_SAMPLES_CHECKED = 50
PROMPT_LIMITS = {"knowledge_qa": 6000}
DEFAULT_PROMPT_LIMIT = 1500


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.mark.parametrize("slug", ALL_SUITES)
def test_each_suite_has_1000_held_out_samples_with_new_ids_and_new_prompts(slug: str) -> None:
    suite = get_suite(slug)
    shipped = suite.load_samples()
    held_out = suite.held_out_samples()
    assert len(held_out) == HELD_OUT_SIZE >= 1000
    assert [s["id"] for s in held_out] == [f"{slug}-h{n:04d}" for n in range(1, HELD_OUT_SIZE + 1)]
    prompts = [s["prompt"] for s in held_out]
    assert len(set(prompts)) == len(prompts)
    assert not set(prompts) & {s["prompt"] for s in shipped}
    assert not {s["id"] for s in held_out} & {s["id"] for s in shipped}


@pytest.mark.parametrize("slug", ALL_SUITES)
def test_held_out_samples_have_the_shape_of_the_shipped_ones(slug: str) -> None:
    suite = get_suite(slug)
    shipped = suite.load_samples()
    fields = {name: type(value) for name, value in shipped[0].items()}
    limit = PROMPT_LIMITS.get(slug, DEFAULT_PROMPT_LIMIT)
    for sample in suite.held_out_samples():
        assert {name: type(value) for name, value in sample.items()} == fields, sample["id"]
        assert sample["prompt"].isascii() and sample["target"].isascii()
        assert 0 < len(sample["prompt"]) < limit, sample["id"]
        assert 0 < len(sample["target"]) <= 200, sample["id"]
    # The shipped prompt head (instructions, schema, tool list layout) is the held-out one too.
    head = shipped[0]["prompt"][:40]
    assert all(sample["prompt"].startswith(head) for sample in suite.held_out_samples())


@pytest.mark.parametrize("slug", ALL_SUITES)
def test_the_shipped_file_and_version_are_unchanged_and_the_held_out_pool_is_pinned(slug: str) -> None:
    suite = get_suite(slug)
    shipped_digest, pool_digest = DIGESTS[slug]
    assert hashlib.sha256(suite.samples_path.read_bytes()).hexdigest() == shipped_digest
    assert suite.version == "1"
    assert _sha256(to_jsonl(suite.held_out_samples())) == pool_digest, "bump held_out_revision with a new pool"
    assert suite.held_out_version == "1+h1"


@pytest.mark.parametrize("slug", ALL_SUITES)
def test_held_out_samples_do_not_depend_on_what_was_asked_before(slug: str) -> None:
    suite = get_suite(slug)
    _held_out_pool.cache_clear()
    late_first = suite.held_out_samples(700, 5)
    whole = suite.held_out_samples()
    assert late_first == whole[700:705]
    # Generation is prefix-stable: a shorter pool is the start of the longer one.
    taken = frozenset(s["prompt"] for s in suite.load_samples())
    assert suite.held_out_builder(30, taken) == whole[:30]
    # Callers get copies: editing one cannot change the pool.
    late_first[0]["target"] = "edited"
    assert suite.held_out_samples(700, 1)[0]["target"] == whole[700]["target"]


@pytest.mark.parametrize("slug", ALL_SUITES)
def test_every_held_out_reference_passes_its_own_scorer(slug: str) -> None:
    suite = get_suite(slug)
    samples = suite.held_out_samples()
    if slug == "code_assistant":
        samples = random.Random(18).sample(samples, CODE_SAMPLES_CHECKED)
    failures = {}
    for sample in samples:
        verdict = suite.score(sample, sample["target"])
        if not (verdict.passed and verdict.score == 1.0):
            failures[sample["id"]] = verdict
    assert failures == {}
    wrong = suite.score(samples[0], "I do not know.")
    assert not wrong.passed and wrong.failure_reason


def test_held_out_sql_differs_from_a_wrong_filter_on_the_fixture() -> None:
    # A gold query that returns nothing or zero would pass a wrong filter too; none may.
    suite = get_suite("dataagent_nl2sql")
    for sample in suite.held_out_samples(0, 100):
        wrong = sample["target"].replace("=", "<>", 1) if "=" in sample["target"] else "SELECT 1;"
        assert not suite.score(sample, wrong).passed, sample["id"]


@pytest.mark.parametrize("slug", ALL_SUITES)
def test_the_kit_never_trains_on_held_out_samples(slug: str) -> None:
    training = load_examples(discover_data_files())
    held_out = get_suite(slug).held_out_samples()
    assert not {s["id"] for s in held_out} & {e.id for e in training}
    assert not {s["prompt"] for s in held_out} & {e.prompt for e in training}


def test_stage_one_is_the_shipped_file_and_later_stages_are_blocks_of_the_pool() -> None:
    suite = get_suite("compliance_qa")
    shipped = suite.load_samples()
    assert suite.stage_samples(1) == shipped
    assert suite.stage_samples(1, size=50) == shipped  # size applies to held-out stages only
    # By default every stage is as large as the first: 200 here, 100 for the other suites.
    assert suite.stage_samples(2) == suite.held_out_samples(0, 200)
    assert suite.stage_samples(6) == suite.held_out_samples(800, 200)
    assert suite.stage_samples(3, size=93) == suite.held_out_samples(93, 93)
    assert len(get_suite("cs_summary").stage_samples(11)) == 100


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.stage_samples(0), r"^stage must be an integer >= 1, got 0"),
        (lambda s: s.stage_samples("2"), r"^stage must be an integer >= 1, got '2'"),
        (lambda s: s.stage_samples(True), r"^stage must be"),
        (lambda s: s.stage_samples(12), r"^stage 12 does not exist: cs_summary has stages 1\.\.11 of 100"),
        (lambda s: s.stage_samples(2, size=0), r"^size must be an integer from 1 to 1000, got 0"),
        (lambda s: s.stage_samples(2, size=1001), r"^size must be"),
        (lambda s: s.stage_samples(2, size=2.5), r"^size must be"),
        (lambda s: s.held_out_samples(-1, 5), r"^start must be an integer >= 0, got -1"),
        (lambda s: s.held_out_samples(0, 0), r"^count must be an integer >= 1, got 0"),
        (lambda s: s.held_out_samples(990, 11), r"^count 11 from start 990 runs past the 1000 held-out"),
        (lambda s: s.stage_of("cs_summary-0001", size=-3), r"^size must be"),
        (lambda s: s.stage_of("knowledge_qa-h0001"), r"^sample_id 'knowledge_qa-h0001' is not a sample id of"),
        (lambda s: s.stage_of("cs_summary-h0000"), r"^sample_id 'cs_summary-h0000'"),
    ],
)
def test_bad_stage_arguments_are_refused_naming_the_parameter(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(get_suite("cs_summary"))


def test_a_sample_id_tells_its_stage() -> None:
    suite = get_suite("tool_calling")
    assert suite.stage_of("tool_calling-0042") == 1
    for stage in (2, 3, 11):
        assert {suite.stage_of(s["id"]) for s in suite.stage_samples(stage)} == {stage}
    assert {suite.stage_of(s["id"], size=93) for s in suite.stage_samples(4, size=93)} == {4}
    # And its position, hence its seed: "<generator SEED>/h<position>", position = the id's number - 1.
    assert re.fullmatch(r"tool_calling-h0001", suite.stage_samples(2)[0]["id"])


def test_the_version_names_the_pool_a_list_of_samples_came_from() -> None:
    suite = get_suite("knowledge_qa")
    assert suite.samples_version(suite.stage_samples(1)) == "1"
    assert suite.samples_version(suite.stage_samples(2)) == "1+h1"
    assert suite.samples_version(suite.stage_samples(1) + suite.stage_samples(2)) == "1+h1"


def test_lm_eval_reads_a_stage_from_the_folder_written_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from lm_eval.tasks import TaskManager

    suite = get_suite("cs_summary")  # its ISO dates are what the JSON loader likes to coerce
    stage = suite.stage_samples(3, size=40)
    name = write_task_folder(suite, tmp_path / "stage3", stage)
    task = TaskManager(include_path=str(tmp_path / "stage3"), include_defaults=False).load([name])["tasks"][name]
    docs = list(task.test_docs())
    assert [doc["id"] for doc in docs] == [s["id"] for s in stage]
    assert all(task.process_results(doc, [doc["target"]]) == {"passed": 1.0, "score": 1.0} for doc in docs)
    assert task.process_results(docs[0], ["{}"])["passed"] == 0.0
    assert task.config.metadata["version"] == "1+h1"
    # The shipped folder is written as before: the committed file, the suite's own version.
    write_task_folder(suite, tmp_path / "stage1")
    shipped_yaml = (tmp_path / "stage1" / name / f"{name}.yaml").read_text()
    assert str(suite.samples_path) in shipped_yaml and 'version: "1"' in shipped_yaml


def test_an_empty_or_id_less_stage_is_refused(tmp_path: Path) -> None:
    suite = get_suite("cs_summary")
    with pytest.raises(ValueError, match="samples must hold at least one sample"):
        write_task_folder(suite, tmp_path, [])
    twice = suite.stage_samples(2)[:1] * 2
    with pytest.raises(ValueError, match="no id twice"):
        write_task_folder(suite, tmp_path, twice)


def test_the_generate_command_scores_every_held_out_reference(capsys: pytest.CaptureFixture[str]) -> None:
    assert generate_main(["--check-held-out", "cs_summary", "tool_calling"]) == 0
    out = capsys.readouterr().out
    assert "cs_summary: 0 failing held-out references" in out
    assert "tool_calling: 0 failing held-out references" in out
