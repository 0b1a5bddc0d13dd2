"""REST API for API tokens: list without secrets, create and rotate (the key is shown once), revoke.

Everyone manages their own tokens; admins manage anyone's (``user`` on create, ``?user=`` on list).
Creating and rotating are rate-limited more strictly than other writes (scope ``token``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import services as tokens
from accounts.models import ApiToken
from accounts.selectors import api_tokens_visible
from core.api import StrictInputSerializer
from core.throttling import AnonThrottle, TokenIssueThrottle, UserWriteThrottle


class ApiTokenSerializer(serializers.ModelSerializer):
    user: serializers.SlugRelatedField = serializers.SlugRelatedField(slug_field="username", read_only=True)
    state = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = ["id", "user", "name", "prefix", "state", "created_at", "last_used_at", "expires_at", "revoked_at"]
        read_only_fields = fields

    def get_state(self, token: ApiToken) -> str:
        return token.state_at(timezone.now())


class IssuedTokenSerializer(ApiTokenSerializer):
    key = serializers.CharField(read_only=True, help_text="the full key; shown only in this response")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "key"]
        read_only_fields = fields


class TokenCreateSerializer(StrictInputSerializer):
    name = serializers.CharField(max_length=100, default="default")
    expires_in_days = serializers.IntegerField(
        min_value=1, max_value=3660, required=False, help_text="no expiry when omitted"
    )
    user = serializers.SlugRelatedField(
        slug_field="username",
        queryset=get_user_model().objects.all(),
        required=False,
        help_text="admins only: issue the token for this user (default: yourself)",
    )


class TokenRotateSerializer(StrictInputSerializer):
    expires_in_days = serializers.IntegerField(
        min_value=1, max_value=3660, required=False, help_text="default: the old token's lifetime"
    )


def _issued(issued: tokens.IssuedToken, code: int) -> Response:
    data = dict(ApiTokenSerializer(issued.token).data)
    data["key"] = issued.key
    response = Response(data, status=code)
    response["Cache-Control"] = "no-store"  # the only copy of the key must not sit in a cache
    return response


def _expiry(days: int | None) -> Any:
    return timezone.now() + timedelta(days=days) if days else None


@extend_schema_view(
    list=extend_schema(parameters=[OpenApiParameter("user", str, description="only this user's tokens (admins)")])
)
class ApiTokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """API tokens. Secrets are never listed: the key appears once, in the create or rotate response."""

    serializer_class = ApiTokenSerializer
    http_method_names = ["get", "post", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        visible = api_tokens_visible(actor=self.request.user)
        username = self.request.query_params.get("user")
        return visible.filter(user__username=username) if username else visible

    def get_throttles(self) -> list[Any]:
        if self.action in {"create", "rotate"}:
            return [AnonThrottle(), UserWriteThrottle(), TokenIssueThrottle()]
        return list(super().get_throttles())

    @extend_schema(request=TokenCreateSerializer, responses={201: IssuedTokenSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Issue a token (for yourself; admins may name another user). The key is in this response only."""
        body = TokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # The service refuses a user other than yourself unless you are an admin.
        owner = body.validated_data.get("user") or cast(User, request.user)
        issued = tokens.api_token_issue(
            actor=request.user,
            user=owner,
            name=body.validated_data["name"],
            expires_at=_expiry(body.validated_data.get("expires_in_days")),
        )
        return _issued(issued, status.HTTP_201_CREATED)

    @extend_schema(request=TokenRotateSerializer, responses={201: IssuedTokenSerializer})
    @action(detail=True, methods=["post"])
    def rotate(self, request: Request, pk: str | None = None) -> Response:
        """Revoke this token and issue its replacement (same user and name); 409 if it is already revoked."""
        body = TokenRotateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        issued = tokens.api_token_rotate(
            actor=request.user, token=self.get_object(), expires_at=_expiry(body.validated_data.get("expires_in_days"))
        )
        return _issued(issued, status.HTTP_201_CREATED)

    @extend_schema(
        responses={204: None},
        description="Revoke the token from now on (the row stays, for the record). Revoking twice is harmless.",
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        tokens.api_token_revoke(actor=request.user, token=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
