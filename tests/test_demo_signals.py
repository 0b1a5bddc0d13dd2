"""Stopping the demo stops everything it started, however it is stopped.

Each test starts the real ``manage.py demo`` (workers, beat, web server, and the GPU-queue
worker's first vLLM engine), stops it as a user would — Ctrl-C (SIGINT), ``kill`` (SIGTERM), a
closed terminal (SIGHUP) — and checks that no process it started, no engine and no listener on
its port is left. The evaluation itself is not waited for.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings

from evaluators.processes import find_free_port, group_alive, port_is_free, process_alive, process_descendants

pytestmark = pytest.mark.engine

SERVICE_VARIABLES = ("DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "REDIS_URL", "OPTGATE_EMBEDDED")
ENGINE_MODULE = "vllm.entrypoints.openai.api_server"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Demo:
    """``manage.py demo`` in a folder of its own, started in its own session like a terminal would."""

    def __init__(self, var_dir: Path, port: int) -> None:
        self.var_dir, self.port = var_dir, port
        self.env = {key: value for key, value in os.environ.items() if key not in SERVICE_VARIABLES}
        # vLLM's own argument check costs seconds per backend; these tests are about processes.
        self.env.update({"OPTGATE_VAR_DIR": str(var_dir), "OPTGATE_VALIDATE_WITH_VLLM": "off"})
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> subprocess.Popen[str]:
        command = [sys.executable, "manage.py", "demo", "--no-serve", "--port", str(self.port)]
        self.proc = subprocess.Popen(
            command,
            cwd=settings.BASE_DIR,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        return self.proc

    def run(self, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "manage.py", "demo", "--no-serve", "--port", str(self.port)]
        return subprocess.run(
            command, cwd=settings.BASE_DIR, env=self.env, capture_output=True, text=True, timeout=timeout_s, check=False
        )

    def wait_until(self, what: str, ready: Callable[[], bool], timeout_s: float = 240) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the demo exited ({self.proc.returncode}) before {what}:\n{self.output()}")
            if ready():
                return
            time.sleep(0.5)
        raise AssertionError(f"no {what} within {timeout_s:g}s:\n{self.output()}")

    def tree(self) -> dict[int, str]:
        assert self.proc is not None
        return {pid: _cmdline(pid) for pid in process_descendants(self.proc.pid)}

    def output(self) -> str:
        assert self.proc is not None
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stdout.read() if self.proc.stdout else ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            for pid in [self.proc.pid, *process_descendants(self.proc.pid)]:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    started = Demo(tmp_path, find_free_port())
    try:
        yield started
    finally:
        started.kill()  # only when a test failed halfway


def _listening(port: int) -> bool:
    return not port_is_free(port)


def _engine_pids(tree: dict[int, str]) -> list[int]:
    return [pid for pid, line in tree.items() if ENGINE_MODULE in line]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_ends_every_demo_process_and_engine(demo: Demo, sig: signal.Signals) -> None:
    proc = demo.start()
    demo.wait_until("web server", lambda: _listening(demo.port))
    # The engine's API server and the EngineCore it spawns (which renames itself, so it is found by
    # parentage, not by name): a stop must reach the whole engine, not just the process it started.
    demo.wait_until("vLLM engine core", lambda: any(process_descendants(pid) for pid in _engine_pids(demo.tree())))
    started = demo.tree()
    groups = {os.getpgid(pid) for pid in started if process_alive(pid)}
    engine_ports = [int(started[pid].split("--port ", 1)[1].split()[0]) for pid in _engine_pids(started)]
    assert any("celery" in line and "worker" in line for line in started.values())
    assert any("runserver" in line for line in started.values())

    os.kill(proc.pid, sig)
    output, _ = proc.communicate(timeout=120)

    assert proc.returncode == 128 + sig, output[-3000:]
    assert f"{sig.name}: stopping everything the demo started" in output
    left = {pid: line for pid, line in started.items() if process_alive(pid)}
    assert not left, left
    assert not [pgid for pgid in groups if group_alive(pgid)]  # nothing started later in those groups either
    assert not _listening(demo.port)
    assert engine_ports and all(port_is_free(port) for port in engine_ports)
    # The evaluation was abandoned, not failed: the next start resumes it.
    with sqlite3.connect(demo.var_dir / "optgate.sqlite3") as db:
        statuses = {status for (status,) in db.execute("SELECT status FROM evaluators_evaluationrun")}
    assert statuses and statuses <= {"queued", "running"}, statuses


def test_a_demo_process_that_dies_stops_the_rest_of_the_demo(demo: Demo) -> None:
    """The demo's own error path: the web server gone, it stops the workers, beat and the engine."""
    proc = demo.start()
    demo.wait_until("web server", lambda: _listening(demo.port))
    demo.wait_until("vLLM engine core", lambda: any(process_descendants(pid) for pid in _engine_pids(demo.tree())))
    started = demo.tree()
    groups = {os.getpgid(pid) for pid in started if process_alive(pid)}
    (web,) = [pid for pid, line in started.items() if "runserver" in line]
    os.kill(web, signal.SIGKILL)
    output, _ = proc.communicate(timeout=120)

    assert proc.returncode == 1, output[-3000:]
    assert "a worker or the web server stopped" in output
    assert not {pid: line for pid, line in started.items() if process_alive(pid)}
    assert not [pgid for pgid in groups if group_alive(pgid)]


def test_a_second_demo_on_the_same_folder_says_so_and_exits(demo: Demo) -> None:
    first = demo.start()
    demo.wait_until("web server", lambda: _listening(demo.port))
    second = Demo(demo.var_dir, find_free_port()).run()
    assert second.returncode == 1
    assert f"another demo is already running from {demo.var_dir} (pid {first.pid})" in second.stderr
    assert first.poll() is None  # the first demo is untouched
    os.kill(first.pid, signal.SIGTERM)
    first.communicate(timeout=120)
    assert first.returncode == 128 + signal.SIGTERM


def test_a_demo_whose_port_is_taken_says_so_before_starting_anything(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = Demo(tmp_path, port).run(timeout_s=60)
    assert done.returncode == 1
    assert f"port {port} is already in use" in done.stderr and "--port" in done.stderr
    assert not (tmp_path / "optgate.sqlite3").exists()  # refused before migrating anything
