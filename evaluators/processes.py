"""Process groups and loopback ports: what the engine launcher, the worker recovery and the tests
need to start, find and stop whole process trees.

Reads ``/proc`` directly (no psutil): the state letter and parent of every process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

HOST = "127.0.0.1"
TERM_GRACE_S = 8.0
KILL_WAIT_S = 5.0
PORT_FREE_WAIT_S = 15.0


def find_free_port(host: str = HOST) -> int:
    """Ask the kernel for a free TCP port (racy by nature; the launcher retries nothing on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = HOST) -> bool:
    """True when a new server could listen on the port (nothing bound or listening there).

    SO_REUSEADDR as servers (uvicorn) use it, so connections lingering in TIME_WAIT after the
    engine closed them do not count as "in use".
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def wait_port_free(port: int, timeout_s: float = PORT_FREE_WAIT_S, host: str = HOST) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_is_free(port, host):
            return True
        time.sleep(0.2)
    return port_is_free(port, host)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of a live or zombie process from /proc, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rpartition(")")[2].split()  # the command name may hold spaces
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], int(fields[2])


def process_descendants(pid: int) -> dict[int, int]:
    """Every live descendant of ``pid`` (children, grandchildren…) as ``{pid: process group}``.

    Read from /proc's parent links, so it also finds processes that moved to a session of their
    own (an engine a worker started); empty where there is no procfs.
    """
    parents: dict[int, int] = {}
    groups: dict[int, int] = {}
    if not os.path.isdir("/proc/self"):
        return {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] not in ("Z", "X"):
            parents[int(entry.name)], groups[int(entry.name)] = int(fields[1]), int(fields[2])
    found: dict[int, int] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in found:
                found[child] = groups[child]
                frontier.append(child)
    return found


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs. A zombie is dead: where nobody reaps orphans (a container whose
    init does not wait), an exited process keeps its pid and still answers ``kill(pid, 0)``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists but not ours
    stat = _proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def group_alive(pgid: int) -> bool:
    """True while any process of group ``pgid`` runs (zombies do not count, see :func:`process_alive`)."""
    if pgid <= 0:
        return False  # 0 would name our own group (and kernel threads' pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if not os.path.isdir("/proc/self"):
        return True  # no procfs: the kernel's answer is all there is
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat is not None and stat[1] == pgid and stat[0] not in ("Z", "X"):
                return True
    return False


def _group_alive(pgid: int, proc: subprocess.Popen[Any] | None = None) -> bool:
    if proc is not None:
        proc.poll()  # reap the leader if it exited
    return group_alive(pgid)


def _leader_alive(pid: int, proc: subprocess.Popen[Any] | None) -> bool:
    if proc is not None:
        return proc.poll() is None
    return process_alive(pid)


def kill_process_group(pgid: int, *, grace_s: float = TERM_GRACE_S, proc: subprocess.Popen[Any] | None = None) -> bool:
    """Stop a whole process group; True when it is gone.

    The leader (the API server, pid == pgid) gets SIGTERM first so it can shut its EngineCore
    and workers down in order (shared memory released); whatever is left after ``grace_s`` gets
    SIGTERM as a group, then SIGKILL. ``proc`` (the leader, when we started it) is reaped so it
    does not linger as a zombie.
    """
    if pgid <= 1 or pgid == os.getpgrp():
        raise ValueError(f"refusing to kill process group {pgid}")  # never our own group or init's
    stages: list[tuple[Callable[[int, int], None], signal.Signals, float]] = [
        (os.kill, signal.SIGTERM, grace_s),
        (os.killpg, signal.SIGTERM, KILL_WAIT_S),
        (os.killpg, signal.SIGKILL, KILL_WAIT_S),
    ]
    for send, sig, wait_s in stages:
        if not _group_alive(pgid, proc):
            break
        leader_only = send is os.kill
        with contextlib.suppress(ProcessLookupError):
            send(pgid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _group_alive(pgid, proc):
            # Once the leader is gone nobody is left to stop the rest in order: move on.
            if leader_only and not _leader_alive(pgid, proc):
                break
            time.sleep(0.1)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)
    return not _group_alive(pgid, proc)
