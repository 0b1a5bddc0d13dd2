"""Engine-arg catalogue: normalisation, refusals, argv building, vLLM's own parser, model roots."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from backends.engine_args import (
    SERVER_MODULE,
    EngineArgsError,
    ModelPathError,
    build_serve_argv,
    ensure_model_allowed,
    validate_engine_args,
)
from backends.vllm_check import validate_with_vllm

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")


def _errors(args: dict) -> dict[str, str]:
    with pytest.raises(EngineArgsError) as caught:
        validate_engine_args(args)
    return caught.value.errors


def test_it_normalises_names_types_and_order() -> None:
    normalised = validate_engine_args(
        {
            "--max-num-seqs": "8",
            "enable-prefix-caching": "true",
            "gpu_memory_utilization": "0.9",
            "kv_cache_dtype": "fp8",
            "max_model_len": 2048.0,
            "seed": None,  # None means "engine default" and is dropped
        }
    )
    assert normalised == {
        "enable_prefix_caching": True,
        "gpu_memory_utilization": 0.9,
        "kv_cache_dtype": "fp8",
        "max_model_len": 2048,
        "max_num_seqs": 8,
    }
    assert list(normalised) == sorted(normalised)


def test_it_sorts_nested_speculative_config_for_a_stable_fingerprint() -> None:
    a = validate_engine_args({"speculative_config": {"num_speculative_tokens": 3, "method": "ngram"}})
    b = validate_engine_args({"speculative_config": '{"method": "ngram", "num_speculative_tokens": 3}'})
    assert json.dumps(a) == json.dumps(b)


def test_it_reports_every_problem_at_once() -> None:
    errors = _errors(
        {
            "max_num_seqs": 0,
            "kv_cache_dtype": "fp9",
            "dtype": 16,
            "gpu_memory_utilization": 1.5,
            "enforce_eager": "yes",
            "max_num_batched_tokens": True,
            "frobnicate": 1,
        }
    )
    assert set(errors) == {
        "max_num_seqs",
        "kv_cache_dtype",
        "dtype",
        "gpu_memory_utilization",
        "enforce_eager",
        "max_num_batched_tokens",
        "frobnicate",
    }
    assert "must be >= 1" in errors["max_num_seqs"]
    assert "'fp9' is not one of" in errors["kv_cache_dtype"]
    assert "must be <= 1" in errors["gpu_memory_utilization"]
    assert "unknown option" in errors["frobnicate"]
    assert "expected an integer" in errors["max_num_batched_tokens"]


def test_it_refuses_disable_log_stats_because_it_hides_every_metric() -> None:
    errors = _errors({"disable_log_stats": True})
    assert "vllm:* metric" in errors["disable_log_stats"]


@pytest.mark.parametrize("name", ["served_model_name", "--served-model-name", "model", "port", "host", "config"])
def test_it_refuses_options_the_launcher_owns(name: str) -> None:
    errors = _errors({name: "x"})
    assert list(errors) == [name.lstrip("-").replace("-", "_")]


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"num_speculative_tokens": 3}, "needs a 'method'"),
        ({"method": "ngram", "num_speculative_tokens": "3"}, "num_speculative_tokens must be a positive integer"),
        ({"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 2}, "must not exceed"),
        ("{not json", "not valid JSON"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_it_checks_speculative_config(spec: object, problem: str) -> None:
    assert problem in _errors({"speculative_config": spec})["speculative_config"]


def test_it_builds_argv_as_a_list_with_bare_and_negated_flags_and_json() -> None:
    argv = build_serve_argv(
        python="/venv/bin/python",
        model_path="/models/tiny",
        served_model_name="cand",
        engine_args={
            "enable_prefix_caching": True,
            "enforce_eager": False,
            "speculative_config": {"method": "ngram", "num_speculative_tokens": 3},
            "max_num_seqs": 4,
        },
        host="127.0.0.1",
        port=8123,
    )
    assert argv[:12] == [
        "/venv/bin/python",
        "-m",
        SERVER_MODULE,
        "--model",
        "/models/tiny",
        "--served-model-name",
        "cand",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--enable-prefix-caching",
    ]
    assert argv[12:] == [
        "--no-enforce-eager",
        "--max-num-seqs",
        "4",
        "--speculative-config",
        '{"method":"ngram","num_speculative_tokens":3}',
    ]
    assert all(isinstance(token, str) for token in argv)


def test_it_keeps_shell_metacharacters_inside_one_argv_token() -> None:
    argv = build_serve_argv(
        python="py",
        model_path="/m",
        served_model_name="x",
        engine_args={"revision": "main; rm -rf /"},
        host="127.0.0.1",
        port=1,
    )
    assert argv[-2:] == ["--revision", "main; rm -rf /"]


def test_it_refuses_a_served_name_that_looks_like_a_flag() -> None:
    with pytest.raises(EngineArgsError) as caught:
        build_serve_argv(python="py", model_path="/m", served_model_name="--x", engine_args={}, host="h", port=1)
    assert "served_model_name" in caught.value.errors


@needs_vllm
def test_vllm_parser_refuses_an_option_this_version_removed() -> None:
    # swap_space is in the catalogue for older GPU workers; vLLM 0.32's parser no longer has it.
    validate_engine_args({"swap_space": 4})
    with pytest.raises(EngineArgsError) as caught:
        validate_with_vllm({"swap_space": 4})
    assert "swap-space" in caught.value.errors["swap_space"]


@needs_vllm
def test_vllm_parser_refuses_a_bad_nested_config_and_names_it() -> None:
    with pytest.raises(EngineArgsError) as caught:
        validate_with_vllm({"compilation_config": {"bogus_key": 1}})
    assert "bogus_key" in caught.value.errors["compilation_config"]


@needs_vllm
def test_vllm_parser_accepts_a_realistic_candidate() -> None:
    validate_with_vllm(
        {
            "enable_prefix_caching": True,
            "kv_cache_dtype": "fp8",
            "max_num_seqs": 8,
            "speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
        }
    )


@needs_vllm
def test_one_child_process_checks_several_argument_sets_and_each_verdict_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from backends import vllm_check

    monkeypatch.setattr(vllm_check, "_verdicts", {})
    good, removed, also_good = {"max_num_seqs": 8}, {"swap_space": 4}, {"enable_prefix_caching": True}
    children = []
    real_run = vllm_check.subprocess.run

    def counted(*args: Any, **kwargs: Any) -> Any:
        children.append(args)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(vllm_check.subprocess, "run", counted)
    verdicts = vllm_check.check_with_vllm_subprocess([good, removed, also_good, good])
    assert verdicts[0] == verdicts[2] == verdicts[3] == {}
    assert "swap-space" in verdicts[1]["swap_space"]
    assert len(children) == 1
    vllm_check.validate_with_vllm_subprocess(also_good)  # known: no second child
    with pytest.raises(EngineArgsError) as caught:
        vllm_check.validate_with_vllm_subprocess(removed)
    assert "swap_space" in caught.value.errors
    assert len(children) == 1


def test_model_inside_a_root_is_allowed(tmp_path: Path) -> None:
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    assert ensure_model_allowed(model, [tmp_path / "models"]) == model.resolve()


def test_model_path_traversal_is_refused(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "secret").mkdir()
    with pytest.raises(ModelPathError, match="outside the allowed roots"):
        ensure_model_allowed(tmp_path / "models" / ".." / "secret", [tmp_path / "models"])


def test_symlink_escaping_a_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "models" / "sneaky").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ModelPathError, match="outside the allowed roots"):
        ensure_model_allowed(tmp_path / "models" / "sneaky", [tmp_path / "models"])


def test_a_sibling_with_a_common_name_prefix_is_not_inside_the_root(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models-evil").mkdir()
    with pytest.raises(ModelPathError):
        ensure_model_allowed(tmp_path / "models-evil", [tmp_path / "models"])


def test_missing_model_and_no_roots_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelPathError, match="does not exist"):
        ensure_model_allowed(tmp_path / "nope", [tmp_path])
    with pytest.raises(ModelPathError, match="no allowed model roots"):
        ensure_model_allowed(tmp_path, [])


@pytest.mark.parametrize("model_path", ["~no-such-user-here/models/x", "/models/with\x00nul"])
def test_a_model_path_that_cannot_be_resolved_is_refused_clearly(tmp_path: Path, model_path: str) -> None:
    # "~user" for an unknown user made Path.expanduser raise RuntimeError: a 500 at registration.
    with pytest.raises(ModelPathError, match="cannot be resolved"):
        ensure_model_allowed(model_path, [tmp_path])
