"""``manage.py bench_interleave``: how much interleaving narrows a latency comparison, and what it costs.

Two engines of the same configuration (an A/A pair: any difference is noise or drift) serve one
task's load, measured ``--repeats`` times two ways in one process:

* **sequential** — all requests on A, then all on B (what two separate runs did);
* **interleaved** — the same requests in ABBA BAAB blocks (``evaluators.interleave``).

For each way it prints the ratio B/A of TTFT and E2E medians and P95 with the judge's bootstrap
interval (paired by prompt, as the judge pairs them) and the interval's width; an A/A ratio away
from 1 is drift the comparison would have blamed on the candidate. Then the engine time per
decision, from the measured start-up, quality and load times: before (two runs one after the
other; the baseline run reused when it can be) and after (both engines up for the pair; the
baseline's quality reused, its load measured again).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from evaluators.engine import EngineHandle, launch_engine
from evaluators.interleave import BASELINE, CANDIDATE, Endpoint, measure_interleaved
from evaluators.loadgen import run_load_sync
from evaluators.pipeline import DEFAULT_LOAD_PROFILE, load_requests, quality_phase
from evaluators.suites import get_suite
from gates.judge.resampling import bootstrap_ratio
from gates.judge.stats import Stat
from tools.kit import BASE, ensure_kit

ENGINE_ARGS = {"max_model_len": 2048, "seed": 0, "max_num_seqs": 8, "enable_prefix_caching": False}
METRICS: tuple[tuple[str, Stat], ...] = (("ttft_s", "median"), ("ttft_s", "p95"), ("e2e_s", "median"), ("e2e_s", "p95"))


class Command(BaseCommand):
    help = "A/A latency intervals with interleaved blocks vs two sequential runs, and engine time per decision."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--task", default="code_assistant")
        parser.add_argument("--requests", type=int, default=DEFAULT_LOAD_PROFILE["requests_per_task"])
        parser.add_argument("--repeats", type=int, default=2)
        parser.add_argument(
            "--engine-env",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="an environment variable for both engines (repeatable), e.g. OMP_WAIT_POLICY=PASSIVE",
        )
        parser.add_argument(
            "--temperature",
            type=float,
            default=0.0,
            help="sampling temperature sent with every request, as a backend's sampling params would "
            "(0, greedy, as the demo fleet serves: both engines answer alike, so their timings compare; "
            "above 0 the two engines' answers and lengths differ)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.env_extra = dict(item.split("=", 1) for item in options["engine_env"])
        kit = ensure_kit()
        suite = get_suite(options["task"])
        ids, requests = load_requests(suite, count=options["requests"], seed=0)
        concurrency = int(DEFAULT_LOAD_PROFILE["concurrency"])
        with tempfile.TemporaryDirectory(prefix="bench-interleave-") as tmp:
            started = time.monotonic()
            engines = self._start_two(kit.path(BASE), kit.root, Path(tmp))
            start_s = time.monotonic() - started
            try:
                sampling = {"temperature": options["temperature"]}
                a, b = (Endpoint(e.base_url, e.model, sampling=sampling) for e in engines)
                requests = [a.prepare(r) for r in requests]
                self.stdout.write(
                    f"task {suite.slug}, {len(requests)} requests per side, concurrency {concurrency}, "
                    f"temperature {options['temperature']:g}"
                )
                self.stdout.write(f"two engines up in {start_s:.0f} s (started together)")
                widths: dict[str, list[float]] = {"sequential": [], "interleaved": []}
                load_s: list[float] = []
                for repeat in range(options["repeats"]):
                    begun = time.monotonic()
                    first = run_load_sync(a.base_url, a.model, requests, concurrency=concurrency)
                    second = run_load_sync(b.base_url, b.model, requests, concurrency=concurrency)
                    load_s.append((time.monotonic() - begun) / 2)
                    sequential = ([vars(r) for r in first.records], [vars(r) for r in second.records])
                    load, indexes = measure_interleaved(
                        {BASELINE: a, CANDIDATE: b}, requests, concurrency=concurrency, seed=0
                    )  # prepare() again is a no-op: the sampling params are already on the requests
                    interleaved = (load.records(BASELINE, indexes), load.records(CANDIDATE, indexes))
                    for way, (base, cand) in (("sequential", sequential), ("interleaved", interleaved)):
                        for key, stat in METRICS:
                            pair = (_by_id(ids, base, key), _by_id(ids, cand, key))
                            widths[way].append(self._line(repeat, way, key, stat, *pair))
                with tempfile.TemporaryDirectory() as work:
                    begun = time.monotonic()
                    quality_phase(suite, base_url=a.base_url, model=a.model, concurrency=4, workdir=Path(work))
                    quality_s = time.monotonic() - begun
            finally:
                for engine in engines:
                    engine.stop()
        self._summary(widths, start_s, quality_s, statistics.mean(load_s))

    def _start_two(self, model: Path, root: Path, logs: Path) -> list[EngineHandle]:
        def start(name: str) -> EngineHandle:
            return launch_engine(
                model_path=model,
                served_model_name=name,
                engine_args=ENGINE_ARGS,
                log_path=logs / f"{name}.log",
                model_roots=[root],
                env_extra=self.env_extra,
            )

        with ThreadPoolExecutor(max_workers=2) as pool:
            return list(pool.map(start, ["aa-a", "aa-b"]))

    def _line(
        self, repeat: int, way: str, key: str, stat: Stat, base: dict[str, float], cand: dict[str, float]
    ) -> float:
        common = sorted(set(base) & set(cand))
        result = bootstrap_ratio(
            [base[i] for i in common],
            [cand[i] for i in common],
            stat,
            0.95,
            2000,
            7,
            True,
        )
        low, high = result.interval
        name = f"{key.removesuffix('_s').upper()} {'P50' if stat == 'median' else stat.upper()}"
        self.stdout.write(
            f"  repeat {repeat + 1} {way:<11} {name:<8} B/A {result.effect:.3f}  95% CI [{low:.3f}, {high:.3f}]"
            f"  width {high - low:.3f}"
        )
        return high - low

    def _summary(self, widths: dict[str, list[float]], start_s: float, quality_s: float, load_s: float) -> None:
        seq, inter = statistics.mean(widths["sequential"]), statistics.mean(widths["interleaved"])
        self.stdout.write(
            f"mean interval width: sequential {seq:.3f}, interleaved {inter:.3f} (ratio {inter / seq:.2f})"
        )
        # Engine-seconds per decision (engines up × time), from the phases measured above. One engine's
        # start is half the two-engine start measured together, on this machine's shared cores.
        one_start = start_s / 2
        before_fresh = 2 * (one_start + quality_s + load_s)
        before_reused = one_start + quality_s + load_s
        after = 2 * (start_s + quality_s + 2 * load_s)
        self.stdout.write(
            f"engine time per decision: before {before_fresh:.0f} engine-s (fresh baseline) / {before_reused:.0f} "
            f"(baseline run reused); after {after:.0f} engine-s (pair: both engines up, baseline quality reused) — "
            f"start {start_s:.0f} s for two, quality {quality_s:.0f} s, load {load_s:.0f} s per side"
        )


def _by_id(ids: list[str], records: list[dict[str, Any]], key: str) -> dict[str, float]:
    """One latency per prompt (sample id), successful requests only."""
    return {ids[r["index"]]: float(r[key]) for r in records if r.get("error") is None and r.get(key) is not None}
