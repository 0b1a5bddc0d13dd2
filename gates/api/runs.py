"""REST API of the evaluators app: evaluation runs (read, with progress) and evidence import.

``GET /api/v1/runs/?ticket=ID`` is what the CI client polls for progress. Evidence measured
outside OptGate enters through an import run: ``POST /runs/`` opens one for a backend and its
tasks, ``POST /runs/{id}/evidence/`` attaches a ``vllm bench serve`` result or lm-eval results
(multipart files, or JSON objects for small documents), ``POST /runs/{id}/close/`` finishes it.
"""

from __future__ import annotations

from typing import Any

import django_filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, parsers, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from backends.models import Backend
from core.api import IsEngineerOrReadOnly, StrictInputSerializer
from core.errors import InvalidInput
from core.parsers import JSONParser
from evaluators.imports.parsing import KINDS, VLLM_BENCH, load_json_document, load_jsonl_records
from evaluators.imports.services import (
    evidence_import_bench,
    evidence_import_lm_eval,
    run_close_import,
    run_open_for_import,
)
from evaluators.models import EvaluationRun, RunStatus, TaskResult
from evaluators.selectors import run_list
from gates.selectors.tickets import ticket_run_ids

MAX_UPLOAD_BYTES = 64 * 1024 * 1024


class TaskResultBriefSerializer(serializers.ModelSerializer):
    origin = serializers.SerializerMethodField()

    class Meta:
        model = TaskResult
        fields = ["task", "suite_version", "quality", "performance", "engine_evidence", "error", "origin"]
        read_only_fields = fields

    def get_origin(self, result: TaskResult) -> dict[str, str]:
        return {
            "quality": str((result.quality or {}).get("source") or ("native" if result.quality else "")),
            "performance": str((result.performance or {}).get("source") or ("native" if result.performance else "")),
        }

    def to_representation(self, instance: TaskResult) -> dict[str, Any]:
        data = super().to_representation(instance)
        # The raw per-request records stay out of the listing; the count says whether they exist.
        data["requests"] = len(instance.requests or [])
        return data


class RunSerializer(serializers.ModelSerializer):
    backend: serializers.SlugRelatedField = serializers.SlugRelatedField(slug_field="name", read_only=True)
    imported_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True, help_text="who imported the evidence; null when OptGate measured it"
    )
    task_results = TaskResultBriefSerializer(many=True, read_only=True)

    class Meta:
        model = EvaluationRun
        fields = [
            "id",
            "backend",
            "tasks",
            "suite_versions",
            "engine_version",
            "hardware_class",
            "load_profile",
            "status",
            "phase",
            "progress",
            "error",
            "reused_from",
            "source",
            "imported_by",
            "created_at",
            "started_at",
            "finished_at",
            "task_results",
        ]
        read_only_fields = fields


class RunFilter(django_filters.FilterSet):
    ticket = django_filters.NumberFilter(method="filter_ticket", label="the ticket's baseline and candidate runs")
    backend = django_filters.CharFilter(field_name="backend__name")
    status = django_filters.ChoiceFilter(choices=RunStatus.choices)

    class Meta:
        model = EvaluationRun
        fields = ["ticket", "backend", "status"]

    def filter_ticket(self, queryset: Any, name: str, value: int) -> Any:
        return queryset.filter(pk__in=ticket_run_ids(pk=value))


class ImportRunInputSerializer(StrictInputSerializer):
    backend = serializers.SlugRelatedField(slug_field="name", queryset=Backend.objects.all())
    tasks = serializers.ListField(child=serializers.SlugField(), allow_empty=False)
    load_profile = serializers.DictField(required=False)


class EvidenceInputSerializer(StrictInputSerializer):
    kind = serializers.ChoiceField(choices=KINDS)
    task = serializers.SlugField()
    file = serializers.JSONField(required=False, help_text="JSON body: the result document itself")
    samples = serializers.JSONField(required=False, help_text="JSON body: lm-eval sample records (a list)")


def _uploaded(request: Request, name: str) -> tuple[bytes | None, str]:
    upload = request.FILES.get(name)
    if upload is None:
        return None, ""
    if upload.size is not None and upload.size > MAX_UPLOAD_BYTES:
        raise InvalidInput({name: f"larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MiB"})
    return upload.read(), upload.name or name


class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Evaluation runs with their status, phase and progress, per-task results, and evidence import."""

    serializer_class = RunSerializer
    permission_classes = [IsEngineerOrReadOnly]
    filterset_class = RunFilter
    parser_classes = [JSONParser, parsers.MultiPartParser, parsers.FormParser]

    def get_queryset(self) -> Any:
        return run_list()

    @extend_schema(request=ImportRunInputSerializer, responses={201: RunSerializer})
    def create(self, request: Request) -> Response:
        """Open an import run for a backend's tasks; evidence files are attached to it next."""
        body = ImportRunInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = run_open_for_import(actor=request.user, **body.validated_data)
        return Response(RunSerializer(self.get_queryset().get(pk=run.pk)).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=EvidenceInputSerializer, responses={201: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"])
    def evidence(self, request: Request, pk: str | None = None) -> Response:
        """Attach evidence: ``kind`` (vllm_bench | lm_eval), ``task`` and a ``file`` (plus lm-eval ``samples``).

        A file whose model or configuration does not match the run's backend answers 400 naming the field.
        """
        run = self.get_object()
        if not isinstance(request.data, dict):  # a JSON list or scalar: the serializer names what it expected
            EvidenceInputSerializer(data=request.data).is_valid(raise_exception=True)
        fields = {key: request.data.get(key) for key in ("kind", "task") if key in request.data}
        for key in ("file", "samples"):
            if key in request.data and key not in request.FILES:
                fields[key] = request.data.get(key)
        body = EvidenceInputSerializer(data=fields)
        body.is_valid(raise_exception=True)
        kind, task = body.validated_data["kind"], body.validated_data["task"]
        raw, filename = _uploaded(request, "file")
        document: Any = raw if raw is not None else body.validated_data.get("file")
        if document is None:
            raise InvalidInput({"file": "attach the result file (multipart field 'file')"})
        parsed = load_json_document(document, field_name="file")
        if kind == VLLM_BENCH:
            result = evidence_import_bench(
                run=run, task=task, document=parsed, actor=request.user, filename=filename or "bench.json"
            )
        else:
            raw_samples, _ = _uploaded(request, "samples")
            sample_source: Any = raw_samples if raw_samples is not None else body.validated_data.get("samples")
            samples = load_jsonl_records(sample_source, field_name="samples") if sample_source else None
            result = evidence_import_lm_eval(
                run=run,
                task=task,
                results=parsed,
                samples=samples,
                actor=request.user,
                filename=filename or "results.json",
            )
        return Response(
            {"run": run.pk, "kind": kind, "task": task, "result": TaskResultBriefSerializer(result).data},
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(request=None, responses={200: RunSerializer})
    @action(detail=True, methods=["post"])
    def close(self, request: Request, pk: str | None = None) -> Response:
        """Finish an import run; it then counts (and is reused) like a native succeeded run."""
        run = run_close_import(run=self.get_object(), actor=request.user)
        return Response(RunSerializer(self.get_queryset().get(pk=run.pk)).data)
