"""Evidence import: ``vllm bench serve`` results and lm-eval results/samples attached to a run.

The real files come from one engine started for this module (a tiny random-weights Llama: the
answers are junk, the files are exactly what the tools write): ``vllm bench serve`` run
in-process with its own parser, lm-eval's CLI with ``--log_samples --output_path`` on an OptGate
suite task folder. Mismatched files are those real files with one field changed; malformed ones
are built by hand and need no engine.
"""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile

import optgate_cli.main as cli
from accounts.services import api_token_issue
from backends.models import Backend
from backends.services import backend_register
from core.errors import DomainError, InvalidInput
from evaluators.imports.parsing import (
    IMPORT_PHASE,
    load_json_document,
    load_jsonl_records,
    parse_lm_eval,
    parse_vllm_bench,
)
from evaluators.imports.services import evidence_import_bench
from evaluators.models import EvaluationRun, RunStatus, SampleRecord, TaskResult
from evaluators.suites import get_suite
from evaluators.suites.lm_eval_task import write_task_folder
from gates.selectors.evidence import run_task_evidence
from ledger.models import LedgerEntry
from ledger.selectors import ledger_verify

TASK = "compliance_qa"
SERVED = "import-tiny"
CONCURRENCY = 4  # the default load profile's concurrency
BENCH_PROMPTS = 16
LM_EVAL_LIMIT = 20

REPO = Path(__file__).resolve().parent.parent


# --- real files from one engine ------------------------------------------------------------------


# Session-scoped: the tests that use these files fall into different groups of pytest-django's
# ordering (transactional ones last), and a module fixture would start the engine once per group.
@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.engine_fixtures import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("import-models") / "tiny-llama")


def _bench(base_url: str, model_dir: Path, out: Path) -> Path:
    from vllm.benchmarks import serve as vllm_serve

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older vLLM
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]

    dataset = out / "prompts.jsonl"
    prompts = [sample["prompt"] for sample in get_suite(TASK).load_samples()[:BENCH_PROMPTS]]
    dataset.write_text("".join(json.dumps({"prompt": p, "output_tokens": 12}) + "\n" for p in prompts))
    parser = FlexibleArgumentParser()
    vllm_serve.add_cli_args(parser)
    args = parser.parse_args(
        [
            "--backend",
            "openai",
            "--base-url",
            base_url,
            "--endpoint",
            "/v1/completions",
            "--model",
            str(model_dir),
            "--served-model-name",
            SERVED,
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(dataset),
            "--custom-output-len",
            "-1",
            "--skip-chat-template",
            "--num-prompts",
            str(BENCH_PROMPTS),
            "--max-concurrency",
            str(CONCURRENCY),
            "--request-rate",
            "inf",
            "--ignore-eos",
            "--temperature",
            "0",
            "--seed",
            "0",
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--metric-percentiles",
            "50,90,95,99",
            "--ready-check-timeout-sec",
            "0",
            "--disable-tqdm",
            "--save-result",
            "--save-detailed",
            "--result-dir",
            str(out),
            "--result-filename",
            "bench.json",
            "--metadata",
            f"served_model_name={SERVED}",
        ]
    )
    vllm_serve.main(args)
    return out / "bench.json"


def _lm_eval(base_url: str, out: Path) -> tuple[Path, Path]:
    task_dir = out / "tasks"
    task_name = write_task_folder(get_suite(TASK), task_dir)
    env = {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    model_args = f"model={SERVED},base_url={base_url}/v1/chat/completions,num_concurrent=4,max_retries=1"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--model",
            "local-chat-completions",
            "--model_args",
            model_args,
            "--tasks",
            task_name,
            "--include_path",
            str(task_dir),
            "--apply_chat_template",
            "--log_samples",
            "--output_path",
            str(out / "lm-eval"),
            "--limit",
            str(LM_EVAL_LIMIT),
        ],
        cwd=REPO,
        env=env,
        timeout=900,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (results,) = (out / "lm-eval").rglob("results_*.json")
    (samples,) = (out / "lm-eval").rglob(f"samples_{task_name}_*.jsonl")
    return results, samples


