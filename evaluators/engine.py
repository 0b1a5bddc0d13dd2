"""The one choke point for engine subprocesses: launch vLLM, wait for health, always tear down.

Usage::

    with launch_engine(model_path=..., served_model_name="cand", engine_args={...},
                       log_path=..., model_roots=[...]) as engine:
        run_load(engine.base_url, engine.model)

vLLM forks an EngineCore and workers (and compilers during warm-up); they all stay in the
server's process group, so the launcher starts the server in its own session and kills the whole
group. A sweeper can do the same from a recorded pgid with :func:`kill_process_group`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import httpx

from backends.engine_args import build_serve_argv, ensure_model_allowed, validate_engine_args
from evaluators.engine_metrics import measurement_argv
from evaluators.processes import HOST, find_free_port, kill_process_group, wait_port_free

DEFAULT_KV_CACHE_GIB = "1"


def default_cpu_threads_bind() -> str:
    """Where a CPU engine's model threads run: every CPU this process may use but the first, which
    is left to the API server, the engine core and the load generator.

    Unbound (``nobind``) the model thread wanders onto the core the API server and the engine
    core's busy-polling loop use, and one request in seven or ten took 80-300 ms longer to its
    first token (the engine's own prefill histogram had the same outliers, so it was the forward
    pass being preempted); pinned to the second of two cores, 80 requests in a row came out at
    37-46 ms. vLLM's own ``auto`` binding differs: measured earlier it starved the API server on
    two cores (docs/benchmarks.md, "CPU engines and thread binding"). A machine with one CPU has
    nothing to leave free: unbound.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "nobind"
    return _cpu_list(cpus[1:])


def side_by_side_cpu_binds(engines: int) -> list[str | None]:
    """Where the model threads of ``engines`` CPU engines serving at the same time run: CPUs of
    their own for each, so neither engine's latency measures the other's load.

    Sharing the CPUs of ``default_cpu_threads_bind``, the first engine's prefills held up the
    second's answers: on the demo's canary traffic a slice's P95 came out 58 % above the other's
    one round and below it the next (docs/benchmarks.md, "Two serving engines, one core each").
    With a CPU more than the engines, the first stays free as there and the rest are split into
    contiguous groups; with exactly one CPU per engine, the first engine gets the first CPU, the one
    the API servers and everything else also use, so a caller puts there the engine that any
    disadvantage should fall on (a canary's candidate). With fewer CPUs than engines, or where the
    machine's own ``VLLM_CPU_OMP_THREADS_BIND`` is set, None: each engine keeps the default.
    """
    if engines < 1:
        raise ValueError("engines must be at least 1")
    cpus = sorted(os.sched_getaffinity(0))
    if "VLLM_CPU_OMP_THREADS_BIND" in os.environ or len(cpus) < engines:
        return [None] * engines
    if len(cpus) > engines:
        cpus = cpus[1:]
    share, extra = divmod(len(cpus), engines)
    binds: list[str | None] = []
    start = 0
    for index in range(engines):
        size = share + (1 if index < extra else 0)
        binds.append(_cpu_list(cpus[start : start + size]))
        start += size
    return binds


def _cpu_list(cpus: list[int]) -> str:
    return ",".join(str(cpu) for cpu in cpus)  # vLLM reads lists like "1,2,3"


_POLL_INTERVAL_S = 1.0
# Lines that carry no information about a failure (progress bars, blank lines).
_NOISE_RE = re.compile(r"^\s*$|it/s\]|s/it\]|^\s*\d+%\|")
# The line that names the real error: a Python exception line or a vLLM ERROR log line.
_ERROR_LINE_RE = re.compile(r"(^|\s)([A-Za-z_][\w.]*(Error|Exception|Exit)|Traceback|CRITICAL|ERROR)\b")
_EXCEPTION_RE = re.compile(r"(?:^|\)\s|\]\s)([A-Za-z_][\w.]*(?:Error|Exception)): ")
# Exceptions that only report that another one happened earlier in the log.
_WRAPPER_RE = re.compile(
    r"see root cause above|initialization failed|failed core proc|see stack trace|encountered an issue", re.IGNORECASE
)


