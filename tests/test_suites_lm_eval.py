"""The generated lm-eval task folders load in lm-eval and score through process_results."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from evaluators.suites import SUITES, get_suite
from evaluators.suites.lm_eval_task import write_task_folder


class _LenientLoader(yaml.SafeLoader):
    """SafeLoader that reads lm-eval's ``!function`` tag as a plain string."""


def _function_tag(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    return f"!function {loader.construct_scalar(node)}"


_LenientLoader.add_constructor("!function", _function_tag)


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lm_eval_tasks")


@pytest.fixture(scope="module")
def loaded_tasks(task_dir: Path) -> Iterator[dict[str, Any]]:
    # No network: the JSON builder reads the local file; offline flags make any hub call fail fast.
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_DATASETS_OFFLINE", "1")
    mp.setenv("HF_HUB_OFFLINE", "1")
    from lm_eval.tasks import TaskManager

    names = [write_task_folder(suite, task_dir) for suite in SUITES.values()]
    tasks = TaskManager(include_path=str(task_dir), include_defaults=False).load(names)["tasks"]
    yield tasks
    mp.undo()


def test_it_writes_a_yaml_with_an_absolute_data_path_and_both_metrics(tmp_path: Path) -> None:
    suite = get_suite("dataagent_nl2sql")
    name = write_task_folder(suite, tmp_path)
    assert name == "optgate_dataagent_nl2sql"
    config = yaml.load((tmp_path / name / f"{name}.yaml").read_text(), Loader=_LenientLoader)
    data_file = Path(config["dataset_kwargs"]["data_files"]["test"])
    assert data_file.is_absolute() and data_file.exists()
    assert config["process_results"] == "!function utils.process_results"
    assert [m["metric"] for m in config["metric_list"]] == ["passed", "score"]
    assert config["generation_kwargs"]["max_gen_toks"] == suite.max_gen_tokens
    assert config["generation_kwargs"]["do_sample"] is False
    assert (tmp_path / name / "utils.py").exists()


def test_every_task_loads_with_all_samples(loaded_tasks: dict[str, Any]) -> None:
    assert set(loaded_tasks) == {f"optgate_{slug}" for slug in SUITES}
    for name, task in loaded_tasks.items():
        slug = name.removeprefix("optgate_")
        docs = list(task.test_docs())
        assert len(docs) == len(get_suite(slug).load_samples())
        assert task.doc_to_text(docs[0]) == docs[0]["prompt"]
        assert task.config.generation_kwargs["until"] == []


@pytest.mark.parametrize("slug", sorted(SUITES))
def test_process_results_scores_gold_as_passed_and_junk_as_failed(loaded_tasks: dict[str, Any], slug: str) -> None:
    task = loaded_tasks[f"optgate_{slug}"]
    doc = next(iter(task.test_docs()))
    assert task.process_results(doc, [doc["target"]]) == {"passed": 1.0, "score": 1.0}
    assert task.process_results(doc, ["I do not know."])["passed"] == 0.0


def test_process_results_survives_the_loaders_date_coercion(loaded_tasks: dict[str, Any]) -> None:
    # The JSON loader may turn ISO date strings into timestamps; scoring must still pass all gold rows.
    task = loaded_tasks["optgate_cs_summary"]
    results = [task.process_results(doc, [doc["target"]])["passed"] for doc in task.test_docs()]
    assert sum(results) == len(results)
