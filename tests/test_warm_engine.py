"""Warm engines (evaluators.warm): a worker process keeps the engines of its last run or pair up
for the next run launched the same way, one pair's two at most, for an idle timeout, and nothing outlives a worker
process that dies: the record of the parked engine lets the next worker start or the sweeper kill it.

The "engine" here is a real process in its own session answering ``/health`` (what the warm
engine checks), so process groups, timers and kills are real; the real vLLM engine is in
``tests/test_workers_faults.py``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from evaluators import warm
from evaluators.engine import EngineHandle
from evaluators.models import ParkedEngine
from evaluators.processes import find_free_port, group_alive
from workers import sweeper

HEALTH_SERVER = """
import http.server, sys
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def start_engine(tmp_path: Path, name: str = "engine") -> EngineHandle:
    port = find_free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", HEALTH_SERVER, str(port)], start_new_session=True, stdout=subprocess.DEVNULL
    )
    engine = EngineHandle(proc=proc, port=port, model=name, log_path=tmp_path / f"{name}.log")
    deadline = time.monotonic() + 20
    while not warm._healthy(engine):
        assert time.monotonic() < deadline, "the stand-in engine did not answer /health"
        time.sleep(0.1)
    return engine


@pytest.fixture(autouse=True)
def _no_engine_left() -> Iterator[None]:
    warm.stop_parked()
    yield
    warm.stop_parked()


@pytest.mark.django_db
def test_a_parked_engine_is_taken_by_the_next_launch_with_its_key_and_its_record_goes(
    tmp_path: Path, settings: Any
) -> None:
    settings.OPTGATE_WARM_ENGINE_IDLE_S = 600
    engine = start_engine(tmp_path)
    assert warm.park(engine, key="baseline", worker="gpu1@host:1", run_id=None, backend_id=None)
    record = ParkedEngine.objects.get()
    assert (record.pgid, record.owner_pid, record.port) == (engine.pgid, os.getpid(), engine.port)
    assert record.expires_at > timezone.now() + timedelta(seconds=590)

    [(key, same, info)] = warm.take("candidate", "baseline")
    assert (key, same) == ("baseline", engine) and info["engine_log"] == str(engine.log_path)
    assert group_alive(engine.pgid)
    assert not ParkedEngine.objects.exists()  # the attempt that took it owns it now
    assert warm.take("baseline") == []  # one taker only
    engine.stop()


@pytest.mark.django_db
def test_both_engines_of_a_pair_are_taken_by_the_next_pair_even_when_they_launch_alike(
    tmp_path: Path, settings: Any
) -> None:
    settings.OPTGATE_WARM_ENGINE_IDLE_S = 600
    baseline, candidate = start_engine(tmp_path, "baseline"), start_engine(tmp_path, "candidate")
    warm.park(baseline, key="same", worker="w", run_id=None, backend_id=None)
    warm.park(candidate, key="same", worker="w", run_id=None, backend_id=None)

    taken = warm.take("same", "same")
    assert sorted(engine.pgid for _, engine, _ in taken) == sorted([baseline.pgid, candidate.pgid])
    assert group_alive(baseline.pgid) and group_alive(candidate.pgid)
    assert not ParkedEngine.objects.exists()
    baseline.stop()
    candidate.stop()


@pytest.mark.django_db
def test_a_pair_takes_its_matching_engine_and_the_other_parked_one_stops(tmp_path: Path, settings: Any) -> None:
    settings.OPTGATE_WARM_ENGINE_IDLE_S = 600
    baseline, old_candidate = start_engine(tmp_path, "baseline"), start_engine(tmp_path, "old-candidate")
    warm.park(baseline, key="baseline", worker="w", run_id=None, backend_id=None)
    warm.park(old_candidate, key="old-candidate", worker="w", run_id=None, backend_id=None)

    [(key, engine, _)] = warm.take("baseline", "new-candidate")
    assert (key, engine) == ("baseline", baseline)
    assert group_alive(baseline.pgid) and not group_alive(old_candidate.pgid)
    baseline.stop()


@pytest.mark.django_db
def test_a_launch_with_another_key_stops_the_parked_engine_first(tmp_path: Path, settings: Any) -> None:
    settings.OPTGATE_WARM_ENGINE_IDLE_S = 600
    engine = start_engine(tmp_path)
    warm.park(engine, key="baseline", worker="w", run_id=None, backend_id=None)

    assert warm.take("another-backend") == []
    assert not group_alive(engine.pgid)
    assert not ParkedEngine.objects.exists()