@pytest.fixture(scope="session")
def real_files(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Start the engine once, produce the bench and lm-eval files, stop it before any test runs."""
    from evaluators.engine import launch_engine

    out = tmp_path_factory.mktemp("import-files")
    with launch_engine(
        model_path=model_dir,
        served_model_name=SERVED,
        engine_args={"max_model_len": 2048, "max_num_seqs": 8},
        log_path=out / "engine.log",
        model_roots=[model_dir.parent],
        startup_timeout_s=900,
    ) as engine:
        bench = _bench(engine.base_url, model_dir, out)
        results, samples = _lm_eval(engine.base_url, out)
    yield {"bench": bench, "results": results, "samples": samples, "model_dir": model_dir}


@pytest.fixture
def tiny_backend(real_files: dict[str, Path], settings: Any, erin: User) -> Backend:
    settings.OPTGATE_MODEL_ROOTS = [real_files["model_dir"].parent]
    backend, _ = backend_register(
        actor=erin,
        name=SERVED,
        model_id="optgate/tiny-random",
        model_revision="random",
        model_path=str(real_files["model_dir"]),
        engine_version="0.32.0",
        hardware_class="cpu-avx2",
        engine_args={"max_model_len": 2048},
    )
    return backend


def upload(
    api: Any, run: int, kind: str, path: Path | bytes, *, samples: Path | bytes | None = None, task: str = TASK
) -> Any:
    def as_file(name: str, value: Path | bytes) -> SimpleUploadedFile:
        content = value.read_bytes() if isinstance(value, Path) else value
        return SimpleUploadedFile(value.name if isinstance(value, Path) else name, content)

    data: dict[str, Any] = {"kind": kind, "task": task, "file": as_file("evidence.json", path)}
    if samples is not None:
        data["samples"] = as_file("samples.jsonl", samples)
    return api.post(f"/api/v1/runs/{run}/evidence/", data, format="multipart")


def open_run(api: Any, backend: str = SERVED, tasks: list[str] | None = None, **extra: Any) -> int:
    response = api.post("/api/v1/runs/", {"backend": backend, "tasks": tasks or [TASK], **extra}, format="json")
    assert response.status_code == 201, response.json()
    assert (response.json()["status"], response.json()["phase"]) == ("running", IMPORT_PHASE)
    return int(response.json()["id"])


def edited(path: Path, change: Any) -> bytes:
    data = json.loads(path.read_text())
    change(data)
    return json.dumps(data).encode()


# --- real files ---------------------------------------------------------------------------------


@pytest.mark.engine
@pytest.mark.django_db
def test_real_bench_and_lm_eval_files_become_evidence_shown_like_native(
    api_for: Any, erin: User, tiny_backend: Backend, real_files: dict[str, Path]
) -> None:
    api = api_for(erin)
    run_id = open_run(api)
    bench = upload(api, run_id, "vllm_bench", real_files["bench"])
    assert bench.status_code == 201, bench.json()
    quality = upload(api, run_id, "lm_eval", real_files["results"], samples=real_files["samples"])
    assert quality.status_code == 201, quality.json()
    closed = api.post(f"/api/v1/runs/{run_id}/close/")
    assert closed.status_code == 200 and closed.json()["status"] == "succeeded"

    result = TaskResult.objects.get(run_id=run_id, task=TASK)
    raw = json.loads(real_files["bench"].read_text())
    assert result.performance["completed"] == raw["completed"] == BENCH_PROMPTS
    assert result.performance["source"] == "vllm bench serve" and result.performance["per_request"] is True
    # Recomputed from the per-request arrays, the median TTFT agrees with vLLM's own figure.
    assert result.performance["ttft_ms"]["median"] == pytest.approx(raw["median_ttft_ms"], rel=1e-6)
    assert result.performance["vllm_reported"]["p99_tpot_ms"] == raw["p99_tpot_ms"]
    assert len(result.requests) == BENCH_PROMPTS and all(r["ttft_s"] > 0 for r in result.requests)
    assert result.quality["n"] == LM_EVAL_LIMIT and result.quality["source"] == "lm-eval"
    samples = SampleRecord.objects.filter(run_id=run_id, task=TASK)
    assert samples.count() == LM_EVAL_LIMIT and all(s.prompt and s.output is not None for s in samples)
    # Re-scored with the suite's own scorer, as native runs are.
    suite = get_suite(TASK)
    by_id = {s["id"]: s for s in suite.load_samples()}
    assert all(suite.score(by_id[s.sample_id], s.output).passed == s.passed for s in samples)

    # What the judge reads: the same shape as a native run's evidence.
    evidence = run_task_evidence(EvaluationRun.objects.get(pk=run_id), TASK)
    assert evidence.error is None
    assert len(evidence.passed) == LM_EVAL_LIMIT and len(evidence.ttft_ms) == BENCH_PROMPTS
    assert isinstance(evidence.output_throughput, float) and evidence.output_throughput > 0
    kinds = list(LedgerEntry.objects.filter(subject_type="run", subject_id=str(run_id)).values_list("kind", flat=True))
    assert kinds.count("evaluation.evidence_imported") == 2 and "evaluation.succeeded" in kinds
    assert ledger_verify().ok


@pytest.mark.engine
@pytest.mark.django_db
def test_a_closed_import_run_is_reused_like_a_native_run(
    api_for: Any, erin: User, tiny_backend: Backend, real_files: dict[str, Path]
) -> None:
    from evaluators.services import run_request

    api = api_for(erin)
    run_id = open_run(api)
    assert run_request(backend=tiny_backend, tasks=[TASK])[1] is False  # half-filled: not reused
    EvaluationRun.objects.exclude(pk=run_id).delete()
    upload(api, run_id, "lm_eval", real_files["results"], samples=real_files["samples"])
    api.post(f"/api/v1/runs/{run_id}/close/")
    run, reused = run_request(backend=tiny_backend, tasks=[TASK])
    assert (run.pk, reused) == (run_id, True)


@pytest.mark.engine
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("model_id", lambda d: d.update(model_id="Qwen/Qwen3-32B")),
        ("tokenizer_id", lambda d: d.update(tokenizer_id="/models/another-tokenizer")),
        ("served_model_name", lambda d: d.update(served_model_name="kit-bf16")),
        ("max_concurrency", lambda d: d.update(max_concurrency=16)),
    ],
)
def test_a_bench_file_of_another_model_or_configuration_is_refused_naming_the_field(
    api_for: Any, erin: User, tiny_backend: Backend, real_files: dict[str, Path], field: str, change: Any
) -> None:
    api = api_for(erin)
    run_id = open_run(api)
    response = upload(api, run_id, "vllm_bench", edited(real_files["bench"], change))
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert not TaskResult.objects.filter(run_id=run_id).exists()


@pytest.mark.engine
@pytest.mark.django_db
def test_a_bench_file_is_refused_when_the_run_measures_at_another_concurrency(
    api_for: Any, erin: User, tiny_backend: Backend, real_files: dict[str, Path]
) -> None:
    api = api_for(erin)
    run_id = open_run(api, load_profile={"concurrency": 8})
    response = upload(api, run_id, "vllm_bench", real_files["bench"])
    assert response.status_code == 400
    assert "max concurrency 4" in response.json()["max_concurrency"][0]
    assert "--max-concurrency 8" in response.json()["max_concurrency"][0]


@pytest.mark.engine
@pytest.mark.django_db
def test_the_same_files_for_another_backend_are_refused(
    api_for: Any, erin: User, tiny_backend: Backend, real_files: dict[str, Path], make_backend: Any
) -> None:
    other = make_backend("kit-bf16")
    api = api_for(erin)
    run_id = open_run(api, backend=other.name)
    bench = upload(api, run_id, "vllm_bench", real_files["bench"])
    assert bench.status_code == 400 and "model_id" in bench.json()
    quality = upload(api, run_id, "lm_eval", real_files["results"], samples=real_files["samples"])
    assert quality.status_code == 400
    assert f"'{SERVED}'" in quality.json()["config.model_args.model"][0]


@pytest.mark.engine
@pytest.mark.django_db
def test_lm_eval_files_of_another_suite_version_task_or_prompt_are_refused(
    api_for: Any, erin: User, tiny_backend: Backend, real_files: dict[str, Path]
) -> None:
    api = api_for(erin)
    run_id = open_run(api, tasks=[TASK, "cs_summary"])
    name = get_suite(TASK).lm_eval_task_name

    def other_version(data: dict[str, Any]) -> None:
        data["configs"][name]["metadata"]["version"] = "0-old"

    response = upload(
        api, run_id, "lm_eval", edited(real_files["results"], other_version), samples=real_files["samples"]
    )
    assert response.status_code == 400 and list(response.json()) == [f"configs.{name}.metadata.version"]

    wrong_task = upload(api, run_id, "lm_eval", real_files["results"], samples=real_files["samples"], task="cs_summary")
    assert wrong_task.status_code == 400 and "no results for lm-eval task 'optgate_cs_summary'" in str(
        wrong_task.json()
    )

    lines = real_files["samples"].read_text().splitlines()
    record = json.loads(lines[0])
    record["doc"]["prompt"] = "something the suite never asked"
    tampered = "\n".join([json.dumps(record), *lines[1:]]).encode()
    response = upload(api, run_id, "lm_eval", real_files["results"], samples=tampered)
    assert response.status_code == 400 and list(response.json()) == ["samples[0].doc.prompt"]
    assert not SampleRecord.objects.filter(run_id=run_id).exists()


@pytest.mark.engine
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_cli_imports_the_real_files_into_an_import_run(
    live_server: Any, erin: User, tiny_backend: Backend, real_files: dict[str, Path]
) -> None:
    token = api_token_issue(actor=None, user=erin).key

    def optgate(*argv: str) -> int:
        return cli.main(["--url", live_server.url, "--token", token, *argv], out=io.StringIO())

    assert optgate("evidence", "open", SERVED, "--task", TASK) == 0
    run = EvaluationRun.objects.get(backend=tiny_backend)
    assert optgate("evidence", "import", str(run.pk), "--task", TASK, "--vllm-bench", str(real_files["bench"])) == 0
    assert (
        optgate(
            "evidence",
            "import",
            str(run.pk),
            "--task",
            TASK,
            "--lm-eval-results",
            str(real_files["results"]),
            "--lm-eval-samples",
            str(real_files["samples"]),
        )
        == 0
    )
    assert optgate("evidence", "close", str(run.pk)) == 0
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert optgate("evidence", "import", str(run.pk), "--task", TASK, "--vllm-bench", str(real_files["bench"])) == 40


# --- malformed files (no engine) ----------------------------------------------------------------


def bench_document(**overrides: Any) -> dict[str, Any]:
    """A minimal well-formed ``vllm bench serve`` result with per-request arrays."""
    document: dict[str, Any] = {
        "date": "20261129-101010",
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": "optgate/kit-base",
        "tokenizer_id": "optgate/kit-base",
        "num_prompts": 2,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 4,
        "duration": 2.0,
        "completed": 2,
        "failed": 0,
        "total_input_tokens": 20,
        "total_output_tokens": 8,
        "request_throughput": 1.0,
        "output_throughput": 4.0,
        "input_lens": [10, 10],
        "output_lens": [4, 4],
        "ttfts": [0.1, 0.2],
        "itls": [[0.05, 0.05, 0.05], [0.05, 0.05, 0.05]],
        "latencies": [0.25, 0.35],
        "errors": ["", ""],
        "start_times": [100.0, 100.5],
        "mean_ttft_ms": 150.0,
        "median_ttft_ms": 150.0,
        "p99_ttft_ms": 199.0,
    }
    document.update(overrides)
    return document


def test_a_well_formed_bench_document_maps_onto_the_load_generator_shape() -> None:
    evidence = parse_vllm_bench(bench_document())
    assert evidence.performance["completed"] == 2
    assert evidence.performance["ttft_ms"]["median"] == pytest.approx(150.0)
    assert evidence.requests[1]["tpot_s"] == pytest.approx((0.35 - 0.2) / 3)
    assert evidence.requests[1]["start_s"] == pytest.approx(0.5)
    aggregates_only = parse_vllm_bench({k: v for k, v in bench_document().items() if k != "ttfts"})
    assert aggregates_only.requests == [] and aggregates_only.performance["ttft_ms"]["p99"] == 199.0


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"completed": 3, "duration": 1.0}, "model_id"),
        (bench_document(duration=0), "duration"),
        (bench_document(duration="fast"), "duration"),
        (bench_document(completed=0), "completed"),
        (bench_document(max_concurrency="4"), "max_concurrency"),
        (bench_document(ttfts=[0.1]), "ttfts"),
        (bench_document(ttfts=[0.1, -1]), "ttfts[1]"),
        (bench_document(itls=[[0.1], "x"]), "itls[1]"),
        (bench_document(errors=["", "timeout"]), "errors"),
    ],
)
def test_malformed_bench_documents_are_refused_naming_the_field(document: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_vllm_bench(document)
    assert list(refused.value.errors) == [field]


@pytest.mark.parametrize(
    ("raw", "message"),
    [(b"", "the file is empty"), (b"{not json", "not JSON"), (b"[1, 2]", "must be a JSON object")],
)
def test_files_that_are_not_json_objects_are_refused(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        load_json_document(raw, field_name="file")


def test_appended_bench_results_take_the_last_one() -> None:
    raw = (json.dumps(bench_document(completed=1, failed=1)) + "\n" + json.dumps(bench_document())).encode()
    assert load_json_document(raw, field_name="file")["completed"] == 2


def test_malformed_lm_eval_files_are_refused() -> None:
    with pytest.raises(InvalidInput, match="line 2 is not JSON"):
        load_jsonl_records(b'{"doc": {}}\n{oops\n', field_name="samples")
    with pytest.raises(InvalidInput, match="does not look like an lm-eval results file"):
        parse_lm_eval({"accuracy": 1}, [], task=TASK)
    results = {"results": {"optgate_compliance_qa": {"passed,none": 1.0}}, "config": {"model_args": "model=x"}}
    with pytest.raises(InvalidInput, match="--log_samples"):
        parse_lm_eval(results, None, task=TASK)
    with pytest.raises(InvalidInput) as refused:
        parse_lm_eval(results, [{"doc": {"id": "nope"}, "resps": [["x"]]}], task=TASK)
    assert list(refused.value.errors) == ["samples[0].doc.id"]
    with pytest.raises(InvalidInput) as unknown:
        parse_lm_eval(results, [], task="no_such_task")
    assert list(unknown.value.errors) == ["task"]


@pytest.mark.django_db
def test_evidence_goes_only_into_an_open_import_run_for_its_tasks(
    api_for: Any, erin: User, olga: User, baseline: Backend
) -> None:
    api = api_for(erin)
    run_id = open_run(api, backend=baseline.name, tasks=["cs_summary"])
    not_a_task = upload(api, run_id, "vllm_bench", json.dumps(bench_document(model_id=baseline.model_id)).encode())
    assert not_a_task.status_code == 400 and "not 'compliance_qa'" in not_a_task.json()["task"][0]
    empty_close = api.post(f"/api/v1/runs/{run_id}/close/")
    assert empty_close.status_code == 400 and "no quality evidence yet for cs_summary" in empty_close.json()["tasks"][0]
    assert (
        api_for(olga).post("/api/v1/runs/", {"backend": baseline.name, "tasks": [TASK]}, format="json").status_code
        == 403
    )
    native = EvaluationRun.objects.create(
        backend=baseline,
        tasks=[TASK],
        engine_version="0.32.0",
        hardware_class="cpu",
        reuse_key="native",
        status=RunStatus.SUCCEEDED,
    )
    with pytest.raises(DomainError, match="opened for import"):
        evidence_import_bench(run=native, task=TASK, document=bench_document(), actor=erin)
    assert upload(api, native.pk, "vllm_bench", json.dumps(bench_document()).encode()).status_code == 409


@pytest.mark.django_db
def test_the_runs_api_lists_a_tickets_runs_with_progress(
    api_for: Any, erin: User, baseline: Backend, candidate: Backend, draft: Any
) -> None:
    from gates.models import ReleaseTicket

    runs = [
        EvaluationRun.objects.create(
            backend=b,
            tasks=[TASK],
            engine_version="0.32.0",
            hardware_class="cpu",
            reuse_key=b.name,
            status=RunStatus.RUNNING,
            phase="quality",
            progress=40,
        )
        for b in (baseline, candidate)
    ]
    ReleaseTicket.objects.filter(pk=draft.pk).update(baseline_run=runs[0], candidate_run=runs[1])
    EvaluationRun.objects.create(
        backend=baseline, tasks=[TASK], engine_version="0.32.0", hardware_class="cpu", reuse_key="unrelated"
    )
    listed = api_for(erin).get("/api/v1/runs/", {"ticket": draft.pk}).json()
    assert listed["count"] == 2
    assert {(r["backend"], r["status"], r["progress"], r["phase"]) for r in listed["results"]} == {
        (baseline.name, "running", 40, "quality"),
        (candidate.name, "running", 40, "quality"),
    }
    assert api_for(erin).get("/api/v1/runs/", {"ticket": 999999}).json()["count"] == 0


def test_a_deep_copy_of_a_bench_document_is_not_mutated_by_parsing() -> None:
    document = bench_document()
    before = copy.deepcopy(document)
    parse_vllm_bench(document)
    assert document == before


@pytest.mark.django_db
def test_small_documents_may_be_posted_as_json(api_for: Any, erin: User, baseline: Backend) -> None:
    api = api_for(erin)
    run_id = open_run(api, backend=baseline.name, tasks=["cs_summary"])
    document = bench_document(model_id=baseline.model_path, tokenizer_id=baseline.model_path)
    response = api.post(
        f"/api/v1/runs/{run_id}/evidence/",
        {"kind": "vllm_bench", "task": "cs_summary", "file": document},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["result"]["origin"] == {"quality": "", "performance": "vllm bench serve"}
    assert response.json()["result"]["requests"] == 2
    missing = api.post(f"/api/v1/runs/{run_id}/evidence/", {"kind": "vllm_bench", "task": "cs_summary"}, format="json")
    assert missing.status_code == 400 and "file" in missing.json()
    unknown_kind = api.post(
        f"/api/v1/runs/{run_id}/evidence/", {"kind": "csv", "task": "cs_summary", "file": {}}, format="json"
    )
    assert unknown_kind.status_code == 400 and "kind" in unknown_kind.json()
