"""``manage.py bench_register``: register backends through the API while the CPU is busy; print p50/p95.

Each registration is a ``POST /api/v1/backends/`` through Django's request handling (in process,
as an engineer), with engine arguments that differ per backend so nothing is answered from a
cache. ``--busy`` processes spin on the CPU meanwhile, standing in for an engine under load. The
backends it registers stay (they are immutable): run it on a scratch database, as ``bench_seed``.

A developer tool: it starts its own busy processes, which the product code never does.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import uuid
from typing import Any

import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.test import Client

from accounts.services import user_save
from core.roles import ENGINEER

BENCH_USER = "bench-registrar"


def _spin(stop: Any) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


class Command(BaseCommand):
    help = "Register N backends through the API with busy CPUs; print each latency and p50/p95."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--count", type=int, default=20, help="backends to register")
        parser.add_argument(
            "--busy", type=int, default=os.cpu_count() or 1, help="CPU-spinning processes (a busy engine)"
        )
        parser.add_argument("--target-p95-s", type=float, default=2.0)

    def handle(self, *args: Any, **options: Any) -> None:
        model_path = settings.OPTGATE_SHIPPED_KIT_DIR / "base"
        if not model_path.is_dir():
            raise CommandError(f"{model_path} is missing: the benchmark registers the shipped kit's base model")
        user, _ = user_save(actor=None, username=BENCH_USER, role=ENGINEER)
        client = Client()
        client.force_login(user)
        run = uuid.uuid4().hex[:8]
        self.stdout.write(
            f"registering {options['count']} backends, {options['busy']} busy process(es); "
            f"vLLM's parser: {'after registration, on a worker' if settings.OPTGATE_VALIDATE_WITH_VLLM else 'off'}"
        )
        stop = multiprocessing.Event()
        spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(options["busy"])]
        for spinner in spinners:
            spinner.start()
        latencies: list[float] = []
        try:
            for i in range(options["count"]):
                body = {
                    "name": f"bench-{run}-{i}",
                    "model_id": "optgate/kit-base",
                    "model_path": str(model_path),
                    "model_revision": f"bench-{run}",
                    "engine_version": "0.32.0",
                    "hardware_class": "cpu",
                    # Arguments differ per backend, so no check is answered from a remembered verdict.
                    "engine_args": {"max_model_len": 512, "max_num_seqs": 1 + i, "seed": i},
                }
                started = time.perf_counter()
                response = client.post("/api/v1/backends/", body, content_type="application/json")
                latencies.append(time.perf_counter() - started)
                if response.status_code != 201:
                    raise CommandError(f"registration {i} answered {response.status_code}: {response.content[:300]!r}")
                self.stdout.write(f"  {body['name']}: {latencies[-1] * 1000:.0f} ms")
        finally:
            stop.set()
            for spinner in spinners:
                spinner.join(timeout=5)
        p50, p95 = (float(np.percentile(latencies, q)) for q in (50, 95))
        verdict = "met" if p95 <= options["target_p95_s"] else "MISSED"
        self.stdout.write(f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms over {len(latencies)} registrations")
        self.stdout.write(f"target p95 ≤ {options['target_p95_s']:.1f} s: {verdict}")
