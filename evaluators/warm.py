"""Warm engines: the engines a worker process last measured with, kept up for its next run.

Start-up dominates a decision's engine time on small machines (two CPU engines take ~47 s to start
together, against ~18 s of quality and ~8 s of load), consecutive tickets usually share their
baseline, and a staged evaluation runs the same pair again for every stage. So a worker process
*parks* both engines of a pair that went well (a single run's engine after that run, and the
engine that came up when its partner could not start) instead of stopping them, and the next run
whose engine would start with exactly the same launch (model files, served name, engine
arguments, device, environment) *takes* it.

Rules that keep this safe:

- **At most one pair's engines per worker process** (:data:`MAX_PARKED`), never more than the
  pair itself held while it ran. Starting any engine that does not match stops every parked one
  first: their memory (the GPU's, on a GPU worker) belongs to the new starts.
- **An idle timeout** (``OPTGATE_WARM_ENGINE_IDLE_S``; 0 turns parking off): a timer stops each.
- **A record outside the process** (:class:`~evaluators.models.ParkedEngine`: worker, pid, process
  group, expiry). An engine runs in its own session, so a worker that dies (SIGKILL, OOM) would
  leave it running; the worker's next start and the sweeper kill the groups of records whose
  worker process is gone or whose expiry has passed (:func:`reap`). The worker's shutdown and the
  interpreter's exit stop it too.
- **Nothing the measurement relies on carries over.** A taken engine is checked healthy; the load
  empties its prefix cache before each block as for a fresh engine, engine counters are read as
  differences, and timing is never reused: both sides of a pair are measured afresh, after the
  same warm-up requests. The attempt that takes an engine names the run that started it and where
  its log is (``attempt.artifacts["warm_engine"]``).
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from core.canonical import canonical_json, sha256_hex
from evaluators.engine import EngineHandle
from evaluators.models import ParkedEngine
from evaluators.processes import group_alive, kill_process_group, process_alive

logger = logging.getLogger(__name__)

# The sweeper leaves a parked engine to its own process's timer this long past its expiry.
REAP_GRACE = timedelta(seconds=60)


def launch_key(*, model_dir: Path, served_model_name: str, engine_args: Mapping[str, Any], device: str) -> str:
    """What decides that two launches give the same engine: the model's files as they are now (a
    rebuilt model under the same path is another engine), the served name, the engine arguments,
    the device and the environment the engine would get."""
    files = sorted(
        (entry.name, entry.stat().st_size, entry.stat().st_mtime_ns)
        for entry in os.scandir(model_dir)
        if entry.is_file()
    )
    return sha256_hex(
        canonical_json(
            {
                "model": str(model_dir),
                "files": files,
                "served_model_name": served_model_name,
                "engine_args": dict(engine_args),
                "device": device,
                # Only what the engine itself reads: a change in these is a different engine.
                "env": {k: v for k, v in os.environ.items() if k.startswith(("VLLM_", "OMP_", "CUDA_"))},
            }
        )
    )


@dataclass(eq=False)
class _Parked:
    key: str
    engine: EngineHandle
    started_for_run: int | None
    parked_at: float
    timer: threading.Timer


# The two engines of one pair: a staged evaluation's next stage takes both.
MAX_PARKED = 2

_lock = threading.Lock()
_parked: list[_Parked] = []


def idle_timeout_s() -> float:
    return float(settings.OPTGATE_WARM_ENGINE_IDLE_S)


def take(*keys: str) -> list[tuple[str, EngineHandle, dict[str, Any]]]:
    """The parked engines launched as one of ``keys`` that still answer (a key listed twice can
    take two engines, as both sides of an A/A pair launch alike), each with its key and what the
    attempt records about it; every other parked engine is stopped (the new starts need its memory)."""
    wanted = list(keys)
    taken = []
    for parked in _unpark_all():
        if parked.key in wanted and parked.engine.is_alive() and _healthy(parked.engine):
            wanted.remove(parked.key)
            info = {
                "started_for_run": parked.started_for_run,
                "engine_log": str(parked.engine.log_path),
                "parked_s": round(time.monotonic() - parked.parked_at, 1),
                "up_s": round(time.monotonic() - parked.engine.started_at, 1),
            }
            logger.info("taking the warm engine %s (started for run %s)", parked.engine, parked.started_for_run)
            taken.append((parked.key, parked.engine, info))
        else:
            logger.info("stopping the warm engine %s: the next run needs another engine", parked.engine)
            parked.engine.stop()
    return taken


def park(engine: EngineHandle, *, key: str, worker: str, run_id: int | None, backend_id: int | None) -> bool:
    """Keep ``engine`` up for the next run of this process instead of stopping it; False (and the
    engine stopped) when parking is off or the engine is not healthy. The oldest parked engine is
    stopped when :data:`MAX_PARKED` are up already."""
    idle = idle_timeout_s()
    if idle <= 0 or not engine.is_alive() or not _healthy(engine):
        engine.stop()
        return False
    with _lock:
        oldest = _parked[0] if len(_parked) >= MAX_PARKED else None
    if oldest is not None:
        _stop(oldest)
    expires_at = timezone.now() + timedelta(seconds=idle)
    ParkedEngine.objects.create(
        worker=worker,
        host=socket.gethostname(),
        owner_pid=os.getpid(),
        pid=engine.pid,
        pgid=engine.pgid,
        port=engine.port,
        backend_id=backend_id,
        started_for_run_id=run_id,
        expires_at=expires_at,
    )
    timer = threading.Timer(idle, _expire, args=(engine,))
    timer.daemon = True
    with _lock:
        _parked.append(_Parked(key=key, engine=engine, started_for_run=run_id, parked_at=time.monotonic(), timer=timer))
    timer.start()
    logger.info("parked %s for %.0f s", engine, idle)
    return True


def stop_parked() -> None:
    """Stop this process's parked engines (worker shutdown, interpreter exit, a new start)."""
    for parked in _unpark_all():
        parked.engine.stop()