class EngineStartError(RuntimeError):
    """The engine died during start-up or did not become healthy in time."""

    def __init__(self, message: str, *, exit_code: int | None = None, log_tail: list[str] | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.log_tail = log_tail or []


class EngineAttachError(RuntimeError):
    """An external endpoint is unreachable or does not serve the expected model."""


def read_log_tail(log_path: Path, n: int = 30) -> list[str]:
    """Last ``n`` meaningful lines of a log (progress bars and blank lines dropped)."""
    try:
        with open(log_path, errors="replace") as handle:
            lines = deque((line.rstrip("\n") for line in handle if not _NOISE_RE.search(line)), maxlen=n)
    except FileNotFoundError:
        return []
    return list(lines)


def find_error_line(lines: list[str]) -> str | None:
    """The root cause: the first ``SomethingError: msg`` line that does not merely point at another
    one (vLLM ends a failed start with "Engine core initialization failed. See root cause above"),
    else the last ERROR line."""
    exceptions = [index for index, line in enumerate(lines) if _EXCEPTION_RE.search(line)]
    causes = [index for index in exceptions if not _WRAPPER_RE.search(lines[index])]
    if causes or exceptions:
        index = (causes or exceptions)[0]
        # Some exceptions put their cause on indented lines below ("    TypeError: ...").
        continuation = [line.strip() for line in lines[index + 1 : index + 3] if line.startswith(" ") and line.strip()]
        return " ".join([lines[index].strip(), *continuation])
    for line in reversed(lines):
        if _ERROR_LINE_RE.search(line):
            return line.strip()
    return None


class EngineHandle:
    """A running engine this process started; a context manager that always stops it."""

    def __init__(self, *, proc: subprocess.Popen[Any], port: int, model: str, log_path: Path) -> None:
        self.proc = proc
        self.port = port
        self.base_url = f"http://{HOST}:{port}"
        self.model = model
        self.log_path = log_path
        self.pid = proc.pid
        # start_new_session=True makes the server its own group leader: pgid == pid.
        self.pgid = proc.pid
        self.started_at = time.monotonic()
        self.ready_after_s: float | None = None
        self._stopped = False

    def is_alive(self) -> bool:
        return self.proc.poll() is None

    def last_log_lines(self, n: int = 30) -> list[str]:
        return read_log_tail(self.log_path, n)

    def stop(self) -> None:
        """Kill the whole process group and wait until the port is free. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        kill_process_group(self.pgid, proc=self.proc)
        wait_port_free(self.port)

    def __enter__(self) -> EngineHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<EngineHandle {self.model} pid={self.pid} {self.base_url}>"


class AttachedEngine:
    """An engine somebody else runs: same surface as EngineHandle, but stop() leaves it alone."""

    def __init__(self, base_url: str, model: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.pid: int | None = None
        self.pgid: int | None = None
        self.log_path: Path | None = None

    def is_alive(self) -> bool:
        try:
            return httpx.get(self.base_url + "/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def last_log_lines(self, n: int = 30) -> list[str]:
        return []

    def stop(self) -> None:
        """Nothing to stop: we do not own the process."""

    def __enter__(self) -> AttachedEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def attach_engine(base_url: str, model: str, *, timeout_s: float = 10.0) -> AttachedEngine:
    """Use an existing OpenAI-compatible endpoint after checking ``/v1/models`` lists ``model``."""
    engine = AttachedEngine(base_url, model)
    try:
        response = httpx.get(engine.base_url + "/v1/models", timeout=timeout_s)
        response.raise_for_status()
        served = [entry.get("id") for entry in response.json().get("data", [])]
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        raise EngineAttachError(f"cannot list models at {engine.base_url}/v1/models: {exc}") from exc
    if model not in served:
        raise EngineAttachError(
            f"{engine.base_url} does not serve {model!r} (it serves: {', '.join(map(str, served))})"
        )
    return engine


# The engine needs the machine's environment (paths, threads, CUDA and vLLM settings) but none of
# OptGate's own configuration: a candidate's engine must not hold the database, broker or signing
# secrets of the service that judges it.
ENGINE_ENV_DROPPED = frozenset({"DATABASE_URL", "CACHE_URL", "REDIS_URL", "SECRET_KEY"})
ENGINE_ENV_DROPPED_PREFIXES = ("OPTGATE_", "DJANGO_", "CELERY_")
ENGINE_ENV_SECRET_WORDS = ("SECRET", "PASSWORD", "PASSWD", "TOKEN", "API_KEY", "CREDENTIAL")


def _kept_for_engine(name: str) -> bool:
    upper = name.upper()
    return not (
        upper in ENGINE_ENV_DROPPED
        or upper.startswith(ENGINE_ENV_DROPPED_PREFIXES)
        or any(word in upper for word in ENGINE_ENV_SECRET_WORDS)
    )


def engine_env(device: Literal["cpu", "gpu"], env_extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The subprocess environment: the machine's, less OptGate's configuration and anything named
    like a secret; offline hub, vLLM's dev routes, CPU target and thread binding where relevant
    (the machine's own settings win), caller overrides last."""
    env = {name: value for name, value in os.environ.items() if _kept_for_engine(name)}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    # vLLM's dev routes include POST /reset_prefix_cache, which lets each load block start from an
    # empty prefix cache (evaluators.interleave). The engines OptGate starts listen on loopback only.
    env.setdefault("VLLM_SERVER_DEV_MODE", "1")
    if device == "cpu":
        # Without VLLM_TARGET_DEVICE some code paths pick GPU kernels (illegal instruction).
        env["VLLM_TARGET_DEVICE"] = "cpu"
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", DEFAULT_KV_CACHE_GIB)
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", default_cpu_threads_bind())
        # vLLM's ahead-of-time compile cache cannot load what it saved on the CPU (vllm-cpu 0.32 with
        # torch 2.13: "Compiling model again due to a load failure ... 'function' object has no
        # attribute 'finalize_loading'", vllm-project/vllm#45447), so every start tried the cache,
        # failed, compiled the model anyway and wrote the cache anew: 9 s of warm-up instead of 4,
        # about 6 s of each start (docs/benchmarks.md, "Engine start-up"). Without it the model is
        # compiled once per start to the same graph: decode speed measured equal.
        env.setdefault("VLLM_USE_AOT_COMPILE", "0")
    elif device != "gpu":
        raise ValueError(f"device must be 'cpu' or 'gpu', not {device!r}")
    env.update(env_extra or {})
    return env


def launch_engine(
    *,
    model_path: str | os.PathLike[str],
    served_model_name: str,
    engine_args: Mapping[str, Any],
    log_path: str | os.PathLike[str],
    model_roots: list[Path],
    startup_timeout_s: float = 600,
    device: Literal["cpu", "gpu"] = "cpu",
    env_extra: Mapping[str, str] | None = None,
    python: str | None = None,
    on_spawn: Callable[[EngineHandle], None] | None = None,
) -> EngineHandle:
    """Start vLLM's OpenAI server and return once ``/health`` answers 200.

    Checks run before anything starts (model root, engine args). On early exit or timeout the
    process group is killed and :class:`EngineStartError` carries the exit code and log tail.
    ``on_spawn`` lets a caller record pid/pgid (for a sweeper) before the long health wait.
    """
    model_dir = ensure_model_allowed(model_path, model_roots)
    normalised = validate_engine_args(engine_args)
    port = find_free_port()
    argv = build_serve_argv(
        python=python or sys.executable,
        model_path=str(model_dir),
        served_model_name=served_model_name,
        engine_args=normalised,
        host=HOST,
        port=port,
    ) + measurement_argv(normalised)
    log_file = Path(log_path)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        log.write(("$ " + " ".join(argv) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=engine_env(device, env_extra),
            start_new_session=True,  # own process group, so teardown reaches EngineCore and workers
        )
    handle = EngineHandle(proc=proc, port=port, model=served_model_name, log_path=log_file)
    try:
        if on_spawn is not None:
            on_spawn(handle)
        _wait_healthy(handle, startup_timeout_s)
    except BaseException:
        # Also on KeyboardInterrupt / task cancellation: never leave an orphan engine behind.
        handle.stop()
        raise
    handle.ready_after_s = time.monotonic() - handle.started_at
    return handle


def _wait_healthy(handle: EngineHandle, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=5.0) as client:
        while True:
            exit_code = handle.proc.poll()
            if exit_code is not None:
                raise _start_error(handle, f"engine exited with code {exit_code} during start-up", exit_code)
            try:
                if client.get(handle.base_url + "/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass  # not listening yet
            if time.monotonic() >= deadline:
                raise _start_error(handle, f"engine not healthy after {timeout_s:g}s", None)
            time.sleep(_POLL_INTERVAL_S)


def _start_error(handle: EngineHandle, headline: str, exit_code: int | None) -> EngineStartError:
    # Read more than we show, so the error line is found even behind a long shutdown trace.
    tail = handle.last_log_lines(200)
    # The log may hold an earlier start of the same attempt: read from this start's command line on.
    starts = [i for i, line in enumerate(tail) if line.startswith("$ ")]
    tail = tail[starts[-1] :] if starts else tail
    error_line = find_error_line(tail)
    shown = tail[-30:]
    message = headline + (f": {error_line}" if error_line else "")
    message += f"\n--- last {len(shown)} log lines of {handle.log_path} ---\n" + "\n".join(shown)
    return EngineStartError(message, exit_code=exit_code, log_tail=shown)
