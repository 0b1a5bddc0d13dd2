"""REST API of reviews of active optimizations: the due ones, and recording an outcome.

Completing a review goes through ``gates.services.reviews.review_complete``, which commits the
outcome, its route changes and its ledger entries in one transaction: of two concurrent
completions one wins and the other answers 409, having moved nothing.
"""

from __future__ import annotations

from typing import Any, cast

import django_filters
from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, permissions, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import StrictInputSerializer
from core.errors import InvalidInput
from core.roles import ADMIN, REVIEWER, has_role
from gates.models import Review, ReviewOutcome, ReviewStatus
from gates.selectors.reviews import signed_tasks_by_ticket
from gates.services.reviews import review_complete


class ReviewSerializer(serializers.ModelSerializer):
    reviewed_by: serializers.SlugRelatedField = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Review
        fields = [
            "id",
            "ticket",
            "reason",
            "status",
            "details",
            "due_at",
            "outcome",
            "comment",
            "reviewed_by",
            "created_at",
            "completed_at",
        ]
        read_only_fields = fields


class ReviewCompleteSerializer(StrictInputSerializer):
    outcome = serializers.ChoiceField(choices=ReviewOutcome.choices)
    comment = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=4000, help_text="required for restrict and rollback"
    )
    restrict_tasks = serializers.ListField(
        child=serializers.SlugField(),
        required=False,
        default=list,
        help_text="restrict only: the signed tasks to move back to the baseline",
    )


class IsReviewerOrAdmin(permissions.BasePermission):
    """Reviews are completed by reviewers and admins (the service checks again, and refuses the owner)."""

    message = "reviews are completed by reviewers"

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated and has_role(request.user, REVIEWER, ADMIN))


class ReviewFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=ReviewStatus.choices)
    ticket = django_filters.NumberFilter(field_name="ticket_id", min_value=1, max_value=2**62)

    class Meta:
        model = Review
        fields = ["status", "ticket"]


class ReviewViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Reviews of active optimizations, the soonest due first. Status is read-only: only ``complete`` moves it."""

    queryset = Review.objects.select_related("ticket", "reviewed_by")
    serializer_class = ReviewSerializer
    filterset_class = ReviewFilter
    lookup_value_regex = r"[0-9]{1,18}"  # an id; anything else is a 404, not a query

    @extend_schema(
        request=ReviewCompleteSerializer,
        responses={
            200: ReviewSerializer,
            400: OpenApiResponse(description="invalid input, by field"),
            403: OpenApiResponse(description="not a reviewer, or the ticket's owner"),
            409: OpenApiResponse(description="the review was completed already (or concurrently)"),
        },
    )
    @action(detail=True, methods=["post"], permission_classes=[IsReviewerOrAdmin])
    def complete(self, request: Request, pk: str | None = None) -> Response:
        """Record the review's outcome: keep_default, restrict (moves the named tasks back), rollback
        (moves every task back) or observe_more (opens a follow-up review); all of it or nothing."""
        review = self.get_object()
        body = ReviewCompleteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        restrict_tasks = list(data["restrict_tasks"])
        # As on the reviews page: only tasks the ticket's signed decision moved can be moved back.
        signed = signed_tasks_by_ticket([review.ticket_id]).get(review.ticket_id, [])
        unknown = sorted(set(restrict_tasks) - set(signed))
        if data["outcome"] == ReviewOutcome.RESTRICT and unknown:
            names = ", ".join(unknown)
            raise InvalidInput({"restrict_tasks": f"not signed tasks of ticket #{review.ticket_id}: {names}"})
        done = review_complete(
            review=review,
            outcome=data["outcome"],
            actor=cast(User, request.user),
            comment=data["comment"],
            restrict_tasks=restrict_tasks if data["outcome"] == ReviewOutcome.RESTRICT else None,
        )
        return Response(ReviewSerializer(done).data)
