"""Reading evidence files: ``vllm bench serve`` result JSON and lm-eval results, checked field by field."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from core.errors import InvalidInput
from evaluators import pipeline
from evaluators.loadgen import RequestRecord, summarize
from evaluators.suites import get_suite

IMPORT_PHASE = "importing evidence"
MAX_REQUESTS = 100_000  # a bench file is a benchmark, not a log dump

VLLM_BENCH = "vllm_bench"
LM_EVAL = "lm_eval"
KINDS = (VLLM_BENCH, LM_EVAL)

# Keys every ``vllm bench serve`` result carries (generation endpoints).
_BENCH_REQUIRED = ("duration", "completed", "model_id")
_BENCH_PER_REQUEST = ("ttfts", "itls", "latencies", "output_lens", "input_lens", "errors")


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(data: dict[str, Any], key: str, *, prefix: str = "", minimum: float | None = 0.0) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput({f"{prefix}{key}": f"must be a finite number, got {value!r}"})
    if minimum is not None and value < minimum:
        raise InvalidInput({f"{prefix}{key}": f"must be at least {minimum}, got {value!r}"})
    return float(value)


# A NUL character inside a JSON string can only be written as the escape \u0000 (preceded by an
# even number of backslashes, or the backslash itself would be escaped); PostgreSQL cannot store it.
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _json_loads(text: str, field_name: str) -> Any:
    """``json.loads`` that refuses documents the database could not store, naming the field."""
    if _ESCAPED_NUL.search(text):
        raise InvalidInput({field_name: "must not contain the NUL character (\\u0000)"})
    try:
        return json.loads(text)
    except RecursionError:
        raise InvalidInput({field_name: "not JSON we can read: nested too deeply"}) from None


def load_json_document(raw: bytes | str | dict[str, Any], *, field_name: str) -> dict[str, Any]:
    """Parse an uploaded JSON document (bytes, text or an already parsed object) into a dict.

    ``vllm bench serve --append-result`` writes one JSON object per line; the last one is taken.
    """
    if isinstance(raw, dict):
        return raw
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    text = text.strip()
    if not text:
        raise InvalidInput({field_name: "the file is empty"})
    try:
        value = _json_loads(text, field_name)
    except json.JSONDecodeError:
        lines = [line for line in text.splitlines() if line.strip()]
        try:
            value = _json_loads(lines[-1], field_name)
        except json.JSONDecodeError as exc:
            raise InvalidInput({field_name: f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"}) from None
    if not isinstance(value, dict):
        raise InvalidInput({field_name: f"must be a JSON object, got {type(value).__name__}"})
    return value


def load_jsonl_records(raw: bytes | str | list[Any], *, field_name: str) -> list[dict[str, Any]]:
    """Parse lm-eval's ``samples_<task>_<date>.jsonl`` (or a JSON list of the same records)."""
    if isinstance(raw, list):
        records = raw
    else:
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        stripped = text.strip()
        if not stripped:
            raise InvalidInput({field_name: "the file is empty"})
        if stripped.startswith("["):
            try:
                records = _json_loads(stripped, field_name)
            except json.JSONDecodeError as exc:
                raise InvalidInput({field_name: f"not JSON: {exc.msg}"}) from None
        else:
            records = []
            for number, line in enumerate(stripped.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    records.append(_json_loads(line, field_name))
                except json.JSONDecodeError as exc:
                    raise InvalidInput({field_name: f"line {number} is not JSON: {exc.msg}"}) from None
    if not all(isinstance(record, dict) for record in records):
        raise InvalidInput({field_name: "every sample record must be a JSON object"})
    return list(records)


@dataclass
class BenchEvidence:
    """A parsed ``vllm bench serve`` result, in OptGate's load-generator shape."""

    model_id: str
    tokenizer_id: str | None
    max_concurrency: int | None
    endpoint_type: str
    performance: dict[str, Any]
    requests: list[dict[str, Any]] = field(default_factory=list)
    engine_evidence: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


def parse_vllm_bench(data: dict[str, Any]) -> BenchEvidence:
    """Validate a ``vllm bench serve`` result and convert it; raise ``InvalidInput`` naming the bad field.

    With the per-request arrays (``--save-detailed``) the aggregates are recomputed from the
    records with our own ``summarize``, so imported and native figures mean the same thing; vLLM's
    own aggregates are kept alongside under ``vllm_reported``.
    """
    missing = [key for key in _BENCH_REQUIRED if key not in data]
    if missing:
        raise InvalidInput(
            {key: "missing: this does not look like a `vllm bench serve` result file" for key in missing}
        )
    duration = _number(data, "duration")
    if duration <= 0:
        raise InvalidInput({"duration": "must be positive"})
    completed = int(_number(data, "completed"))
    failed = int(_number(data, "failed")) if "failed" in data else 0
    if completed == 0:
        raise InvalidInput({"completed": "no request completed: there is no evidence in this file"})
    if not isinstance(data["model_id"], str) or not data["model_id"]:
        raise InvalidInput({"model_id": "must be a non-empty string"})
    concurrency = data.get("max_concurrency")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)):
        raise InvalidInput({"max_concurrency": f"must be an integer or null, got {concurrency!r}"})
    if "num_prompts" in data and isinstance(data["num_prompts"], int) and completed + failed > data["num_prompts"]:
        raise InvalidInput({"completed": f"completed + failed ({completed + failed}) exceeds num_prompts"})

    reported = {
        key: value
        for key, value in data.items()
        if isinstance(value, int | float)
        and not isinstance(value, bool)
        and (
            key.endswith("_ms")
            or key
            in (
                "duration",
                "completed",
                "failed",
                "request_throughput",
                "output_throughput",
                "total_token_throughput",
                "request_goodput",
                "total_input_tokens",
                "total_output_tokens",
            )
        )
    }
    requests: list[dict[str, Any]] = []
    if all(key in data for key in _BENCH_PER_REQUEST):
        records = _bench_records(data)
        succeeded = sum(1 for r in records if r.ok)
        if succeeded != completed:
            raise InvalidInput({"errors": f"{succeeded} error-free records but completed={completed}"})
        performance = summarize(records, duration)
        requests = [asdict(record) for record in records]
    else:
        performance = _bench_aggregates(data, duration, completed, failed)
    # The judge's selector reads ``output_throughput`` (vLLM's name); our summary calls it
    # ``output_token_throughput``. Keep both so the throughput test sees imported evidence.
    performance.setdefault("output_throughput", performance.get("output_token_throughput"))
    performance["source"] = "vllm bench serve"
    performance["per_request"] = bool(requests)
    performance["vllm_reported"] = reported
    engine = {
        key: data[key]
        for key in (
            "spec_decode_acceptance_rate",
            "spec_decode_num_drafts",
            "spec_decode_draft_tokens",
            "spec_decode_accepted_tokens",
        )
        if isinstance(data.get(key), int | float)
    }
    if "spec_decode_num_drafts" in engine:
        engine["spec_decode_drafts"] = engine.pop("spec_decode_num_drafts")
    if isinstance(data.get("spec_decode_acceptance_length"), int | float):
        engine["spec_decode_mean_accepted_length"] = data["spec_decode_acceptance_length"]
    known = {
        *_BENCH_PER_REQUEST,
        *reported,
        "generated_texts",
        "start_times",
        "queue_times",
        "date",
        "label",
        "backend",
        "endpoint_type",
        "model_id",
        "tokenizer_id",
        "num_prompts",
        "request_rate",
        "burstiness",
        "max_concurrency",
    }
    metadata = {k: v for k, v in data.items() if k not in known and isinstance(v, str)}
    return BenchEvidence(
        model_id=data["model_id"],
        tokenizer_id=data.get("tokenizer_id") if isinstance(data.get("tokenizer_id"), str) else None,
        max_concurrency=concurrency,
        endpoint_type=str(data.get("endpoint_type") or data.get("backend") or ""),
        performance=performance,
        requests=requests,
        engine_evidence=engine,
        metadata=metadata,
    )


