"""Whether an evidence file was measured on the run's backend: model, served name, suite version, load."""

from __future__ import annotations

from pathlib import Path

from backends.models import Backend
from core.errors import InvalidInput
from evaluators.imports.parsing import BenchEvidence, LmEvalEvidence
from evaluators.models import EvaluationRun
from evaluators.suites import get_suite


def _same_path(a: str, b: str) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError):
        return a == b


def _model_names(backend: Backend) -> list[str]:
    """Names under which a file may legitimately refer to this backend's model."""
    names = [backend.name, backend.model_id, backend.model_path]
    served = backend.engine_args.get("served_model_name")
    if isinstance(served, str):
        names.append(served)
    return names


def _matches(value: str, candidates: list[str]) -> bool:
    return any(value == c or ("/" in value and "/" in c and _same_path(value, c)) for c in candidates if c)


def check_bench_matches(evidence: BenchEvidence, *, run: EvaluationRun) -> None:
    """Refuse a bench result measured on another model, tokenizer or concurrency than ``run``'s."""
    backend = run.backend
    names = _model_names(backend)
    if not _matches(evidence.model_id, names):
        raise InvalidInput(
            {
                "model_id": (
                    f"the benchmark measured model {evidence.model_id!r}, but backend {backend.name} serves "
                    f"{backend.model_id!r} from {backend.model_path!r}"
                )
            }
        )
    tokenizers = [*names, str(backend.engine_args.get("tokenizer") or "")]
    if evidence.tokenizer_id is not None and not _matches(evidence.tokenizer_id, tokenizers):
        raise InvalidInput(
            {
                "tokenizer_id": (
                    f"the benchmark counted tokens with tokenizer {evidence.tokenizer_id!r}, not backend "
                    f"{backend.name}'s ({backend.engine_args.get('tokenizer') or backend.model_path!r})"
                )
            }
        )
    served = evidence.metadata.get("served_model_name")
    if served is not None and served not in names:
        raise InvalidInput({"served_model_name": f"the benchmark sent requests to {served!r}, not {backend.name!r}"})
    fingerprint = evidence.metadata.get("backend_fingerprint") or evidence.metadata.get("optgate_fingerprint")
    if fingerprint is not None and fingerprint != backend.fingerprint:
        raise InvalidInput({"backend_fingerprint": f"{fingerprint!r} is not backend {backend.name}'s fingerprint"})
    wanted = run.load_profile.get("concurrency")
    if wanted is not None and evidence.max_concurrency != wanted:
        raise InvalidInput(
            {
                "max_concurrency": (
                    f"the benchmark ran at max concurrency {evidence.max_concurrency}, "
                    f"but run #{run.pk}'s load profile measures at {wanted}; rerun with --max-concurrency {wanted}"
                )
            }
        )
    if evidence.endpoint_type and evidence.endpoint_type not in ("openai", "openai-chat", "vllm", "openai-completions"):
        raise InvalidInput({"endpoint_type": f"{evidence.endpoint_type!r} is not an OpenAI-compatible vLLM endpoint"})


def check_lm_eval_matches(evidence: LmEvalEvidence, *, run: EvaluationRun) -> None:
    """Refuse lm-eval output of another served model or another version of the suite."""
    backend = run.backend
    if evidence.model is None:
        raise InvalidInput({"config.model_args.model": "missing: the results do not say which model answered"})
    if not _matches(evidence.model, _model_names(backend)):
        raise InvalidInput(
            {
                "config.model_args.model": (
                    f"lm-eval queried model {evidence.model!r}, "
                    f"but backend {backend.name} is served as {backend.name!r}"
                )
            }
        )
    expected = run.suite_versions.get(evidence.task) or get_suite(evidence.task).version
    if evidence.suite_version is not None and evidence.suite_version != expected:
        raise InvalidInput(
            {
                f"configs.{get_suite(evidence.task).lm_eval_task_name}.metadata.version": (
                    f"the file was produced with suite {evidence.task} version {evidence.suite_version}, run #{run.pk} "
                    f"measures version {expected}"
                )
            }
        )
