"""REST API of the ledger app: backends (create, list, detail; never update) and the ledger."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django.core.exceptions import ValidationError
from django_filters.fields import IsoDateTimeField
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response

from ledger import selectors, services
from ledger.models import Backend, LedgerEntry, LedgerHead
from optgate.api import IsEngineerOrReadOnly, StrictInputSerializer, idempotent_create
from optgate.throttling import AnonThrottle, LedgerVerifyThrottle


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

    class Meta:
        model = Backend
        fields = [
            "id", "name", "fingerprint", "model_id", "model_path", "model_revision", "engine", "engine_version",
            "engine_args", "sampling_params", "prefix_cache_key_recipe", "gpu_pool", "hardware_class", "model_card",
            "created_by", "created_at",
        ]  # fmt: skip
        read_only_fields = fields


class BackendFilter(django_filters.FilterSet):
    class Meta:
        model = Backend
        fields = ["name", "fingerprint", "hardware_class", "engine_version"]


class BackendViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Registered serving configurations. A backend is immutable: there is no update or delete."""

    queryset = Backend.objects.select_related("created_by")
    serializer_class = BackendSerializer
    permission_classes = [IsEngineerOrReadOnly]
    filterset_class = BackendFilter

    @extend_schema(request=BackendInputSerializer, responses={201: BackendSerializer, 200: BackendSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        def register() -> Response:
            data = BackendInputSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            backend, created = services.backend_register(actor=request.user, **data.validated_data)
            code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
            return Response(BackendSerializer(backend).data, status=code)

        return idempotent_create(request, "backends", register)


class LedgerEntrySerializer(serializers.ModelSerializer):
    subject = serializers.SerializerMethodField()

    class Meta:
        model = LedgerEntry
        fields = ["id", "seq", "kind", "subject", "actor_name", "payload", "created_at", "prev_hash", "hash"]
        read_only_fields = fields

    def get_subject(self, entry: LedgerEntry) -> dict[str, str]:
        return {"type": entry.subject_type, "id": entry.subject_id, "name": entry.subject_name}


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time, converted to UTC before it reaches the database.

    Python accepts offsets up to ±23:59 but PostgreSQL only ±15:59 ("time zone displacement out of
    range"), and a date near year 1 or 9999 can leave the calendar once shifted to UTC.
    """

    def to_python(self, value: Any) -> datetime | None:
        moment = super().to_python(value)
        if moment is None:
            return None
        try:
            return moment.astimezone(UTC)
        except OverflowError:
            raise ValidationError("out of range once converted to UTC", code="invalid") from None


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class LedgerFilter(django_filters.FilterSet):
    kind = django_filters.CharFilter()
    subject_type = django_filters.CharFilter()
    subject_id = django_filters.CharFilter()
    actor = django_filters.CharFilter(field_name="actor_name")
    since = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    not_adopted = django_filters.BooleanFilter(method="filter_not_adopted", label="only plans that were not adopted")
    search = django_filters.CharFilter(method="filter_search", label="text in the subject name or payload")

    class Meta:
        model = LedgerEntry
        fields = ["kind", "subject_type", "subject_id", "actor", "since", "until", "not_adopted", "search"]

    def filter_not_adopted(self, queryset: Any, name: str, value: bool) -> Any:
        return queryset.filter(kind__in=selectors.NOT_ADOPTED_KINDS) if value else queryset

    def filter_search(self, queryset: Any, name: str, value: str) -> Any:
        return queryset & selectors.ledger_entries(search=value)


class ChainReportSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    checked = serializers.IntegerField()
    first_bad_seq = serializers.IntegerField(allow_null=True)
    first_bad_id = serializers.IntegerField(allow_null=True)
    problem = serializers.CharField()


class LedgerPagination(LimitOffsetPagination):
    """Limit/offset pages whose unfiltered count is the head's sequence number.

    The ledger only grows, numbered 1…head without gaps (what ``ledger_verify`` checks), so
    counting a million rows for every page would only re-derive that number: COUNT(*) was
    the slowest part of the ledger list at a million entries. Filtered lists count their rows.
    """

    def get_count(self, queryset: Any) -> int:
        if not queryset.query.where:
            head = LedgerHead.objects.filter(id=1).values_list("seq", flat=True).first()
            if head is not None:
                return int(head)
        return int(super().get_count(queryset))


class LedgerViewSet(viewsets.ReadOnlyModelViewSet):
    """The append-only ledger: every change, decision and not-adopted plan, hash-chained."""

    queryset = LedgerEntry.objects.all()
    serializer_class = LedgerEntrySerializer
    filterset_class = LedgerFilter
    pagination_class = LedgerPagination

    @extend_schema(responses=ChainReportSerializer)
    @action(detail=False, methods=["get"], throttle_classes=[AnonThrottle, LedgerVerifyThrottle])
    def verify(self, request: Request) -> Response:
        """Recompute the hash chain and report the first bad entry, if any."""
        return Response(selectors.ledger_verify().as_dict())
