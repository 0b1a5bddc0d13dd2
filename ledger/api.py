"""REST API of the ledger app: search the ledger and verify its chain."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django.core.exceptions import ValidationError
from django_filters.fields import IsoDateTimeField
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import Pagination
from core.throttling import AnonThrottle, LedgerVerifyThrottle
from ledger import selectors
from ledger.models import LedgerEntry


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


class LedgerPagination(Pagination):
    """Limit/offset pages whose unfiltered count is the head's sequence number.

    The ledger only grows, numbered 1…head without gaps (what ``ledger_verify`` checks), so
    counting a million rows for every page would only re-derive that number: COUNT(*) was
    the slowest part of the ledger list at a million entries. Filtered lists count their rows.
    """

    def get_count(self, queryset: Any) -> int:
        if not queryset.query.where:
            head = selectors.ledger_head_seq()
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