def _bench_records(data: dict[str, Any]) -> list[RequestRecord]:
    arrays = {key: data[key] for key in _BENCH_PER_REQUEST}
    for key, values in arrays.items():
        if not isinstance(values, list):
            raise InvalidInput({key: "must be a list (one entry per request)"})
    lengths = {len(values) for values in arrays.values()}
    if len(lengths) != 1:
        sizes = ", ".join(f"{key}={len(values)}" for key, values in arrays.items())
        raise InvalidInput({"ttfts": f"per-request arrays differ in length ({sizes})"})
    if lengths.pop() > MAX_REQUESTS:
        raise InvalidInput({"ttfts": f"more than {MAX_REQUESTS} requests"})
    starts = data.get("start_times") if isinstance(data.get("start_times"), list) else None
    first_start = min(starts) if starts else 0.0
    records = []
    for index, (ttft, itl, latency, out_len, in_len, error) in enumerate(
        zip(*(arrays[key] for key in _BENCH_PER_REQUEST), strict=True)
    ):
        record = RequestRecord(index=index)
        if starts and index < len(starts) and isinstance(starts[index], int | float):
            record.start_s = float(starts[index]) - float(first_start)
        if error:
            record.error = str(error)[:300]
            records.append(record)
            continue
        for key, value in (("ttfts", ttft), ("latencies", latency), ("output_lens", out_len)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InvalidInput({f"{key}[{index}]": f"must be a non-negative number, got {value!r}"})
        if not isinstance(itl, list) or not all(isinstance(v, int | float) for v in itl):
            raise InvalidInput({f"itls[{index}]": "must be a list of numbers"})
        record.ttft_s = float(ttft)
        record.e2e_s = float(latency)
        record.itl_s = [float(v) for v in itl]
        record.output_tokens = int(out_len)
        record.prompt_tokens = int(in_len) if isinstance(in_len, int) else None
        if record.output_tokens > 1:
            # vLLM's TPOT definition, which is also ours: decode time per token after the first.
            record.tpot_s = (record.e2e_s - record.ttft_s) / (record.output_tokens - 1)
        records.append(record)
    return records


def _bench_aggregates(data: dict[str, Any], duration: float, completed: int, failed: int) -> dict[str, Any]:
    """Map vLLM's aggregate keys (``mean_ttft_ms``, ``p99_tpot_ms``…) onto our summary shape."""

    def stats(metric: str) -> dict[str, float | None]:
        out: dict[str, float | None] = {"mean": None, "median": None, "p90": None, "p95": None, "p99": None}
        for ours, theirs in (("mean", "mean"), ("median", "median"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99")):
            value = data.get(f"{theirs}_{metric}_ms")
            out[ours] = float(value) if isinstance(value, int | float) else None
        return out

    return {
        "count": completed + failed,
        "completed": completed,
        "errors": failed,
        "duration_s": duration,
        "request_throughput": data.get("request_throughput"),
        "output_token_throughput": data.get("output_throughput"),
        "total_output_tokens": data.get("total_output_tokens"),
        "total_prompt_tokens": data.get("total_input_tokens"),
        "ttft_ms": stats("ttft"),
        "tpot_ms": stats("tpot"),
        "itl_ms": stats("itl"),
        "e2e_ms": stats("e2el"),
    }


@dataclass
class LmEvalEvidence:
    """One suite task's lm-eval results, re-scored sample by sample with the suite's scorer."""

    task: str
    model: str | None
    suite_version: str | None
    samples: list[pipeline.SampleOutcome]
    reported: dict[str, Any]


def _model_args(config: dict[str, Any]) -> dict[str, str]:
    raw = config.get("model_args")
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    if isinstance(raw, str):
        pairs = (part.split("=", 1) for part in raw.split(",") if "=" in part)
        return {key.strip(): value.strip() for key, value in pairs}
    return {}


def parse_lm_eval(results: dict[str, Any], samples: list[dict[str, Any]] | None, *, task: str) -> LmEvalEvidence:
    """Validate lm-eval output for OptGate suite ``task`` and re-score its samples.

    ``samples`` may be omitted when ``results`` holds them (``simple_evaluate``'s return value
    has a ``samples`` key; the file written with ``--output_path`` does not).
    """
    try:
        suite = get_suite(task)
    except ValueError as exc:
        raise InvalidInput({"task": str(exc)}) from None
    name = suite.lm_eval_task_name
    per_task = results.get("results")
    if not isinstance(per_task, dict):
        raise InvalidInput({"results": "missing: this does not look like an lm-eval results file"})
    if name not in per_task:
        present = ", ".join(sorted(per_task)) or "none"
        raise InvalidInput({"results": f"no results for lm-eval task {name!r} (the file has: {present})"})
    metadata = _mapping(_mapping(_mapping(results.get("configs")).get(name)).get("metadata"))
    version = metadata.get("version")
    config = _mapping(results.get("config"))
    named = results.get("model_name")
    model = _model_args(config).get("model") or (named if isinstance(named, str) else None)

    if samples is None:
        inline = results.get("samples")
        samples = inline.get(name) if isinstance(inline, dict) else None
    if not samples:
        raise InvalidInput({"samples": f"no per-sample records for {name}: run lm-eval with --log_samples"})
    by_id = {sample["id"]: sample for sample in suite.load_samples()}
    outcomes: list[pipeline.SampleOutcome] = []
    seen: set[str] = set()
    for index, record in enumerate(samples):
        doc = record.get("doc")
        if not isinstance(doc, dict) or not isinstance(doc.get("id"), str):
            raise InvalidInput({f"samples[{index}].doc.id": "missing: each record needs the suite sample it answers"})
        sample = by_id.get(doc["id"])
        if sample is None:
            raise InvalidInput({f"samples[{index}].doc.id": f"{doc['id']!r} is not a sample of suite {task}"})
        if doc.get("prompt") is not None and doc.get("prompt") != sample["prompt"]:
            raise InvalidInput({f"samples[{index}].doc.prompt": f"differs from suite {task}'s sample {doc['id']}"})
        if doc["id"] in seen:
            raise InvalidInput({f"samples[{index}].doc.id": f"{doc['id']!r} appears twice"})
        seen.add(doc["id"])
        output = record.get("filtered_resps") or record.get("resps") or [""]
        while isinstance(output, list):  # lm-eval nests responses per request and per repeat
            output = output[0] if output else ""
        verdict = suite.score(sample, str(output))
        outcomes.append(
            pipeline.SampleOutcome(
                sample_id=sample["id"],
                prompt=sample["prompt"],
                target=str(sample.get("target", "")),
                output=str(output),
                passed=verdict.passed,
                score=verdict.score,
                failure_reason=verdict.failure_reason or "",
                detail=verdict.detail,
            )
        )
    reported = {k: v for k, v in per_task[name].items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return LmEvalEvidence(
        task=task,
        model=model,
        suite_version=str(version) if version is not None else None,
        samples=sorted(outcomes, key=lambda o: o.sample_id),
        reported=reported,
    )
