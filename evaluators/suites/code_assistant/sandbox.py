"""Run candidate Python code against unit tests in an isolated, resource-limited child.

Isolation here is a guard against accidents (an endless loop, a runaway allocation),
not a security boundary: the child runs as the same user. It runs with ``-I``
(no user site, no environment variables), an empty temp directory as CWD, an address
space limit, a CPU limit, no core files and a wall-time limit enforced by killing its
whole process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

WALL_TIMEOUT_S = 5.0
MEMORY_LIMIT_BYTES = 512 * 1024 * 1024
_MARKER = "@@OPTGATE_RESULT@@"

# The child's whole program. It never imports project code, so ``-I`` is enough.
_RUNNER = f"""
import json, sys
def report(**fields):
    sys.__stdout__.write("\\n{_MARKER}" + json.dumps(fields) + "\\n")
    sys.__stdout__.flush()
payload = json.loads(sys.stdin.read())
ns = {{"__name__": "candidate"}}
try:
    exec(compile(payload["code"], "<candidate>", "exec"), ns)
except MemoryError:
    report(event="memory")
    sys.exit(3)
except BaseException as exc:
    report(event="load_error", error=type(exc).__name__ + ": " + str(exc)[:200])
    sys.exit(2)
failures = []
for index, test in enumerate(payload["tests"]):
    try:
        exec(compile(test, "<test %d>" % index, "exec"), dict(ns))
    except MemoryError:
        report(event="memory")
        sys.exit(3)
    except BaseException as exc:
        failures.append(test + " -> " + type(exc).__name__ + (": " + str(exc)[:120] if str(exc) else ""))
total = len(payload["tests"])
report(event="done", passed=total - len(failures), total=total, failures=failures[:3])
"""


@dataclass(frozen=True)
class RunOutcome:
    """What happened when the tests ran: ``status`` is done, load_error, memory, timeout or crashed."""

    status: str
    passed: int = 0
    total: int = 0
    message: str = ""


def _limit_child(memory_bytes: int, cpu_seconds: int) -> None:
    # Runs in the child between fork and exec; only async-signal-safe-ish calls here.
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024 * 1024, 1024 * 1024))


def run_tests(
    code: str,
    tests: list[str],
    *,
    timeout_s: float = WALL_TIMEOUT_S,
    memory_bytes: int = MEMORY_LIMIT_BYTES,
) -> RunOutcome:
    """Execute ``code`` then each test statement in a fresh interpreter; never raises for candidate faults."""
    payload = json.dumps({"code": code, "tests": tests})
    cpu_seconds = int(timeout_s) + 1
    with tempfile.TemporaryDirectory(prefix="optgate-code-") as workdir:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _RUNNER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
            text=True,
            start_new_session=True,  # its own process group, so a timeout kills any children too
            preexec_fn=lambda: _limit_child(memory_bytes, cpu_seconds),
        )
        try:
            stdout, stderr = proc.communicate(payload, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            return RunOutcome(status="timeout", total=len(tests), message=f"no result within {timeout_s:g}s")
    return _read_outcome(proc.returncode, stdout, stderr, len(tests))


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):  # it may already be gone
        os.killpg(proc.pid, signal.SIGKILL)


def _read_outcome(returncode: int, stdout: str, stderr: str, total: int) -> RunOutcome:
    reports = [line[len(_MARKER) :] for line in stdout.splitlines() if line.startswith(_MARKER)]
    if not reports:
        if returncode == -signal.SIGXCPU:
            return RunOutcome(status="timeout", total=total, message="CPU time limit reached")
        tail = stderr.strip().splitlines()[-1:] or [f"exit status {returncode}"]
        return RunOutcome(status="crashed", total=total, message=tail[0][:200])
    fields = json.loads(reports[-1])
    event = fields["event"]
    if event == "done":
        failures = "; ".join(fields["failures"])
        return RunOutcome(status="done", passed=fields["passed"], total=fields["total"], message=failures)
    if event == "memory":
        return RunOutcome(status="memory", total=total, message="MemoryError under the memory limit")
    return RunOutcome(status="load_error", total=total, message=fields.get("error", ""))