def kill_parked_now() -> None:
    """Kill this process's parked engines without touching the database (from a signal handler: the
    process may be inside a query; the records go with the next :func:`reap`)."""
    with _lock:
        parked_now = list(_parked)
    for parked in parked_now:
        parked.timer.cancel()
        kill_process_group(parked.engine.pgid, grace_s=2.0)


def parked_engines() -> list[EngineHandle]:
    """This process's parked engines, oldest first (for tests and the benchmark)."""
    with _lock:
        return [parked.engine for parked in _parked]


def _unpark_all() -> list[_Parked]:
    """Take every parked engine out of this process's slots and their records out of the database."""
    with _lock:
        taken = list(_parked)
        _parked.clear()
    for parked in taken:
        parked.timer.cancel()
        _forget(parked.engine.pgid)
    return taken


def _stop(parked: _Parked) -> None:
    """Stop one parked engine, if it is still parked."""
    with _lock:
        if parked not in _parked:
            return
        _parked.remove(parked)
    parked.timer.cancel()
    _forget(parked.engine.pgid)
    parked.engine.stop()


def _expire(engine: EngineHandle) -> None:
    with _lock:
        parked = next((p for p in _parked if p.engine is engine), None)
    if parked is None:
        return
    logger.info("the warm engine %s was idle for %.0f s: stopping it", engine, idle_timeout_s())
    try:
        _stop(parked)
    finally:
        connection.close()  # this timer thread's own connection


def _forget(pgid: int) -> None:
    try:
        ParkedEngine.objects.filter(pgid=pgid).delete()
    except Exception:  # the database is down: the record stays, and reap() finds the group gone
        logger.exception("could not remove the record of the parked engine group %s", pgid)
        close_old_connections()


def _healthy(engine: EngineHandle) -> bool:
    try:
        return httpx.get(engine.base_url + "/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def reap(*, now: datetime | None = None) -> list[int]:
    """Kill the parked engines on this host that no live worker process owns any more, or whose
    idle timeout passed long ago; returns the killed process groups.

    Called when a worker starts and by the sweeper: a worker process killed outright never ran its
    timer or its shutdown hook.
    """
    now = now or timezone.now()
    killed = []
    for record in ParkedEngine.objects.filter(host=socket.gethostname()):
        owner_gone = record.owner_pid != os.getpid() and not process_alive(record.owner_pid)
        overdue = record.expires_at + REAP_GRACE <= now
        if not (owner_gone or overdue):
            continue
        if group_alive(record.pgid):
            kill_process_group(record.pgid)
            logger.warning(
                "killed the parked engine group %s of %s (%s)",
                record.pgid,
                record.worker,
                "its worker process is gone" if owner_gone else "idle past its expiry",
            )
            killed.append(record.pgid)
        record.delete()
    return killed


atexit.register(stop_parked)
