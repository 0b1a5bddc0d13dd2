"""REST API of the backends app: register, list and read serving configurations (never update)."""

from __future__ import annotations

from typing import Any

import django_filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from backends.models import Backend, EngineArgsCheck
from backends.services import backend_register
from core.api import IsEngineerOrReadOnly, StrictInputSerializer, idempotent_create


class BackendInputSerializer(StrictInputSerializer):
    name = serializers.SlugField(max_length=100)
    model_id = serializers.CharField(max_length=200)
    model_path = serializers.CharField(max_length=500)
    model_revision = serializers.CharField(max_length=128)
    engine = serializers.ChoiceField(choices=["vllm"], default="vllm")
    engine_version = serializers.CharField(max_length=40)
    engine_args = serializers.DictField(
        required=False,
        default=dict,
        help_text='vLLM serve options by name, e.g. {"max_num_seqs": 64, "enable_prefix_caching": true}',
        error_messages={
            # A command line ("--max-num-seqs 64") or an argv list is the usual mistake: say what is wanted.
            "not_a_dict": 'must be an object of option names to values, e.g. {{"max_num_seqs": 64}}, '
            "not a command line or argv list (got {input_type})",
        },
    )
    sampling_params = serializers.DictField(required=False, default=dict)
    prefix_cache_key_recipe = serializers.DictField(required=False, default=dict)
    gpu_pool = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    hardware_class = serializers.CharField(max_length=100)
    model_card = serializers.DictField(required=False, default=dict)


class BackendSerializer(serializers.ModelSerializer):
    created_by: serializers.SlugRelatedField = serializers.SlugRelatedField(slug_field="username", read_only=True)
    engine_args_check = serializers.SerializerMethodField(
        help_text="vLLM's own parser's verdict on the engine arguments, checked after registration: "
        "{status: pending | passed | failed | error, errors, checked_at}; null when the check is off"
    )

    class Meta:
        model = Backend
        fields = [
            "id",
            "name",
            "fingerprint",
            "model_id",
            "model_path",
            "model_revision",
            "engine",
            "engine_version",
            "engine_args",
            "sampling_params",
            "prefix_cache_key_recipe",
            "gpu_pool",
            "hardware_class",
            "model_card",
            "created_by",
            "created_at",
            "engine_args_check",
        ]
        read_only_fields = fields

    def get_engine_args_check(self, backend: Backend) -> dict[str, Any] | None:
        try:
            check: EngineArgsCheck = backend.args_check  # type: ignore[attr-defined]
        except EngineArgsCheck.DoesNotExist:
            return None
        return check.shown()


class BackendFilter(django_filters.FilterSet):
    class Meta:
        model = Backend
        fields = ["name", "fingerprint", "hardware_class", "engine_version"]


class BackendViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Registered serving configurations. A backend is immutable: there is no update or delete."""

    queryset = Backend.objects.select_related("created_by", "args_check")
    serializer_class = BackendSerializer
    permission_classes = [IsEngineerOrReadOnly]
    filterset_class = BackendFilter

    @extend_schema(request=BackendInputSerializer, responses={201: BackendSerializer, 200: BackendSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        def register() -> Response:
            data = BackendInputSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            backend, created = backend_register(actor=request.user, **data.validated_data)
            code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
            return Response(BackendSerializer(backend).data, status=code)

        return idempotent_create(request, "backends", register)