@pytest.mark.django_db
def test_one_pairs_two_parked_engines_at_most(tmp_path: Path, settings: Any) -> None:
    settings.OPTGATE_WARM_ENGINE_IDLE_S = 600
    first, second, third = (start_engine(tmp_path, name) for name in ("first", "second", "third"))
    for key, engine in (("a", first), ("b", second), ("c", third)):
        warm.park(engine, key=key, worker="w", run_id=None, backend_id=None)

    assert not group_alive(first.pgid) and group_alive(second.pgid) and group_alive(third.pgid)
    assert warm.parked_engines() == [second, third]
    assert sorted(ParkedEngine.objects.values_list("pgid", flat=True)) == sorted([second.pgid, third.pgid])


@pytest.mark.django_db
def test_parking_off_or_an_unhealthy_engine_stops_it(tmp_path: Path, settings: Any) -> None:
    settings.OPTGATE_WARM_ENGINE_IDLE_S = 0
    engine = start_engine(tmp_path)
    assert not warm.park(engine, key="a", worker="w", run_id=None, backend_id=None)
    assert not group_alive(engine.pgid) and warm.parked_engines() == []

    settings.OPTGATE_WARM_ENGINE_IDLE_S = 600
    dead = start_engine(tmp_path)
    dead.proc.kill()
    dead.proc.wait()
    assert not warm.park(dead, key="a", worker="w", run_id=None, backend_id=None)
    assert not ParkedEngine.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_an_idle_parked_engine_stops_at_its_timeout(tmp_path: Path, settings: Any) -> None:
    settings.OPTGATE_WARM_ENGINE_IDLE_S = 1
    engine = start_engine(tmp_path)
    warm.park(engine, key="a", worker="w", run_id=None, backend_id=None)
    assert group_alive(engine.pgid)

    deadline = time.monotonic() + 20
    while group_alive(engine.pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not group_alive(engine.pgid)
    assert warm.parked_engines() == []
    assert not ParkedEngine.objects.exists()


@pytest.mark.django_db
def test_the_sweeper_kills_an_engine_whose_worker_process_is_gone(tmp_path: Path) -> None:
    engine = start_engine(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a worker process that died without stopping what it parked
    ParkedEngine.objects.create(
        worker="gpu1@host:123",
        host=socket.gethostname(),
        owner_pid=gone.pid,
        pid=engine.pid,
        pgid=engine.pgid,
        port=engine.port,
        expires_at=timezone.now() + timedelta(minutes=10),
    )

    report = sweeper.sweep()

    assert report.parked_killed == [engine.pgid]
    assert not group_alive(engine.pgid)
    assert not ParkedEngine.objects.exists()


@pytest.mark.django_db
def test_reap_leaves_a_live_owners_engine_until_long_past_its_expiry(tmp_path: Path) -> None:
    engine = start_engine(tmp_path)
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ParkedEngine.objects.create(
            worker="gpu1@host:1",
            host=socket.gethostname(),
            owner_pid=owner.pid,
            pid=engine.pid,
            pgid=engine.pgid,
            port=engine.port,
            expires_at=timezone.now(),
        )
        assert warm.reap() == []  # its own timer stops it; the sweeper waits a grace period
        assert group_alive(engine.pgid)

        assert warm.reap(now=timezone.now() + warm.REAP_GRACE + timedelta(seconds=1)) == [engine.pgid]
        assert not group_alive(engine.pgid)
    finally:
        owner.kill()
        owner.wait()
        engine.stop()


@pytest.mark.django_db
def test_reap_ignores_engines_of_other_hosts(tmp_path: Path) -> None:
    ParkedEngine.objects.create(
        worker="gpu1@elsewhere:1",
        host="elsewhere",
        owner_pid=999_999,
        pid=999_999,
        pgid=999_999,
        port=1,
        expires_at=timezone.now() - timedelta(days=1),
    )
    assert warm.reap() == []
    assert ParkedEngine.objects.count() == 1


def test_the_launch_key_changes_with_the_model_files_arguments_and_name(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    key = warm.launch_key(model_dir=model, served_model_name="b", engine_args={"seed": 0}, device="cpu")

    assert key == warm.launch_key(model_dir=model, served_model_name="b", engine_args={"seed": 0}, device="cpu")
    assert key != warm.launch_key(model_dir=model, served_model_name="c", engine_args={"seed": 0}, device="cpu")
    assert key != warm.launch_key(model_dir=model, served_model_name="b", engine_args={"seed": 1}, device="cpu")
    (model / "model.safetensors").write_bytes(b"rebuilt")
    assert key != warm.launch_key(model_dir=model, served_model_name="b", engine_args={"seed": 0}, device="cpu")
