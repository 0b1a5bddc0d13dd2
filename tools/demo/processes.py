"""The demo's processes: a GPU-queue worker, a default worker, beat and the web server, each in a
session of its own, and every engine they start.

However the demo is stopped, it stops what it started: SIGINT (Ctrl-C), SIGTERM (kill) and SIGHUP
(the terminal closed). Children get SIGTERM and ``STOP_GRACE_S`` to go; a second signal ends the
wait at once with SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from evaluators.processes import group_alive, process_descendants

STOP_GRACE_S = 30.0
# Everything but the GPU-queue worker runs at a lower CPU priority. In production the GPU workers
# have machines of their own; here the web server, the default worker (the judge, the sweeper's
# re-checks) and beat share two cores with the engines being measured, and whatever they do while
# a load block runs lands on that block's latencies.
BACKGROUND_NICENESS = 10
MEASURING = "worker-gpu"


def demo_commands(port: int) -> dict[str, list[str]]:
    """What the demo starts, by name: the name is also its log file's."""
    celery = [sys.executable, "-m", "celery", "-A", "optgate"]
    return {
        "worker-gpu": [*celery, "worker", "-Q", "gpu", "-c", "1", "-n", "gpu@%h", "-l", "INFO"],
        "worker-default": [*celery, "worker", "-Q", "default", "-c", "1", "-n", "default@%h", "-l", "INFO"],
        "beat": [*celery, "beat", "-l", "INFO"],
        "web": [sys.executable, "manage.py", "runserver", "--noreload", "--insecure", f"127.0.0.1:{port}"],
    }


class DemoProcesses:
    """The processes one demo started; ``stop`` ends them and their engines."""

    def __init__(self) -> None:
        self.children: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, logs: Path, port: int) -> None:
        for name, argv in demo_commands(port).items():
            if name != MEASURING:
                argv = ["nice", "-n", str(BACKGROUND_NICENESS), *argv]  # nice execs it: the same process
            with open(logs / f"{name}.log", "ab") as log:  # the child keeps its own copy of the descriptor
                self.children[name] = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, cwd=settings.BASE_DIR, start_new_session=True
                )

    def any_stopped(self) -> bool:
        return any(child.poll() is not None for child in self.children.values())

    def engine_groups(self) -> set[int]:
        """Process groups of the engines the workers started (each engine runs in a session of its own)."""
        own = {child.pid for child in self.children.values()}
        return {
            pgid
            for child in self.children.values()
            for pgid in process_descendants(child.pid).values()
            if pgid not in own
        }

    def stop(self, hurry: Callable[[], bool]) -> None:
        """Stop every process the demo started, and every engine they started.

        An evaluation in flight is abandoned, not failed: the GPU-queue worker is killed before its
        engine, so its run stays *running* with a dead worker, and the sweeper re-queues it on the
        next start, as after a crash. Everything else gets SIGTERM, then SIGKILL after
        ``STOP_GRACE_S`` or once ``hurry()`` says so (a second signal).
        """
        own = {child.pid for child in self.children.values()}
        engines = self.engine_groups()
        gpu_worker = self.children.get("worker-gpu")
        if engines and gpu_worker is not None and gpu_worker.poll() is None:
            _signal_group(gpu_worker.pid, signal.SIGKILL)
        terminated: set[int] = set()
        deadline = time.monotonic() + STOP_GRACE_S
        while True:
            engines |= self.engine_groups()  # one may be starting while the demo stops
            alive = {pgid for pgid in own | engines if group_alive(pgid)}
            if not alive:
                break
            late = hurry() or time.monotonic() >= deadline
            for pgid in alive:
                if late:
                    _signal_group(pgid, signal.SIGKILL)
                elif pgid not in terminated:
                    _signal_group(pgid, signal.SIGTERM)
                    terminated.add(pgid)
            for child in self.children.values():
                child.poll()  # reap: a zombie leader must not count as alive
            time.sleep(0.2)
        for child in self.children.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
