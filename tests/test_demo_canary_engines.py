"""The demo canary's two serving engines: CPUs of their own, and never one left running alone.

Unit tests with a stand-in for the engine start; the demo test (tests/test_demo.py) checks the
same on the real engines' logs.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from backends.models import Backend
from tools.demo import canary


class FakeEngine:
    def __init__(self, name: str) -> None:
        self.name = name
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_on_two_cores_the_candidate_takes_the_shared_cpu_and_the_baseline_the_other(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    binds: dict[str, str | None] = {}

    def launch(backend: Backend, *, log_path: Path, cpu_threads_bind: str | None = None, **_: Any) -> FakeEngine:
        binds[backend.name] = cpu_threads_bind
        return FakeEngine(backend.name)

    monkeypatch.setattr(canary, "backend_engine_launch", launch)
    engines = canary._serving_engines(Backend(name="candidate"), Backend(name="baseline"), tmp_path)
    assert binds == {"candidate": "0", "baseline": "1"}
    assert {name: engine.name for name, engine in engines.items()} == {"candidate": "candidate", "baseline": "baseline"}  # type: ignore[attr-defined]


def test_when_one_engine_fails_to_start_the_other_is_stopped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started: list[FakeEngine] = []
    baseline_failed = threading.Event()

    def launch(backend: Backend, **_: Any) -> FakeEngine:
        if backend.name == "baseline":
            baseline_failed.set()
            raise RuntimeError("the baseline's engine exited during start-up")
        # The candidate comes up only after the baseline has already failed.
        baseline_failed.wait(timeout=5)
        engine = FakeEngine(backend.name)
        started.append(engine)
        return engine

    monkeypatch.setattr(canary, "backend_engine_launch", launch)
    with pytest.raises(RuntimeError, match="exited during start-up"):
        canary._serving_engines(Backend(name="candidate"), Backend(name="baseline"), tmp_path)
    assert [engine.name for engine in started] == ["candidate"]
    assert started[0].stopped
