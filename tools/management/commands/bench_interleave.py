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
            model = kit.path(BASE)
            engines = self._start_two(model, kit.root, Path(tmp))
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
                widths: dict[str, list[float]] = {"sequential": [], "interleaved": [], "by chunks": []}
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
                    chunks = {ids[r["index"]]: int(r["chunk"]) for r in interleaved[0]}
                    for way, (base, cand) in (("sequential", sequential), ("interleaved", interleaved)):
                        for key, stat in METRICS:
                            pair = (_by_id(ids, base, key), _by_id(ids, cand, key))
                            widths[way].append(self._line(repeat, way, key, stat, *pair))
                            if way == "interleaved":  # as the judge reads it: whole chunks resampled
                                widths["by chunks"].append(self._line(repeat, "by chunks", key, stat, *pair, chunks))
                with tempfile.TemporaryDirectory() as work:
                    begun = time.monotonic()
                    quality_phase(suite, base_url=a.base_url, model=a.model, concurrency=4, workdir=Path(work))
                    quality_s = time.monotonic() - begun
                # The next decision with the baseline kept warm (evaluators.warm): only the
                # candidate's engine starts, next to the baseline's idle one.
                engines[1].stop()
                begun = time.monotonic()
                engines[1] = self._start(model, kit.root, Path(tmp), "aa-b")
                warm_start_s = time.monotonic() - begun
            finally:
                for engine in engines:
                    engine.stop()
        self._summary(widths, start_s, warm_start_s, quality_s, statistics.mean(load_s))

    def _start(self, model: Path, root: Path, logs: Path, name: str) -> EngineHandle:
        return launch_engine(
            model_path=model,
            served_model_name=name,
            engine_args=ENGINE_ARGS,
            log_path=logs / f"{name}.log",
            model_roots=[root],
            env_extra=self.env_extra,
        )

    def _start_two(self, model: Path, root: Path, logs: Path) -> list[EngineHandle]:
        with ThreadPoolExecutor(max_workers=2) as pool:
            return list(pool.map(lambda name: self._start(model, root, logs, name), ["aa-a", "aa-b"]))

    def _line(
        self,
        repeat: int,
        way: str,
        key: str,
        stat: Stat,
        base: dict[str, float],
        cand: dict[str, float],
        chunks: dict[str, int] | None = None,
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
            [chunks[i] for i in common] if chunks else None,
        )
        low, high = result.interval
        name = f"{key.removesuffix('_s').upper()} {'P50' if stat == 'median' else stat.upper()}"
        self.stdout.write(
            f"  repeat {repeat + 1} {way:<11} {name:<8} B/A {result.effect:.3f}  95% CI [{low:.3f}, {high:.3f}]"
            f"  width {high - low:.3f}"
        )
        return high - low

    def _summary(
        self, widths: dict[str, list[float]], start_s: float, warm_start_s: float, quality_s: float, load_s: float
    ) -> None:
        seq, inter, chunked = (statistics.mean(widths[way]) for way in ("sequential", "interleaved", "by chunks"))
        self.stdout.write(
            f"mean interval width: sequential {seq:.3f}, interleaved {inter:.3f} (ratio {inter / seq:.2f}), "
            f"interleaved with whole chunks resampled (the judge) {chunked:.3f} (ratio {chunked / seq:.2f})"
        )
        # Per decision, from the phases measured above: engine-seconds (engines up × time) and the
        # worker's own time. One engine's start is half the two-engine start measured together.
        one_start = start_s / 2
        measuring = quality_s + 2 * load_s  # the candidate's quality (the baseline's is reused), both loads
        rows = [
            (
                "before, fresh baseline (two runs)",
                2 * (one_start + quality_s + load_s),
                2 * (one_start + quality_s + load_s),
            ),
            ("before, baseline run reused", one_start + quality_s + load_s, one_start + quality_s + load_s),
            ("after, pair with both engines started", 2 * (start_s + measuring), start_s + measuring),
            ("after, pair with the baseline kept warm", 2 * (warm_start_s + measuring), warm_start_s + measuring),
        ]
        for name, engine_s, worker_s in rows:
            self.stdout.write(f"per decision, {name:<42} {engine_s:4.0f} engine-s, {worker_s:4.0f} s of the worker")
        self.stdout.write(
            f"  (start {start_s:.0f} s for two together, {warm_start_s:.0f} s for one next to a warm one; "
            f"quality {quality_s:.0f} s, load {load_s:.0f} s per side)"
        )


def _by_id(ids: list[str], records: list[dict[str, Any]], key: str) -> dict[str, float]:
    """One latency per prompt (sample id), successful requests only."""
    return {ids[r["index"]]: float(r[key]) for r in records if r.get("error") is None and r.get(key) is not None}
